// `engine-perf dashboard`: one self-contained HTML file (template, script, style and uPlot
// embedded at build time; the history's numbers as a JSON block) that opens from file:// with no
// server and no network. Statistics are computed here, not in the page: per series (config,
// profile, machine) the p50 and p99 of every run with order-statistic intervals, the miss rate with
// a Clopper-Pearson interval, change points of the p50 series, and the latest run's verdicts
// against the previous run and against a baseline label.
#pragma once

#include <string>
#include <vector>

#include "profiles/history/compare.h"
#include "profiles/history/run_record.h"
#include "runtime/status.h"

namespace kiln::history {

class HistoryDb;

struct DashboardOptions {
  std::string title = "kiln latency history";
  std::string baseline_label;   // empty: the oldest labelled run of each series
  size_t layer_runs = 20;       // the latest runs whose per-layer times the page carries
  double change_point_alpha = 0.001;
  CompareOptions compare;
};

// Series: the runs of one config (series key), one profile and one machine fingerprint, in time
// order. A machine change never joins a series.
struct Series {
  std::string key, profile, kind, machine;
  double budget_ms = 0;
  std::vector<size_t> runs;  // indices into the run list
};
std::vector<Series> build_series(const std::vector<RunRecord>& runs);

// The page's data, as JSON (also what `engine-perf history --json` builds on).
std::string dashboard_data_json(const std::vector<RunRecord>& runs, const DashboardOptions& opts, const std::string& db_path);
// The whole page around that data.
std::string dashboard_html(const std::string& data_json, const std::string& title);

// Loads the history and writes the page to `out_path` (through a temporary file, renamed into
// place, so a failed run leaves nothing behind).
Status write_dashboard(const HistoryDb& db, const std::string& out_path, const DashboardOptions& opts);

}  // namespace kiln::history
