#include "profiles/benchmark.h"

#include <chrono>
#include <vector>

namespace kiln {

StatusOr<BenchmarkResult> run_benchmark(const std::function<Status()>& fn, int warmup, int iterations, double budget_ms) {
  for (int i = 0; i < warmup; ++i) KILN_RETURN_IF_ERROR(fn());
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(iterations));
  BenchmarkResult r;
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(fn());
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    samples.push_back(ms);
    if (ms > budget_ms) ++r.deadline_misses;
  }
  r.latency = compute_latency_stats(samples);
  r.budget_ms = budget_ms;
  r.within_budget = r.latency.p99_ms <= budget_ms;
  return r;
}

}  // namespace kiln
