// The panel GEMM's AVX2 + FMA register block (runtime/kernels/panel_gemm_block.h), for CPUs
// without AVX-512: 6 rows x 16 columns, i.e. 12 ymm accumulators + 2 vectors of W + 1 broadcast of
// A = 15 of the 16 registers, run over the 64-column panel as 4 sub-blocks. Each sub-block runs
// the whole K block, so the block's rows of A (6 x kc floats, 9 KB at kDepth) stay in L1 for all
// four and the K block of W (96 KB) in L2 for every row block. AVX2 is kiln's baseline; the
// target pragma keeps the file right if that ever changes, and like panel_gemm_avx512.cpp it
// instantiates no template with external linkage.
#include <immintrin.h>

#include <cstdint>

#include "runtime/kernels/panel_gemm_block.h"
#include "runtime/simd/vec_avx2.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
// Clang ignores GCC's target pragma; its own attribute pragma does the same.
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#endif

namespace kiln::panel_gemm::detail {
namespace {

constexpr int64_t kSub = 16;  // columns per register block

// Lanes [0, n) of a vector set (n may be <= 0 or >= 8).
inline __m256i lanes(int64_t n) { return simd::avx2::first_lanes(n < 0 ? 0 : n > 8 ? 8 : n); }

template <bool kFull>
inline __m256 load(const float* p, __m256i mask) { return kFull ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask); }

// Columns [j0, j0 + 16) of the panel. kFull: all 16 lie within N, so y, bias and the residual are
// read and written whole; otherwise through lane masks (AVX2's masked stores are slow, so only
// the panel's last partial sub-block pays for them).
template <int R, bool kFull>
inline void sub_block(const Block& k, int64_t j0) {
  __m256i m[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  if (!kFull) {
    m[0] = lanes(k.cols - j0);
    m[1] = lanes(k.cols - j0 - 8);
  }
  __m256 c[R][2];
  if (k.first) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) c[r][0] = c[r][1] = _mm256_setzero_ps();
  } else {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      c[r][0] = load<kFull>(k.y + r * k.ldy + j0, m[0]);
      c[r][1] = load<kFull>(k.y + r * k.ldy + j0 + 8, m[1]);
    }
  }
  const float* a[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) a[r] = k.a + r * k.lda;
  const float* b = k.b + j0;
  const int64_t kc = k.kc;
#pragma GCC unroll 4
  for (int64_t d = 0; d < kc; ++d) {
    const __m256 b0 = _mm256_load_ps(b + d * kPanelCols), b1 = _mm256_load_ps(b + d * kPanelCols + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(a[r] + d);
      c[r][0] = _mm256_fmadd_ps(x, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(x, b1, c[r][1]);
    }
  }
  if (k.last) {
    __m256 bias[2];
    for (int v = 0; v < 2; ++v) bias[v] = k.bias ? load<kFull>(k.bias + j0 + 8 * v, m[v]) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int v = 0; v < 2; ++v) {
        __m256 x = _mm256_add_ps(c[r][v], bias[v]);
        if (k.act == Act::kGeluErf) x = simd::avx2::gelu_erf(x);
        if (k.act == Act::kGeluTanh) x = simd::avx2::gelu_tanh(x);
        if (k.residual) x = _mm256_add_ps(x, load<kFull>(k.residual + r * k.ldy + j0 + 8 * v, m[v]));
        c[r][v] = x;
      }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v) {
      float* p = k.y + r * k.ldy + j0 + 8 * v;
      if (kFull)
        _mm256_storeu_ps(p, c[r][v]);
      else
        _mm256_maskstore_ps(p, m[v], c[r][v]);
    }
}

template <int R>
void block(const Block& k) {
  int64_t j0 = 0;
  for (; j0 + kSub <= k.cols; j0 += kSub) sub_block<R, true>(k, j0);
  if (j0 < k.cols) sub_block<R, false>(k, j0);
}

}  // namespace

void run_block_avx2(int rows, const Block& k) {
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

#ifdef __clang__
#pragma clang attribute pop
#endif
#pragma GCC pop_options
