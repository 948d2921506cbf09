// kiln's vector math for AVX-512 (16 float lanes): the lane primitives, then the shared math
// functions of runtime/simd/vec_math.inc in namespace kiln::simd::avx512.
//
// Header-only and self-contained (only <immintrin.h>), so both runtime/ kernels and plugins/ may
// include it without depending on anything else of the runtime: see docs/simd.md. Everything is
// compiled for AVX-512 through a target pragma and has internal linkage (an anonymous namespace, no
// std templates), so no copy of it can be chosen by the linker for code running on a CPU without
// AVX-512. Callers must be in a function compiled for AVX-512 too (the same pragma) and check the
// CPU at run time (__builtin_cpu_supports("avx512f") etc.) before calling in.
#pragma once

#include <immintrin.h>

#include <cstdint>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
// Clang ignores GCC's target pragma; its own attribute pragma does the same.
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))), apply_to = function)
#endif
// GCC 12's _mm512_undefined_ps() initializes a variable from itself, which -Wmaybe-uninitialized
// reports at every max/min/roundscale.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kiln::simd::avx512 {
namespace {

using V = __m512;
using M = __mmask16;
constexpr int kLanes = 16;

inline V set1(float v) { return _mm512_set1_ps(v); }
inline V zero() { return _mm512_setzero_ps(); }
inline V loadu(const float* p) { return _mm512_loadu_ps(p); }
inline void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
inline M first_lanes(int64_t n) { return static_cast<M>(n >= 16 ? 0xffff : n <= 0 ? 0 : (1u << n) - 1); }
// The first n lanes (n < kLanes) from p, zeros elsewhere; the others are never touched.
inline V load_partial(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(first_lanes(n), p); }
inline void store_partial(float* p, int64_t n, V v) { _mm512_mask_storeu_ps(p, first_lanes(n), v); }
// v with the lanes from n on set to 0.
inline V keep_first(V v, int64_t n) { return _mm512_maskz_mov_ps(first_lanes(n), v); }

inline V add(V a, V b) { return _mm512_add_ps(a, b); }
inline V sub(V a, V b) { return _mm512_sub_ps(a, b); }
inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V div(V a, V b) { return _mm512_div_ps(a, b); }
inline V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }    // a * b + c
inline V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a * b
// x86 min/max return the second operand when either is NaN: min(x, c) with x NaN gives c, so the
// math below puts the value that must propagate NaN second.
inline V min(V a, V b) { return _mm512_min_ps(a, b); }
inline V max(V a, V b) { return _mm512_max_ps(a, b); }
inline V sqrt(V a) { return _mm512_sqrt_ps(a); }
inline V abs(V a) { return _mm512_abs_ps(a); }
inline V neg(V a) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN))); }
inline V round_even(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline V floor(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
inline V ceil(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
// The magnitude of a with the sign bit of s.
inline V copysign(V a, V s) {
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(a), _mm512_castps_si512(s),
                                                       _mm512_set1_epi32(INT32_MIN), 0xd8));  // mask ? s : a, bitwise
}

inline M lt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
inline M le(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
inline M gt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
inline M ge(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
inline M eq(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
inline M is_nan(V a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
inline M mand(M a, M b) { return static_cast<M>(a & b); }
inline M mor(M a, M b) { return static_cast<M>(a | b); }
inline M mnot(M a) { return static_cast<M>(~a); }
inline V select(M m, V if_true, V if_false) { return _mm512_mask_mov_ps(if_false, m, if_true); }
// 1.0f where m, else 0.0f: how comparisons and masks travel as values.
inline V mask_to_float(M m) { return _mm512_maskz_mov_ps(m, _mm512_set1_ps(1.0f)); }
inline M float_to_mask(V v) { return _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NEQ_UQ); }

// y * 2^n for integral n in float (any size: overflow gives inf, underflow denormals or 0).
inline V ldexp(V y, V n) { return _mm512_scalef_ps(y, n); }
// x = m * 2^e with m in [0.5, 1), for finite x > 0 (denormals included).
inline V frexp(V x, V* e) {
  *e = _mm512_add_ps(_mm512_getexp_ps(x), _mm512_set1_ps(1.0f));
  return _mm512_getmant_ps(x, _MM_MANT_NORM_p5_1, _MM_MANT_SIGN_zero);
}

inline float hsum(V v) { return _mm512_reduce_add_ps(v); }
inline float hmax(V v) { return _mm512_reduce_max_ps(v); }

// Double-precision accumulation of float lanes (reductions that sum in double, as the scalar ones).
using VD = __m512d;
inline VD zero_d() { return _mm512_setzero_pd(); }
inline void add_widened(V v, VD* lo, VD* hi) {
  *lo = _mm512_add_pd(*lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
  *hi = _mm512_add_pd(*hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}
inline double hsum_d(VD v) { return _mm512_reduce_add_pd(v); }

// float16 / bfloat16 lanes (n < kLanes for the partial forms; other lanes are never touched).
// float16 rounds to nearest even (vcvtps2ph), NaN stays NaN; bfloat16 truncates the low mantissa
// bits with NaN kept quiet, as kiln's scalar Cast does (the ONNX reference of opsets 13-17).
inline V load_half(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline V load_half_partial(const uint16_t* p, int64_t n) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first_lanes(n), p)); }
inline __m256i to_half(V v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline void store_half(uint16_t* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_half(v)); }
inline void store_half_partial(uint16_t* p, int64_t n, V v) { _mm256_mask_storeu_epi16(p, first_lanes(n), to_half(v)); }
inline V bf16_widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
inline V load_bf16(const uint16_t* p) { return bf16_widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline V load_bf16_partial(const uint16_t* p, int64_t n) { return bf16_widen(_mm256_maskz_loadu_epi16(first_lanes(n), p)); }
inline __m256i to_bf16(V v) {
  const __m512i hi = _mm512_srli_epi32(_mm512_castps_si512(v), 16);
  return _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(hi, is_nan(v), hi, _mm512_set1_epi32(0x40)));
}
inline void store_bf16(uint16_t* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_bf16(v)); }
inline void store_bf16_partial(uint16_t* p, int64_t n, V v) { _mm256_mask_storeu_epi16(p, first_lanes(n), to_bf16(v)); }

#include "runtime/simd/vec_math.inc"

}  // namespace
}  // namespace kiln::simd::avx512

#pragma GCC diagnostic pop
#ifdef __clang__
#pragma clang attribute pop
#endif
#pragma GCC pop_options
