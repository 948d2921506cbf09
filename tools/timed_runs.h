// engine-run's timed runs, as trtexec users expect them: --warmup N untimed runs, then at least
// --iterations N runs and at least --duration S seconds of them; every run's start and latency can
// be written as JSON (--export-times).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace kiln {

struct TimingOptions {
  int warmup = 1;
  int iterations = 0;        // at least this many timed runs
  double duration_s = 0;     // and at least this long
  std::string json;          // {"latency_ms": {...}, "cpu_ms": {...}, "iterations": N}
  std::string export_times;  // every run: {"runs": [{"start_ms", "latency_ms"}, ...]}
  bool enabled() const { return iterations > 0 || duration_s > 0; }
};

struct TimedRuns {
  std::vector<double> start_ms;     // from the first timed run's start
  std::vector<double> latency_ms;
  std::vector<double> cpu_ms;       // the process's CPU time (all threads) per run
};

// Runs `run` as the options say and prints the latency line; writes the JSON files asked for.
// `context` ({"engine": "...", "profile": "..."}) goes into the exported times.
StatusOr<TimedRuns> time_runs(const std::function<Status()>& run, const TimingOptions& options,
                              const std::vector<std::pair<std::string, std::string>>& context);

}  // namespace kiln
