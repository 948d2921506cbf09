#include "builder/plan/int8_lowering.h"

#include <fnmatch.h>

#include <set>

#include "builder/plan/plan_passes.h"
#include "runtime/kernel.h"

namespace kiln {

namespace {

// A reduction this short gains nothing from int8 (the ControlTransformer's speed and pedal inputs
// are matmuls over K = 1), and such inputs are raw features whose few values calibrate poorly. For
// a convolution the reduction is C/group x kernel size: resnet's first conv (3 x 7 x 7 = 147) is
// quantized, a 3x3 depthwise one (9: memory-bound, nothing to gain) is not.
constexpr int64_t kMinInt8Reduction = 16;

bool is_candidate(const Plan& plan, const PlanStep& step) {
  if (step.domain != kKilnDomain || step.inputs.size() < 2 || step.inputs[1] < 0) return false;
  const bool matmul = step.op_type == "FusedMatMul", conv = step.op_type == "FusedConv";
  if (!matmul && !conv) return false;
  if (step.attrs.count("a_scale")) return false;  // quantized by the model itself (QDQ)
  const PlanValue& w = plan.values[step.inputs[1]];
  if (w.constant < 0) return false;
  const Tensor& t = plan.constants[w.constant];
  if (t.dtype() != DType::kFloat32) return false;
  if (matmul) return t.shape().rank() == 2 && t.shape()[0] >= kMinInt8Reduction;
  // FusedConv's W is [M, C/group, k...]; the int8 kernel runs 1-D and 2-D convolutions.
  return (t.shape().rank() == 3 || t.shape().rank() == 4) && t.shape()[0] > 0 && t.shape().numel() / t.shape()[0] >= kMinInt8Reduction;
}

// Whether value `v` cannot be negative: a ReLU's (or sigmoid's, or a clip's at >= 0) output, also
// as a fused epilogue, or that seen through pools and reshapes (resnet's MaxPool after its first
// conv). Such an input quantizes to u8 over 255 levels instead of s8 over 127.
bool non_negative(const Plan& plan, const std::map<int, const PlanStep*>& producer, int v, int depth = 0) {
  auto it = producer.find(v);
  if (it == producer.end() || depth > 8) return false;
  const PlanStep& p = *it->second;
  auto attr = [&](const char* name) -> const Attribute* {
    auto a = p.attrs.find(name);
    return a == p.attrs.end() ? nullptr : &a->second;
  };
  if (p.domain == kKilnDomain && (p.op_type == "FusedConv" || p.op_type == "FusedMatMul")) {
    const Attribute* act = attr("activation");
    if (!act || act->kind != Attribute::Kind::kString) return false;
    if (act->s == "relu" || act->s == "sigmoid") return true;
    const Attribute* alpha = attr("activation_alpha");
    return act->s == "clip" && alpha && alpha->kind == Attribute::Kind::kFloat && alpha->f >= 0;
  }
  if (!p.domain.empty() || p.inputs.empty()) return false;
  if (p.op_type == "Relu" || p.op_type == "Sigmoid") return true;
  static const std::set<std::string> kKeepSign = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
                                                   "Reshape", "Flatten",     "Transpose",         "Identity"};
  return kKeepSign.count(p.op_type) && p.inputs[0] >= 0 && non_negative(plan, producer, p.inputs[0], depth + 1);
}

std::string precision_field(const PlanStep& step) {
  auto it = step.attrs.find("precision");
  return it != step.attrs.end() && it->second.kind == Attribute::Kind::kString ? it->second.s : "";
}

bool glob_match(const std::string& pattern, const std::string& name) { return fnmatch(pattern.c_str(), name.c_str(), 0) == 0; }

// A step's precision is its kernel's (impl) and, for plugins, their `precision` field.
void set_fp32(PlanStep& step, const PlanStep& fp32) {
  step.impl = fp32.impl;
  step.attrs = fp32.attrs;
}

void set_bf16(PlanStep& step, const PlanStep& fp32) {
  step.attrs = fp32.attrs;
  if (!is_kernel_domain(step.domain)) {
    step.attrs["precision"] = Attribute::String("bf16");
    return;
  }
  step.impl = "onednn_bf16";
}

bool unsigned_input(const Plan& plan, const std::map<int, const PlanStep*>& producer, const PlanStep& step) {
  return step.op_type == "FusedConv" && !step.inputs.empty() && non_negative(plan, producer, step.inputs[0]);
}

std::map<int, const PlanStep*> producers(const Plan& plan) {
  std::map<int, const PlanStep*> p;
  for (const auto& step : plan.steps)
    for (int v : step.outputs) p[v] = &step;
  return p;
}

}  // namespace

