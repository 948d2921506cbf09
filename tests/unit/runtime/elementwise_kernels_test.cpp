// Elementwise kernels: unary math, activations, binary arithmetic / compare / logic with
// broadcasting, Pow, Mod, variadic ops, Where, Clip and Cast. Expected values are hand-computed or
// come from numpy, never from the kernels themselves.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "runtime/kernel_runner.h"
#include "runtime/tensor.h"

namespace kiln {
namespace {

template <typename T>
Tensor make(const std::vector<T>& v, Shape s) {
  return Tensor::from_vector<T>(v, s);
}
Tensor f32(const std::vector<float>& v, Shape s) { return make<float>(v, s); }
Tensor halfs(const std::vector<float>& v, Shape s) {
  Tensor t = Tensor::zeros(DType::kFloat16, s);
  for (size_t i = 0; i < v.size(); ++i) t.as<uint16_t>()[i] = float_to_half(v[i]);
  return t;
}

StatusOr<Tensor> run1(const std::string& op, const std::vector<Tensor>& in, const AttrMap& attrs = {}, int opset = 17) {
  KILN_ASSIGN_OR_RETURN(auto outs, run_op_once(op, attrs, in, 1, "", opset));
  return outs[0];
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.as<T>(), t.as<T>() + t.numel());
}
std::vector<int> bools(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::kBool);
  std::vector<int> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.as<bool>()[i] ? 1 : 0);
  return v;
}
std::vector<float> half_values(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::kFloat16);
  std::vector<float> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(half_to_float(t.as<uint16_t>()[i]));
  return v;
}
// The same readers on a kernel result: a failed run is reported and reads as empty.
template <typename T>
std::vector<T> values(const StatusOr<Tensor>& r) {
  if (!r.ok()) {
    ADD_FAILURE() << r.status().message();
    return {};
  }
  return values<T>(r.value());
}
std::vector<int> bools(const StatusOr<Tensor>& r) {
  if (!r.ok()) {
    ADD_FAILURE() << r.status().message();
    return {};
  }
  return bools(r.value());
}

// Checks a float32 result against expected values with a relative tolerance (and the shape, if given).
void expect_floats(const StatusOr<Tensor>& r, const std::vector<float>& expected, std::optional<Shape> shape = {},
                   float rtol = 1e-5f) {
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->dtype(), DType::kFloat32);
  if (shape) {
    EXPECT_EQ(r->shape(), *shape);
  }
  const auto got = values<float>(r.value());
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expected[i], 1e-6f + rtol * std::abs(expected[i])) << "element " << i;
}

TEST(ElementwiseUnary, ExpTanhErfSigmoid) {
  const Tensor x = f32({-2.5f, -0.5f, 0.0f, 0.3f, 1.0f, 3.0f}, {2, 3});
  expect_floats(run1("Exp", {x}), {0.082085006f, 0.60653067f, 1.0f, 1.3498588f, 2.718282f, 20.085537f}, Shape{2, 3});
  expect_floats(run1("Tanh", {x}), {-0.9866143f, -0.4621172f, 0.0f, 0.29131263f, 0.7615942f, 0.9950548f});
  expect_floats(run1("Erf", {x}), {-0.999593048f, -0.520499878f, 0.0f, 0.328626772f, 0.842700793f, 0.999977910f});
  expect_floats(run1("Sigmoid", {x}), {0.07585818f, 0.377540669f, 0.5f, 0.57444252f, 0.731058579f, 0.952574127f});
  expect_floats(run1("Softplus", {x}), {0.078889734f, 0.474076984f, 0.693147181f, 0.854355251f, 1.313261688f, 3.048587352f});
  expect_floats(run1("Softsign", {x}), {-0.71428573f, -0.33333334f, 0.0f, 0.23076925f, 0.5f, 0.75f});
}

TEST(ElementwiseUnary, TrigonometryAndRoots) {
  const Tensor y = f32({0.1f, 0.5f, 0.9f}, {3});
  expect_floats(run1("Sin", {y}), {0.09983342f, 0.47942555f, 0.7833269f});
  expect_floats(run1("Cos", {y}), {0.9950042f, 0.87758255f, 0.62161f});
  expect_floats(run1("Tan", {y}), {0.100334674f, 0.5463025f, 1.2601581f});
  expect_floats(run1("Asin", {y}), {0.10016742f, 0.5235988f, 1.1197696f});
  expect_floats(run1("Acos", {y}), {1.470629f, 1.0471976f, 0.45102686f});
  expect_floats(run1("Atan", {y}), {0.09966865f, 0.4636476f, 0.7328151f});
  expect_floats(run1("Sinh", {y}), {0.10016675f, 0.5210953f, 1.0265167f});
  expect_floats(run1("Cosh", {y}), {1.0050043f, 1.1276261f, 1.4330864f});
  expect_floats(run1("Asinh", {y}), {0.09983408f, 0.4812118f, 0.8088669f});
  expect_floats(run1("Atanh", {y}), {0.10033535f, 0.54930615f, 1.4722193f});
  expect_floats(run1("Log", {y}), {-2.3025851f, -0.6931472f, -0.105360545f});
  expect_floats(run1("Sqrt", {y}), {0.31622776f, 0.70710677f, 0.94868326f});
  expect_floats(run1("Reciprocal", {y}), {10.0f, 2.0f, 1.1111111f});
  expect_floats(run1("Acosh", {f32({1.0f, 2.0f, 10.0f}, {3})}), {0.0f, 1.316958f, 2.993223f});
}

