// The vector float16 / bfloat16 conversions and BatchNormalization's scale-and-shift loops (both ISA
// tables of runtime/kernels/vec_kernels.h) against scalar references: every float16 and bfloat16
// bit pattern, a sample of every float32 exponent and mantissa residue, the special values
// (inf, NaN, signed zeros, denormals, overflow, round-to-nearest-even ties) and awkward lengths
// (masked tails); then the Cast and BatchNormalization kernels, which run through them, at awkward
// shapes, against the scalar conversion / a double-precision BatchNormalization.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/kernel_runner.h"
#include "runtime/kernels/vec_kernels.h"

namespace kiln {
namespace {

std::vector<const vec::Table*> tables() {
  std::vector<const vec::Table*> t = {&vec::avx2_table()};
  if (vec::avx512_table()) t.push_back(vec::avx512_table());
  return t;
}

// kiln's Cast to bfloat16: truncation, NaN kept quiet (elementwise_cast_kernels.cpp).
uint16_t bf16_truncate(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>(u >> 16);
}
float bf16_widen(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

bool is_nan_half(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }

// Same bits, or both NaN with the same sign (the hardware keeps NaN payloads, the scalar path does not).
::testing::AssertionResult same_half(uint16_t got, uint16_t want, float from) {
  if (got == want || (is_nan_half(got) && is_nan_half(want) && (got >> 15) == (want >> 15)))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "from " << from << " (0x" << std::hex << std::bit_cast<uint32_t>(from)
                                       << "): got 0x" << got << ", want 0x" << want;
}
::testing::AssertionResult same_float(float got, float want, uint32_t from) {
  const uint32_t g = std::bit_cast<uint32_t>(got), w = std::bit_cast<uint32_t>(want);
  if (g == w || (std::isnan(got) && std::isnan(want) && (g >> 31) == (w >> 31))) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "from 0x" << std::hex << from << ": got " << got << ", want " << want;
}

// float32 inputs: every 2039th bit pattern (every exponent, many mantissa residues) and the edges.
std::vector<float> float_sample() {
  std::vector<float> v;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 2039) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, std::bit_cast<float>(0x7f800001u),
                            std::bit_cast<float>(0xffbfffffu), 1e-45f, -1e-45f, 1.17549435e-38f, 65504.0f, 65519.996f,
                            65520.0f, -65520.0f, 1e10f, -1e10f, 3.4028235e38f,
                            1.0f + std::ldexp(1.0f, -11),          // tie: rounds to even (1.0)
                            1.0f + 3 * std::ldexp(1.0f, -11),      // tie: rounds up to even
                            std::ldexp(1.0f, -25), std::ldexp(3.0f, -25), std::ldexp(5.0f, -25),  // half-denormal ties
                            std::ldexp(1.0f, -24), std::ldexp(1.0f, -14), std::ldexp(1023.0f, -24),
                            std::ldexp(2047.0f, -25), 6.0975552e-05f, 0.1f, -2.5f, 1.0f / 3.0f};
  for (float s : specials) v.push_back(s);
  return v;
}

TEST(VecConvert, FloatToHalfMatchesScalar) {
  const std::vector<float> x = float_sample();
  std::vector<uint16_t> y(x.size());
  for (const vec::Table* t : tables()) {
    SCOPED_TRACE(t->isa);
    t->f32_to_f16(x.data(), y.data(), static_cast<int64_t>(x.size()));
    int bad = 0;
    for (size_t i = 0; i < x.size() && bad < 10; ++i) {
      const auto r = same_half(y[i], float_to_half(x[i]), x[i]);
      if (!r) ++bad;
      EXPECT_TRUE(r);
    }
  }
}

TEST(VecConvert, EveryHalfAndBFloat16Widens) {
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> y(h.size());
  for (const vec::Table* t : tables()) {
    SCOPED_TRACE(t->isa);
    t->f16_to_f32(h.data(), y.data(), 65536);
    for (uint32_t i = 0; i < 65536; ++i) ASSERT_TRUE(same_float(y[i], half_to_float(h[i]), i));
    t->bf16_to_f32(h.data(), y.data(), 65536);
    for (uint32_t i = 0; i < 65536; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(bf16_widen(h[i]))) << i;
  }
}

TEST(VecConvert, FloatToBFloat16Truncates) {
  const std::vector<float> x = float_sample();
  std::vector<uint16_t> y(x.size());
  for (const vec::Table* t : tables()) {
    SCOPED_TRACE(t->isa);
    t->f32_to_bf16(x.data(), y.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], bf16_truncate(x[i])) << "from " << x[i];
  }
}

