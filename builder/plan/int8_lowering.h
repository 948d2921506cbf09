// precision: int8, as one plan-level rewrite (an entry of the plan-pass list): every FusedMatMul
// and FusedConv with constant weights whose input has a calibrated activation scale runs on the
// int8 kernel (impl "onednn_int8", attribute a_scale; runtime/kernels/fused_matmul_int8.cpp,
// fused_conv_int8.cpp). The steps it
// leaves in floating point keep what the plan had when it was called (the caller lowers the rest to
// bf16 first where the CPU has it: attention, normalisation-adjacent matmuls without weights).
// precision_overrides then pin steps, by glob on the step's name or on an ONNX node it replaced, to
// fp32 (as in `fp32_plan`) or bf16; the first matching override wins.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "builder/build_config.h"
#include "runtime/plan.h"

namespace kiln {

// Steps int8 lowering can quantize (names, plan order): FusedMatMul with a constant 2-D f32 weight
// of at least 16 rows, FusedConv (1-D or 2-D) with a constant f32 weight whose reduction
// (C/group x kernel size) is at least 16 (shorter reductions stay in floating point: nothing to
// gain). A FusedConv whose input cannot be negative (after a ReLU) also gets a_unsigned = 1.
// Calibration measures the activation (input 0) of each.
std::vector<std::string> int8_candidate_steps(const Plan& plan);

struct Int8Lowering {
  int quantized = 0;                      // steps now on onednn_int8
  std::vector<std::string> without_scale; // candidates calibration gave no scale (left as they were)
  std::map<std::string, std::string> overridden;  // step -> the precision an override pinned it to
};

// `fp32_plan` is the same plan before any precision lowering (same steps, same order); `bf16`
// says whether bf16 kernels may run here (a bf16 override on a CPU without them stays fp32).
Int8Lowering lower_to_int8(Plan& plan, const Plan& fp32_plan, const std::map<std::string, float>& a_scales,
                           const std::vector<PrecisionOverride>& overrides, bool bf16);

// The kernel a step's own quantization asks for: "onednn_int8" for a FusedMatMul that carries
// a_scale (from a QDQ model, builder/passes/qdq_matmul_fusion.cpp), else the step's impl.
std::string explicit_int8_impl(const PlanStep& step);

// The first override whose glob matches the step's name or one of the nodes it replaced, or null.
const PrecisionOverride* find_precision_override(const PlanStep& step, const std::vector<PrecisionOverride>& overrides);

// Pins the steps matched by overrides to fp32 (restored from `fp32_plan`) or bf16 in a bf16 or int8
// plan; returns step -> precision for those it changed or confirmed.
std::map<std::string, std::string> apply_precision_overrides(Plan& plan, const Plan& fp32_plan,
                                                             const std::vector<PrecisionOverride>& overrides, bool bf16);

}  // namespace kiln
