// kiln's vector math for AVX2 + FMA + F16C (8 float lanes), kiln's baseline ISA (-march=x86-64-v3): the
// lane primitives, then the shared math functions of runtime/simd/vec_math.inc in namespace
// kiln::simd::avx2. Header-only and self-contained, like runtime/simd/vec_avx512.h (docs/simd.md).
#pragma once

#include <immintrin.h>

#include <cstdint>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
// Clang ignores GCC's target pragma; its own attribute pragma does the same.
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#endif

namespace kiln::simd::avx2 {
namespace {

using V = __m256;
using M = __m256;  // all-ones / all-zeros lanes
constexpr int kLanes = 8;

inline V set1(float v) { return _mm256_set1_ps(v); }
inline V zero() { return _mm256_setzero_ps(); }
inline V loadu(const float* p) { return _mm256_loadu_ps(p); }
inline void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
inline __m256i first_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
// The first n lanes (n < kLanes) from p, zeros elsewhere; the others are never touched.
inline V load_partial(const float* p, int64_t n) { return _mm256_maskload_ps(p, first_lanes(n)); }
inline void store_partial(float* p, int64_t n, V v) { _mm256_maskstore_ps(p, first_lanes(n), v); }
// v with the lanes from n on set to 0.
inline V keep_first(V v, int64_t n) { return _mm256_and_ps(v, _mm256_castsi256_ps(first_lanes(n))); }
// The even and the odd floats of the 16 in a, b (a stride-2 convolution's input columns by phase):
// a0 a2 b0 b2 | a4 a6 b4 b6, then 64-bit lanes 0 2 1 3: a0 a2 a4 a6 b0 b2 b4 b6 (odds alike).
inline void deinterleave2(V a, V b, V* even, V* odd) {
  *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
  *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

inline V add(V a, V b) { return _mm256_add_ps(a, b); }
inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V div(V a, V b) { return _mm256_div_ps(a, b); }
inline V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }    // a * b + c
inline V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a * b
// x86 min/max return the second operand when either is NaN (see vec_avx512.h).
inline V min(V a, V b) { return _mm256_min_ps(a, b); }
inline V max(V a, V b) { return _mm256_max_ps(a, b); }
inline V sqrt(V a) { return _mm256_sqrt_ps(a); }
inline V abs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
inline V neg(V a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
inline V round_even(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline V floor(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
inline V ceil(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
inline V copysign(V a, V s) {
  const V sign = _mm256_set1_ps(-0.0f);
  return _mm256_or_ps(_mm256_andnot_ps(sign, a), _mm256_and_ps(sign, s));
}

inline M lt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
inline M le(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
inline M gt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
inline M ge(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
inline M eq(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
inline M is_nan(V a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
inline M mand(M a, M b) { return _mm256_and_ps(a, b); }
inline M mor(M a, M b) { return _mm256_or_ps(a, b); }
inline M mnot(M a) { return _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(-1))); }
inline V select(M m, V if_true, V if_false) { return _mm256_blendv_ps(if_false, if_true, m); }
inline V mask_to_float(M m) { return _mm256_and_ps(m, _mm256_set1_ps(1.0f)); }
inline M float_to_mask(V v) { return _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NEQ_UQ); }

// y * 2^n for integral n in [-150, 128] held in float, y in [0.5, 2): 2^n is built in two halves so
// that neither leaves the normal exponent range; the second product rounds once into a denormal
// or overflows to inf, as one exact scaling would.
inline V ldexp(V y, V n) {
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const V s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const V s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}
// x = m * 2^e with m in [0.5, 1), for finite x > 0; denormals are scaled by 2^25 first.
inline V frexp(V x, V* e) {
  const V tiny = _mm256_cmp_ps(x, _mm256_set1_ps(1.17549435e-38f), _CMP_LT_OQ);
  x = _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(33554432.0f)), tiny);
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i ex = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126));
  *e = _mm256_sub_ps(_mm256_cvtepi32_ps(ex), _mm256_and_ps(tiny, _mm256_set1_ps(25.0f)));
  const __m256i mant = _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f000000));
  return _mm256_castsi256_ps(mant);
}

inline float hsum(V v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hmax(V v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Double-precision accumulation of float lanes, as in vec_avx512.h.
using VD = __m256d;
inline VD zero_d() { return _mm256_setzero_pd(); }
inline void add_widened(V v, VD* lo, VD* hi) {
  *lo = _mm256_add_pd(*lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  *hi = _mm256_add_pd(*hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}
inline double hsum_d(VD v) {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

// float16 / bfloat16 lanes, as in vec_avx512.h (float16 rounds to nearest even through F16C;
// bfloat16 truncates, NaN kept quiet). AVX2 has no 16-bit masked load/store: the partial forms go
// through a lane-sized buffer.
inline V load_half(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline void store_half(uint16_t* p, V v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline V load_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline void store_bf16(uint16_t* p, V v) {
  __m256i hi = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
  hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_castps_si256(is_nan(v)), _mm256_set1_epi32(0x40)));
  // Each value fits 16 bits, so the unsigned-saturating pack is exact; it packs within 128-bit
  // halves, and the permute brings the two halves' results together.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(hi, hi), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}
inline V load_half_partial(const uint16_t* p, int64_t n) {
  uint16_t b[kLanes] = {};
  for (int64_t i = 0; i < n; ++i) b[i] = p[i];
  return load_half(b);
}
inline void store_half_partial(uint16_t* p, int64_t n, V v) {
  uint16_t b[kLanes];
  store_half(b, v);
  for (int64_t i = 0; i < n; ++i) p[i] = b[i];
}
inline V load_bf16_partial(const uint16_t* p, int64_t n) {
  uint16_t b[kLanes] = {};
  for (int64_t i = 0; i < n; ++i) b[i] = p[i];
  return load_bf16(b);
}
inline void store_bf16_partial(uint16_t* p, int64_t n, V v) {
  uint16_t b[kLanes];
  store_bf16(b, v);
  for (int64_t i = 0; i < n; ++i) p[i] = b[i];
}

#include "runtime/simd/vec_math.inc"

}  // namespace
}  // namespace kiln::simd::avx2

#ifdef __clang__
#pragma clang attribute pop
#endif
#pragma GCC pop_options
