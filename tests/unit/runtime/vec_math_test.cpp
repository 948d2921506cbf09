// runtime/simd's vector math (through the vec_kernels tables, both ISAs) against the C library in
// double precision: the maximum error in ulp over the whole float range (every 2039th bit pattern
// of each sign, so every exponent and every residue of the low mantissa bits is visited) and exact
// special values (inf, NaN, signed zeros, denormals, saturation), plus the activations built from
// them against their scalar formulas at awkward lengths (masked tails).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "runtime/kernels/vec_kernels.h"

namespace kiln {
namespace {

using vec::Unary;

std::vector<const vec::Table*> tables() {
  std::vector<const vec::Table*> t = {&vec::avx2_table()};
  if (vec::avx512_table()) t.push_back(vec::avx512_table());
  return t;
}

// Distance of `got` from the exact value `want` in units of the last place of float at `want`.
double ulp_error(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : 1e30;
  if (std::isinf(want)) return got == static_cast<float>(want) ? 0.0 : 1e30;
  const float w = static_cast<float>(want);
  if (std::isinf(w)) return std::isinf(got) && (got > 0) == (want > 0) ? 0.0 : 1e30;  // rounds to inf
  const double aw = std::fabs(want);
  const double ulp = aw < 1.1754943508222875e-38 ? std::ldexp(1.0, -149) : std::ldexp(1.0, std::ilogb(aw) - 23);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

struct Sweep {
  double worst = 0;
  float at = 0;
};

// Runs `fn` over a sample of every float and returns the worst ulp error against `ref`.
Sweep sweep(vec::UnaryFn fn, const std::function<double(double)>& ref, float lo = -INFINITY, float hi = INFINITY) {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<float> x(kChunk), y(kChunk);
  Sweep s;
  int64_t n = 0;
  auto flush = [&] {
    fn(x.data(), y.data(), n, {});
    for (int64_t i = 0; i < n; ++i) {
      const double e = ulp_error(y[i], ref(x[i]));
      if (e > s.worst) s = {e, x[i]};
    }
    n = 0;
  };
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 2039) {
    const float v = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(v) || v < lo || v > hi) continue;
    x[n++] = v;
    if (n == kChunk) flush();
  }
  flush();
  return s;
}

double sigmoid_ref(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }
double softplus_ref(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

struct Case {
  const char* name;
  Unary op;
  std::function<double(double)> ref;
  double max_ulp;  // the bound documented in runtime/simd/vec_math.inc
};

TEST(VecMath, MaxUlpErrorOverTheFloatRange) {
  const std::vector<Case> cases = {
      {"exp", Unary::kExp, [](double x) { return std::exp(x); }, 1.5},
      {"log", Unary::kLog, [](double x) { return std::log(x); }, 1},
      {"tanh", Unary::kTanh, [](double x) { return std::tanh(x); }, 1.5},
      {"erf", Unary::kErf, [](double x) { return std::erf(x); }, 2.5},
      {"sigmoid", Unary::kSigmoid, sigmoid_ref, 2.5},
      {"softplus", Unary::kSoftplus, softplus_ref, 3},
      {"sqrt", Unary::kSqrt, [](double x) { return std::sqrt(x); }, 0.5},
      {"reciprocal", Unary::kReciprocal, [](double x) { return 1.0 / x; }, 0.5},
  };
  for (const vec::Table* t : tables())
    for (const Case& c : cases) {
      const Sweep s = sweep(t->unary[static_cast<int>(c.op)], c.ref);
      EXPECT_LE(s.worst, c.max_ulp) << t->isa << " " << c.name << ": " << s.worst << " ulp at x = " << s.at;
      std::printf("[ulp] %-7s %-10s max %.3f ulp (at %.9g)\n", t->isa, c.name, s.worst, s.at);
    }
}

// SiLU's documented absolute bound (runtime/simd/vec_math.inc: logistic_activation): every 2039th
// float bit pattern of both signs, plus a dense grid over [-20, 20] where the rational fit lives.
TEST(VecMath, SiluAbsoluteErrorBound) {
  std::vector<float> x;
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 2039) {
    const float v = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isfinite(v)) x.push_back(v);
  }
  for (int i = 0; i <= 400000; ++i) x.push_back(-20.0f + 40.0f * static_cast<float>(i) / 400000.0f);
  for (const vec::Table* t : tables()) {
    std::vector<float> y(x.size());
    t->unary[static_cast<int>(Unary::kSilu)](x.data(), y.data(), static_cast<int64_t>(x.size()), {});
    double worst = 0, at = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double xd = x[i], want = xd * sigmoid_ref(xd);
      const double err = std::fabs(y[i] - want) / std::max(1.0, std::fabs(xd));
      if (err > worst) worst = err, at = xd;
    }
    EXPECT_LE(worst, 2.5e-7) << t->isa << " silu: " << worst << " at x = " << at;
    std::printf("[abs] %-7s silu       max %.3g / max(1, |x|) (at %.9g)\n", t->isa, worst, at);
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f};
    float out[7];
    t->unary[static_cast<int>(Unary::kSilu)](specials, out, 7, {});
    EXPECT_EQ(out[0], 0.0f);
    EXPECT_EQ(out[1], 0.0f);
    EXPECT_EQ(out[2], INFINITY);
    EXPECT_TRUE(std::isnan(out[3])) << "-inf * sigmoid(-inf) is -inf * 0";
    EXPECT_TRUE(std::isnan(out[4]));
    EXPECT_NEAR(out[5], 0.5e-40f, 1e-44f);
    EXPECT_NEAR(out[6], -0.5e-40f, 1e-44f);
  }
}

