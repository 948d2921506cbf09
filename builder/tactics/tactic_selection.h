// Tactic selection: where an op has more than one kernel implementation (MatMul, Gemm and Conv have
// "onednn" and "reference", FusedConv also "onednn_winograd", "im2col_panel", "winograd_f4x3" and
// "nchw_direct", MatMul and FusedMatMul also "panel"), engine-build times each candidate on
// the step's own shapes at the profile's opt point and records the fastest as the step's impl in
// the engine. A candidate that cannot run the step as itself (prepare fails with Unimplemented, or
// it falls back to another kernel) is reported unavailable and never chosen. Where the runner-up
// came within 2x of the best, both are timed again inside whole runs of the plan and the faster
// there wins (builder/tactics/tactic_refinement.h: isolated runs keep a kernel's weights in cache).
//
// Timing cache: the choices, keyed by op, candidates, input dtypes/shapes (and which are weights),
// attributes, thread count and CPU features, can be saved to a file and reused. A rebuild with the
// cache times nothing, so the same config plus the same cache gives a byte-identical engine.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "builder/build_config.h"
#include "builder/engine_build_job.h"
#include "runtime/kernel.h"
#include "runtime/plan.h"

namespace kiln {

struct TacticTiming {
  std::string impl;
  double ms = 0;  // best of the timed runs; < 0 = not timed to the end (far slower than the best)
  // Non-empty: the candidate cannot run the step's shapes as itself (why), and was not timed.
  std::string unavailable;
};

struct TacticDecision {
  std::string node, op_type, chosen;
  bool from_cache = false;
  std::vector<TacticTiming> timings;  // empty when from the cache
  // When the isolated best and runner-up were close (builder/tactics/tactic_refinement.h): both
  // candidates' per-step medians inside whole runs, summed over the steps sharing this step's
  // cache key; `chosen` follows these.
  std::vector<TacticTiming> in_context;
};

class TimingCache {
 public:
  // A missing file is an empty cache; a malformed one is an error naming the file and line.
  static StatusOr<TimingCache> load(const std::string& path);
  Status save(const std::string& path) const;  // atomically; sorted, so deterministic
  const std::string* find(const std::string& key) const;
  void insert(const std::string& key, const std::string& impl) { entries_[key] = impl; }
  size_t size() const { return entries_.size(); }

 private:
  std::map<std::string, std::string> entries_;
};

// Times the candidates of every multi-implementation step of `plan` at `opt_shapes` (all graph
// inputs), consulting and filling `cache`, and sets each such step's impl. (The winograd_layout plan
// pass then keeps the values between Winograd FusedConvs in nChw16c.)
StatusOr<std::vector<TacticDecision>> select_tactics(Plan& plan, const std::map<std::string, Shape>& opt_shapes, const BuildConfig& cfg,
                                                     TimingCache& cache, const KernelRegistry& registry = KernelRegistry::builtin());

// The same selection for engine-run's in-memory build: the plan runs once on `inputs` (every graph
// input, by name) to learn each step's shapes, and each step is timed there.
StatusOr<std::vector<TacticDecision>> select_tactics_for_inputs(Plan& plan, const std::map<std::string, Tensor>& inputs, TimingCache& cache,
                                                                const KernelRegistry& registry = KernelRegistry::builtin());

// "N op impl, ..." over the decisions, and how many values the plan keeps in nChw16c between
// Winograd convolutions, for progress lines.
std::string tactics_summary(const Plan& plan, const std::vector<TacticDecision>& decisions);

using TacticLog = std::map<std::string, std::vector<TacticDecision>>;  // by profile

// engine-build's plan hook: selects the tactics of each profile at its opt shapes (printing a
// summary line per profile) and logs the decisions in `log`.
PlanHook tactic_selection_hook(const BuildConfig& cfg, TimingCache& cache, const std::function<void(const std::string&)>& progress,
                               TacticLog* log);

// The report's "tactics" object: per profile, the steps with a choice, what was chosen and the
// timings ({"node", "op", "chosen", "cached", "ms": {impl: ms or null}, ["in_context_ms": {impl: ms},]
// "unavailable": {impl: why}}).
std::string tactics_report_json(const TacticLog& log);

}  // namespace kiln