// Every length up to a few vectors, at an odd offset, with guards: the masked tails must write
// exactly n elements.
TEST(VecConvert, TailsWriteExactlyN) {
  for (const vec::Table* t : tables()) {
    SCOPED_TRACE(t->isa);
    for (int64_t n = 0; n <= 70; ++n) {
      std::vector<float> x(n + 2), back(n + 2, 7.0f);
      for (int64_t i = 0; i < n + 2; ++i) x[i] = 0.37f * static_cast<float>(i) - 5.0f;
      std::vector<uint16_t> h(n + 2, 0xabcd), b(n + 2, 0xabcd);
      t->f32_to_f16(x.data() + 1, h.data() + 1, n);
      t->f32_to_bf16(x.data() + 1, b.data() + 1, n);
      EXPECT_EQ(h[0], 0xabcd);
      EXPECT_EQ(h[n + 1], 0xabcd) << n;
      EXPECT_EQ(b[n + 1], 0xabcd) << n;
      for (int64_t i = 1; i <= n; ++i) {
        EXPECT_EQ(h[i], float_to_half(x[i])) << n << " " << i;
        EXPECT_EQ(b[i], bf16_truncate(x[i])) << n << " " << i;
      }
      t->f16_to_f32(h.data() + 1, back.data() + 1, n);
      EXPECT_EQ(back[0], 7.0f);
      EXPECT_EQ(back[n + 1], 7.0f) << n;
      for (int64_t i = 1; i <= n; ++i) EXPECT_EQ(back[i], half_to_float(h[i]));
      t->bf16_to_f32(b.data() + 1, back.data() + 1, n);
      EXPECT_EQ(back[n + 1], 7.0f) << n;
      for (int64_t i = 1; i <= n; ++i) EXPECT_EQ(back[i], bf16_widen(b[i]));
    }
  }
}

TEST(VecConvert, ScaleShiftAndAffine) {
  for (const vec::Table* t : tables()) {
    SCOPED_TRACE(t->isa);
    for (int64_t n : {0, 1, 7, 15, 16, 17, 33, 100}) {
      std::vector<float> x(n + 1), a(n + 1), b(n + 1), y(n + 1, 9.0f);
      for (int64_t i = 0; i < n; ++i) {
        x[i] = 0.3f * static_cast<float>(i) - 2.0f;
        a[i] = 1.0f + 0.01f * static_cast<float>(i);
        b[i] = -0.5f * static_cast<float>(i);
      }
      t->scale_shift(x.data(), y.data(), n, 1.5f, -0.25f);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], std::fma(x[i], 1.5f, -0.25f));
      EXPECT_EQ(y[n], 9.0f);
      t->affine(x.data(), y.data(), n, a.data(), b.data());
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], std::fma(x[i], a[i], b[i]));
      EXPECT_EQ(y[n], 9.0f);
    }
  }
}

Tensor random_floats(const Shape& s, uint32_t seed, float lo = -4, float hi = 4) {
  Tensor t = Tensor::zeros(DType::kFloat32, s);
  uint32_t st = seed * 2654435761u + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    st = st * 1664525u + 1013904223u;
    t.as<float>()[i] = lo + (hi - lo) * static_cast<float>(st >> 8) / 16777216.0f;
  }
  return t;
}

Tensor run_cast(const Tensor& x, DType to) {
  auto r = run_op_once("Cast", {{"to", Attribute::Int(static_cast<int64_t>(to))}}, {x}, 1, "reference", 17);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move((*r)[0]) : Tensor();
}