// Exact results at the special values, for each function and ISA.
TEST(VecMath, SpecialValues) {
  const float inf = INFINITY, nan = NAN, den = 1e-40f, tiny = std::numeric_limits<float>::denorm_min();
  struct Want {
    Unary op;
    float x, y;  // y NaN: expect NaN
  };
  const std::vector<Want> wants = {
      {Unary::kExp, -inf, 0}, {Unary::kExp, inf, inf}, {Unary::kExp, 0, 1}, {Unary::kExp, -0.0f, 1},
      {Unary::kExp, 89, inf}, {Unary::kExp, -104, 0}, {Unary::kExp, nan, nan}, {Unary::kExp, den, 1},
      {Unary::kLog, 0, -inf}, {Unary::kLog, -0.0f, -inf}, {Unary::kLog, -1, nan}, {Unary::kLog, inf, inf},
      {Unary::kLog, 1, 0}, {Unary::kLog, nan, nan}, {Unary::kLog, -inf, nan},
      {Unary::kLog, tiny, static_cast<float>(std::log(static_cast<double>(tiny)))},
      {Unary::kTanh, inf, 1}, {Unary::kTanh, -inf, -1}, {Unary::kTanh, 20, 1}, {Unary::kTanh, -20, -1},
      {Unary::kTanh, nan, nan}, {Unary::kTanh, den, den}, {Unary::kTanh, -den, -den},
      {Unary::kErf, inf, 1}, {Unary::kErf, -inf, -1}, {Unary::kErf, 5, 1}, {Unary::kErf, nan, nan},
      {Unary::kSigmoid, inf, 1}, {Unary::kSigmoid, -inf, 0}, {Unary::kSigmoid, 0, 0.5f}, {Unary::kSigmoid, nan, nan},
      {Unary::kSoftplus, inf, inf}, {Unary::kSoftplus, -inf, 0}, {Unary::kSoftplus, 100, 100}, {Unary::kSoftplus, nan, nan},
      {Unary::kRelu, nan, nan}, {Unary::kRelu, -inf, 0}, {Unary::kRelu, inf, inf},
      {Unary::kSqrt, -1, nan}, {Unary::kSqrt, inf, inf},
  };
  for (const vec::Table* t : tables())
    for (const Want& w : wants) {
      float y = 0;
      t->unary[static_cast<int>(w.op)](&w.x, &y, 1, {});
      if (std::isnan(w.y))
        EXPECT_TRUE(std::isnan(y)) << t->isa << " op " << int(w.op) << " x=" << w.x << " got " << y;
      else
        EXPECT_EQ(y, w.y) << t->isa << " op " << int(w.op) << " x=" << w.x;
    }
  // Signed zeros survive the odd functions.
  for (const vec::Table* t : tables())
    for (Unary op : {Unary::kTanh, Unary::kErf}) {
      const float x = -0.0f;
      float y = 1;
      t->unary[static_cast<int>(op)](&x, &y, 1, {});
      EXPECT_TRUE(y == 0 && std::signbit(y)) << t->isa << " op " << int(op);
    }
}

