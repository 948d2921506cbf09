// The FusedConv activation on one AVX2 vector, for the direct kernels that apply the epilogue in
// registers (depthwise_direct, depthwise_nchw): the same functions (runtime/simd/vec_math.inc) as
// the vector kernels of runtime/kernels/vec_kernels.inc, so ReLU and Clip pass NaN through.
#pragma once

#include <utility>

#include "runtime/kernels/fused_conv_common.h"
#include "runtime/simd/vec_avx2.h"

namespace kiln {

template <ConvAct A>
inline simd::avx2::V conv_activate(simd::avx2::V v, float alpha, float beta) {
  namespace sv = simd::avx2;
  if constexpr (A == ConvAct::kNone) return v;
  else if constexpr (A == ConvAct::kRelu) return sv::relu(v);
  else if constexpr (A == ConvAct::kSilu) return sv::silu(v);
  else if constexpr (A == ConvAct::kSigmoid) return sv::sigmoid(v);
  else if constexpr (A == ConvAct::kHardSwish) return sv::hardswish(v);
  else if constexpr (A == ConvAct::kClip) return sv::clip(v, alpha, beta);
  else if constexpr (A == ConvAct::kGeluErf) return sv::gelu_erf(v);
  else return sv::gelu_tanh(v);
}

// `pick.template operator()<A>()` for the activation `a` known at run time (a kernel's row
// function templated on it).
template <class Pick>
auto dispatch_conv_act(ConvAct a, Pick&& pick) -> decltype(pick.template operator()<ConvAct::kNone>()) {
  switch (a) {
    case ConvAct::kNone: return pick.template operator()<ConvAct::kNone>();
    case ConvAct::kRelu: return pick.template operator()<ConvAct::kRelu>();
    case ConvAct::kSilu: return pick.template operator()<ConvAct::kSilu>();
    case ConvAct::kSigmoid: return pick.template operator()<ConvAct::kSigmoid>();
    case ConvAct::kHardSwish: return pick.template operator()<ConvAct::kHardSwish>();
    case ConvAct::kClip: return pick.template operator()<ConvAct::kClip>();
    case ConvAct::kGeluErf: return pick.template operator()<ConvAct::kGeluErf>();
    case ConvAct::kGeluTanh: return pick.template operator()<ConvAct::kGeluTanh>();
  }
  return {};
}

}  // namespace kiln
