// Runs in and out of the history file (history_db.h): one transaction per run, raw samples,
// streaming steps and layer times kept as compact little-endian blobs (the formats are in the
// schema's migrations).
#pragma once

#include <string>
#include <vector>

#include "profiles/history/history_db.h"
#include "profiles/history/run_record.h"
#include "runtime/status.h"

namespace kiln::history {

// Stores `run` (and its machine, once per fingerprint); sets run.id and each profile's id.
Status insert_run(HistoryDb& db, RunRecord& run);

struct LoadOptions {
  bool layers = false;  // every layer's times (large: only for the runs being compared)
  bool steps = false;   // streaming steps
};

// All runs, oldest first, with their profiles and samples.
StatusOr<std::vector<RunRecord>> load_runs(const HistoryDb& db, const LoadOptions& opts = {});
StatusOr<RunRecord> load_run(const HistoryDb& db, int64_t id, const LoadOptions& opts = {});
// Fills the layers (and steps) of a run loaded without them.
Status load_details(const HistoryDb& db, RunRecord& run, const LoadOptions& opts);

// A run id ("42") or a label (its latest run). Errors name what was looked for.
StatusOr<int64_t> resolve_run(const HistoryDb& db, const std::string& id_or_label);

}  // namespace kiln::history