std::string explicit_int8_impl(const PlanStep& step) {
  return step.domain == kKilnDomain && step.op_type == "FusedMatMul" && step.attrs.count("a_scale") ? "onednn_int8" : step.impl;
}

std::vector<std::string> int8_candidate_steps(const Plan& plan) {
  std::vector<std::string> out;
  for (const auto& step : plan.steps)
    if (is_candidate(plan, step)) out.push_back(step.name);
  return out;
}

const PrecisionOverride* find_precision_override(const PlanStep& step, const std::vector<PrecisionOverride>& overrides) {
  for (const auto& o : overrides) {
    if (glob_match(o.pattern, step.name)) return &o;
    for (const auto& n : step.replaced_nodes)
      if (glob_match(o.pattern, n)) return &o;
  }
  return nullptr;
}

std::map<std::string, std::string> apply_precision_overrides(Plan& plan, const Plan& fp32_plan,
                                                             const std::vector<PrecisionOverride>& overrides, bool bf16) {
  std::map<std::string, std::string> changed;
  if (overrides.empty() || fp32_plan.steps.size() != plan.steps.size()) return changed;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    PlanStep& step = plan.steps[s];
    const PlanStep& fp32 = fp32_plan.steps[s];
    const PrecisionOverride* o = find_precision_override(step, overrides);
    if (!o) continue;
    // Only a step the lowering changed has a lowered form: an Add stays what it is under a bf16 override.
    const bool lowered = step.impl != fp32.impl || precision_field(step) != precision_field(fp32) || step.attrs.count("a_scale");
    if (!lowered) continue;
    if (o->precision == "bf16" && bf16) {
      set_bf16(step, fp32);
      changed[step.name] = "bf16";
    } else {
      set_fp32(step, fp32);
      changed[step.name] = "fp32";
    }
  }
  return changed;
}

Int8Lowering lower_to_int8(Plan& plan, const Plan& fp32_plan, const std::map<std::string, float>& a_scales,
                           const std::vector<PrecisionOverride>& overrides, bool bf16) {
  Int8Lowering r;
  const auto producer = producers(fp32_plan);  // the fp32 plan's steps compute the same activations
  for (auto& step : plan.steps) {
    if (!is_candidate(plan, step)) continue;
    auto it = a_scales.find(step.name);
    if (it == a_scales.end() || !(it->second > 0)) {
      r.without_scale.push_back(step.name);
      continue;
    }
    step.impl = "onednn_int8";
    step.attrs["a_scale"] = Attribute::Float(it->second);
    if (unsigned_input(fp32_plan, producer, step)) step.attrs["a_unsigned"] = Attribute::Int(1);
  }
  r.overridden = apply_precision_overrides(plan, fp32_plan, overrides, bf16);
  for (const auto& step : plan.steps) r.quantized += step.impl == "onednn_int8";
  return r;
}

// The plan pass: int8 with the calibrated scales, or precision_overrides alone in a bf16 plan. The
// plan before it (bf16_lowering's copy, else this one) is the fp32 reference the overrides restore.
Status int8_lowering(Plan& plan, PlanPassContext& ctx) {
  static const std::vector<PrecisionOverride> kNone;
  const auto& overrides = ctx.precision_overrides ? *ctx.precision_overrides : kNone;
  const bool int8 = ctx.int8_scales != nullptr;
  if (!int8 && (overrides.empty() || !ctx.bf16)) return Status::Ok();
  if (!ctx.fp32_plan) ctx.fp32_plan = std::make_shared<Plan>(plan);
  if (int8) {
    const Int8Lowering r = lower_to_int8(plan, *ctx.fp32_plan, *ctx.int8_scales, overrides, ctx.bf16);
    ctx.log.push_back("int8: " + std::to_string(r.quantized) + " steps quantized" +
                      (r.without_scale.empty() ? "" : ", " + std::to_string(r.without_scale.size()) + " without a calibrated scale left as they were") +
                      (r.overridden.empty() ? "" : ", " + std::to_string(r.overridden.size()) + " pinned by precision_overrides") +
                      (ctx.bf16 ? "; the other steps with a bf16 kernel run bf16" : "; the other steps run fp32 (no AVX512_BF16 here)"));
    ctx.fp32_ops.erase("FusedMatMul");
    ctx.fp32_ops.erase("FusedConv");
  } else {
    const auto pinned = apply_precision_overrides(plan, *ctx.fp32_plan, overrides, ctx.bf16);
    if (!pinned.empty()) ctx.log.push_back("precision_overrides: " + std::to_string(pinned.size()) + " steps pinned");
  }
  // A plugin may size its tiles or workspace by precision in configure().
  if (overrides.empty() || ctx.disabled.count("plugin_configuration")) return Status::Ok();
  return configure_plugin_steps(plan, ctx);
}

}  // namespace kiln