TEST(ElementwiseUnary, RoundingIsHalfToEven) {
  const Tensor x = f32({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, -2.6f, 3.0f}, {8});
  expect_floats(run1("Round", {x}), {0.0f, 2.0f, 2.0f, -0.0f, -2.0f, 2.0f, -3.0f, 3.0f});
  expect_floats(run1("Ceil", {x}), {1.0f, 2.0f, 3.0f, -0.0f, -1.0f, 3.0f, -2.0f, 3.0f});
  expect_floats(run1("Floor", {x}), {0.0f, 1.0f, 2.0f, -1.0f, -2.0f, 2.0f, -3.0f, 3.0f});
  // float64 goes through the same functors in double.
  auto r = run1("Round", {make<double>({2.5, -3.5, 0.49999999999999994}, {3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(values<double>(*r), (std::vector<double>{2.0, -4.0, 0.0}));
}

TEST(ElementwiseUnary, IntegerAbsNegSignRelu) {
  const Tensor x = make<int32_t>({-7, 0, 5, std::numeric_limits<int32_t>::min() + 1}, {2, 2});
  EXPECT_EQ(values<int32_t>(run1("Abs", {x})), (std::vector<int32_t>{7, 0, 5, std::numeric_limits<int32_t>::max()}));
  EXPECT_EQ(values<int32_t>(run1("Neg", {x})), (std::vector<int32_t>{7, 0, -5, std::numeric_limits<int32_t>::max()}));
  EXPECT_EQ(values<int32_t>(run1("Sign", {x})), (std::vector<int32_t>{-1, 0, 1, -1}));
  EXPECT_EQ(values<int32_t>(run1("Relu", {x})), (std::vector<int32_t>{0, 0, 5, 0}));
  EXPECT_EQ(values<uint8_t>(run1("Abs", {make<uint8_t>({0, 200}, {2})})), (std::vector<uint8_t>{0, 200}));
  EXPECT_EQ(values<int8_t>(run1("Neg", {make<int8_t>({-128, 127}, {2})})), (std::vector<int8_t>{-128, -127}));
  const int64_t lo = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(values<int64_t>(run1("Neg", {make<int64_t>({lo, 3}, {2})})), (std::vector<int64_t>{lo, -3}));
  EXPECT_EQ(values<int64_t>(run1("Abs", {make<int64_t>({lo, -3}, {2})})), (std::vector<int64_t>{lo, 3}));
  // Neg has no unsigned types in ONNX.
  EXPECT_FALSE(run1("Neg", {make<uint8_t>({1}, {1})}).ok());
  expect_floats(run1("Sign", {f32({-0.1f, 0.0f, 7.0f}, {3})}), {-1.0f, 0.0f, 1.0f});
  auto nan_sign = run1("Sign", {f32({NAN}, {1})});
  ASSERT_TRUE(nan_sign.ok());
  EXPECT_TRUE(std::isnan(values<float>(*nan_sign)[0]));
}

TEST(ElementwiseActivation, Parameterized) {
  const Tensor x = f32({-2.5f, -0.5f, 0.0f, 0.3f, 1.0f, 3.0f}, {6});
  expect_floats(run1("Relu", {x}), {0.0f, 0.0f, 0.0f, 0.3f, 1.0f, 3.0f});
  expect_floats(run1("LeakyRelu", {x}), {-0.025f, -0.005f, 0.0f, 0.3f, 1.0f, 3.0f});
  expect_floats(run1("LeakyRelu", {x}, {{"alpha", Attribute::Float(0.1f)}}), {-0.25f, -0.05f, 0.0f, 0.3f, 1.0f, 3.0f});
  expect_floats(run1("Elu", {x}, {{"alpha", Attribute::Float(2.0f)}}),
                {-1.835830003f, -0.786938681f, 0.0f, 0.3f, 1.0f, 3.0f});
  expect_floats(run1("Selu", {x}), {-1.613785764f, -0.69175819f, 0.0f, 0.315210319f, 1.050701022f, 3.152103066f});
  expect_floats(run1("Selu", {x}, {{"alpha", Attribute::Float(2.0f)}, {"gamma", Attribute::Float(3.0f)}}),
                {3.0f * 2.0f * (0.082085006f - 1.0f), 3.0f * 2.0f * (0.60653067f - 1.0f), 0.0f, 0.9f, 3.0f, 9.0f});
  expect_floats(run1("Celu", {x}, {{"alpha", Attribute::Float(2.0f)}}),
                {-1.426990406f, -0.442398434f, 0.0f, 0.3f, 1.0f, 3.0f});
  expect_floats(run1("HardSigmoid", {x}), {0.0f, 0.4f, 0.5f, 0.56f, 0.7f, 1.0f});
  expect_floats(run1("HardSigmoid", {x}, {{"alpha", Attribute::Float(0.5f)}, {"beta", Attribute::Float(0.6f)}}),
                {0.0f, 0.35f, 0.6f, 0.75f, 1.0f, 1.0f});
  expect_floats(run1("HardSwish", {x}), {-0.20833336f, -0.20833333f, 0.0f, 0.165f, 0.6666667f, 3.0f});
  expect_floats(run1("ThresholdedRelu", {x}), {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 3.0f});
  expect_floats(run1("ThresholdedRelu", {x}, {{"alpha", Attribute::Float(0.2f)}}), {0.0f, 0.0f, 0.0f, 0.3f, 1.0f, 3.0f});
  expect_floats(run1("Shrink", {x}, {{"lambd", Attribute::Float(1.5f)}}), {-2.5f, 0.0f, 0.0f, 0.0f, 0.0f, 3.0f});
  expect_floats(run1("Shrink", {x}, {{"lambd", Attribute::Float(0.4f)}, {"bias", Attribute::Float(0.25f)}}),
                {-2.25f, -0.25f, 0.0f, 0.0f, 0.75f, 2.75f});
  // Shrink accepts integers too.
  EXPECT_EQ(values<int32_t>(run1("Shrink", {make<int32_t>({-3, -1, 0, 2, 5}, {5})},
                                  {{"lambd", Attribute::Float(1.5f)}, {"bias", Attribute::Float(1.0f)}})),
            (std::vector<int32_t>{-2, 0, 0, 1, 4}));
  // Large magnitudes must not overflow exp().
  expect_floats(run1("Sigmoid", {f32({-1000.0f, 1000.0f}, {2})}), {0.0f, 1.0f});
  expect_floats(run1("Softplus", {f32({-1000.0f, 1000.0f}, {2})}), {0.0f, 1000.0f});
  EXPECT_FALSE(run1("Celu", {x}, {{"alpha", Attribute::Float(0.0f)}}).ok());
}

TEST(ElementwiseUnary, PredicatesAndNot) {
  const Tensor x = f32({-1.2f, NAN, INFINITY, 2.8f, -INFINITY, INFINITY}, {6});
  EXPECT_EQ(bools(run1("IsNaN", {x})), (std::vector<int>{0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(bools(run1("IsInf", {x})), (std::vector<int>{0, 0, 1, 0, 1, 1}));
  EXPECT_EQ(bools(run1("IsInf", {x}, {{"detect_positive", Attribute::Int(0)}})), (std::vector<int>{0, 0, 0, 0, 1, 0}));
  EXPECT_EQ(bools(run1("IsInf", {x}, {{"detect_negative", Attribute::Int(0)}})), (std::vector<int>{0, 0, 1, 0, 0, 1}));
  auto isnan64 = run1("IsNaN", {make<double>({NAN, 1.0}, {2})});
  ASSERT_TRUE(isnan64.ok());
  EXPECT_EQ(isnan64->dtype(), DType::kBool);
  EXPECT_EQ(bools(run1("Not", {make<bool>({true, false, false}, {3})})), (std::vector<int>{0, 1, 1}));
  EXPECT_FALSE(run1("Not", {x}).ok());
  EXPECT_FALSE(run1("IsNaN", {make<int32_t>({1}, {1})}).ok());
}

TEST(ElementwiseUnary, ZeroSizeScalarsHalfAndErrors) {
  auto empty = run1("Exp", {f32({}, {2, 0, 3})});
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_EQ(empty->shape(), (Shape{2, 0, 3}));
  auto scalar = run1("Neg", {f32({4.0f}, {})});
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar->shape(), Shape{});
  EXPECT_EQ(values<float>(*scalar)[0], -4.0f);
  // float16 computes in float: exp(1) = 2.71875 in half precision (nearest half).
  auto h = run1("Exp", {halfs({0.0f, 1.0f, -1.0f}, {3})});
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->dtype(), DType::kFloat16);
  EXPECT_EQ(half_values(*h), (std::vector<float>{1.0f, 2.71875f, 0.36791992f}));
  EXPECT_FALSE(run1("Exp", {make<int32_t>({1}, {1})}).ok());                // float-only op
  EXPECT_FALSE(run1("Exp", {}).ok());                                       // missing input
  EXPECT_FALSE(run1("Relu", {f32({1.0f}, {1})}, {{"foo", Attribute::Int(1)}}).ok());  // unknown attribute
  EXPECT_FALSE(run1("LeakyRelu", {f32({1.0f}, {1})}, {{"alpha", Attribute::String("x")}}).ok());
}

TEST(ElementwiseUnary, LargeInputRunsInParallel) {
  const int64_t n = 100003;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 17) - 8.0f;
  auto r = run1("Relu", {f32(v, {n})});
  ASSERT_TRUE(r.ok());
  const auto out = values<float>(*r);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], v[i] > 0 ? v[i] : 0.0f) << i;
}

// ---- Where ------------------------------------------------------------------------------------

TEST(ElementwiseWhere, ThreeWayBroadcast) {
  const Tensor c = make<bool>({true, false}, {2, 1});
  const Tensor x = f32({1.0f, 2.0f, 3.0f}, {1, 3});
  const Tensor y = f32({-9.0f}, {});
  auto r = run1("Where", {c, x, y});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(*r), (std::vector<float>{1, 2, 3, -9, -9, -9}));
  // numpy example from the ONNX docs, int64.
  auto l = run1("Where", {make<bool>({true, false, true, true}, {2, 2}), make<int64_t>({1, 2, 3, 4}, {2, 2}),
                          make<int64_t>({9, 8, 7, 6}, {2, 2})});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(values<int64_t>(*l), (std::vector<int64_t>{1, 8, 3, 4}));
  // bool and float16 payloads move by element size.
  auto b = run1("Where", {make<bool>({false, true}, {2}), make<bool>({true, true}, {2}), make<bool>({false, false}, {2})});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(bools(*b), (std::vector<int>{0, 1}));
  auto h = run1("Where", {make<bool>({false, true}, {2}), halfs({1.5f, 2.5f}, {2}), halfs({-1.0f}, {1})});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(half_values(*h), (std::vector<float>{-1.0f, 2.5f}));
  auto z = run1("Where", {make<bool>({}, {0, 1}), f32({1, 2}, {2}), f32({0}, {1})});
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->shape(), (Shape{0, 2}));
}

