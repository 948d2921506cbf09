// Private helpers of the reduction family (Reduce*, ArgMax/ArgMin, Softmax family, losses,
// CumSum, TopK, Einsum), shared by the reduction_*.cpp files.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "runtime/simd/vec_avx2.h"
#define KILN_REDUCTION_AVX2 1
#endif

#include "runtime/kernels/kernel_util.h"

namespace kiln {

// Registration of the ops living in the other reduction_*.cpp files; register_reduction_kernels
// calls them.
void register_reduction_softmax_kernels(KernelRegistry& r);  // Softmax, LogSoftmax, Hardmax, NLL and SCE losses
void register_reduction_misc_kernels(KernelRegistry& r);     // CumSum, TopK, Einsum

// Loads and stores an element of storage type S through the type arithmetic happens in, so one
// template serves float32/float64/integers and the 16-bit float storage types.
template <typename S>
struct Elem {
  using Compute = S;
  static Compute load(S v) { return v; }
  static S store(Compute c) { return c; }
};
template <>
struct Elem<Half> {
  using Compute = float;
  static float load(Half v) { return half_to_float(v.bits); }
  static Half store(float c) { return Half{float_to_half(c)}; }
};
template <>
struct Elem<BFloat16> {
  using Compute = float;
  static float load(BFloat16 v) { return bf16_to_float(v.bits); }
  static BFloat16 store(float c) { return BFloat16{float_to_bf16(c)}; }
};

// dispatch_float plus float16/bfloat16 (as Half/BFloat16 storage types).
template <typename F>
Status dispatch_float_half(DType dt, F&& f, const char* what = "input") {
  switch (dt) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kFloat16: return f(Half{});
    case DType::kBFloat16: return f(BFloat16{});
    default:
      return Unimplemented(std::string(what) + " dtype " + dtype_name(dt) +
                           " is not supported (float16/bfloat16/float32/float64 only)");
  }
}

// Numeric types without bool, plus float16/bfloat16: what Reduce*, ArgMax, CumSum, TopK accept.
template <typename F>
Status dispatch_arith(DType dt, F&& f, const char* what = "input") {
  switch (dt) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kFloat16: return f(Half{});
    case DType::kBFloat16: return f(BFloat16{});
    case DType::kInt8: return f(int8_t{});
    case DType::kInt16: return f(int16_t{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
    case DType::kUInt8: return f(uint8_t{});
    case DType::kUInt16: return f(uint16_t{});
    case DType::kUInt32: return f(uint32_t{});
    case DType::kUInt64: return f(uint64_t{});
    default: return Unimplemented(std::string(what) + " dtype " + dtype_name(dt) + " is not supported");
  }
}

// NaN test that compiles to false for integer types (no self-comparison warnings).
template <typename T>
inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// Outer/axis/inner decomposition of a shape around one axis: element (o, a, i) is at
// (o * n + a) * inner + i.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
inline AxisSplit split_at_axis(const Shape& s, int axis) {
  return AxisSplit{s.numel(0, axis), s[axis], s.numel(axis + 1, s.rank())};
}

// exp(x) for float, accurate to about 2 ulp over the whole float range, written branch-free so
// that loops calling it vectorize (std::exp does not without -ffast-math). Inputs below
// -87.3 flush to 0 and above 88.7 saturate to +inf; NaN propagates.
inline float fast_expf(float x) {
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits
  float xc = x < -87.3365f ? -87.3365f : x;
  xc = xc > 88.7228f ? 88.7228f : xc;
  const float t = std::fma(xc, kLog2e, kMagic);
  const float n = t - kMagic;
  float r = std::fma(n, -kLn2Hi, xc);
  r = std::fma(n, -kLn2Lo, r);
  // Minimax polynomial for e^r on [-ln2/2, ln2/2] (Cephes expf).
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p, r * r, r) + 1.0f;
  // 2^n built in two halves so that n = 128 (x near 88.7) does not overflow the exponent field.
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kMagic);
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  const float s1 = std::bit_cast<float>((n1 + 127) << 23), s2 = std::bit_cast<float>((n2 + 127) << 23);
  float y = p * s1 * s2;
  y = x < -87.3365f ? 0.0f : y;
  y = x > 88.7228f ? INFINITY : y;
  return x != x ? x : y;
}

#ifdef KILN_REDUCTION_AVX2
// The vector side comes from kiln's vector math library (runtime/simd/vec_avx2.h).
inline __m256 fast_exp8(__m256 x) { return simd::avx2::exp(x); }
inline float hsum8(__m256 v) { return simd::avx2::hsum(v); }
inline float hmax8(__m256 v) { return simd::avx2::hmax(v); }
#endif

}  // namespace kiln
