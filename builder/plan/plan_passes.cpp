#include "builder/plan/plan_passes.h"

#include <algorithm>

namespace kiln {

const std::vector<PlanPass>& plan_pass_pipeline() {
  static const std::vector<PlanPass> passes = {
      {"plugin_configuration",
       "give each plugin step its inputs' min/opt/max for the profile (PluginBuild::configure) and save the fields it "
       "reports, so a plugin sizes tiles and picks code paths for the shapes it will see",
       plugin_configuration},
      {"bf16_lowering",
       "with precision bf16, switch every step that has a bf16 kernel to it and set the precision field of plugins that "
       "declare one (configuring them again); keeps the fp32 plan as the reference the build report measures bf16 "
       "against; after plugin_configuration so that reference is configured too",
       bf16_lowering},
      {"int8_lowering",
       "with precision int8, run every FusedMatMul and FusedConv whose activation has a calibrated scale on the int8 kernel, then pin "
       "the steps precision_overrides name to fp32 or bf16 (configuring plugins again); after bf16_lowering, so the "
       "steps int8 leaves keep bf16 where the CPU has it",
       int8_lowering},
      {"tactic_selection",
       "time each step's candidate kernels at the profile's opt shapes (or take them from the timing cache) and keep "
       "the fastest; after the precision lowerings, since candidates keep the step's precision",
       tactic_selection},
      {"winograd_layout",
       "keep the values flowing only between Winograd FusedConvs in oneDNN's nChw16c layout, which their kernels compute "
       "in; after tactic_selection, which decides where Winograd runs",
       winograd_layout},
  };
  return passes;
}

std::vector<std::string> plan_pass_names() {
  std::vector<std::string> names;
  for (const auto& p : plan_pass_pipeline()) names.push_back(p.name);
  return names;
}

Status run_plan_passes(Plan& plan, PlanPassContext& ctx) {
  for (const auto& p : plan_pass_pipeline()) {
    if (ctx.disabled.count(p.name)) continue;
    Status st = p.run(plan, ctx);
    if (!st.ok()) return st.with_context(std::string("plan pass ") + p.name);
  }
  return Status::Ok();
}

Status tactic_selection(Plan& plan, PlanPassContext& ctx) {
  if (!ctx.tactics) return Status::Ok();
  return ctx.tactics(plan, *ctx.profile);
}

}  // namespace kiln
