// One float32 Softmax / LogSoftmax row along the contiguous last axis: the Softmax kernel's rows
// (reduction_softmax_kernels.cpp) and the fused scores-then-Softmax rows of kiln::FusedElementwise
// (fused_elementwise_kernels.cpp). y may be x (in place).
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/kernels/reduction_common.h"
#include "runtime/kernels/vec_kernels.h"

namespace kiln {

// The transformer hot path: float32 rows along the contiguous last axis. One pass for the max,
// one for exp and the sum, one to scale; AVX2 for each pass when compiled for it (the exp and
// scale passes AVX-512 where the CPU has it, vec::Table::softmax_row), the row's tail
// (n % 8) as one vector overlapping the body, so that a row of 49 takes no scalar exp (and no
// masked store, which AMD's cores run as microcode).
// exp(x - max) below e^-87 is taken as 0: those outputs are below FLT_MIN (the sum is >= 1), and
// forming them as denormals costs a microcode assist per element. Masked attention rows (Swin's
// shifted windows add -100) are full of such elements, and the assists doubled the step's time.
inline constexpr float kSoftmaxExpFloor = -87.0f;  // e^-87 = 1.6e-38, still a normal float

#ifdef KILN_REDUCTION_AVX2
// e^d for d <= 0 (x - max), 0 below kSoftmaxExpFloor. The reduction and polynomial are kiln's
// vector exp's (runtime/simd/vec_math.inc); with d clamped to [-87, 0], 2^n (n in [-126, 0]) is a
// single normal float, so no step forms a denormal. NaN passes: max_ps returns its second operand
// on NaN, the ordered compare is false for it, and NaN times any scale stays NaN.
inline __m256 softmax_exp8(__m256 d) {
  const __m256 floor = _mm256_set1_ps(kSoftmaxExpFloor);
  const __m256 x = _mm256_max_ps(floor, d);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(_mm256_cmp_ps(d, floor, _CMP_LT_OQ), _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}
#endif

#ifdef KILN_REDUCTION_AVX2
// Softmax of x[0, n) into y (y may be x), n >= 8, given the max of its elements (NaN when one is).
inline void softmax_row_with_max_f32(const float* x, float* y, int64_t n, float m);
#endif

inline void softmax_row_f32(const float* xr, float* yr, int64_t n, bool log) {
#ifdef KILN_REDUCTION_AVX2
  if (n < 8) {  // one vector through a buffer padded with -inf (whose exp is 0)
    alignas(32) float buf[8];
    for (int64_t k = 0; k < 8; ++k) buf[k] = k < n ? xr[k] : -INFINITY;
    const __m256 v = _mm256_load_ps(buf);
    const float m = hmax8(v);
    const __m256 e = softmax_exp8(_mm256_sub_ps(v, _mm256_set1_ps(m)));
    const float s = hsum8(e);
    _mm256_store_ps(buf, _mm256_mul_ps(e, _mm256_set1_ps(1.0f / s)));
    const float ls = std::log(s);
    for (int64_t k = 0; k < n; ++k) yr[k] = log ? (xr[k] - m) - ls : buf[k];
    return;
  }
  // The tail (n % 8) is the row's last 8 elements, overlapping the body: the max does not mind the
  // repeats, and the sums mask them off.
  const int64_t n8 = n & ~int64_t{7}, last = n - 8;
  const bool tail = n8 != n;
  __m256 vm = _mm256_loadu_ps(xr + last);
  for (int64_t i = 0; i < n8; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(xr + i));
  const float m = hmax8(vm);
  // NaN inputs make the sum NaN, so the whole row comes out NaN, as in numpy.
  if (!log) {
    softmax_row_with_max_f32(xr, yr, n, m);
    return;
  }
  const __m256 vmax = _mm256_set1_ps(m);
  __m256 vs = _mm256_setzero_ps();
  if (tail) {
    // Lanes [0, 8 - n % 8) repeat body elements: only the others join the sum.
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 fresh = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32(static_cast<int>(n8 - last - 1))));
    vs = _mm256_and_ps(softmax_exp8(_mm256_sub_ps(_mm256_loadu_ps(xr + last), vmax)), fresh);
  }
  for (int64_t i = 0; i < n8; i += 8) vs = _mm256_add_ps(vs, softmax_exp8(_mm256_sub_ps(_mm256_loadu_ps(xr + i), vmax)));
  const float ls = std::log(hsum8(vs));
  for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - m) - ls;
#else
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, xr[i]);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float d = xr[i] - m;
    const float e = d < kSoftmaxExpFloor ? 0.0f : fast_expf(d);
    if (!log) yr[i] = e;
    s += e;
  }
  if (log) {
    const float ls = std::log(s);
    for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - m) - ls;
    return;
  }
  const float inv = 1.0f / s;
  for (int64_t j = 0; j < n; ++j) yr[j] *= inv;
#endif
}

#ifdef KILN_REDUCTION_AVX2
inline void softmax_row_with_max_f32(const float* x, float* y, int64_t n, float m) {
  // With AVX-512 the exp and scale passes run 16 lanes wide (runtime/kernels/vec_kernels.inc),
  // the tail through masked stores, which AVX-512 cores run natively.
  if (const vec::Table& t = vec::table(); t.lanes == 16) {
    t.softmax_row(x, y, n, m);
    return;
  }
  // The tail (n % 8) is the row's last 8 elements, overlapping the body: the sum masks the repeats
  // off, and the overlapping stores write the same values again. It goes first: in place, the
  // body's stores overwrite the x it overlaps.
  const int64_t n8 = n & ~int64_t{7}, last = n - 8;
  const __m256 vmax = _mm256_set1_ps(m);
  __m256 vs = _mm256_setzero_ps(), et = _mm256_setzero_ps();
  if (n8 != n) {
    et = softmax_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + last), vmax));
    // Lanes [0, 8 - n % 8) repeat body elements: only the others join the sum.
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    vs = _mm256_and_ps(et, _mm256_castsi256_ps(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32(static_cast<int>(n8 - last - 1)))));
  }
  for (int64_t i = 0; i < n8; i += 8) {
    const __m256 e = softmax_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    _mm256_storeu_ps(y + i, e);
    vs = _mm256_add_ps(vs, e);
  }
  const __m256 vinv = _mm256_set1_ps(1.0f / hsum8(vs));
  for (int64_t j = 0; j < n8; j += 8) _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_loadu_ps(y + j), vinv));
  // After the body: its overlapped elements get e * inv again, the value they already hold.
  if (n8 != n) _mm256_storeu_ps(y + last, _mm256_mul_ps(et, vinv));
}
#endif

}  // namespace kiln