TEST(ElementwiseWhere, Errors) {
  const Tensor c = make<bool>({true, false, true}, {3});
  EXPECT_FALSE(run1("Where", {c, f32({1, 2}, {2}), f32({1}, {1})}).ok());                  // [3] vs [2]
  EXPECT_FALSE(run1("Where", {c, f32({1}, {1}), make<double>({1}, {1})}).ok());            // dtype mismatch
  EXPECT_FALSE(run1("Where", {make<int32_t>({1}, {1}), f32({1}, {1}), f32({1}, {1})}).ok());  // non-bool condition
  EXPECT_FALSE(run1("Where", {c, f32({1}, {1})}).ok());
}

TEST(ElementwiseWhere, LargeMaskBroadcast) {
  // [2, 8, 4096] attention-style mask broadcast over a [2, 1, 4096] condition.
  const int64_t b = 2, s = 8, d = 4096;
  std::vector<bool> cond(b * d);
  for (int64_t i = 0; i < b * d; ++i) cond[i] = (i % 3) == 0;
  std::vector<float> x(b * s * d);
  for (int64_t i = 0; i < b * s * d; ++i) x[i] = static_cast<float>(i);
  auto r = run1("Where", {make<bool>(cond, {b, 1, d}), f32(x, {b, s, d}), f32({-1.0f}, {1})});
  ASSERT_TRUE(r.ok());
  const auto out = values<float>(*r);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < s; ++j)
      for (int64_t k = 0; k < d; ++k) {
        const int64_t o = (i * s + j) * d + k;
        ASSERT_EQ(out[o], cond[i * d + k] ? x[o] : -1.0f) << o;
      }
}

