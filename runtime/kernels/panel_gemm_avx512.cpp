// The panel GEMM's AVX-512 register block (runtime/kernels/panel_gemm_block.h): 6 rows x 64
// columns, 24 zmm accumulators. Chosen at run time, so this file is compiled for AVX-512 through a
// target pragma and must not instantiate any template with external linkage (such a copy could be
// picked by the linker for callers on CPUs without AVX-512): helpers are internal, no std templates.
#include <immintrin.h>

#include <cstdint>

#include "runtime/kernels/panel_gemm_block.h"
#include "runtime/simd/vec_avx512.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq")
// Clang ignores GCC's target pragma; its own attribute pragma does the same.
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq"))), apply_to = function)
#endif
// GCC 12's _mm512_undefined_ps() initializes a variable from itself, which -Wmaybe-uninitialized
// reports at every roundscale.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kiln::panel_gemm::detail {
namespace {

inline __mmask16 lanes(int64_t n) { return static_cast<__mmask16>(n >= 16 ? 0xffff : n <= 0 ? 0 : (1u << n) - 1); }

// The epilogue's GELUs come from kiln's vector math library (runtime/simd/vec_avx512.h).
inline __m512 gelu_erf16(__m512 x) { return simd::avx512::gelu_erf(x); }
inline __m512 gelu_tanh16(__m512 x) { return simd::avx512::gelu_tanh(x); }

template <int R>
inline void block(const Block& k) {
  __mmask16 cols[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) cols[j] = lanes(k.cols - 16 * j);
  __m512 c[R][4];
  if (k.first) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) c[r][j] = _mm512_setzero_ps();
  } else {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) c[r][j] = _mm512_maskz_loadu_ps(cols[j], k.y + r * k.ldy + 16 * j);
  }
  const float* a[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) a[r] = k.a + r * k.lda;
  const float* b = k.b;
#pragma GCC unroll 4
  for (int64_t d = 0; d < k.kc; ++d) {
    const __m512 b0 = _mm512_load_ps(b + d * kPanelCols), b1 = _mm512_load_ps(b + d * kPanelCols + 16),
                 b2 = _mm512_load_ps(b + d * kPanelCols + 32), b3 = _mm512_load_ps(b + d * kPanelCols + 48);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r][d]);
      c[r][0] = _mm512_fmadd_ps(x, b0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(x, b1, c[r][1]);
      c[r][2] = _mm512_fmadd_ps(x, b2, c[r][2]);
      c[r][3] = _mm512_fmadd_ps(x, b3, c[r][3]);
    }
  }
  if (k.last) {
    __m512 bias[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) bias[j] = k.bias ? _mm512_maskz_loadu_ps(cols[j], k.bias + 16 * j) : _mm512_setzero_ps();
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        __m512 v = _mm512_add_ps(c[r][j], bias[j]);
        if (k.act == Act::kGeluErf) v = gelu_erf16(v);
        if (k.act == Act::kGeluTanh) v = gelu_tanh16(v);
        if (k.residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(cols[j], k.residual + r * k.ldy + 16 * j));
        c[r][j] = v;
      }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) _mm512_mask_storeu_ps(k.y + r * k.ldy + 16 * j, cols[j], c[r][j]);
}

}  // namespace

void run_block_avx512(int rows, const Block& k) {
  switch (rows) {
    case 6: block<6>(k); break;
    case 5: block<5>(k); break;
    case 4: block<4>(k); break;
    case 3: block<3>(k); break;
    case 2: block<2>(k); break;
    default: block<1>(k); break;
  }
}

}  // namespace kiln::panel_gemm::detail

#pragma GCC diagnostic pop
#ifdef __clang__
#pragma clang attribute pop
#endif
#pragma GCC pop_options
