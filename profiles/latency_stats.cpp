#include "profiles/latency_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace kiln {

namespace {
double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  // Nearest-rank: the smallest sample with at least p% of samples at or below it.
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}
std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}
}  // namespace

LatencyStats compute_latency_stats(std::vector<double> samples) {
  LatencyStats s;
  s.iterations = static_cast<int>(samples.size());
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.min_ms = samples.front();
  s.max_ms = samples.back();
  s.p50_ms = percentile(samples, 50);
  s.p90_ms = percentile(samples, 90);
  s.p99_ms = percentile(samples, 99);
  s.mean_ms = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  return s;
}

std::string latency_json(const LatencyStats& s) {
  return "{\"min\": " + fmt(s.min_ms) + ", \"p50\": " + fmt(s.p50_ms) + ", \"p90\": " + fmt(s.p90_ms) +
         ", \"p99\": " + fmt(s.p99_ms) + ", \"max\": " + fmt(s.max_ms) + ", \"mean\": " + fmt(s.mean_ms) + "}";
}

std::string latency_line(const LatencyStats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "min %.3f ms  p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  max %.3f ms  mean %.3f ms", s.min_ms,
                s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms, s.mean_ms);
  return buf;
}

}  // namespace kiln
