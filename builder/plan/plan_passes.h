// The plan passes: rewrites of a profile's lowered plan, in one ordered, named list like the graph
// pass pipeline (builder/passes/pipeline.cpp). Each can be disabled by name (`passes: {disable:
// [...]}` takes graph and plan pass names alike) and is tested on and off.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "builder/optimization_profile.h"
#include "plugins/plugin_api.h"
#include "runtime/plan.h"
#include "runtime/status.h"

namespace kiln {

struct PrecisionOverride;

// Work on a profile's plan that builder/ leaves to its caller (kernel timing needs the caller's
// inputs or timing cache): the tactic_selection plan pass runs it.
using PlanHook = std::function<Status(Plan& plan, const ResolvedProfile& profile)>;

struct PlanPassContext {
  const ResolvedProfile* profile = nullptr;
  std::set<std::string> disabled;  // plan pass names to skip
  bool bf16 = false;               // bf16 kernels run: precision bf16 or int8, and the CPU has AVX512_BF16
  // precision int8: each candidate step's calibrated activation scale (null: not an int8 build).
  const std::map<std::string, float>* int8_scales = nullptr;
  // precision_overrides pin steps to fp32 or bf16 in a bf16 or int8 plan (null or empty: none).
  const std::vector<PrecisionOverride>* precision_overrides = nullptr;
  PlanHook tactics;                // tactic selection; none = every op keeps its best-ranked kernel
  // Each plugin step's inputs at the profile's min, opt and max (by step name), from the graph the
  // plan was lowered from; steps whose inputs are not all known at the three points are absent.
  std::map<std::string, std::vector<PluginInputRange>> plugin_inputs;

  // Filled by the passes:
  std::shared_ptr<Plan> fp32_plan;   // bf16/int8_lowering: the plan before lowering, for error reports
  std::set<std::string> fp32_ops;    // bf16_lowering: compute ops left in fp32 (no bf16 kernel, not int8)
  std::vector<std::string> log;      // one line per rewrite worth reporting
};

struct PlanPass {
  const char* name;
  const char* why;
  std::function<Status(Plan&, PlanPassContext&)> run;
};

const std::vector<PlanPass>& plan_pass_pipeline();
std::vector<std::string> plan_pass_names();
// Runs every enabled plan pass in order; errors name the pass.
Status run_plan_passes(Plan& plan, PlanPassContext& ctx);

// The plan passes (one file each).
Status plugin_configuration(Plan& plan, PlanPassContext& ctx);
Status bf16_lowering(Plan& plan, PlanPassContext& ctx);
Status int8_lowering(Plan& plan, PlanPassContext& ctx);  // builder/plan/int8_lowering.cpp
Status tactic_selection(Plan& plan, PlanPassContext& ctx);
Status winograd_layout(Plan& plan, PlanPassContext& ctx);

// Configures the plugin steps of `plan` named in `only` (all plugin steps with known inputs when
// empty) for the profile's input ranges, and saves the fields each configured plugin reports.
Status configure_plugin_steps(Plan& plan, const PlanPassContext& ctx, const std::set<std::string>& only = {});

}  // namespace kiln
