// The one build path: a graph and an optimization profile in, the profile's finished plan out.
// engine-build calls it per profile; engine-run's in-memory build calls it with a profile whose
// shapes are fixed to the inputs it was given (build_plan). The steps, in order:
//   1. check the profile against the graph at its min, opt and max points;
//   2. specialize what the profile fixes and run the graph pass pipeline (builder/passes/);
//   3. lower the graph to a plan;
//   4. run the plan passes (builder/plan/plan_passes.h): plugin configuration, bf16 and int8
//      lowering, tactic selection (a hook the caller supplies), the Winograd layout.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "builder/build_config.h"
#include "builder/graph.h"
#include "builder/optimization_profile.h"
#include "builder/passes/pass.h"
#include "builder/plan/plan_passes.h"
#include "runtime/plan.h"

namespace kiln {

struct ProfileBuildOptions {
  std::set<std::string> disabled_passes;  // graph and plan pass names
  bool attention_required = false;        // an attention-like site left unfused is an error
  bool bf16 = false;                      // lower to bf16 kernels (the caller checked the CPU)
  PlanHook tactics;                       // tactic selection; none = best-ranked kernels
  const std::map<std::string, float>* int8_scales = nullptr;  // precision int8: calibrated activation scales
  std::vector<PrecisionOverride> precision_overrides;          // steps pinned to fp32 or bf16
};

struct BuiltProfile {
  ResolvedProfile profile;
  std::shared_ptr<Plan> plan;
  std::shared_ptr<Plan> fp32_plan;  // bf16/int8 only: the plan before lowering, for the error report
  std::set<std::string> fp32_ops;   // bf16/int8 only: compute ops that stayed fp32 (no bf16 kernel)
  std::vector<std::string> pass_log;
  std::vector<AttentionSite> attention_sites;  // every attention-like site, fused or with the reason not
};

// Inputs the profile does not name keep their declared (possibly symbolic) shapes and are not
// checked; engine-build's profiles name every input (resolve_profile).
StatusOr<BuiltProfile> build_profile(const Graph& g, const ResolvedProfile& p, const ProfileBuildOptions& options);

// build_profile(g, p, {disabled_passes, attention_required}).plan, for tests and tools that need
// the plan only. `sites` (optional) receives every attention-like site.
StatusOr<std::shared_ptr<Plan>> build_profile_plan(const Graph& g, const ResolvedProfile& p, const std::set<std::string>& disabled_passes,
                                                   std::vector<std::string>* log = nullptr, bool attention_required = false,
                                                   std::vector<AttentionSite>* sites = nullptr);

// Every graph and plan pass name, for validating `passes: {disable: [...]}` and --disable-pass.
std::vector<std::string> all_pass_names();

}  // namespace kiln
