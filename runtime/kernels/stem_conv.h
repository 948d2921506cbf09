// FusedConv impl "stem_direct" (runtime/kernels/stem_conv_kernels.cpp): the register blocks shared
// by its AVX2 and AVX-512 builds (stem_conv_rows.inc, included by stem_conv_kernels.cpp and
// stem_conv_avx512.cpp).
#pragma once

#include <cstdint>

#include "runtime/kernels/fused_conv_common.h"

namespace kiln::stem {

// Output channels are packed in groups of kPack (zero-padded), a multiple of both ISAs' lanes.
constexpr int64_t kPack = 16;

struct Geom {
  int64_t C, H, W;        // X: NCHW
  int64_t OC, OCp;        // output channels, rounded up to kPack
  int64_t OH, OW, KH, KW, sh, sw, ph, pw;
  // Where output pixel p's channel vector v (the ISA's lanes) goes: y + p * pixel_stride + v *
  // vector_stride (NHWC: OC and lanes; nChw<lanes>c of one image: lanes and OH * OW * lanes).
  int64_t pixel_stride, vector_stride, image_stride;
  float alpha, beta;  // Clip's bounds
};

// Output rows [r0, r1) of the whole batch (row r: image r / OH, row r % OH) from X (NCHW), W packed
// as [C][KH][KW][OCp] and the bias (OCp values, zero past OC).
using RowsFn = void (*)(const Geom& g, const float* x, const float* w, const float* bias, float* y, int64_t r0, int64_t r1);

RowsFn rows_avx2(ConvAct a);
RowsFn rows_avx512(ConvAct a);  // only on a CPU with AVX-512 (cpu_info().avx512)

}  // namespace kiln::stem
