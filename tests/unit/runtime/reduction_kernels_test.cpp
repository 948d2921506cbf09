// Reduce*, ArgMax/ArgMin, CumSum, TopK and Einsum against values computed with numpy offline.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/kernel_runner.h"

namespace kiln {
namespace {

Tensor F(std::vector<float> v, Shape s) { return Tensor::from_vector<float>(v, s); }
Tensor D(std::vector<double> v, Shape s) { return Tensor::from_vector<double>(v, s); }
Tensor I64(std::vector<int64_t> v, Shape s) { return Tensor::from_vector<int64_t>(v, s); }
Tensor I32(std::vector<int32_t> v, Shape s) { return Tensor::from_vector<int32_t>(v, s); }

template <typename T>
void expect_tensor(const Tensor& t, const Shape& shape, const std::vector<T>& want, double tol = 1e-5) {
  ASSERT_EQ(t.dtype(), DTypeOf<T>::value);
  ASSERT_EQ(t.shape(), shape) << t.shape().str();
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(t.as<T>()[i])) << "at " << i;
      else if (std::isinf(want[i])) EXPECT_EQ(t.as<T>()[i], want[i]) << "at " << i;
      else EXPECT_NEAR(t.as<T>()[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
    } else {
      EXPECT_EQ(t.as<T>()[i], want[i]) << "at " << i;
    }
  }
}

StatusOr<std::vector<Tensor>> run1(const std::string& op, const AttrMap& attrs, const std::vector<Tensor>& in,
                                   int opset = 17, int num_outputs = 1) {
  return run_op_once(op, attrs, in, num_outputs, {}, opset);
}

// x = (arange(24).reshape(2,3,4) - 10) / 4
Tensor x234() {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = (static_cast<float>(i) - 10) / 4;
  return F(v, {2, 3, 4});
}

// ---------------------------------------------------------------------------------------------
// Reduce*

TEST(ReduceKernels, SumAxesInputNegativeKeepdims) {
  auto r = run1("ReduceSum", {}, {x234(), I64({-1, 0}, {2})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {1, 3, 1}, {-5, 3, 11});
}

TEST(ReduceKernels, SumNoKeepdimsMiddleAxis) {
  auto r = run1("ReduceSum", {{"keepdims", Attribute::Int(0)}}, {x234(), I64({1}, {1})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {2, 4}, {-4.5f, -3.75f, -3.0f, -2.25f, 4.5f, 5.25f, 6.0f, 6.75f});
}

TEST(ReduceKernels, SumEmptyOrAbsentAxesReducesAll) {
  auto r = run1("ReduceSum", {{"keepdims", Attribute::Int(0)}}, {x234(), I64({}, {0})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {}, {9});
  r = run1("ReduceSum", {}, {x234()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {1, 1, 1}, {9});
}

TEST(ReduceKernels, SumNoopWithEmptyAxesIsIdentity) {
  auto r = run1("ReduceSum", {{"noop_with_empty_axes", Attribute::Int(1)}}, {x234(), I64({}, {0})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ((*r)[0].shape(), (Shape{2, 3, 4}));
  for (int i = 0; i < 24; ++i) EXPECT_EQ((*r)[0].as<float>()[i], (static_cast<float>(i) - 10) / 4);
}

// y of shape (2,3,2) reduced over the non-adjacent axes 0 and 2.
Tensor y232() { return F({1, -2, 3, 0.5f, -1, 2, 2, 2, -3, 1, 0.25f, 4}, {2, 3, 2}); }

TEST(ReduceKernels, AllOpsNonAdjacentAxes) {
  struct Case {
    const char* op;
    std::vector<float> want;
  } cases[] = {
      {"ReduceProd", {-8.0f, -4.5f, -2.0f}},
      {"ReduceL1", {7.0f, 7.5f, 7.25f}},
      {"ReduceL2", {3.605551242828369f, 4.387482166290283f, 4.589389801025391f}},
      {"ReduceLogSum", {1.0986122886681098f, 0.4054651081081644f, 1.6582280766035324f}},
      {"ReduceLogSumExp", {2.869700080626986f, 3.1987680963345317f, 4.153228234012084f}},
      {"ReduceSumSquare", {13.0f, 19.25f, 21.0625f}},
      {"ReduceMax", {2, 3, 4}},
      {"ReduceMin", {-2, -3, -1}},
      {"ReduceMean", {0.75f, 0.375f, 1.3125f}},
      {"ReduceSum", {3, 1.5f, 5.25f}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op);
    AttrMap attrs{{"keepdims", Attribute::Int(0)}};
    std::vector<Tensor> in{y232()};
    if (std::string(c.op) == "ReduceSum") in.push_back(I64({0, -1}, {2}));
    else attrs["axes"] = Attribute::Ints({0, -1});
    auto r = run1(c.op, attrs, in);
    ASSERT_TRUE(r.ok()) << r.status().message();
    expect_tensor<float>((*r)[0], {3}, c.want);
    // keepdims=1 gives the same numbers in shape (1, 3, 1).
    attrs["keepdims"] = Attribute::Int(1);
    r = run1(c.op, attrs, in);
    ASSERT_TRUE(r.ok()) << r.status().message();
    expect_tensor<float>((*r)[0], {1, 3, 1}, c.want);
  }
}

TEST(ReduceKernels, Opset18AxesAsInput) {
  auto r = run1("ReduceMean", {{"keepdims", Attribute::Int(0)}}, {y232(), I64({0, 2}, {2})}, 18);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {3}, {0.75f, 0.375f, 1.3125f});
  r = run1("ReduceMax", {{"keepdims", Attribute::Int(0)}, {"noop_with_empty_axes", Attribute::Int(1)}},
           {y232(), I64({}, {0})}, 18);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].shape(), (Shape{2, 3, 2}));
}

TEST(ReduceKernels, ZeroSizeReducedDimGivesIdentityValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = F({}, {2, 0});
  auto attrs = AttrMap{{"axes", Attribute::Ints({1})}, {"keepdims", Attribute::Int(0)}};
  struct Case {
    const char* op;
    float v;
  } cases[] = {{"ReduceProd", 1},  {"ReduceMax", -inf},      {"ReduceMin", inf},       {"ReduceL1", 0},
               {"ReduceL2", 0},    {"ReduceSumSquare", 0},   {"ReduceLogSum", -inf},   {"ReduceLogSumExp", -inf},
               {"ReduceMean", NAN}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op);
    auto r = run1(c.op, attrs, {x});
    ASSERT_TRUE(r.ok()) << r.status().message();
    expect_tensor<float>((*r)[0], {2}, {c.v, c.v});
  }
  auto r = run1("ReduceSum", {{"keepdims", Attribute::Int(1)}}, {x, I64({1}, {1})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {2, 1}, {0, 0});
  r = run1("ReduceMax", attrs, {Tensor::from_vector<int32_t>({}, {3, 0})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const int32_t lo = std::numeric_limits<int32_t>::min();
  expect_tensor<int32_t>((*r)[0], {3}, {lo, lo, lo});
}

TEST(ReduceKernels, LargeInputTakesParallelPath) {
  // (64, 33, 40) with x[i, j, k] = j: summing axes 0 and 2 gives 2560 * j; max over axis 1 gives 32.
  std::vector<float> v(64 * 33 * 40);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i / 40) % 33);
  auto r = run1("ReduceSum", {{"keepdims", Attribute::Int(0)}}, {F(v, {64, 33, 40}), I64({0, 2}, {2})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<float> want(33);
  for (int j = 0; j < 33; ++j) want[j] = 2560.0f * j;
  expect_tensor<float>((*r)[0], {33}, want);
  r = run1("ReduceMax", {{"axes", Attribute::Ints({1})}}, {F(v, {64, 33, 40})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {64, 1, 40}, std::vector<float>(64 * 40, 32.0f));
}

TEST(ReduceKernels, ZeroSizeKeptDim) {
  auto r = run1("ReduceSum", {{"keepdims", Attribute::Int(1)}}, {F({}, {0, 3}), I64({1}, {1})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].shape(), (Shape{0, 1}));
}

TEST(ReduceKernels, ScalarInput) {
  auto r = run1("ReduceSum", {}, {F({2.5f}, {})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {}, {2.5f});
}

TEST(ReduceKernels, IntegerAndDoubleDtypes) {
  auto r = run1("ReduceSum", {{"keepdims", Attribute::Int(0)}}, {I32({1, -2, 3, 4, 5, -6}, {2, 3}), I64({1}, {1})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<int32_t>((*r)[0], {2}, {2, 3});
  r = run1("ReduceMin", {{"axes", Attribute::Ints({0})}, {"keepdims", Attribute::Int(0)}},
           {I64({1, -2, 3, 4, 5, -6}, {2, 3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<int64_t>((*r)[0], {3}, {1, -2, -6});
  r = run1("ReduceMean", {{"keepdims", Attribute::Int(0)}}, {I32({1, 2, 4, 7}, {4})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<int32_t>((*r)[0], {}, {3});
  r = run1("ReduceLogSumExp", {{"axes", Attribute::Ints({0})}}, {D({1000, 1000}, {2})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<double>((*r)[0], {1}, {1000.6931471805599453}, 1e-12);
}

TEST(ReduceKernels, Float16) {
  Tensor h = Tensor::zeros(DType::kFloat16, {3});
  const float vals[] = {1.5f, -0.5f, 2.0f};
  for (int i = 0; i < 3; ++i) h.as<uint16_t>()[i] = float_to_half(vals[i]);
  auto r = run1("ReduceMean", {}, {h});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ((*r)[0].dtype(), DType::kFloat16);
  EXPECT_FLOAT_EQ(half_to_float((*r)[0].as<uint16_t>()[0]), 1.0f);
}

TEST(ReduceKernels, NanPropagatesThroughMax) {
  auto r = run1("ReduceMax", {{"keepdims", Attribute::Int(0)}}, {F({1, NAN, 3}, {3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(std::isnan((*r)[0].as<float>()[0]));
}

TEST(ReduceKernels, Errors) {
  EXPECT_FALSE(run1("ReduceSum", {}, {x234(), I64({3}, {1})}).ok());            // axis out of range
  EXPECT_FALSE(run1("ReduceSum", {}, {x234(), I64({-4}, {1})}).ok());           // axis out of range
  EXPECT_FALSE(run1("ReduceSum", {}, {x234(), I64({1, -2}, {2})}).ok());        // repeated axis
  EXPECT_FALSE(run1("ReduceSum", {}, {x234(), F({1}, {1})}).ok());              // float axes
  EXPECT_FALSE(run1("ReduceMax", {{"axes", Attribute::Ints({0})}}, {x234(), I64({0}, {1})}).ok());  // both forms
  EXPECT_FALSE(run1("ReduceMax", {{"axes", Attribute::Ints({5})}}, {x234()}).ok());
  EXPECT_FALSE(run1("ReduceSum", {}, {Tensor::from_vector<bool>({true}, {1})}).ok());  // bool
  EXPECT_FALSE(run1("ReduceSum", {{"bogus", Attribute::Int(1)}}, {x234()}).ok());       // unknown attribute
  EXPECT_FALSE(run1("ReduceSum", {}, {}).ok());                                          // no input
}

// ---------------------------------------------------------------------------------------------
// ArgMax / ArgMin

Tensor ties() { return F({1, 5, 5, 7, 2, 7}, {2, 3}); }

TEST(ArgKernels, ArgMaxFirstAndLastIndex) {
  auto r = run1("ArgMax", {{"axis", Attribute::Int(1)}}, {ties()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<int64_t>((*r)[0], {2, 1}, {1, 0});
  r = run1("ArgMax", {{"axis", Attribute::Int(-1)}, {"select_last_index", Attribute::Int(1)}, {"keepdims", Attribute::Int(0)}},
           {ties()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<int64_t>((*r)[0], {2}, {2, 2});
}

TEST(ArgKernels, ArgMinDefaultAxis) {
  auto r = run1("ArgMin", {{"keepdims", Attribute::Int(0)}}, {ties()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<int64_t>((*r)[0], {3}, {0, 1, 0});
  r = run1("ArgMin", {}, {I64({3, 3, -1, 3, -1, 0}, {1, 2, 3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<int64_t>((*r)[0], {1, 2, 3}, {0, 0, 0, 0, 0, 0});
  r = run1("ArgMin", {{"axis", Attribute::Int(2)}, {"select_last_index", Attribute::Int(1)}},
           {I64({3, 3, -1, 3, -1, -1}, {1, 2, 3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<int64_t>((*r)[0], {1, 2, 1}, {2, 2});
}

TEST(ArgKernels, ZeroSizeOtherDimAndErrors) {
  auto r = run1("ArgMax", {{"axis", Attribute::Int(1)}}, {F({}, {0, 3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].shape(), (Shape{0, 1}));
  EXPECT_FALSE(run1("ArgMax", {{"axis", Attribute::Int(0)}}, {F({}, {0, 3})}).ok());  // nothing to pick
  EXPECT_FALSE(run1("ArgMax", {{"axis", Attribute::Int(2)}}, {ties()}).ok());
  EXPECT_FALSE(run1("ArgMin", {}, {F({1}, {})}).ok());
}

// ---------------------------------------------------------------------------------------------
// CumSum

TEST(CumSumKernels, Modes1D) {
  const Tensor x = D({1, 2, 3, 4}, {4});
  struct Case {
    int exclusive, reverse;
    std::vector<double> want;
  } cases[] = {{0, 0, {1, 3, 6, 10}}, {1, 0, {0, 1, 3, 6}}, {0, 1, {10, 9, 7, 4}}, {1, 1, {9, 7, 4, 0}}};
  for (const auto& c : cases) {
    auto r = run1("CumSum", {{"exclusive", Attribute::Int(c.exclusive)}, {"reverse", Attribute::Int(c.reverse)}},
                  {x, I32({0}, {})});
    ASSERT_TRUE(r.ok()) << r.status().message();
    expect_tensor<double>((*r)[0], {4}, c.want);
  }
}

TEST(CumSumKernels, Axes2DAndInt) {
  const Tensor m = D({1, 2, 3, 4, 5, 6}, {2, 3});
  auto r = run1("CumSum", {}, {m, I64({0}, {1})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<double>((*r)[0], {2, 3}, {1, 2, 3, 5, 7, 9});
  r = run1("CumSum", {}, {m, I64({-1}, {})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<double>((*r)[0], {2, 3}, {1, 3, 6, 4, 9, 15});
  r = run1("CumSum", {{"reverse", Attribute::Int(1)}}, {I32({1, 2, 3, 4, 5, 6}, {2, 3}), I32({1}, {})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<int32_t>((*r)[0], {2, 3}, {6, 5, 3, 15, 11, 6});
}

TEST(CumSumKernels, ZeroSizeAndErrors) {
  auto r = run1("CumSum", {}, {F({}, {0, 3}), I64({1}, {})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].shape(), (Shape{0, 3}));
  EXPECT_FALSE(run1("CumSum", {}, {F({1, 2}, {2}), I64({1}, {})}).ok());          // axis out of range
  EXPECT_FALSE(run1("CumSum", {}, {F({1, 2}, {2}), I64({0, 0}, {2})}).ok());      // axis not scalar
  EXPECT_FALSE(run1("CumSum", {}, {F({1, 2}, {2}), F({0}, {})}).ok());            // float axis
  EXPECT_FALSE(run1("CumSum", {}, {F({1, 2}, {2})}).ok());                        // missing axis
}

// ---------------------------------------------------------------------------------------------
// TopK

Tensor topk_x() { return F({0, 1, 2, 3, 4, 5, 6, 7, 11, 10, 9, 8}, {3, 4}); }

TEST(TopKKernels, LargestAlongLastAxis) {
  auto r = run1("TopK", {{"axis", Attribute::Int(1)}}, {topk_x(), I64({3}, {1})}, 17, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {3, 3}, {3, 2, 1, 7, 6, 5, 11, 10, 9});
  expect_tensor<int64_t>((*r)[1], {3, 3}, {3, 2, 1, 3, 2, 1, 0, 1, 2});
}

TEST(TopKKernels, SmallestNegativeAxisAndAxis0) {
  auto r = run1("TopK", {{"axis", Attribute::Int(-1)}, {"largest", Attribute::Int(0)}, {"sorted", Attribute::Int(1)}},
                {topk_x(), I64({2}, {1})}, 17, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {3, 2}, {0, 1, 4, 5, 8, 9});
  expect_tensor<int64_t>((*r)[1], {3, 2}, {0, 1, 0, 1, 3, 2});
  r = run1("TopK", {{"axis", Attribute::Int(0)}}, {topk_x(), I64({1}, {1})}, 17, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {1, 4}, {11, 10, 9, 8});
  expect_tensor<int64_t>((*r)[1], {1, 4}, {2, 2, 2, 2});
}

TEST(TopKKernels, TiesKeepLowerIndexFirst) {
  auto r = run1("TopK", {}, {I32({5, 7, 5, 7, 1}, {5}), I64({4}, {1})}, 17, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<int32_t>((*r)[0], {4}, {7, 7, 5, 5});
  expect_tensor<int64_t>((*r)[1], {4}, {1, 3, 0, 2});
  r = run1("TopK", {{"largest", Attribute::Int(0)}}, {I32({5, 7, 5, 7, 1}, {5}), I64({3}, {1})}, 17, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<int64_t>((*r)[1], {3}, {4, 0, 2});
}

TEST(TopKKernels, KZeroAndErrors) {
  auto r = run1("TopK", {}, {topk_x(), I64({0}, {1})}, 17, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].shape(), (Shape{3, 0}));
  EXPECT_FALSE(run1("TopK", {}, {topk_x(), I64({5}, {1})}, 17, 2).ok());    // K > dim
  EXPECT_FALSE(run1("TopK", {}, {topk_x(), I64({-1}, {1})}, 17, 2).ok());   // K < 0
  EXPECT_FALSE(run1("TopK", {{"axis", Attribute::Int(2)}}, {topk_x(), I64({1}, {1})}, 17, 2).ok());
  EXPECT_FALSE(run1("TopK", {}, {topk_x(), I32({1}, {1})}, 17, 2).ok());    // K must be int64
}

TEST(TopKKernels, Opset1KAttribute) {
  auto r = run1("TopK", {{"k", Attribute::Int(1)}}, {topk_x()}, 9, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {3, 1}, {3, 7, 11});
}

// ---------------------------------------------------------------------------------------------
// Einsum

Tensor ein_a() {  // arange(24).reshape(2,3,4) * 0.5 - 3
  std::vector<double> v(24);
  for (int i = 0; i < 24; ++i) v[i] = i * 0.5 - 3;
  return D(v, {2, 3, 4});
}
Tensor ein_b() {  // arange(40).reshape(2,4,5) * 0.25 - 2
  std::vector<double> v(40);
  for (int i = 0; i < 40; ++i) v[i] = i * 0.25 - 2;
  return D(v, {2, 4, 5});
}
const std::vector<double> kBmm = {4.25,   2.0,   -0.25, -2.5,  -4.75, 3.25,  3.0,   2.75,  2.5,   2.25,
                                  2.25,   4.0,   5.75,  7.5,   9.25,  76.25, 80.0,  83.75, 87.5,  91.25,
                                  115.25, 121.0, 126.75, 132.5, 138.25, 154.25, 162.0, 169.75, 177.5, 185.25};

TEST(EinsumKernels, BatchMatmulWithSpaces) {
  auto r = run1("Einsum", {{"equation", Attribute::String("bij, bjk -> bik")}}, {ein_a(), ein_b()}, 12);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<double>((*r)[0], {2, 3, 5}, kBmm, 1e-12);
}

TEST(EinsumKernels, ImplicitOutputMatmul) {
  const Tensor a = ein_a(), b = ein_b();
  Tensor a0 = D(std::vector<double>(a.as<double>(), a.as<double>() + 12), {3, 4});
  Tensor b0 = D(std::vector<double>(b.as<double>(), b.as<double>() + 20), {4, 5});
  auto r = run1("Einsum", {{"equation", Attribute::String("ij,jk")}}, {a0, b0});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<double>((*r)[0], {3, 5}, std::vector<double>(kBmm.begin(), kBmm.begin() + 15), 1e-12);
}

TEST(EinsumKernels, EllipsisBroadcast) {
  const Tensor a = ein_a();
  Tensor a0 = D(std::vector<double>(a.as<double>(), a.as<double>() + 12), {1, 3, 4});
  auto r = run1("Einsum", {{"equation", Attribute::String("...ij,...jk->...ik")}}, {a0, ein_b()});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<double>((*r)[0], {2, 3, 5},
                        {4.25,  2.0,   -0.25, -2.5,  -4.75, 3.25,  3.0,   2.75,  2.5,   2.25,
                         2.25,  4.0,   5.75,  7.5,   9.25,  -40.75, -43.0, -45.25, -47.5, -49.75,
                         -1.75, -2.0,  -2.25, -2.5,  -2.75, 37.25, 39.0,  40.75, 42.5,  44.25},
                        1e-12);
}

TEST(EinsumKernels, DiagonalTraceTransposeSumInner) {
  std::vector<double> v(18);
  for (int i = 0; i < 18; ++i) v[i] = i;
  auto r = run1("Einsum", {{"equation", Attribute::String("...ii ->...i")}}, {D(v, {2, 3, 3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<double>((*r)[0], {2, 3}, {0, 4, 8, 9, 13, 17});
  r = run1("Einsum", {{"equation", Attribute::String("ii")}}, {D(std::vector<double>(v.begin(), v.begin() + 9), {3, 3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<double>((*r)[0], {}, {12});
  r = run1("Einsum", {{"equation", Attribute::String("ij->ji")}}, {D({1, 2, 3, 4, 5, 6}, {2, 3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<double>((*r)[0], {3, 2}, {1, 4, 2, 5, 3, 6});
  r = run1("Einsum", {{"equation", Attribute::String("ij->i")}}, {D({1, 2, 3, 4, 5, 6}, {2, 3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<double>((*r)[0], {2}, {6, 15});
  r = run1("Einsum", {{"equation", Attribute::String("i,i")}}, {D({1, 2, 3}, {3}), D({4, -5, 6}, {3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<double>((*r)[0], {}, {12});
  r = run1("Einsum", {{"equation", Attribute::String("i,j->ij")}}, {I32({1, 2}, {2}), I32({3, 4, 5}, {3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<int32_t>((*r)[0], {2, 3}, {3, 4, 5, 6, 8, 10});
}

TEST(EinsumKernels, ZeroSizeAndErrors) {
  auto r = run1("Einsum", {{"equation", Attribute::String("ij,jk->ik")}}, {F({}, {2, 0}), F({}, {0, 3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_tensor<float>((*r)[0], {2, 3}, {0, 0, 0, 0, 0, 0});
  auto eq = [](const char* s) { return AttrMap{{"equation", Attribute::String(s)}}; };
  EXPECT_FALSE(run1("Einsum", eq("ij,jk->ik"), {F({1, 2}, {1, 2}), F({1, 2, 3}, {3, 1})}).ok());  // j: 2 vs 3
  EXPECT_FALSE(run1("Einsum", eq("ijk->i"), {F({1, 2}, {1, 2})}).ok());                            // rank
  EXPECT_FALSE(run1("Einsum", eq("ij->k"), {F({1, 2}, {1, 2})}).ok());                             // unknown label
  EXPECT_FALSE(run1("Einsum", eq("i1->i"), {F({1, 2}, {2})}).ok());                                // bad char
  EXPECT_FALSE(run1("Einsum", eq("ij->ii"), {F({1, 2, 3, 4}, {2, 2})}).ok());                      // repeated output
  EXPECT_FALSE(run1("Einsum", eq("i,i"), {F({1, 2}, {2}), D({1, 2}, {2})}).ok());                  // dtypes differ
  EXPECT_FALSE(run1("Einsum", eq("i,i"), {F({1, 2}, {2})}).ok());                                  // input count
}

}  // namespace
}  // namespace kiln
