// Plan pass bf16_lowering: with precision bf16, every step that has a bf16 kernel switches to it,
// and plugins that declare a string field `precision` get "bf16" (and are configured again, since
// a plugin may size its tiles or workspace by precision). Compute ops left without a bf16 kernel
// are listed for the build's warning.
#include "builder/plan/plan_passes.h"
#include "runtime/kernel.h"
#include "runtime/plugin_host/plugin_kernel.h"
#include "runtime/plugin_host/plugin_registry.h"

namespace kiln {

namespace {

// Ops whose arithmetic bf16 would speed up: named in the fallback warning when they stay fp32
// (data movement and shape ops are not worth a warning).
const std::set<std::string> kFloatComputeOps = {"MatMul", "Gemm", "Conv", "FusedMatMul", "ConvTranspose", "Einsum"};

// Whether the plugin of `step` declares a string field `precision` (it may omit the field from its
// saved fields while it is at the fp32 default, as kiln::Attention does).
bool plugin_declares_precision(const PlanStep& step) {
  auto version = plugin_version_from_impl(step);
  const PluginEntry* entry = version.ok() ? PluginRegistry::global().find(step.domain, step.op_type, *version) : nullptr;
  if (!entry) return false;
  for (const auto& f : entry->creator->field_specs())
    if (f.name == "precision" && f.kind == Attribute::Kind::kString) return true;
  return false;
}

}  // namespace

Status bf16_lowering(Plan& plan, PlanPassContext& ctx) {
  if (!ctx.bf16) return Status::Ok();
  ctx.fp32_plan = std::make_shared<Plan>(plan);
  const KernelRegistry& reg = KernelRegistry::builtin();
  std::set<std::string> changed_plugins;
  for (auto& step : plan.steps) {
    if (!is_kernel_domain(step.domain)) {
      auto it = step.attrs.find("precision");
      if (plugin_declares_precision(step) || (it != step.attrs.end() && it->second.kind == Attribute::Kind::kString)) {
        if (it == step.attrs.end() || it->second.s != "bf16") changed_plugins.insert(step.name);
        step.attrs["precision"] = Attribute::String("bf16");
      } else {
        ctx.fp32_ops.insert(step.domain + "::" + step.op_type);
      }
      continue;
    }
    if (step.impl == "onednn_int8") continue;  // quantized by the model itself (QDQ)
    bool has_bf16 = false;
    for (const KernelEntry* e : reg.implementations(step.op_type)) has_bf16 |= e->impl == "onednn_bf16";
    if (has_bf16) step.impl = "onednn_bf16";
    else if (kFloatComputeOps.count(step.op_type)) ctx.fp32_ops.insert(step.op_type);
  }
  if (changed_plugins.empty() || ctx.disabled.count("plugin_configuration")) return Status::Ok();
  return configure_plugin_steps(plan, ctx, changed_plugins);
}

}  // namespace kiln