// Through the kernel: sizes that run inline, in parallel blocks, and with special values.
TEST(VecConvert, CastKernelMatchesScalar) {
  for (int64_t n : {1, 17, 1000, 200003}) {
    Tensor x = random_floats(Shape{n}, 3, -70000, 70000);
    float* p = x.as<float>();
    p[0] = n > 1 ? NAN : p[0];
    if (n > 4) {
      p[1] = INFINITY;
      p[2] = -1e-40f;
      p[3] = 1.0f + std::ldexp(1.0f, -11);
    }
    Tensor h = run_cast(x, DType::kFloat16), b = run_cast(x, DType::kBFloat16);
    ASSERT_EQ(h.dtype(), DType::kFloat16);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(same_half(h.as<uint16_t>()[i], float_to_half(p[i]), p[i])) << i;
      ASSERT_EQ(b.as<uint16_t>()[i], bf16_truncate(p[i])) << i;
    }
    Tensor hf = run_cast(h, DType::kFloat32), bf = run_cast(b, DType::kFloat32);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(same_float(hf.as<float>()[i], half_to_float(h.as<uint16_t>()[i]), h.as<uint16_t>()[i])) << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(bf.as<float>()[i]), std::bit_cast<uint32_t>(bf16_widen(b.as<uint16_t>()[i]))) << i;
    }
  }
}

// BatchNormalization (float32, vector path) against the formula in double, at planes of one element
// (BatchNorm1d), small planes (spread over the row), channel counts not multiples of 16, tails, and
// a large input that runs in parallel blocks; parameters include a zero variance and a negative scale.
TEST(VecConvert, BatchNormMatchesDoubleReference) {
  const std::vector<Shape> shapes = {{1, 1}, {5, 3}, {2, 17}, {1, 17, 1, 1}, {2, 19, 5, 7}, {3, 5, 31},
                                     {1, 3, 33}, {2, 21, 40000}, {1, 96, 56, 56}, {4, 100}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(s.str());
    const int64_t C = s[1];
    Tensor x = random_floats(s, 1);
    Tensor scale = random_floats(Shape{C}, 2, -2, 2), bias = random_floats(Shape{C}, 3, -1, 1),
           mean = random_floats(Shape{C}, 4, -1, 1), var = random_floats(Shape{C}, 5, 0, 2);
    var.as<float>()[0] = 0.0f;
    const float eps = 1e-3f;
    auto r = run_op_once("BatchNormalization", {{"epsilon", Attribute::Float(eps)}}, {x, scale, bias, mean, var}, 1,
                         "reference", 17);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const Tensor& y = (*r)[0];
    ASSERT_EQ(y.shape(), s);
    const int64_t inner = s.numel(2, s.rank());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t c = (i / inner) % C;
      const double a = scale.as<float>()[c] / std::sqrt(static_cast<double>(var.as<float>()[c]) + eps);
      const double want = (x.as<float>()[i] - mean.as<float>()[c]) * a + bias.as<float>()[c];
      // float rounding of a, of the shift and of the FMA: a few ulp of the terms' magnitudes.
      const double terms = std::abs(x.as<float>()[i] * a) + std::abs(mean.as<float>()[c] * a) + std::abs(bias.as<float>()[c]);
      ASSERT_NEAR(y.as<float>()[i], want, 4e-7 * (1 + terms)) << i;
    }
  }
}

// Where's branch-free selection against the ternary, with a random condition, full-size operands and
// broadcast ones (a scalar y), at a length that runs inline and one that runs in parallel blocks.
TEST(VecConvert, WhereMatchesTernary) {
  for (int64_t n : {1, 37, 100003}) {
    Tensor c = Tensor::zeros(DType::kBool, Shape{n});
    Tensor x = random_floats(Shape{n}, 8), y = random_floats(Shape{n}, 9), s = Tensor::from_vector<float>({-0.5f}, Shape{});
    for (int64_t i = 0; i < n; ++i) c.as<bool>()[i] = ((i * 2654435761u) >> 7) & 1;
    for (bool bcast : {false, true}) {
      auto r = run_op_once("Where", {}, {c, x, bcast ? s : y}, 1, "reference", 17);
      ASSERT_TRUE(r.ok()) << r.status().message();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ((*r)[0].as<float>()[i], c.as<bool>()[i] ? x.as<float>()[i] : (bcast ? -0.5f : y.as<float>()[i])) << i;
    }
  }
}