// The activations built from the primitives, against the scalar formulas of the reference
// kernels, at lengths that leave every possible masked tail.
TEST(VecMath, ActivationsMatchScalarFormulasAtEveryTail) {
  struct Act {
    Unary op;
    vec::Params p;
    std::function<double(double)> ref;
  };
  const double k = std::sqrt(2.0 / M_PI);
  const std::vector<Act> acts = {
      {Unary::kGeluErf, {}, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      {Unary::kGeluTanh, {}, [k](double x) { return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x))); }},
      {Unary::kSilu, {}, [](double x) { return x * sigmoid_ref(x); }},
      {Unary::kHardSwish, {}, [](double x) { return x * std::max(0.0, std::min(1.0, x / 6 + 0.5)); }},
      {Unary::kHardSigmoid, {0.2f, 0.5f}, [](double x) { return std::max(0.0, std::min(1.0, 0.2 * x + 0.5)); }},
      {Unary::kLeakyRelu, {0.1f, 0}, [](double x) { return x < 0 ? 0.1 * x : x; }},
      {Unary::kClip, {-1.5f, 2.0f}, [](double x) { return std::min(2.0, std::max(-1.5, x)); }},
      {Unary::kPowInt, {3, 0}, [](double x) { return x * x * x; }},
      {Unary::kPowInt, {-2, 0}, [](double x) { return 1 / (x * x); }},
      {Unary::kPowHalf, {0.5f, 1}, [](double x) { return std::sqrt(std::fabs(x)); }},
      {Unary::kPowHalf, {-0.5f, -1}, [](double x) { return 1 / std::sqrt(std::fabs(x)); }},
      {Unary::kAbs, {}, [](double x) { return std::fabs(x); }},
      {Unary::kNeg, {}, [](double x) { return -x; }},
  };
  for (const vec::Table* t : tables())
    for (const Act& a : acts)
      for (int64_t n = 1; n <= 2 * t->lanes + 3; ++n) {
        std::vector<float> x(n), y(n + 1, 777.0f);
        for (int64_t i = 0; i < n; ++i) x[i] = -9.5f + 19.0f * static_cast<float>(i) / static_cast<float>(n) + 0.013f;
        if (a.op == Unary::kPowHalf)
          for (float& v : x) v = std::fabs(v) + 0.01f;
        t->unary[static_cast<int>(a.op)](x.data(), y.data(), n, a.p);
        for (int64_t i = 0; i < n; ++i) {
          const double want = a.ref(x[i]);
          EXPECT_NEAR(y[i], want, 2e-6 * std::fabs(want) + 1e-6) << t->isa << " op " << int(a.op) << " x=" << x[i];
        }
        EXPECT_EQ(y[n], 777.0f) << "wrote past the end";
      }
}

TEST(VecMath, BinarySelectAndSumWithBroadcastSteps) {
  for (const vec::Table* t : tables()) {
    for (int64_t n : {1, 7, 16, 37}) {
      std::vector<float> a(n), b(n), z(n);
      for (int64_t i = 0; i < n; ++i) {
        a[i] = 0.5f * static_cast<float>(i) - 3;
        b[i] = 1.25f - 0.25f * static_cast<float>(i);
      }
      const float s = 2.5f;
      t->binary[static_cast<int>(vec::Binary::kSub)](a.data(), 1, &s, 0, z.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], a[i] - s);
      t->binary[static_cast<int>(vec::Binary::kDiv)](&s, 0, b.data(), 1, z.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], s / b[i]);
      t->binary[static_cast<int>(vec::Binary::kLess)](a.data(), 1, b.data(), 1, z.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], a[i] < b[i] ? 1.0f : 0.0f);
      t->select(z.data(), 1, a.data(), 1, b.data(), 1, z.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], a[i] < b[i] ? a[i] : b[i]);
      float sum = 0, sq = 0;
      t->sum(a.data(), n, &sum, &sq);
      double ws = 0, wq = 0;
      for (float v : a) ws += v, wq += double(v) * v;
      EXPECT_NEAR(sum, ws, 1e-4 * (1 + std::fabs(ws)));
      EXPECT_NEAR(sq, wq, 1e-4 * (1 + wq));
    }
    const float nan = NAN, one = 1;
    float z = 0;
    t->binary[static_cast<int>(vec::Binary::kMax)](&nan, 0, &one, 0, &z, 1);
    EXPECT_TRUE(std::isnan(z)) << t->isa << " Max(NaN, 1)";
    t->binary[static_cast<int>(vec::Binary::kMax)](&one, 0, &nan, 0, &z, 1);
    EXPECT_TRUE(std::isnan(z)) << t->isa << " Max(1, NaN)";
  }
}

}  // namespace
}  // namespace kiln
