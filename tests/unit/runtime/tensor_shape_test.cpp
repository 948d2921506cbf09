// Shape-only and constant-producing ops of the tensor family. Expected values come from numpy
// (np.triu/np.tril, np.arange, np.eye) or hand computation.
#include <gtest/gtest.h>

#include "runtime/kernel_runner.h"

namespace kiln {
namespace {

template <typename T>
Tensor make(std::vector<T> v, Shape s) {
  return Tensor::from_vector<T>(v, s);
}
Tensor i64(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(v, Shape{static_cast<int64_t>(v.size())}); }
template <typename T>
Tensor iota(Shape s) {
  std::vector<T> v(static_cast<size_t>(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(i);
  return make<T>(v, s);
}
template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.as<T>(), t.as<T>() + t.numel());
}
std::vector<int64_t> v64(std::initializer_list<int64_t> v) { return v; }

Tensor run1(const std::string& op, const AttrMap& attrs, const std::vector<Tensor>& in, int opset = 17) {
  auto r = run_op_once(op, attrs, in, 1, {}, opset);
  EXPECT_TRUE(r.ok()) << op << ": " << r.status().message();
  return r.ok() ? (*r)[0] : Tensor();
}
Shape shape_of(const std::string& op, const AttrMap& attrs, const std::vector<Tensor>& in, int opset = 17) {
  return run1(op, attrs, in, opset).shape();
}

// ---- Shape, Size ----

TEST(TensorShapeOp, StartEndClamping) {
  Tensor x = Tensor::zeros(DType::kFloat32, Shape{2, 3, 4, 5});
  EXPECT_EQ(values<int64_t>(run1("Shape", {}, {x})), v64({2, 3, 4, 5}));
  EXPECT_EQ(values<int64_t>(run1("Shape", {{"start", Attribute::Int(1)}, {"end", Attribute::Int(-1)}}, {x})), v64({3, 4}));
  EXPECT_EQ(values<int64_t>(run1("Shape", {{"start", Attribute::Int(-10)}, {"end", Attribute::Int(2)}}, {x})), v64({2, 3}));
  EXPECT_EQ(values<int64_t>(run1("Shape", {{"start", Attribute::Int(-1)}, {"end", Attribute::Int(10)}}, {x})), v64({5}));
  EXPECT_EQ(shape_of("Shape", {{"start", Attribute::Int(3)}, {"end", Attribute::Int(1)}}, {x}), (Shape{0}));
  EXPECT_EQ(shape_of("Shape", {}, {make<bool>({true}, Shape{})}), (Shape{0}));
}

TEST(TensorSize, ScalarOutput) {
  Tensor s = run1("Size", {}, {Tensor::zeros(DType::kInt8, Shape{2, 0, 3})});
  EXPECT_EQ(s.shape(), (Shape{}));
  EXPECT_EQ(*s.as<int64_t>(), 0);
  EXPECT_EQ(*run1("Size", {}, {Tensor::zeros(DType::kFloat16, Shape{3, 7})}).as<int64_t>(), 21);
}

// ---- Reshape ----

TEST(TensorReshape, ZeroCopiesDimAndMinusOneInfers) {
  Tensor x = iota<float>(Shape{2, 3, 4});
  Tensor y = run1("Reshape", {}, {x, i64({0, -1})});
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_EQ(values<float>(y), values<float>(x));
  EXPECT_EQ(shape_of("Reshape", {}, {x, i64({-1})}), (Shape{24}));
  EXPECT_EQ(shape_of("Reshape", {}, {x, i64({4, 0, -1})}), (Shape{4, 3, 2}));
  EXPECT_EQ(shape_of("Reshape", {}, {x, i64({1, 1, 24, 1})}), (Shape{1, 1, 24, 1}));
  // allowzero=1: 0 is a real zero-size dim.
  EXPECT_EQ(shape_of("Reshape", {{"allowzero", Attribute::Int(1)}}, {Tensor::zeros(DType::kInt32, Shape{0, 3}), i64({3, 0})}),
            (Shape{3, 0}));
  EXPECT_EQ(shape_of("Reshape", {}, {Tensor::zeros(DType::kInt32, Shape{0, 3}), i64({0, 3})}), (Shape{0, 3}));
}

TEST(TensorReshape, CopiesBytesOfAnyDtype) {
  Tensor h = Tensor::zeros(DType::kFloat16, Shape{2, 2});
  for (int i = 0; i < 4; ++i) h.as<uint16_t>()[i] = static_cast<uint16_t>(0x3c00 + i);
  Tensor y = run1("Reshape", {}, {h, i64({4})});
  EXPECT_EQ(y.dtype(), DType::kFloat16);
  EXPECT_EQ(values<uint16_t>(y), (std::vector<uint16_t>{0x3c00, 0x3c01, 0x3c02, 0x3c03}));
  Tensor b = run1("Reshape", {}, {make<bool>({true, false, true, true}, Shape{4}), i64({2, 2})});
  EXPECT_EQ(values<bool>(b), (std::vector<bool>{true, false, true, true}));
}

TEST(TensorReshape, Errors) {
  Tensor x = iota<float>(Shape{2, 3, 4});
  auto bad = run_op_once("Reshape", {}, {x, i64({5, 5})}, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("24"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(run_op_once("Reshape", {}, {x, i64({-1, -1})}, 1).ok());
  EXPECT_FALSE(run_op_once("Reshape", {}, {x, i64({-1, 5})}, 1).ok());
  EXPECT_FALSE(run_op_once("Reshape", {}, {x, i64({-2, 12})}, 1).ok());
  EXPECT_FALSE(run_op_once("Reshape", {}, {x, i64({2, 3, 4, 0})}, 1).ok());  // 0 copies a missing dim
  EXPECT_FALSE(run_op_once("Reshape", {}, {x, make<float>({24}, Shape{1})}, 1).ok());
  EXPECT_FALSE(run_op_once("Reshape", {{"allowzero", Attribute::Int(1)}}, {x, i64({0, -1})}, 1).ok());
}

// ---- Flatten, Squeeze, Unsqueeze ----

TEST(TensorFlatten, Axes) {
  Tensor x = iota<int16_t>(Shape{2, 3, 4});
  EXPECT_EQ(shape_of("Flatten", {}, {x}), (Shape{2, 12}));
  EXPECT_EQ(shape_of("Flatten", {{"axis", Attribute::Int(0)}}, {x}), (Shape{1, 24}));
  EXPECT_EQ(shape_of("Flatten", {{"axis", Attribute::Int(3)}}, {x}), (Shape{24, 1}));
  EXPECT_EQ(shape_of("Flatten", {{"axis", Attribute::Int(-1)}}, {x}), (Shape{6, 4}));
  EXPECT_EQ(shape_of("Flatten", {{"axis", Attribute::Int(-3)}}, {x}), (Shape{1, 24}));
  EXPECT_EQ(shape_of("Flatten", {}, {Tensor::zeros(DType::kFloat32, Shape{0, 5})}), (Shape{0, 5}));
  EXPECT_EQ(values<int16_t>(run1("Flatten", {}, {x})), values<int16_t>(x));
  EXPECT_FALSE(run_op_once("Flatten", {{"axis", Attribute::Int(4)}}, {x}, 1).ok());
  EXPECT_FALSE(run_op_once("Flatten", {{"axis", Attribute::Int(-4)}}, {x}, 1).ok());
}

TEST(TensorSqueeze, AxesInputAttributeAndAll) {
  Tensor x = iota<float>(Shape{1, 3, 1, 2});
  EXPECT_EQ(shape_of("Squeeze", {}, {x}), (Shape{3, 2}));
  EXPECT_EQ(shape_of("Squeeze", {}, {x, i64({-2})}), (Shape{1, 3, 2}));
  EXPECT_EQ(shape_of("Squeeze", {}, {x, i64({2, 0})}), (Shape{3, 2}));
  EXPECT_EQ(shape_of("Squeeze", {}, {x, i64({})}), (Shape{3, 2}));
  EXPECT_EQ(shape_of("Squeeze", {{"axes", Attribute::Ints({0})}}, {x}, 11), (Shape{3, 1, 2}));
  EXPECT_EQ(values<float>(run1("Squeeze", {}, {x})), values<float>(x));
  EXPECT_EQ(shape_of("Squeeze", {}, {Tensor::zeros(DType::kInt64, Shape{1})}), (Shape{}));
  EXPECT_FALSE(run_op_once("Squeeze", {}, {x, i64({1})}, 1).ok());  // dim of size 3
  EXPECT_FALSE(run_op_once("Squeeze", {}, {x, i64({4})}, 1).ok());
}

TEST(TensorUnsqueeze, AxesAgainstOutputRank) {
  Tensor x = iota<int32_t>(Shape{3, 4});
  EXPECT_EQ(shape_of("Unsqueeze", {}, {x, i64({0, -1})}), (Shape{1, 3, 4, 1}));
  EXPECT_EQ(shape_of("Unsqueeze", {}, {iota<int32_t>(Shape{2, 3}), i64({3, 1})}), (Shape{2, 1, 3, 1}));
  EXPECT_EQ(shape_of("Unsqueeze", {}, {make<float>({5}, Shape{}), i64({0})}), (Shape{1}));
  EXPECT_EQ(shape_of("Unsqueeze", {{"axes", Attribute::Ints({1})}}, {x}, 11), (Shape{3, 1, 4}));
  EXPECT_EQ(shape_of("Unsqueeze", {}, {Tensor::zeros(DType::kBool, Shape{0}), i64({1})}), (Shape{0, 1}));
  EXPECT_FALSE(run_op_once("Unsqueeze", {}, {x, i64({1, 1})}, 1).ok());
  EXPECT_FALSE(run_op_once("Unsqueeze", {}, {x, i64({3})}, 1).ok());
  EXPECT_FALSE(run_op_once("Unsqueeze", {}, {x}, 1).ok());
}

// ---- Identity, Dropout ----

TEST(TensorIdentity, CopiesAnyDtype) {
  Tensor b = run1("Identity", {}, {make<bool>({true, false}, Shape{2})});
  EXPECT_EQ(values<bool>(b), (std::vector<bool>{true, false}));
  Tensor u = run1("Identity", {}, {make<uint64_t>({1, ~uint64_t{0}}, Shape{2, 1})});
  EXPECT_EQ(u.shape(), (Shape{2, 1}));
  EXPECT_EQ(values<uint64_t>(u), (std::vector<uint64_t>{1, ~uint64_t{0}}));
}

TEST(TensorDropout, InferenceAndMask) {
  Tensor x = make<float>({1, -2, 3}, Shape{3});
  auto r = run_op_once("Dropout", {{"seed", Attribute::Int(3)}}, {x, make<float>({0.3f}, Shape{})}, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(values<float>((*r)[0]), (std::vector<float>{1, -2, 3}));
  EXPECT_EQ((*r)[1].dtype(), DType::kBool);
  EXPECT_EQ(values<bool>((*r)[1]), (std::vector<bool>{true, true, true}));
  // training_mode=true is fine with ratio 0 and unsupported otherwise.
  Tensor on = make<bool>({true}, Shape{});
  EXPECT_TRUE(run_op_once("Dropout", {}, {x, make<float>({0.0f}, Shape{}), on}, 1).ok());
  auto t = run_op_once("Dropout", {}, {x, make<float>({0.5f}, Shape{}), on}, 1);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_FALSE(run_op_once("Dropout", {}, {x, Tensor(), on}, 1).ok());  // default ratio 0.5
  // Opset 7: ratio attribute, mask of the input's dtype.
  auto old = run_op_once("Dropout", {{"ratio", Attribute::Float(0.2f)}}, {make<double>({4}, Shape{1})}, 2, {}, 7);
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_EQ((*old)[1].dtype(), DType::kFloat64);
  EXPECT_EQ(values<double>((*old)[1]), (std::vector<double>{1.0}));
}

// ---- Constant, ConstantOfShape ----

TEST(TensorConstant, ValueAttributes) {
  Tensor a = run1("Constant", {{"value_ints", Attribute::Ints({3, -1})}}, {});
  EXPECT_EQ(a.dtype(), DType::kInt64);
  EXPECT_EQ(values<int64_t>(a), v64({3, -1}));
  Tensor f = run1("Constant", {{"value_float", Attribute::Float(2.5f)}}, {});
  EXPECT_EQ(f.shape(), (Shape{}));
  EXPECT_EQ(*f.as<float>(), 2.5f);
  Tensor i = run1("Constant", {{"value_int", Attribute::Int(7)}}, {});
  EXPECT_EQ(*i.as<int64_t>(), 7);
  Tensor fs = run1("Constant", {{"value_floats", Attribute::Floats({1, 2})}}, {});
  EXPECT_EQ(values<float>(fs), (std::vector<float>{1, 2}));
  Tensor t = run1("Constant", {{"value", Attribute::TensorValue(make<int8_t>({1, 2, 3, 4}, Shape{2, 2}))}}, {});
  EXPECT_EQ(t.dtype(), DType::kInt8);
  EXPECT_EQ(t.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<int8_t>(t), (std::vector<int8_t>{1, 2, 3, 4}));
  auto s = run_op_once("Constant", {{"value_string", Attribute::String("x")}}, {}, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnimplemented);
  EXPECT_FALSE(run_op_once("Constant", {}, {}, 1).ok());
  EXPECT_FALSE(run_op_once("Constant", {{"value_int", Attribute::Int(1)}, {"value_float", Attribute::Float(1)}}, {}, 1).ok());
}

TEST(TensorConstantOfShape, DefaultAndValue) {
  Tensor z = run1("ConstantOfShape", {}, {i64({2, 3})});
  EXPECT_EQ(z.dtype(), DType::kFloat32);
  EXPECT_EQ(values<float>(z), (std::vector<float>(6, 0.0f)));
  Tensor v = run1("ConstantOfShape", {{"value", Attribute::TensorValue(make<int32_t>({7}, Shape{1}))}}, {i64({3})});
  EXPECT_EQ(v.dtype(), DType::kInt32);
  EXPECT_EQ(values<int32_t>(v), (std::vector<int32_t>{7, 7, 7}));
  EXPECT_EQ(run1("ConstantOfShape", {}, {i64({0})}).shape(), (Shape{0}));
  EXPECT_EQ(run1("ConstantOfShape", {}, {i64({})}).shape(), (Shape{}));
  EXPECT_FALSE(run_op_once("ConstantOfShape", {}, {i64({2, -1})}, 1).ok());
  EXPECT_FALSE(run_op_once("ConstantOfShape", {{"value", Attribute::TensorValue(make<float>({1, 2}, Shape{2}))}},
                           {i64({2})}, 1).ok());
}

// ---- Range ----

TEST(TensorRange, TypesAndSigns) {
  Tensor f = run1("Range", {}, {make<float>({1}, Shape{}), make<float>({2.5f}, Shape{}), make<float>({0.5f}, Shape{})});
  EXPECT_EQ(values<float>(f), (std::vector<float>{1.0f, 1.5f, 2.0f}));
  Tensor i = run1("Range", {}, {make<int32_t>({10}, Shape{}), make<int32_t>({4}, Shape{}), make<int32_t>({-3}, Shape{})});
  EXPECT_EQ(values<int32_t>(i), (std::vector<int32_t>{10, 7}));
  Tensor e = run1("Range", {}, {make<int64_t>({0}, Shape{}), make<int64_t>({0}, Shape{}), make<int64_t>({1}, Shape{})});
  EXPECT_EQ(e.shape(), (Shape{0}));
  Tensor w = run1("Range", {}, {make<int64_t>({5}, Shape{}), make<int64_t>({9}, Shape{}), make<int64_t>({-1}, Shape{})});
  EXPECT_EQ(w.shape(), (Shape{0}));
  EXPECT_FALSE(run_op_once("Range", {}, {make<int64_t>({0}, Shape{}), make<int64_t>({3}, Shape{}), make<int64_t>({0}, Shape{})}, 1).ok());
  EXPECT_FALSE(run_op_once("Range", {}, {make<int64_t>({0}, Shape{}), make<int32_t>({3}, Shape{}), make<int64_t>({1}, Shape{})}, 1).ok());
}

// ---- EyeLike, Trilu ----

TEST(TensorEyeLike, OffsetsAndDtype) {
  Tensor y = run1("EyeLike", {{"k", Attribute::Int(1)}}, {Tensor::zeros(DType::kFloat32, Shape{3, 4})});
  EXPECT_EQ(values<float>(y), (std::vector<float>{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
  Tensor d = run1("EyeLike", {{"k", Attribute::Int(-2)}, {"dtype", Attribute::Int(7)}}, {Tensor::zeros(DType::kInt32, Shape{3, 2})});
  EXPECT_EQ(d.dtype(), DType::kInt64);
  EXPECT_EQ(values<int64_t>(d), v64({0, 0, 0, 0, 1, 0}));
  EXPECT_FALSE(run_op_once("EyeLike", {}, {Tensor::zeros(DType::kFloat32, Shape{3})}, 1).ok());
}

TEST(TensorTrilu, UpperLowerAndK) {
  Tensor x = iota<int64_t>(Shape{3, 4});
  EXPECT_EQ(values<int64_t>(run1("Trilu", {}, {x, make<int64_t>({1}, Shape{})})), v64({0, 1, 2, 3, 0, 0, 6, 7, 0, 0, 0, 11}));
  EXPECT_EQ(values<int64_t>(run1("Trilu", {{"upper", Attribute::Int(0)}}, {x, make<int64_t>({-1}, Shape{})})),
            v64({0, 0, 0, 0, 4, 0, 0, 0, 8, 9, 0, 0}));
  EXPECT_EQ(values<int64_t>(run1("Trilu", {}, {x, make<int64_t>({-1}, Shape{})})), v64({0, 1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11}));
  EXPECT_EQ(values<int64_t>(run1("Trilu", {{"upper", Attribute::Int(0)}}, {x, make<int64_t>({5}, Shape{})})),
            values<int64_t>(x));
  EXPECT_EQ(values<int32_t>(run1("Trilu", {{"upper", Attribute::Int(0)}}, {iota<int32_t>(Shape{2, 2, 3})})),
            (std::vector<int32_t>{0, 0, 0, 3, 4, 0, 6, 0, 0, 9, 10, 0}));
  EXPECT_EQ(run1("Trilu", {}, {Tensor::zeros(DType::kFloat32, Shape{0, 3, 3})}).shape(), (Shape{0, 3, 3}));
  EXPECT_FALSE(run_op_once("Trilu", {}, {iota<float>(Shape{3})}, 1).ok());
}

}  // namespace
}  // namespace kiln