// ---- Clip -------------------------------------------------------------------------------------

TEST(ElementwiseClip, BoundsAsOptionalInputs) {
  const Tensor x = f32({-2.0f, 0.0f, 2.0f, NAN}, {2, 2});
  auto both = run1("Clip", {x, f32({-1.0f}, {}), f32({1.0f}, {})});
  ASSERT_TRUE(both.ok()) << both.status().message();
  auto v = values<float>(*both);
  EXPECT_EQ(v[0], -1.0f);
  EXPECT_EQ(v[1], 0.0f);
  EXPECT_EQ(v[2], 1.0f);
  EXPECT_TRUE(std::isnan(v[3]));
  expect_floats(run1("Clip", {f32({-2, 0, 2}, {3}), Tensor(), f32({1.0f}, {})}), {-2.0f, 0.0f, 1.0f});
  expect_floats(run1("Clip", {f32({-2, 0, 2}, {3}), f32({-1.0f}, {1})}), {-1.0f, 0.0f, 2.0f});
  expect_floats(run1("Clip", {f32({-2, 0, 2}, {3})}), {-2.0f, 0.0f, 2.0f});
  // min > max gives max everywhere (numpy.clip semantics).
  expect_floats(run1("Clip", {f32({-2, 0, 2}, {3}), f32({1.0f}, {}), f32({-1.0f}, {})}), {-1.0f, -1.0f, -1.0f});
  EXPECT_EQ(values<int8_t>(run1("Clip", {make<int8_t>({-128, -5, 0, 127}, {4}), make<int8_t>({-4}, {}),
                                          make<int8_t>({100}, {})})),
            (std::vector<int8_t>{-4, -4, 0, 100}));
  EXPECT_EQ(values<int64_t>(run1("Clip", {make<int64_t>({-5, 9}, {2}), Tensor(), make<int64_t>({3}, {})})),
            (std::vector<int64_t>{-5, 3}));
  auto z = run1("Clip", {f32({}, {0, 4}), f32({0.0f}, {})});
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->shape(), (Shape{0, 4}));
}

TEST(ElementwiseClip, AttributesBeforeOpset11AndErrors) {
  auto old = run_op_once("Clip", {{"min", Attribute::Float(-0.5f)}, {"max", Attribute::Float(0.5f)}},
                         {f32({-1.0f, 0.25f, 1.0f}, {3})}, 1, "", 6);
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_EQ(values<float>((*old)[0]), (std::vector<float>{-0.5f, 0.25f, 0.5f}));
  // From opset 11 the bounds are inputs; a 'min' attribute is unsupported.
  EXPECT_FALSE(run1("Clip", {f32({1.0f}, {1})}, {{"min", Attribute::Float(0.0f)}}).ok());
  EXPECT_FALSE(run1("Clip", {f32({1.0f}, {1}), f32({0.0f, 1.0f}, {2})}).ok());  // non-scalar bound
  EXPECT_FALSE(run1("Clip", {f32({1.0f}, {1}), make<double>({0.0}, {})}).ok());  // bound dtype mismatch
  EXPECT_FALSE(run1("Clip", {make<bool>({true}, {1})}).ok());
}

// ---- Cast / CastLike ----------------------------------------------------------------------------

AttrMap to(DType t) { return {{"to", Attribute::Int(static_cast<int64_t>(t))}}; }

