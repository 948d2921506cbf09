// Benchmark runner: warm-up, timed iterations, latency statistics and the budget verdict.
#pragma once

#include <functional>
#include <vector>

#include "profiles/latency_stats.h"
#include "runtime/status.h"

namespace kiln {

struct BenchmarkResult {
  LatencyStats latency;
  double budget_ms = 0;
  bool within_budget = false;  // p99 <= budget
  int deadline_misses = 0;     // iterations over budget
  std::vector<double> samples_ms;  // every timed iteration, in the order run (for the history)
};

// Benchmarks several functions against each other: each runs `warmup` untimed times, then their
// `iterations` timed runs alternate in `rounds` rounds (A's share, B's share, A's, ...), and a
// function's share of a round follows one untimed run of it, which gives it back the caches the
// other functions' runs took. On a shared host the speed drifts over minutes: two
// benchmarks run one after the other would carry that drift whole into their ratio; alternated,
// each samples the same stretch. One function, or rounds = 1: each function's timed runs back to back.
StatusOr<std::vector<BenchmarkResult>> run_alternating_benchmarks(const std::vector<std::function<Status()>>& fns, int warmup,
                                                                  int iterations, int rounds, double budget_ms);

}  // namespace kiln
