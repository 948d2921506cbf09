// Latency statistics over a series of timed runs: percentiles (nearest-rank), max, mean.
#pragma once

#include <string>
#include <vector>

namespace kiln {

struct LatencyStats {
  int iterations = 0;
  double min_ms = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0, mean_ms = 0;
};

LatencyStats compute_latency_stats(std::vector<double> samples_ms);
// {"min": .., "p50": .., "p90": .., "p99": .., "max": .., "mean": ..}
std::string latency_json(const LatencyStats& s);
// One human-readable line: "min 1.234 ms  p50 ...".
std::string latency_line(const LatencyStats& s);

}  // namespace kiln