// The table's select (FusedElementwise's Where) at every combination of step-1 and step-0 operands
// (an attention mask against a scalar fill), at lengths around the vector width, with NaN and -0.0
// conditions (NaN selects a, as NaN != 0).
TEST(VecConvert, SelectEveryStepCombination) {
  for (const vec::Table* t : tables()) {
    for (int64_t n : {1, 7, 8, 9, 16, 33, 512}) {
      std::vector<float> c(static_cast<size_t>(n)), a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), out(static_cast<size_t>(n) + 1);
      for (int64_t i = 0; i < n; ++i) {
        c[i] = i % 5 == 0 ? 0.0f : i % 5 == 1 ? -0.0f : i % 5 == 2 ? NAN : (i % 3 ? 1.0f : 0.0f);
        a[i] = static_cast<float>(i) + 0.25f;
        b[i] = -static_cast<float>(i) - 0.5f;
      }
      for (int mask = 0; mask < 8; ++mask) {
        const int64_t sc = (mask >> 2) & 1, sa = (mask >> 1) & 1, sb = mask & 1;
        for (float cst : {0.0f, 1.0f}) {
          const float c0 = cst;
          const float* cp = sc ? c.data() : &c0;
          // A broadcast operand is one element inside the vector (which n = 1 makes element 0).
          const float* ap = sa ? a.data() : a.data() + std::min<int64_t>(3, n - 1);
          const float* bp = sb ? b.data() : b.data() + std::min<int64_t>(4, n - 1);
          out[static_cast<size_t>(n)] = 12345.0f;
          t->select(cp, sc, ap, sa, bp, sb, out.data(), n);
          for (int64_t i = 0; i < n; ++i) {
            const float want = cp[i * sc] != 0.0f ? ap[i * sa] : bp[i * sb];
            ASSERT_EQ(out[i], want) << "n " << n << " steps " << sc << sa << sb << " at " << i;
          }
          ASSERT_EQ(out[static_cast<size_t>(n)], 12345.0f) << "wrote past n " << n;
          if (sc) break;  // the constant condition matters only when c is broadcast
        }
      }
    }
  }
}

// ReduceSum / Mean / Max / Min over the last axis (the vector row loops) against the scalar formula:
// row lengths around the vector width, and rows holding NaN, +-inf and only negative values.
TEST(VecConvert, LastAxisReductionsMatchScalar) {
  for (int64_t n : {1, 7, 15, 16, 17, 33, 100, 1536}) {
    const int64_t rows = 5;
    Tensor x = random_floats(Shape{rows, n}, 7, -1000, 1000);
    float* p = x.as<float>();
    p[1 * n + n / 2] = NAN;                                       // row 1: NaN wins max and min
    p[2 * n + (n - 1)] = INFINITY;                                // row 2: +inf in the tail
    for (int64_t i = 0; i < n; ++i) p[3 * n + i] = -1.0f - static_cast<float>(i % 5);  // row 3: all negative
    if (n > 1) p[4 * n] = -INFINITY;
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"}) {
      SCOPED_TRACE(std::string(op) + " n=" + std::to_string(n));
      AttrMap a{{"axes", Attribute::Ints({-1})}, {"keepdims", Attribute::Int(0)}};
      auto r = run_op_once(op, a, {x}, 1, "reference", 17);
      if (std::string(op) == "ReduceSum") {  // opset 13+: axes is an input
        r = run_op_once(op, {{"keepdims", Attribute::Int(0)}}, {x, Tensor::from_vector<int64_t>({-1}, Shape{1})}, 1,
                        "reference", 17);
      }
      ASSERT_TRUE(r.ok()) << r.status().message();
      const Tensor& y = (*r)[0];
      ASSERT_EQ(y.shape(), Shape{rows});
      for (int64_t row = 0; row < rows; ++row) {
        double sum = 0, mx = -INFINITY, mn = INFINITY;
        bool nan = false;
        for (int64_t i = 0; i < n; ++i) {
          const float v = p[row * n + i];
          sum += v;
          nan |= std::isnan(v);
          mx = std::max<double>(mx, v);
          mn = std::min<double>(mn, v);
        }
        const std::string o(op);
        const float want = o == "ReduceSum"    ? static_cast<float>(sum)
                           : o == "ReduceMean" ? static_cast<float>(sum / static_cast<double>(n))
                           : nan               ? NAN
                           : o == "ReduceMax"  ? static_cast<float>(mx)
                                               : static_cast<float>(mn);
        const float got = y.as<float>()[row];
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << row;
        else EXPECT_FLOAT_EQ(got, want) << row;
      }
    }
  }
}

}  // namespace
}  // namespace kiln