TEST(ElementwiseCast, NumericConversions) {
  const Tensor x = f32({2.7f, -2.7f, 0.0f, 300.0f}, {2, 2});
  auto i = run1("Cast", {x}, to(DType::kInt32));
  ASSERT_TRUE(i.ok()) << i.status().message();
  EXPECT_EQ(i->shape(), (Shape{2, 2}));
  EXPECT_EQ(values<int32_t>(*i), (std::vector<int32_t>{2, -2, 0, 300}));
  EXPECT_EQ(bools(run1("Cast", {x}, to(DType::kBool))), (std::vector<int>{1, 1, 0, 1}));
  EXPECT_EQ(values<double>(run1("Cast", {make<bool>({true, false}, {2})}, to(DType::kFloat64))),
            (std::vector<double>{1.0, 0.0}));
  EXPECT_EQ(values<int64_t>(run1("Cast", {make<uint8_t>({0, 255}, {2})}, to(DType::kInt64))),
            (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(values<uint8_t>(run1("Cast", {make<int32_t>({256, 257, -1}, {3})}, to(DType::kUInt8))),
            (std::vector<uint8_t>{0, 1, 255}));  // integer narrowing wraps, as in numpy
  // Out-of-range and NaN float -> int are defined here: saturate, NaN -> 0.
  EXPECT_EQ(values<int8_t>(run1("Cast", {f32({1e6f, -1e6f, NAN}, {3})}, to(DType::kInt8))),
            (std::vector<int8_t>{127, -128, 0}));
  EXPECT_EQ(values<float>(run1("Cast", {make<int64_t>({16777217}, {1})}, to(DType::kFloat32))),
            (std::vector<float>{16777216.0f}));
  auto same = run1("Cast", {x}, to(DType::kFloat32));
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(values<float>(*same), (std::vector<float>{2.7f, -2.7f, 0.0f, 300.0f}));
}

TEST(ElementwiseCast, HalfAndBFloat16) {
  // 0.1 -> float16 0x2e66 (0.0999755859375); 65520 overflows to inf; 1/3 -> 0x3555.
  auto h = run1("Cast", {make<double>({0.1, 65520.0, 1.0 / 3.0, -2.0}, {4})}, to(DType::kFloat16));
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->dtype(), DType::kFloat16);
  const uint16_t* hb = h->as<uint16_t>();
  EXPECT_EQ(hb[0], 0x2e66);
  EXPECT_EQ(hb[1], 0x7c00);
  EXPECT_EQ(hb[2], 0x3555);
  EXPECT_EQ(hb[3], 0xc000);
  EXPECT_EQ(values<double>(run1("Cast", {*h}, to(DType::kFloat64)))[0], 0.0999755859375);
  // Just above the midpoint of two halves, but float would round it onto the midpoint (numpy: 0x3c01).
  const double above_mid = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  auto hm = run1("Cast", {make<double>({above_mid, -above_mid, 1.0 + std::ldexp(1.0, -11)}, {3})}, to(DType::kFloat16));
  ASSERT_TRUE(hm.ok());
  EXPECT_EQ(hm->as<uint16_t>()[0], 0x3c01);
  EXPECT_EQ(hm->as<uint16_t>()[1], 0xbc01);
  EXPECT_EQ(hm->as<uint16_t>()[2], 0x3c00);  // exact midpoint: ties to even
  // float -> bfloat16 keeps the top 16 bits (the ONNX reference truncates): 0.48033667f is 0x3ef5eeb6.
  auto b = run1("Cast", {f32({0.48033667f, 1.0f, -INFINITY, NAN}, {4})}, to(DType::kBFloat16));
  ASSERT_TRUE(b.ok());
  const uint16_t* bb = b->as<uint16_t>();
  EXPECT_EQ(bb[0], 0x3ef5);
  EXPECT_EQ(bb[1], 0x3f80);
  EXPECT_EQ(bb[2], 0xff80);
  EXPECT_EQ(bb[3] & 0x7f80, 0x7f80);
  EXPECT_NE(bb[3] & 0x007f, 0);
  EXPECT_EQ(values<float>(run1("Cast", {*b}, to(DType::kFloat32)))[0], 0.478515625f);
  EXPECT_EQ(values<int32_t>(run1("Cast", {halfs({-3.5f, 7.0f}, {2})}, to(DType::kInt32))),
            (std::vector<int32_t>{-3, 7}));
}

TEST(ElementwiseCast, CastLikeAndErrors) {
  auto r = run1("CastLike", {f32({1.5f, -1.5f}, {2}), make<int64_t>({0}, {1})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->dtype(), DType::kInt64);
  EXPECT_EQ(values<int64_t>(*r), (std::vector<int64_t>{1, -1}));
  auto z = run1("Cast", {f32({}, {3, 0})}, to(DType::kFloat16));
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->shape(), (Shape{3, 0}));
  auto s = run1("Cast", {f32({1.0f}, {1})}, to(DType::kString));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.status().message().find("string"), std::string::npos);
  EXPECT_FALSE(run1("Cast", {f32({1.0f}, {1})}).ok());  // 'to' is required
  EXPECT_FALSE(run1("Cast", {f32({1.0f}, {1})}, {{"to", Attribute::Int(99)}}).ok());
  EXPECT_FALSE(run1("CastLike", {f32({1.0f}, {1})}).ok());
}

// ---- binary arithmetic and broadcasting ---------------------------------------------------------

TEST(ElementwiseBinary, SameShapeScalarAndTrailingBroadcast) {
  const Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_floats(run1("Add", {a, f32({10, 20, 30, 40, 50, 60}, {2, 3})}), {11, 22, 33, 44, 55, 66}, Shape{2, 3});
  expect_floats(run1("Sub", {a, f32({1.5f}, {})}), {-0.5f, 0.5f, 1.5f, 2.5f, 3.5f, 4.5f}, Shape{2, 3});
  expect_floats(run1("Sub", {f32({1.5f}, {}), a}), {0.5f, -0.5f, -1.5f, -2.5f, -3.5f, -4.5f}, Shape{2, 3});
  expect_floats(run1("Mul", {a, f32({1, 10, 100}, {3})}), {1, 20, 300, 4, 50, 600}, Shape{2, 3});
  expect_floats(run1("Div", {a, f32({2, 4}, {2, 1})}), {0.5f, 1.0f, 1.5f, 1.0f, 1.25f, 1.5f}, Shape{2, 3});
  // Both operands broadcast: [2,1,3] + [4,1] -> [2,4,3], element (i,j,k) = a[i,k] + b[j].
  std::vector<float> expected;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) expected.push_back(static_cast<float>((i * 3 + k + 1) + 100 * (j + 1)));
  expect_floats(run1("Add", {f32({1, 2, 3, 4, 5, 6}, {2, 1, 3}), f32({100, 200, 300, 400}, {4, 1})}), expected,
                Shape{2, 4, 3});
  // Rank-0 with rank-0, and 1-sized dims everywhere.
  expect_floats(run1("Mul", {f32({3}, {}), f32({4}, {})}), {12}, Shape{});
  expect_floats(run1("Add", {f32({1}, {1, 1, 1}), f32({2}, {1})}), {3}, Shape{1, 1, 1});
}

