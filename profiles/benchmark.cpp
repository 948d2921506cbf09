#include "profiles/benchmark.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace kiln {

namespace {

StatusOr<double> timed_run(const std::function<Status()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  KILN_RETURN_IF_ERROR(fn());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

BenchmarkResult result_of(const std::vector<double>& samples, double budget_ms) {
  BenchmarkResult r;
  for (double ms : samples) r.deadline_misses += ms > budget_ms ? 1 : 0;
  r.latency = compute_latency_stats(samples);
  r.budget_ms = budget_ms;
  r.within_budget = r.latency.p99_ms <= budget_ms;
  r.samples_ms = samples;
  return r;
}

}  // namespace

StatusOr<std::vector<BenchmarkResult>> run_alternating_benchmarks(const std::vector<std::function<Status()>>& fns, int warmup,
                                                                  int iterations, int rounds, double budget_ms) {
  const size_t n = fns.size();
  if (n <= 1) rounds = 1;
  rounds = std::clamp(rounds, 1, std::max(iterations, 1));
  for (const auto& fn : fns)
    for (int i = 0; i < warmup; ++i) KILN_RETURN_IF_ERROR(fn());
  std::vector<std::vector<double>> samples(n);
  for (auto& s : samples) s.reserve(static_cast<size_t>(iterations));
  for (int r = 0; r < rounds; ++r) {
    // Round r times runs [iterations * r / rounds, iterations * (r + 1) / rounds).
    const int share = iterations * (r + 1) / rounds - iterations * r / rounds;
    for (size_t f = 0; f < n; ++f) {
      if (rounds > 1) KILN_RETURN_IF_ERROR(fns[f]());
      for (int i = 0; i < share; ++i) {
        KILN_ASSIGN_OR_RETURN(double ms, timed_run(fns[f]));
        samples[f].push_back(ms);
      }
    }
  }
  std::vector<BenchmarkResult> out;
  for (const auto& s : samples) out.push_back(result_of(s, budget_ms));
  return out;
}

}  // namespace kiln
