// The LayerNorm row kernel (runtime/kernels/vec_kernels.inc, both ISAs where the CPU has them) and
// the LayerNormalization kernel's fast path against a double reference on the same float inputs, at
// awkward lengths (1, 7, 9, 767, 769: masked tails, runs of float lanes ending mid-row), with and
// without scale and bias, on constant rows and on rows whose mean is large against their spread
// (1e4 + noise, where x - float(mean) alone would lose the deviation) or whose first element is far
// out (the one-pass statistics' shift), and with the Mean and
// InvStdDev outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernels/vec_kernels.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

std::vector<const vec::Table*> tables() {
  std::vector<const vec::Table*> t = {&vec::avx2_table()};
  if (vec::avx512_table()) t.push_back(vec::avx512_table());
  return t;
}

struct Ref {
  std::vector<double> y;
  double mean = 0, inv = 0;
};

Ref reference(const float* x, const float* scale, const float* bias, int64_t n, float eps) {
  Ref r;
  for (int64_t i = 0; i < n; ++i) r.mean += x[i];
  r.mean /= static_cast<double>(n);
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - r.mean) * (x[i] - r.mean);
  var /= static_cast<double>(n);
  r.inv = 1.0 / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i) r.y.push_back((x[i] - r.mean) * r.inv * (scale ? scale[i] : 1.0) + (bias ? bias[i] : 0.0));
  return r;
}

// The mean as a float (its rounding), and off by a millionth of the row's spread at most: what the
// normalised values feel of it.
double mean_tolerance(const Ref& r) { return 6e-8 * std::fabs(r.mean) + 1e-6 / r.inv; }

// kOutlierFirst: x[0] far out (the kernel's one-pass shift is x[0]: its second pass must take over).
enum class Data { kNoise, kConstant, kLargeOffset, kLargeOffsetTinyNoise, kOutlierFirst };

std::vector<float> row(int64_t n, Data d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) {
    switch (d) {
      case Data::kNoise: v = 3.0f * u(rng) + 0.5f; break;
      case Data::kConstant: v = -2.75f; break;
      case Data::kLargeOffset: v = 1e4f + u(rng); break;
      case Data::kLargeOffsetTinyNoise: v = 1e4f + 0.05f * u(rng); break;
      case Data::kOutlierFirst: v = u(rng); break;
    }
  }
  if (d == Data::kOutlierFirst && n > 1) x[0] = 3e3f;
  return x;
}

TEST(LayerNormRow, MatchesTheDoubleReferenceAtAwkwardLengths) {
  const float eps = 1e-5f;
  for (const vec::Table* t : tables())
    for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 96, 127, 128, 129, 255, 257, 767, 768, 769, 3001})
      for (Data d : {Data::kNoise, Data::kConstant, Data::kLargeOffset, Data::kLargeOffsetTinyNoise, Data::kOutlierFirst})
        for (int params = 0; params < 4; ++params) {
          const std::vector<float> x = row(n, d, static_cast<uint32_t>(n));
          const std::vector<float> sv = row(n, Data::kNoise, 7), bv = row(n, Data::kNoise, 8);
          const float* scale = params & 1 ? sv.data() : nullptr;
          const float* bias = params & 2 ? bv.data() : nullptr;
          // Guard bands: the kernel writes exactly n floats.
          std::vector<float> y(static_cast<size_t>(n) + 16, 123.0f);
          float mean = 0, inv = 0;
          t->layer_norm(x.data(), scale, bias, y.data() + 8, n, eps, &mean, &inv);
          const Ref r = reference(x.data(), scale, bias, n, eps);
          const std::string what = std::string(t->isa) + " n " + std::to_string(n) + " data " + std::to_string(static_cast<int>(d)) +
                                   " params " + std::to_string(params);
          for (int i = 0; i < 8; ++i) {
            ASSERT_EQ(y[static_cast<size_t>(i)], 123.0f) << what;
            ASSERT_EQ(y[static_cast<size_t>(n + 8 + i)], 123.0f) << what;
          }
          // The normalised values are O(1) (times scale up to 3.5): a few float ulps of that.
          for (int64_t i = 0; i < n; ++i)
            ASSERT_NEAR(y[static_cast<size_t>(i + 8)], r.y[static_cast<size_t>(i)], 4e-6 * (1.0 + std::fabs(r.y[static_cast<size_t>(i)])))
                << what << " element " << i;
          EXPECT_NEAR(mean, r.mean, mean_tolerance(r)) << what;
          EXPECT_NEAR(inv, r.inv, 1e-6 * r.inv) << what;
          if (d == Data::kConstant) {
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[static_cast<size_t>(i + 8)], bias ? bias[i] : 0.0f) << what;
          }
        }
}

// The LayerNormalization kernel (float32, dense scale and bias: the row kernel on the pool) with
// its statistics outputs, rows split over threads or not, against the reference per row.
TEST(LayerNormRow, LayerNormalizationKernelUsesItPerRow) {
  for (const Shape& s : {Shape{1, 1, 1}, Shape{3, 7}, Shape{1, 197, 768}, Shape{1, 56, 56, 96}, Shape{2, 5, 769}}) {
    const int64_t cols = s[s.rank() - 1], rows = s.numel() / cols;
    Tensor x = testing::random_f32(s, 3, -2.0f, 2.0f);
    for (int64_t i = 0; i < s.numel(); i += 3) x.as<float>()[i] += 1e4f;  // rows with a large mean
    const Tensor scale = testing::random_f32(Shape{cols}, 4, 0.5f, 2.0f), bias = testing::random_f32(Shape{cols}, 5);
    AttrMap a;
    a["axis"] = Attribute::Int(-1);
    a["epsilon"] = Attribute::Float(1e-6f);
    auto k = testing::make_kernel("LayerNormalization", a, 3, "");
    ASSERT_NE(k, nullptr);
    const TensorView in[3] = {x.view(), scale.view(), bias.view()};
    Shape stat = s;
    stat[stat.rank() - 1] = 1;
    Tensor y = Tensor::zeros(DType::kFloat32, s), mean = Tensor::zeros(DType::kFloat32, stat), inv = Tensor::zeros(DType::kFloat32, stat);
    const TensorView out[3] = {y.view(), mean.view(), inv.view()};
    TensorDesc desc[3];
    ASSERT_TRUE(k->infer(in, desc).ok());
    ASSERT_TRUE(k->prepare(in, out).ok());
    ASSERT_TRUE(k->run(in, out).ok());
    for (int64_t r = 0; r < rows; ++r) {
      const Ref ref = reference(x.as<float>() + r * cols, scale.as<float>(), bias.as<float>(), cols, 1e-6f);
      for (int64_t i = 0; i < cols; ++i)
        ASSERT_NEAR(y.as<float>()[r * cols + i], ref.y[static_cast<size_t>(i)], 1e-5 * (1.0 + std::fabs(ref.y[static_cast<size_t>(i)])))
            << s.str() << " row " << r << " col " << i;
      EXPECT_NEAR(mean.as<float>()[r], ref.mean, mean_tolerance(ref)) << s.str();
      EXPECT_NEAR(inv.as<float>()[r], ref.inv, 1e-6 * ref.inv) << s.str();
    }
  }
}

}  // namespace
}  // namespace kiln