TEST(ElementwiseBinary, ZeroSizeAndIncompatibleShapes) {
  auto z = run1("Add", {f32({}, {0, 3}), f32({1, 2, 3}, {3})});
  ASSERT_TRUE(z.ok()) << z.status().message();
  EXPECT_EQ(z->shape(), (Shape{0, 3}));
  auto z2 = run1("Mul", {f32({}, {2, 0}), f32({5}, {1})});
  ASSERT_TRUE(z2.ok());
  EXPECT_EQ(z2->shape(), (Shape{2, 0}));
  auto z3 = run1("Greater", {f32({}, {1, 0}), f32({1, 2}, {2, 1})});
  ASSERT_TRUE(z3.ok());
  EXPECT_EQ(z3->shape(), (Shape{2, 0}));
  EXPECT_FALSE(run1("Add", {f32({1, 2, 3, 4, 5, 6}, {2, 3}), f32({1, 2, 3, 4}, {4})}).ok());
  EXPECT_FALSE(run1("Add", {f32({}, {0, 3}), f32({1, 2}, {2, 1})}).ok());  // 0 vs 2
  EXPECT_FALSE(run1("Add", {f32({1}, {1}), make<int32_t>({1}, {1})}).ok());  // mixed dtypes
  EXPECT_FALSE(run1("Add", {f32({1}, {1})}).ok());
  EXPECT_FALSE(run1("Add", {make<bool>({true}, {1}), make<bool>({true}, {1})}).ok());
}

