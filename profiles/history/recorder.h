// engine-build's side of the history: the provenance a report gains (time, kiln version and
// commit, config and its repository, hashes, machine, load) and recording a written report into a
// history file (the same reading path as `engine-perf import`, so a recorded run and an imported
// one are the same).
#pragma once

#include <string>

#include "builder/build_config.h"
#include "profiles/history/run_record.h"

namespace kiln::history {

// Fills a RunRecord's provenance fields (no profiles) for a build of `cfg` into `engine_path`.
StatusOr<RunRecord> describe_run(const BuildConfig& cfg, const std::string& engine_path, const std::string& label, double start_unix_time,
                                 const LoadAverage& load_before);

// Reads the report just written and stores it; returns the run's id.
StatusOr<int64_t> record_report(const std::string& db_path, const std::string& report_text, const std::string& report_path);

}  // namespace kiln::history
