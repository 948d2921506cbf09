// FLOP counts of plan steps (a multiply-add counts 2), for the GFLOP/s figure of the build report.
// Only the compute-bound ops are counted: MatMul (also kiln's FusedMatMul and StridedMatMul), Gemm,
// Conv, ConvTranspose and the kiln::Attention plugin. Everything else (elementwise, norms, Softmax,
// data movement) counts 0: it is bound by memory bandwidth, and counting it would blur what the rate
// says about the matmul-like kernels.
//
// kiln::Attention counts Q·Kᵀ and P·V, 4·Dh FLOPs per visible (query, key) pair per batch and head:
//   mask causal / block_causal: only the visible keys of each query (exact: what the model needs;
//     the kernel skips fully masked key tiles and so computes at most one partial tile more per row);
//   mask bool with readable data (a plan input or constant): the true entries of the mask (exact);
//   otherwise (no mask, additive, or a bool mask computed inside the plan): all Sk_total keys,
//     flagged as an upper bound when a mask is present.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "runtime/execution_context.h"
#include "runtime/plan.h"

namespace kiln {

struct FlopCount {
  double flops = 0;
  bool upper_bound = false;  // a mask hides keys the count could not see
};

// The arithmetic a step's counted FLOPs run in, which names the peak they are measured against
// (profiles/matmul_peak.h): a bf16 matmul at the f32 peak would read as "134 % of peak".
enum class FlopPrecision { kF32 = 0, kBf16 = 1, kInt8 = 2 };
constexpr int kFlopPrecisions = 3;
const char* flop_precision_name(FlopPrecision p);  // "f32", "bf16", "int8"
// By the kernel that ran the step (`kernel_impl`, e.g. "onednn_bf16"; a kernel that fell back to
// "reference" is f32), and for plugins by their `precision` field.
FlopPrecision step_precision(const PlanStep& step, std::string_view kernel_impl);

// `inputs` and `outputs` are the step's values with their shapes; input data is read only for a
// bool attention mask, and only when its view has data (pass a view without data otherwise).
FlopCount step_flops(const PlanStep& step, std::span<const TensorView> inputs, std::span<const TensorView> outputs);

// Per step of the context's plan, at the shapes of the context's last run.
std::vector<FlopCount> plan_step_flops(const ExecutionContext& ctx);
FlopCount total_flops(const std::vector<FlopCount>& steps);

}  // namespace kiln
