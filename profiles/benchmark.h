// Benchmark runner: warm-up, timed iterations, latency statistics and the budget verdict.
#pragma once

#include <functional>

#include "profiles/latency_stats.h"
#include "runtime/status.h"

namespace kiln {

struct BenchmarkResult {
  LatencyStats latency;
  double budget_ms = 0;
  bool within_budget = false;  // p99 <= budget
  int deadline_misses = 0;     // iterations over budget
};

// Runs `fn` warmup + iterations times, timing each of the last `iterations` runs.
StatusOr<BenchmarkResult> run_benchmark(const std::function<Status()>& fn, int warmup, int iterations, double budget_ms);

}  // namespace kiln
