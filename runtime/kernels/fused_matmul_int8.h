// FusedMatMul in int8 (impl "onednn_int8", runtime/kernels/fused_matmul_int8.cpp).
#pragma once

namespace kiln {

// The largest |q(W)| the int8 kernel quantizes calibrated weights to on this CPU: 127 where oneDNN
// has VNNI (or AMX), 63 where it has not, since its u8 x s8 pair sums saturate 16 bits beyond that.
int int8_weight_levels();

}  // namespace kiln
