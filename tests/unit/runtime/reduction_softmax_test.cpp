// Softmax, LogSoftmax, Hardmax and the NLL / SoftmaxCrossEntropy losses against values computed
// with numpy (and the ONNX reference functions) offline.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/kernel_runner.h"
#include "runtime/kernels/reduction_common.h"
#include "runtime/kernels/vec_kernels.h"

namespace kiln {
namespace {

Tensor F(std::vector<float> v, Shape s) { return Tensor::from_vector<float>(v, s); }
Tensor I64(std::vector<int64_t> v, Shape s) { return Tensor::from_vector<int64_t>(v, s); }

template <typename T>
void expect_tensor(const Tensor& t, const Shape& shape, const std::vector<T>& want, double tol = 1e-5) {
  ASSERT_EQ(t.dtype(), DTypeOf<T>::value);
  ASSERT_EQ(t.shape(), shape) << t.shape().str();
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(t.as<T>()[i])) << "at " << i;
    else EXPECT_NEAR(t.as<T>()[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
  }
}

StatusOr<std::vector<Tensor>> run1(const std::string& op, const AttrMap& attrs, const std::vector<Tensor>& in,
                                   int opset = 17, int num_outputs = 1) {
  return run_op_once(op, attrs, in, num_outputs, {}, opset);
}

Tensor s23() { return F({1, 2, 3, 4, 5, 7}, {2, 3}); }

// ---------------------------------------------------------------------------------------------
// fast_expf

TEST(FastExp, MatchesStdExpAcrossRange) {
  double worst = 0;
  for (float x = -87.0f; x < 88.5f; x += 0.01234f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(fast_expf(x) - want) / want);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(fast_expf(0.0f), 1.0f);
  EXPECT_EQ(fast_expf(-INFINITY), 0.0f);
  EXPECT_EQ(fast_expf(-100.0f), 0.0f);
  EXPECT_EQ(fast_expf(100.0f), INFINITY);
  EXPECT_TRUE(std::isnan(fast_expf(NAN)));
  EXPECT_NEAR(fast_expf(88.7f) / std::exp(static_cast<double>(88.7f)), 1.0, 1e-6);
}

#ifdef KILN_REDUCTION_AVX2
TEST(FastExp, EightLanesMatchStdExp) {
  const float xs[] = {-1000.0f, -87.5f, -87.3f, -20.25f, -1.0f, 0.0f, 0.5f, 3.0f, 50.0f, 88.7f, 89.0f, INFINITY, -INFINITY, NAN, 1e-8f, -0.3466f};
  for (int start = 0; start < 16; start += 8) {
    float out[8];
    _mm256_storeu_ps(out, fast_exp8(_mm256_loadu_ps(xs + start)));
    // The lanes are kiln's vector exp (runtime/simd), which keeps denormal results where the scalar
    // tail flushes them to 0: both are compared with the exact value.
    for (int i = 0; i < 8; ++i) {
      const double want = std::exp(static_cast<double>(xs[start + i]));
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(out[i])) << xs[start + i];
      else if (std::isinf(static_cast<float>(want))) EXPECT_EQ(out[i], INFINITY) << xs[start + i];
      else EXPECT_NEAR(out[i], want, 3e-7 * want + 1.5e-45) << xs[start + i];
    }
  }
}
#endif

// ---------------------------------------------------------------------------------------------
// Softmax family

TEST(SoftmaxKernels, LastAxisFastPath) {
  auto r = run1("Softmax", {}, {s23()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {2, 3},
                       {0.09003057330846786f, 0.2447284609079361f, 0.6652409434318542f, 0.04201006516814232f,
                        0.11419519782066345f, 0.8437947034835815f});
  r = run1("LogSoftmax", {{"axis", Attribute::Int(1)}}, {s23()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {2, 3},
                       {-2.4076059644443806f, -1.4076059644443801f, -0.40760596444438046f, -3.1698460195562856f,
                        -2.1698460195562856f, -0.16984601955628567f});
}

TEST(SoftmaxKernels, NonLastAxis) {
  auto r = run1("Softmax", {{"axis", Attribute::Int(0)}}, {s23()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {2, 3},
                       {0.04742587357759476f, 0.04742587357759476f, 0.01798621006309986f, 0.9525741338729858f,
                        0.9525741338729858f, 0.9820137619972229f});
  r = run1("LogSoftmax", {{"axis", Attribute::Int(-2)}}, {s23()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {2, 3},
                       {-3.048587351573742f, -3.048587351573742f, -4.0181499279178094f, -0.0485873515737419f,
                        -0.0485873515737419f, -0.01814992791780973f});
}

TEST(SoftmaxKernels, LargeNumbersAndMaskedEntries) {
  auto r = run1("Softmax", {}, {F({1000, 1001, 1002}, {1, 3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {1, 3}, {0.09003057330846786f, 0.2447284609079361f, 0.6652409434318542f});
  r = run1("LogSoftmax", {}, {F({1000, 1001, 1002}, {3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {3}, {-2.4076059644443806f, -1.4076059644443801f, -0.40760596444438046f});
  const float ninf = -std::numeric_limits<float>::infinity();
  r = run1("Softmax", {}, {F({0, ninf, 0, -3.4e38f}, {4})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {4}, {0.5f, 0, 0.5f, 0});
  // Same with the masked entries inside a full vector and in the scalar tail.
  std::vector<float> v(19, ninf), want(19, 0.0f);
  v[2] = v[9] = v[17] = 1.5f;
  want[2] = want[9] = want[17] = 1.0f / 3;
  r = run1("Softmax", {}, {F(v, {19})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {19}, want);
  r = run1("LogSoftmax", {}, {F({1, NAN, 2, 3, 4, 5, 6, 7, 8}, {9})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  for (int i = 0; i < 9; ++i) EXPECT_TRUE(std::isnan((*r)[0].as<float>()[i])) << i;
}

TEST(SoftmaxKernels, LongRowsMatchDoubleReference) {
  // 7 rows of 1003 (not a multiple of the vector width), values spread over [-30, 30].
  const int rows = 7, n = 1003;
  std::vector<float> v(rows * n);
  for (int i = 0; i < rows * n; ++i) v[i] = static_cast<float>(std::fmod(i * 7.31, 60.0) - 30.0);
  auto r = run1("Softmax", {}, {F(v, {rows, n})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  for (int row = 0; row < rows; ++row) {
    double m = -1e300, s = 0;
    for (int i = 0; i < n; ++i) m = std::max(m, static_cast<double>(v[row * n + i]));
    for (int i = 0; i < n; ++i) s += std::exp(v[row * n + i] - m);
    for (int i = 0; i < n; ++i) {
      const double want = std::exp(v[row * n + i] - m) / s;
      ASSERT_NEAR((*r)[0].as<float>()[row * n + i], want, 1e-6 * want + 1e-12) << row << "," << i;
    }
  }
}

// Swin's shifted-window rows: -100 added to the scores of other regions, so exp(x - max) lands in
// [e^-104, e^-87], below FLT_MIN. The kernel gives 0 there (the exact value is < 1.7e-38); every
// other output matches a double reference. Row widths around the vector width and its tail, enough
// rows to be split over threads, and an all -inf row (NaN, as in numpy).
TEST(SoftmaxKernels, MaskedRowsFlushBelowFloatRangeAtAwkwardWidths) {
  for (int n : {1, 3, 7, 8, 9, 15, 16, 17, 49, 50, 63}) {
    const int rows = 2003;
    std::vector<float> v(static_cast<size_t>(rows) * n);
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < n; ++i) {
        float x = static_cast<float>(std::fmod((r * 131 + i * 7) * 0.173, 8.0) - 4.0);
        // Masked where (r + i) % 3 == 1, never the row's first entry, so some entry stays unmasked.
        if (i > 0 && (r + i) % 3 == 1) x -= (r % 5 == 0) ? 83.0f : 100.0f;
        v[static_cast<size_t>(r) * n + i] = x;
      }
    const float ninf = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < n; ++i) v[static_cast<size_t>(rows - 1) * n + i] = ninf;  // all masked
    auto r = run1("Softmax", {}, {F(v, {rows, n})});
    ASSERT_TRUE(r.ok()) << r.status().message();
    const float* y = (*r)[0].as<float>();
    for (int row = 0; row < rows - 1; ++row) {
      const float* x = &v[static_cast<size_t>(row) * n];
      double m = -1e300, s = 0;
      for (int i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
      for (int i = 0; i < n; ++i) s += std::exp(x[i] - m);
      for (int i = 0; i < n; ++i) {
        const float got = y[static_cast<size_t>(row) * n + i];
        const double want = std::exp(x[i] - m) / s;
        if (x[i] - static_cast<float>(m) < -87.0f) ASSERT_EQ(got, 0.0f) << n << ":" << row << "," << i;
        else ASSERT_NEAR(got, want, 1e-6 * want + 1e-37) << n << ":" << row << "," << i;
      }
    }
    for (int i = 0; i < n; ++i) EXPECT_TRUE(std::isnan(y[static_cast<size_t>(rows - 1) * n + i])) << n << ":" << i;
    // LogSoftmax keeps the exact log of every entry: the flushed terms only drop out of the sum.
    r = run1("LogSoftmax", {}, {F(std::vector<float>(v.begin(), v.begin() + 5 * n), {5, n})});
    ASSERT_TRUE(r.ok()) << r.status().message();
    for (int row = 0; row < 5; ++row) {
      const float* x = &v[static_cast<size_t>(row) * n];
      double m = -1e300, s = 0;
      for (int i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
      for (int i = 0; i < n; ++i) s += std::exp(x[i] - m);
      for (int i = 0; i < n; ++i)
        ASSERT_NEAR((*r)[0].as<float>()[row * n + i], x[i] - m - std::log(s), 1e-5 * (1 + std::abs(x[i] - m))) << n;
    }
  }
}

// vec::Table::softmax_row, the AVX-512 build the kernels use where the CPU has it and the AVX2
// build, at every width from 1 to 70 (whole vectors, tails, masked tails), in place and not, with
// masked entries (flushed to 0 below e^-87) and a NaN entry (the whole row NaN).
TEST(SoftmaxKernels, VectorRowOfEachIsaMatchesDoubleReference) {
  std::vector<const vec::Table*> tables{&vec::avx2_table()};
  if (vec::avx512_table()) tables.push_back(vec::avx512_table());
  for (const vec::Table* t : tables) {
    for (int n = 1; n <= 70; ++n) {
      for (bool in_place : {false, true}) {
        std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n) + 1, -7.0f);
        for (int i = 0; i < n; ++i) x[i] = static_cast<float>(std::fmod(i * 2.71, 9.0) - 4.5) - ((i % 4 == 3) ? 95.0f : 0.0f);
        float m = x[0];
        for (float v : x) m = std::max(m, v);
        float* out = in_place ? x.data() : y.data();
        const std::vector<float> x0 = x;
        t->softmax_row(x.data(), out, n, m);
        double s = 0;
        for (float v : x0) s += std::exp(static_cast<double>(v) - m);
        for (int i = 0; i < n; ++i) {
          const double want = std::exp(static_cast<double>(x0[i]) - m) / s;
          if (x0[i] - m < -87.0f) {
            ASSERT_EQ(out[i], 0.0f) << t->isa << " n=" << n << " i=" << i;
          } else {
            ASSERT_NEAR(out[i], want, 1e-6 * want + 1e-37) << t->isa << " n=" << n << " i=" << i;
          }
        }
        if (!in_place) {
          EXPECT_EQ(y[static_cast<size_t>(n)], -7.0f) << t->isa << " n=" << n << ": wrote past the row";
        }
        std::vector<float> bad = x0;
        bad[static_cast<size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
        t->softmax_row(bad.data(), y.data(), n, std::numeric_limits<float>::quiet_NaN());
        for (int i = 0; i < n; ++i) EXPECT_TRUE(std::isnan(y[i])) << t->isa << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(SoftmaxKernels, Opset11FlattensAtAxis) {
  const Tensor z = F({1, 2, 3, 4, 0, 0, 0, -1}, {2, 2, 2});
  auto r = run1("Softmax", {}, {z}, 11);  // default axis 1: rows of 4
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {2, 2, 2},
                       {0.032058604061603546f, 0.08714432269334793f, 0.23688280582427979f, 0.6439142823219299f,
                        0.2969227433204651f, 0.2969227433204651f, 0.2969227433204651f, 0.10923177003860474f});
}

TEST(SoftmaxKernels, HardmaxFirstMaxWins) {
  auto r = run1("Hardmax", {}, {F({3, 1, 3, 0, 2, 5}, {2, 3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {2, 3}, {1, 0, 0, 0, 0, 1});
  r = run1("Hardmax", {{"axis", Attribute::Int(0)}}, {F({3, 1, 3, 0, 2, 5}, {2, 3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {2, 3}, {1, 0, 0, 0, 1, 1});
}

TEST(SoftmaxKernels, DoubleAndFloat16) {
  auto r = run1("Softmax", {}, {Tensor::from_vector<double>({1, 2, 3}, {3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<double>((*r)[0], {3}, {0.09003057317038046, 0.24472847105479767, 0.6652409557748219}, 1e-12);
  Tensor h = Tensor::zeros(DType::kFloat16, {2});
  h.as<uint16_t>()[0] = float_to_half(0.0f);
  h.as<uint16_t>()[1] = float_to_half(0.0f);
  r = run1("Softmax", {}, {h});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(half_to_float((*r)[0].as<uint16_t>()[1]), 0.5f);
}

TEST(SoftmaxKernels, ZeroSizeAndErrors) {
  for (const Shape& s : {Shape{0, 5}, Shape{2, 0}}) {
    auto r = run1("Softmax", {}, {F({}, s)});
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ((*r)[0].shape(), s);
  }
  EXPECT_FALSE(run1("Softmax", {{"axis", Attribute::Int(2)}}, {s23()}).ok());
  EXPECT_FALSE(run1("Softmax", {{"axis", Attribute::Int(-3)}}, {s23()}).ok());
  EXPECT_FALSE(run1("LogSoftmax", {}, {Tensor::from_vector<int32_t>({1, 2}, {2})}).ok());
}

// ---------------------------------------------------------------------------------------------
// NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss
// x3: (2, 3, 2), t3: (2, 2), w: (3,)

Tensor x3() { return F({0.1f, 0.2f, 0.3f, -0.4f, 1.0f, 2.0f, -1, 0.5f, 0.7f, 0.8f, 0.9f, -0.2f}, {2, 3, 2}); }
Tensor t3() { return I64({0, 2, 1, 1}, {2, 2}); }
Tensor w3() { return F({0.2f, 0.5f, 1.5f}, {3}); }
AttrMap red(const char* r) { return {{"reduction", Attribute::String(r)}}; }

TEST(LossKernels, NllNoneNC) {
  auto r = run1("NegativeLogLikelihoodLoss", red("none"),
                {F({0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f}, {2, 3}), I64({2, 0}, {2})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {2}, {-2.0f, -1.5f});
}

TEST(LossKernels, NllReductionsWeightsIgnoreIndex) {
  auto r = run1("NegativeLogLikelihoodLoss", {}, {x3(), t3(), w3()});  // mean is the default
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {}, {-1.3962962627410889f});
  AttrMap a = red("mean");
  a["ignore_index"] = Attribute::Int(1);
  r = run1("NegativeLogLikelihoodLoss", a, {x3(), t3(), w3()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {}, {-1.7764705419540405f});
  a = red("sum");
  a["ignore_index"] = Attribute::Int(2);
  r = run1("NegativeLogLikelihoodLoss", a, {x3(), t3()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {}, {-1.600000023841858f});
  r = run1("NegativeLogLikelihoodLoss", red("mean"), {x3(), t3()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {}, {-0.8999999761581421f});
}

TEST(LossKernels, NllIgnoreIndexOutsideClassRange) {
  AttrMap a = red("none");
  a["ignore_index"] = Attribute::Int(-5);
  auto r = run1("NegativeLogLikelihoodLoss", a, {x3(), I64({-5, 2, 1, -5}, {2, 2})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {2, 2}, {0, -2.0f, -0.7f, 0});
  // Everything ignored with mean: 0 / 0.
  a = red("mean");
  a["ignore_index"] = Attribute::Int(1);
  r = run1("NegativeLogLikelihoodLoss", a, {x3(), I64({1, 1, 1, 1}, {2, 2})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(std::isnan((*r)[0].as<float>()[0]));
}

TEST(LossKernels, SceNoneWithLogProb) {
  AttrMap a = red("none");
  a["ignore_index"] = Attribute::Int(0);
  auto r = run1("SoftmaxCrossEntropyLoss", a, {x3(), t3(), w3()}, 13, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {2, 2}, {0.0f, 0.3419182300567627f, 0.43858492374420166f, 0.3730352520942688f});
  expect_tensor<float>((*r)[1], {2, 3, 2},
                       {-1.5435129404067993f, -2.0279455184936523f, -1.343513011932373f, -2.6279456615448f,
                        -0.6435130834579468f, -0.227945476770401f, -2.577169895172119f, -1.0460705757141113f,
                        -0.8771698474884033f, -0.7460705041885376f, -0.6771699786186218f, -1.7460706233978271f});
}

TEST(LossKernels, SceMeanAndSum) {
  auto r = run1("SoftmaxCrossEntropyLoss", {}, {F({0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f}, {2, 3}), I64({2, 0}, {2})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {}, {0.28599196672439575f});
  r = run1("SoftmaxCrossEntropyLoss", red("sum"), {x3(), t3()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {}, {3.3946986198425293f});
}

TEST(LossKernels, Errors) {
  EXPECT_FALSE(run1("NegativeLogLikelihoodLoss", {}, {x3(), I64({0, 3, 1, 1}, {2, 2})}).ok());  // target >= C
  EXPECT_FALSE(run1("NegativeLogLikelihoodLoss", {}, {x3(), I64({0, -1, 1, 1}, {2, 2})}).ok()); // target < 0
  EXPECT_FALSE(run1("NegativeLogLikelihoodLoss", {}, {x3(), I64({0, 1}, {2})}).ok());           // target rank
  EXPECT_FALSE(run1("NegativeLogLikelihoodLoss", {}, {x3(), I64({0, 1, 1, 1, 0, 0}, {2, 3})}).ok());  // target dim
  EXPECT_FALSE(run1("NegativeLogLikelihoodLoss", {}, {x3(), t3(), F({1, 1}, {2})}).ok());       // weight shape
  EXPECT_FALSE(run1("NegativeLogLikelihoodLoss", red("max"), {x3(), t3()}).ok());               // reduction
  EXPECT_FALSE(run1("SoftmaxCrossEntropyLoss", {}, {F({1, 2}, {2}), I64({0}, {1})}).ok());      // rank 1
  EXPECT_FALSE(run1("SoftmaxCrossEntropyLoss", {}, {x3(), F({0, 1, 1, 1}, {2, 2})}).ok());      // float target
}

}  // namespace
}  // namespace kiln
