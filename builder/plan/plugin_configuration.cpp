// Plan pass plugin_configuration: PluginBuild::configure for each plugin step with its inputs'
// min/opt/max over the profile; the step then saves the fields the configured plugin reports.
#include "builder/plan/plan_passes.h"
#include "runtime/kernel.h"
#include "runtime/plugin_host/plugin_kernel.h"
#include "runtime/plugin_host/plugin_registry.h"

namespace kiln {

Status configure_plugin_steps(Plan& plan, const PlanPassContext& ctx, const std::set<std::string>& only) {
  const std::string profile = ctx.profile ? ctx.profile->name : std::string();
  for (auto& step : plan.steps) {
    if (is_kernel_domain(step.domain) || (!only.empty() && !only.count(step.name))) continue;
    auto ranges = ctx.plugin_inputs.find(step.name);
    if (ranges == ctx.plugin_inputs.end() || ranges->second.size() != step.inputs.size()) continue;
    KILN_ASSIGN_OR_RETURN(std::string version, plugin_version_from_impl(step));
    const PluginEntry* entry = PluginRegistry::global().find(step.domain, step.op_type, version);
    if (!entry) return Internal("node '" + step.name + "': plugin " + step.domain + "::" + step.op_type + " vanished from the registry");
    const std::string where = "node '" + step.name + "' (plugin " + entry->id() + ")";
    auto build = entry->creator->create(step.attrs);
    if (!build.ok()) return build.status().with_context(where);
    if (!build.value()) return Internal(where + ": creator returned no plugin");
    KILN_RETURN_IF_ERROR(build.value()->configure(ranges->second).with_context(where + ": configure for profile '" + profile + "'"));
    step.attrs = build.value()->fields();
  }
  return Status::Ok();
}

Status plugin_configuration(Plan& plan, PlanPassContext& ctx) { return configure_plugin_steps(plan, ctx); }

}  // namespace kiln
