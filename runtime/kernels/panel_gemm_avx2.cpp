// The panel GEMM's AVX2 + FMA register block (runtime/kernels/panel_gemm_block.h), for CPUs
// without AVX-512: 6 rows x 16 columns, i.e. 12 ymm accumulators + 2 vectors of W + 1 broadcast of
// A = 15 of the 16 registers, run over the 64-column panel as 4 sub-blocks (blocks of 1-3 rows
// take 32 or 64 columns instead). Each sub-block runs the whole K block, so the block's rows of A
// (6 x kc floats, 9 KB at kDepth) stay in L1 for all four and the K block of W (96 KB) in L2 for
// every row block. AVX2 is kiln's baseline; the
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

// Lanes [0, n) of a vector set (n may be <= 0 or >= 8).
inline __m256i lanes(int64_t n) { return simd::avx2::first_lanes(n < 0 ? 0 : n > 8 ? 8 : n); }

template <bool kFull>
inline __m256 load(const float* p, __m256i mask) { return kFull ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask); }

// Applies the epilogue on the last K block and stores the accumulators. Out of line, so the
// GELU's constants and temporaries do not crowd the K loop's registers (inlined, GCC spilled an
// accumulator inside the loop).
template <int R, int V, bool kFull>
__attribute__((noinline)) void finish(const Block& k, int64_t j0, __m256 (&c)[R][V], const __m256i (&m)[V]) {
  if (k.last) {
    __m256 bias[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) bias[v] = k.bias ? load<kFull>(k.bias + j0 + 8 * v, m[v]) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        __m256 x = _mm256_add_ps(c[r][v], bias[v]);
        if (k.act == Act::kGeluErf) x = simd::avx2::gelu_erf(x);
        if (k.act == Act::kGeluTanh) x = simd::avx2::gelu_tanh(x);
        if (k.residual) x = _mm256_add_ps(x, load<kFull>(k.residual + r * k.ldy + j0 + 8 * v, m[v]));
        c[r][v] = x;
      }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      float* p = k.y + r * k.ldy + j0 + 8 * v;
      if (kFull)
        _mm256_storeu_ps(p, c[r][v]);
      else
        _mm256_maskstore_ps(p, m[v], c[r][v]);
    }
}

// R rows x columns [j0, j0 + 8V) of the panel, R x V accumulators. kFull: all 8V columns lie
// within N, so y, bias and the residual are read and written whole; otherwise through lane masks
// (AVX2's masked stores are slow, so only the panel's last partial sub-block pays for them).
template <int R, int V, bool kFull>
inline void sub_block(const Block& k, int64_t j0) {
  __m256i m[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) m[v] = kFull ? _mm256_setzero_si256() : lanes(k.cols - j0 - 8 * v);
  __m256 c[R][V];
  if (k.first) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) c[r][v] = _mm256_setzero_ps();
  } else {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) c[r][v] = load<kFull>(k.y + r * k.ldy + j0 + 8 * v, m[v]);
  }
  const float* a[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) a[r] = k.a + r * k.lda;
  const float* b = k.b + j0;
  const int64_t kc = k.kc;
  if constexpr (V == 2) {
    // Both vectors of W in registers, then one broadcast per row: 12 + 2 + 1 registers at R 6.
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
  } else {
    // The rows' broadcasts in registers, then one vector of W at a time: R x V + R + 1 registers.
#pragma GCC unroll 2
    for (int64_t d = 0; d < kc; ++d) {
      __m256 x[R];
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) x[r] = _mm256_broadcast_ss(a[r] + d);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        const __m256 bv = _mm256_load_ps(b + d * kPanelCols + 8 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; ++r) c[r][v] = _mm256_fmadd_ps(x[r], bv, c[r][v]);
      }
    }
  }
  // A copy for the call: taking the accumulators' own address would keep them in memory.
  __m256 out[R][V];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) out[r][v] = c[r][v];
  finish<R, V, kFull>(k, j0, out, m);
}

// R rows of the panel in sub-blocks of 8V columns. Fewer rows take wider sub-blocks, so a
// short block still has 8-12 independent accumulators to hide the FMA latency (decoding's single
// row would otherwise wait on 2 chains).
template <int R, int V>
void block(const Block& k) {
  int64_t j0 = 0;
  for (; j0 + 8 * V <= k.cols; j0 += 8 * V) sub_block<R, V, true>(k, j0);
  if (j0 < k.cols) sub_block<R, V, false>(k, j0);
}

}  // namespace

void run_block_avx2(int rows, const Block& k) {
  switch (rows) {
    case 6: block<6, 2>(k); break;
    case 5: block<5, 2>(k); break;
    case 4: block<4, 2>(k); break;
    case 3: block<3, 4>(k); break;
    case 2: block<2, 4>(k); break;
    default: block<1, 8>(k); break;
  }
}

}  // namespace kiln::panel_gemm::detail

#ifdef __clang__
#pragma clang attribute pop
#endif
#pragma GCC pop_options
