// Vectorized float32 loops over contiguous arrays, built twice from runtime/kernels/vec_kernels.inc
// (AVX-512 and AVX2) and chosen once at run time: the elementwise unary kernels, Pow by a small
// constant exponent, the expression programs of kiln::FusedElementwise, BatchNormalization and the
// float16 / bfloat16 casts run through them.
#pragma once

#include <cstdint>

namespace kiln::vec {

// The unary functions with a vector implementation. Params carry the attributes of the ones that
// have any (LeakyRelu alpha, HardSigmoid alpha/beta, Clip bounds, Pow's exponent).
enum class Unary : uint8_t {
  kExp, kLog, kTanh, kErf, kSigmoid, kSoftplus, kGeluErf, kGeluTanh, kSilu, kSqrt, kReciprocal, kRelu,
  kHardSwish, kHardSigmoid, kNeg, kAbs, kLeakyRelu, kClip, kPowInt, kPowHalf, kCount
};
// Binary functions of the expression programs: arithmetic, min/max, comparisons producing 1.0f or
// 0.0f, and Pow with a tensor exponent.
enum class Binary : uint8_t { kAdd, kSub, kMul, kDiv, kMax, kMin, kPow, kLess, kLessEq, kGreater, kGreaterEq, kEqual, kCount };

struct Params {
  float alpha = 0.0f, beta = 0.0f;
};

using UnaryFn = void (*)(const float* x, float* y, int64_t n, Params p);
// z = op(x, y); a null stride-0 operand is given as a pointer to one value with its step 0.
using BinaryFn = void (*)(const float* x, int64_t sx, const float* y, int64_t sy, float* z, int64_t n);
// out = cond != 0 ? a : b, each with its step (0 or 1).
using SelectFn = void (*)(const float* c, int64_t sc, const float* a, int64_t sa, const float* b, int64_t sb, float* out,
                          int64_t n);
// Sum and sum of squares of x[0..n).
using SumFn = void (*)(const float* x, int64_t n, float* sum, float* sum_sq);
// y[i] = x[i] * a + b: BatchNormalization's per-channel scale and shift over one channel's plane.
using ScaleShiftFn = void (*)(const float* x, float* y, int64_t n, float a, float b);
// y[i] = x[i] * a[i] + b[i]: the same with the scale and shift spread over the row (small planes).
using AffineFn = void (*)(const float* x, float* y, int64_t n, const float* a, const float* b);
// float32 <-> float16 (round to nearest even) and bfloat16 (truncating, as kiln's Cast does); the
// 16-bit side is the raw bit pattern.
using NarrowFn = void (*)(const float* x, uint16_t* y, int64_t n);
using WidenFn = void (*)(const uint16_t* x, float* y, int64_t n);
// The sum of x[0..n) accumulated in double (ReduceSum / ReduceMean over contiguous rows).
using RowSumFn = double (*)(const float* x, int64_t n);
// The maximum (or minimum) of x[0..n), n > 0, into *out; false, with *out untouched, when some
// element is NaN (the caller's scalar loop then returns that NaN, as the reference does).
using RowExtremeFn = bool (*)(const float* x, int64_t n, bool is_max, float* out);

// LayerNormalization of one row of n contiguous floats: y = (x - mean) / sqrt(var + eps) * scale +
// bias (scale, bias: n floats each, or null for 1 and 0); the mean and the biased variance (around
// the mean) summed in double over runs of float lanes; the row's mean and 1 / sqrt(var + eps) into *mean_out / *inv_out
// where not null.
using LayerNormRowFn = void (*)(const float* x, const float* scale, const float* bias, float* y, int64_t n, float eps,
                                float* mean_out, float* inv_out);

// Softmax of one row of n contiguous floats given its max m (NaN when an element is): y = e / sum(e),
// e = exp(x - m), 0 where x - m < -87 (below FLT_MIN after the division). y may be x.
using SoftmaxRowFn = void (*)(const float* x, float* y, int64_t n, float m);

struct Table {
  const char* isa;
  int lanes;
  UnaryFn unary[static_cast<int>(Unary::kCount)];
  BinaryFn binary[static_cast<int>(Binary::kCount)];
  SelectFn select;
  SumFn sum;
  ScaleShiftFn scale_shift;
  AffineFn affine;
  NarrowFn f32_to_f16, f32_to_bf16;
  WidenFn f16_to_f32, bf16_to_f32;
  RowSumFn row_sum;
  RowExtremeFn row_extreme;
  LayerNormRowFn layer_norm;
  SoftmaxRowFn softmax_row;
};

// The table for this CPU: AVX-512 where runtime/cpu_features.h reports F/BW/DQ/VL (KILN_MAX_CPU_ISA
// caps it) and KILN_SIMD is not "avx2" (which lets tests and benchmarks pin the baseline).
const Table& table();
const Table& avx2_table();
const Table* avx512_table();  // null on CPUs without AVX-512

inline UnaryFn unary(Unary op) { return table().unary[static_cast<int>(op)]; }
inline BinaryFn binary(Binary op) { return table().binary[static_cast<int>(op)]; }

}  // namespace kiln::vec