TEST(ElementwiseBinary, IntegerArithmetic) {
  const Tensor a = make<int32_t>({7, -7, 7, -7, 5, std::numeric_limits<int32_t>::min()}, {6});
  const Tensor b = make<int32_t>({2, 2, -2, -2, 0, -1}, {6});
  // Truncating division; x/0 -> 0 and INT_MIN/-1 wraps instead of trapping.
  EXPECT_EQ(values<int32_t>(run1("Div", {a, b})),
            (std::vector<int32_t>{3, -3, -3, 3, 0, std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(values<int32_t>(run1("Add", {make<int32_t>({std::numeric_limits<int32_t>::max()}, {1}),
                                          make<int32_t>({1}, {1})})),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min()}));
  // uint8 wraps like numpy: 250 + 10 = 4, 3 - 5 = 254, 16 * 17 = 16.
  EXPECT_EQ(values<uint8_t>(run1("Add", {make<uint8_t>({250}, {1}), make<uint8_t>({10}, {1})})),
            (std::vector<uint8_t>{4}));
  EXPECT_EQ(values<uint8_t>(run1("Sub", {make<uint8_t>({3}, {1}), make<uint8_t>({5}, {1})})),
            (std::vector<uint8_t>{254}));
  EXPECT_EQ(values<uint8_t>(run1("Mul", {make<uint8_t>({16}, {1}), make<uint8_t>({17}, {1})})),
            (std::vector<uint8_t>{16}));
  EXPECT_EQ(values<uint16_t>(run1("Mul", {make<uint16_t>({65535}, {1}), make<uint16_t>({65535}, {1})})),
            (std::vector<uint16_t>{1}));
  EXPECT_EQ(values<uint8_t>(run1("Div", {make<uint8_t>({200, 7}, {2}), make<uint8_t>({3}, {1})})),
            (std::vector<uint8_t>{66, 2}));
  EXPECT_EQ(values<int64_t>(run1("Mul", {make<int64_t>({3, -4}, {2, 1}), make<int64_t>({5, 6, 7}, {3})})),
            (std::vector<int64_t>{15, 18, 21, -20, -24, -28}));
  EXPECT_EQ(values<double>(run1("Sub", {make<double>({0.5}, {1}), make<double>({0.25, 1.0}, {2})})),
            (std::vector<double>{0.25, -0.5}));
}

TEST(ElementwiseBinary, Float16ComputesInFloat) {
  auto r = run1("Add", {halfs({1.0f, 2.5f, 65504.0f}, {3}), halfs({0.5f}, {1})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->dtype(), DType::kFloat16);
  EXPECT_EQ(half_values(*r), (std::vector<float>{1.5f, 3.0f, 65504.0f}));
  auto m = run1("Max", {halfs({1.0f, -2.0f, 3.0f}, {3}), halfs({2.0f, -3.0f, 1.0f}, {3})});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(half_values(*m), (std::vector<float>{2.0f, -2.0f, 3.0f}));
}

TEST(ElementwiseBinary, ModSignRules) {
  const Tensor xi = make<int32_t>({-4, 7, 5, 4, -7, 8}, {6});
  const Tensor yi = make<int32_t>({2, -3, 8, -2, 3, 5}, {6});
  EXPECT_EQ(values<int32_t>(run1("Mod", {xi, yi})), (std::vector<int32_t>{0, -2, 5, 0, 2, 3}));
  EXPECT_EQ(values<int32_t>(run1("Mod", {xi, yi}, {{"fmod", Attribute::Int(1)}})),
            (std::vector<int32_t>{0, 1, 5, 0, -1, 3}));
  EXPECT_EQ(values<int8_t>(run1("Mod", {make<int8_t>({-4, 7, -128}, {3}), make<int8_t>({3, -3, -1}, {3})})),
            (std::vector<int8_t>{2, -2, 0}));
  EXPECT_EQ(values<uint32_t>(run1("Mod", {make<uint32_t>({4, 7, 5}, {3}), make<uint32_t>({2, 3, 0}, {3})})),
            (std::vector<uint32_t>{0, 1, 0}));
  EXPECT_EQ(values<int32_t>(run1("Mod", {make<int32_t>({10, 11, 12, -13}, {2, 2}), make<int32_t>({3}, {1})})),
            (std::vector<int32_t>{1, 2, 0, 2}));
  const Tensor xf = f32({-4.3f, 7.2f, 5.0f, 4.3f, -7.2f, 8.0f}, {6});
  const Tensor yf = f32({2.1f, -3.4f, 8.0f, -2.1f, 3.4f, 5.0f}, {6});
  expect_floats(run1("Mod", {xf, yf}, {{"fmod", Attribute::Int(1)}}),
                {-0.10000038f, 0.39999962f, 5.0f, 0.10000038f, -0.39999962f, 3.0f});
  expect_floats(run1("Mod", {xf, yf}), {1.9999995f, -3.0000005f, 5.0f, -1.9999995f, 3.0000005f, 3.0f});
  EXPECT_FALSE(run1("Mod", {xi, yi}, {{"fmod", Attribute::Int(2)}}).ok());
}

TEST(ElementwiseBinary, PowMixedDtypes) {
  expect_floats(run1("Pow", {f32({2, 3, -2}, {3}), make<int64_t>({-1, 3, 3}, {3})}), {0.5f, 27.0f, -8.0f});
  expect_floats(run1("Pow", {f32({1.5f, 2.0f, 4.0f}, {3}), f32({0.5f}, {})}), {1.2247448f, 1.4142135f, 2.0f});
  expect_floats(run1("Pow", {f32({1, 2, 3, 4, 5, 6}, {2, 3}), f32({1, 2, 3}, {3})}), {1, 4, 27, 4, 25, 216});
  expect_floats(run1("Pow", {f32({-3.0f, 0.5f}, {2}), f32({2.0f}, {})}), {9.0f, 0.25f});  // x*x fast path
  expect_floats(run1("Pow", {f32({3.0f}, {1}), make<uint32_t>({4}, {1})}), {81.0f});
  auto i = run1("Pow", {make<int64_t>({1, 2, 3}, {3}), f32({4, 5, 6}, {3})});
  ASSERT_TRUE(i.ok()) << i.status().message();
  EXPECT_EQ(i->dtype(), DType::kInt64);
  EXPECT_EQ(values<int64_t>(*i), (std::vector<int64_t>{1, 32, 729}));
  EXPECT_EQ(values<int32_t>(run1("Pow", {make<int32_t>({2, -3, 2, -1, 5}, {5}), make<int32_t>({10, 3, -1, -3, 0}, {5})})),
            (std::vector<int32_t>{1024, -27, 0, -1, 1}));
  EXPECT_EQ(values<int32_t>(run1("Pow", {make<int32_t>({2, 3}, {2}), f32({0.5f}, {})})),
            (std::vector<int32_t>{1, 1}));  // 1.414 and 1.732 truncate
  EXPECT_FALSE(run1("Pow", {make<uint8_t>({2}, {1}), make<uint8_t>({2}, {1})}).ok());
  EXPECT_FALSE(run1("Pow", {f32({1, 2}, {2}), f32({1, 2, 3}, {3})}).ok());
}

TEST(ElementwiseBinary, BitShift) {
  const AttrMap left = {{"direction", Attribute::String("LEFT")}};
  const AttrMap right = {{"direction", Attribute::String("RIGHT")}};
  EXPECT_EQ(values<uint8_t>(run1("BitShift", {make<uint8_t>({16, 4, 1, 255}, {4}), make<uint8_t>({1, 2, 3, 8}, {4})}, left)),
            (std::vector<uint8_t>{32, 16, 8, 0}));
  EXPECT_EQ(values<uint8_t>(run1("BitShift", {make<uint8_t>({16, 4, 1}, {3}), make<uint8_t>({1, 2, 3}, {3})}, right)),
            (std::vector<uint8_t>{8, 1, 0}));
  EXPECT_EQ(values<uint64_t>(run1("BitShift", {make<uint64_t>({1}, {1}), make<uint64_t>({63, 64}, {2})}, left)),
            (std::vector<uint64_t>{uint64_t{1} << 63, 0}));
  EXPECT_FALSE(run1("BitShift", {make<uint8_t>({1}, {1}), make<uint8_t>({1}, {1})}, {{"direction", Attribute::String("UP")}}).ok());
  EXPECT_FALSE(run1("BitShift", {make<uint8_t>({1}, {1}), make<uint8_t>({1}, {1})}).ok());
  EXPECT_FALSE(run1("BitShift", {make<int32_t>({1}, {1}), make<int32_t>({1}, {1})}, left).ok());
}

TEST(ElementwiseBinary, CompareAndLogic) {
  const Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = f32({2, 2, 2}, {3});
  EXPECT_EQ(bools(run1("Greater", {a, b})), (std::vector<int>{0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(bools(run1("Less", {a, b})), (std::vector<int>{1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(bools(run1("GreaterOrEqual", {a, b})), (std::vector<int>{0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(bools(run1("LessOrEqual", {a, b})), (std::vector<int>{1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(bools(run1("Equal", {a, b})), (std::vector<int>{0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(bools(run1("Equal", {make<int64_t>({-1, 5}, {2, 1}), make<int64_t>({5, -1}, {1, 2})})),
            (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(bools(run1("Equal", {f32({NAN}, {1}), f32({NAN}, {1})})), (std::vector<int>{0}));
  EXPECT_EQ(bools(run1("Greater", {make<uint8_t>({200}, {1}), make<uint8_t>({100}, {1})})), (std::vector<int>{1}));
  const Tensor p = make<bool>({true, false}, {2, 1});
  const Tensor q = make<bool>({true, false, true}, {1, 3});
  EXPECT_EQ(bools(run1("And", {p, q})), (std::vector<int>{1, 0, 1, 0, 0, 0}));
  EXPECT_EQ(bools(run1("Or", {p, q})), (std::vector<int>{1, 1, 1, 1, 0, 1}));
  EXPECT_EQ(bools(run1("Xor", {p, q})), (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(bools(run1("Equal", {p, q})), (std::vector<int>{1, 0, 1, 0, 1, 0}));
  EXPECT_FALSE(run1("And", {a, b}).ok());
  EXPECT_FALSE(run1("Greater", {p, q}).ok());
}

TEST(ElementwiseBinary, PRelu) {
  expect_floats(run1("PRelu", {f32({-2, 3, -4, 5, -6, 7}, {2, 3}), f32({0.5f, 0.25f, 2.0f}, {3})}),
                {-1.0f, 3.0f, -8.0f, 5.0f, -1.5f, 7.0f}, Shape{2, 3});
  expect_floats(run1("PRelu", {f32({-2, 3, -4, -5}, {2, 2}), f32({0.1f}, {1})}), {-0.2f, 3.0f, -0.4f, -0.5f});
  EXPECT_EQ(values<int32_t>(run1("PRelu", {make<int32_t>({-2, 3}, {2}), make<int32_t>({3}, {1})})),
            (std::vector<int32_t>{-6, 3}));
  // The slope broadcasts to X, never the other way.
  EXPECT_FALSE(run1("PRelu", {f32({-1, 2, 3}, {3}), f32({1, 2, 3, 4, 5, 6}, {2, 3})}).ok());
}

TEST(ElementwiseVariadic, MaxMinSumMeanBroadcast) {
  const Tensor a = f32({3, -1, 2}, {3});
  const Tensor b = f32({1, 5}, {2, 1});
  const Tensor c = f32({2.5f}, {1});
  expect_floats(run1("Max", {a, b, c}), {3, 2.5f, 2.5f, 5, 5, 5}, Shape{2, 3});
  expect_floats(run1("Min", {a, b, c}), {1, -1, 1, 2.5f, -1, 2}, Shape{2, 3});
  expect_floats(run1("Sum", {a, b, c}), {6.5f, 2.5f, 5.5f, 10.5f, 6.5f, 9.5f}, Shape{2, 3});
  expect_floats(run1("Mean", {a, b, c}), {2.1666667f, 0.8333333f, 1.8333334f, 3.5f, 2.1666667f, 3.1666667f}, Shape{2, 3});
  expect_floats(run1("Max", {a}), {3, -1, 2}, Shape{3});
  expect_floats(run1("Sum", {c, a}), {5.5f, 1.5f, 4.5f}, Shape{3});
  expect_floats(run1("Mean", {a, a}), {3, -1, 2});
  auto nan_max = run1("Max", {f32({1.0f, NAN}, {2}), f32({NAN, 2.0f}, {2})});
  ASSERT_TRUE(nan_max.ok());
  EXPECT_TRUE(std::isnan(values<float>(*nan_max)[0]));
  EXPECT_TRUE(std::isnan(values<float>(*nan_max)[1]));
  EXPECT_EQ(values<uint8_t>(run1("Max", {make<uint8_t>({1, 200}, {2}), make<uint8_t>({100, 3}, {2})})),
            (std::vector<uint8_t>{100, 200}));
  EXPECT_EQ(values<int64_t>(run1("Min", {make<int64_t>({1, -200}, {2}), make<int64_t>({-100, 3}, {2})})),
            (std::vector<int64_t>{-100, -200}));
  auto z = run1("Sum", {f32({}, {0, 2}), f32({1, 2}, {2})});
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->shape(), (Shape{0, 2}));
  EXPECT_FALSE(run1("Max", {a, f32({1, 2}, {2})}).ok());
  EXPECT_FALSE(run1("Sum", {a, make<double>({1}, {1})}).ok());
  EXPECT_FALSE(run1("Mean", {make<int32_t>({1}, {1})}).ok());
  EXPECT_FALSE(run1("Max", {}).ok());
}

// Large inputs take the parallel path; rows are split into blocks when there are few of them.
TEST(ElementwiseBinary, LargeBroadcastsMatchScalarLoops) {
  const int64_t rows = 48, d = 1024;  // [rows, d] + [d]: 49152 elements
  std::vector<float> x(rows * d), bias(d);
  for (int64_t i = 0; i < rows * d; ++i) x[i] = static_cast<float>(i % 251) * 0.5f;
  for (int64_t j = 0; j < d; ++j) bias[j] = static_cast<float>(j) - 512.0f;
  auto r = run1("Add", {f32(x, {4, rows / 4, d}), f32(bias, {d})});
  ASSERT_TRUE(r.ok());
  auto out = values<float>(*r);
  for (int64_t i = 0; i < rows * d; ++i) ASSERT_EQ(out[i], x[i] + bias[i % d]) << i;

  // Two long rows times a per-row scale: [2, 40000] * [2, 1].
  const int64_t n = 40000;
  std::vector<float> y(2 * n);
  for (int64_t i = 0; i < 2 * n; ++i) y[i] = static_cast<float>(i % 97);
  auto m = run1("Mul", {f32(y, {2, n}), f32({2.0f, -1.0f}, {2, 1})});
  ASSERT_TRUE(m.ok());
  out = values<float>(*m);
  for (int64_t i = 0; i < 2 * n; ++i) ASSERT_EQ(out[i], y[i] * (i < n ? 2.0f : -1.0f)) << i;

  // Same shape, one flat run split across threads; and scalar on the left.
  auto s = run1("Sub", {f32({1000.0f}, {}), f32(y, {2, n})});
  ASSERT_TRUE(s.ok());
  out = values<float>(*s);
  for (int64_t i = 0; i < 2 * n; ++i) ASSERT_EQ(out[i], 1000.0f - y[i]) << i;
  auto e = run1("Equal", {f32(y, {2, n}), f32(y, {2, n})});
  ASSERT_TRUE(e.ok());
  for (int v : bools(*e)) ASSERT_EQ(v, 1);

  // Column broadcast against a row: [300, 1] + [1, 200] -> [300, 200].
  std::vector<float> col(300), row(200);
  for (int i = 0; i < 300; ++i) col[i] = static_cast<float>(i);
  for (int j = 0; j < 200; ++j) row[j] = static_cast<float>(j) * 1000.0f;
  auto o = run1("Add", {f32(col, {300, 1}), f32(row, {1, 200})});
  ASSERT_TRUE(o.ok());
  out = values<float>(*o);
  for (int i = 0; i < 300; ++i)
    for (int j = 0; j < 200; ++j) ASSERT_EQ(out[i * 200 + j], col[i] + row[j]);
}

}  // namespace
}  // namespace kiln
