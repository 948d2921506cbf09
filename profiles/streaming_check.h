// The streaming half of engine-build (config section `streaming`): an equivalence check — full(T)
// must equal full(T-1) followed by one incremental step, outputs and state — and a streaming
// benchmark: one cold start, then `steps` steps paced at rate_hz on a real clock.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "builder/build_config.h"
#include "profiles/latency_stats.h"
#include "runtime/streaming_session.h"

namespace kiln {

struct StreamingResult {
  // Equivalence: largest |full(T) - (full(T-1) + step)| per compared output and state.
  std::map<std::string, double> equivalence_err;
  double equivalence_max_abs_err = 0;
  int64_t equivalence_timesteps = 0;   // T
  // Benchmark.
  // Latency counts from each step's scheduled release, not from when it got to start: a step that
  // overruns delays the next, and that delay is part of the next step's latency (the
  // coordinated-omission correction). `service` is start to end, the step's own run time.
  int steps = 0;
  LatencyStats latency;                // per step from its release, cold start excluded
  LatencyStats service;                // per step from its start
  struct Step {
    double release_ms = 0, start_ms = 0, end_ms = 0;  // from the start of the paced loop
    bool missed = false;                              // end - release over the budget
  };
  std::vector<Step> step_times;
  double budget_ms = 0;
  int deadline_misses = 0;             // steps whose latency from release is over budget
  double cold_start_ms = 0;
  double profile_switch_ms = 0;        // first step after the cold start minus the steps' p50
  double state_bytes_copied_per_step = 0;    // mean over the steps
  uint64_t state_bytes_copied_max = 0;
  double state_bytes_appended_per_step = 0;  // the new rows written in place, for scale
  uint64_t state_buffer_bytes = 0;
  int in_place_steps = 0;
  int64_t cached_rows = 0;             // cache rows in the last step
};

// Runs the session the engine records (engine-build wrote the config's streaming section into it).
StatusOr<StreamingResult> run_streaming_check(std::shared_ptr<const Engine> engine, const BuildConfig& cfg, bool benchmark,
                                              const std::function<void(const std::string&)>& progress);

// Per-step inputs of `profile` at its opt shapes, from the config's generators: everything but the
// state inputs and the mask the session generates (bench/interference uses it too).
StatusOr<std::vector<std::pair<std::string, Tensor>>> streaming_step_inputs(const Engine& engine, const std::string& profile,
                                                                            const BuildConfig& cfg, const StreamingSpec& spec);

// The report's "streaming" object.
std::string streaming_report_json(const StreamingResult& r);

}  // namespace kiln
