// FusedConv impl "stem_direct"'s AVX-512 register blocks (runtime/kernels/stem_conv_rows.inc).
// Chosen at run time, so this file is compiled for AVX-512 through a target pragma and everything
// it instantiates has internal linkage (runtime/simd/vec_avx512.h explains why).
#include <immintrin.h>

#include <cstdint>

#include "runtime/kernels/stem_conv.h"
#include "runtime/simd/vec_avx512.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
// Clang ignores GCC's target pragma; its own attribute pragma does the same.
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))), apply_to = function)
#endif
// GCC 12's _mm512_undefined_ps() initializes a variable from itself, which -Wmaybe-uninitialized
// reports at every max/min.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kiln::stem {
namespace {
namespace sv = simd::avx512;
#include "runtime/kernels/stem_conv_rows.inc"
}  // namespace

RowsFn rows_avx512(ConvAct a) { return pick_rows(a); }

}  // namespace kiln::stem

#pragma GCC diagnostic pop
#ifdef __clang__
#pragma clang attribute pop
#endif
#pragma GCC pop_options
