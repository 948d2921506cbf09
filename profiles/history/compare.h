// `engine-perf compare` and `ab`: two runs, profile by profile. Per side the p50 and p99 with
// order-statistic intervals and the deadline-miss rate with a Clopper-Pearson interval; the
// relative change of the chosen metric with a bootstrap interval, a Mann-Whitney U p-value on the
// raw samples, and a verdict:
//   regressed / improved  the change is significant (p < alpha) and at least min_effect
//   same                  its interval lies within +- min_effect
//   inconclusive          otherwise
// The overall verdict is the worst profile's (regressed > inconclusive > same > improved). Layer
// attribution: per layer (a fused step and the ops it replaced on the other side count as one
// entry) the change in mean ms over the profiled runs with Welch's t-test, largest change first.
#pragma once

#include <string>
#include <vector>

#include "profiles/history/run_record.h"
#include "profiles/history/statistics.h"

namespace kiln::history {

struct CompareOptions {
  std::string metric = "p50";  // p50 | p99 | miss_rate
  double min_effect = 0.03;    // relative for p50/p99; absolute (fraction of runs) for miss_rate
  double alpha = 0.05;
  int bootstrap_resamples = 2000;
  size_t max_layers = 25;      // layer entries kept in the result
};

struct SideStats {
  int n = 0;
  QuantileCi p50, p99;
  int64_t misses = 0;
  double miss_rate = 0;
  Interval miss_rate_ci;
};

struct LayerChange {
  std::string name, op_type;
  std::vector<std::string> members;  // the other side's ops a fused step stands for
  double a_ms = 0, b_ms = 0, delta_ms = 0, p_value = 1;
};

struct OpTypeChange {
  std::string op_type;
  double a_ms = 0, b_ms = 0, delta_ms = 0;
};

struct ProfileComparison {
  std::string name, kind, verdict;
  double budget_ms = 0;
  SideStats a, b;
  double p50_change = 0, p99_change = 0, miss_rate_change = 0;
  Interval p50_change_ci, p99_change_ci, miss_rate_change_ci;
  double p_value = 1;       // Mann-Whitney U on the raw samples
  double miss_p_value = 1;  // Fisher's exact test on the miss counts
  std::vector<LayerChange> layers;
  std::vector<OpTypeChange> op_types;
};

struct Comparison {
  int64_t a_id = 0, b_id = 0;
  std::string a_label, b_label, a_time, b_time;
  std::string verdict = "same";
  CompareOptions options;
  bool same_machine = true;
  std::vector<ProfileComparison> profiles;
  std::vector<std::string> notes;  // profiles on one side only, machines that differ
};

ProfileComparison compare_profiles(const ProfileRecord& a, const ProfileRecord& b, const CompareOptions& opts);
Comparison compare_runs(const RunRecord& a, const RunRecord& b, const CompareOptions& opts);

// 3 regressed, 2 inconclusive, 1 same, 0 improved.
int verdict_rank(const std::string& verdict);

std::string comparison_json(const Comparison& c);
std::string comparison_text(const Comparison& c, size_t layers_shown = 8);

}  // namespace kiln::history
