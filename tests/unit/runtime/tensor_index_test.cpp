// Index-driven and value-dependent ops of the tensor family. Expected values come from numpy
// (np.take, np.take_along_axis, np.unique, np.nonzero, np.compress) and the ONNX operator examples.
#include <gtest/gtest.h>

#include "runtime/kernel_runner.h"

namespace kiln {
namespace {

template <typename T>
Tensor make(std::vector<T> v, Shape s) {
  return Tensor::from_vector<T>(v, s);
}
Tensor i64(std::vector<int64_t> v, Shape s) { return Tensor::from_vector<int64_t>(v, s); }
Tensor i64(std::vector<int64_t> v) { return i64(v, Shape{static_cast<int64_t>(v.size())}); }
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

// ---- Gather ----

TEST(TensorGather, AxesAndNegativeIndices) {
  Tensor d = iota<int64_t>(Shape{3, 4});
  Tensor y = run1("Gather", {{"axis", Attribute::Int(1)}}, {d, i64({-1, 0, 2, 2}, Shape{2, 2})});
  EXPECT_EQ(y.shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(values<int64_t>(y), v64({3, 0, 2, 2, 7, 4, 6, 6, 11, 8, 10, 10}));
  Tensor y0 = run1("Gather", {}, {d, make<int32_t>({2, -3}, Shape{2})});
  EXPECT_EQ(values<int64_t>(y0), v64({8, 9, 10, 11, 0, 1, 2, 3}));
  // Scalar index drops the axis.
  Tensor s = run1("Gather", {{"axis", Attribute::Int(-1)}}, {d, i64({1}, Shape{})});
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(values<int64_t>(s), v64({1, 5, 9}));
}

TEST(TensorGather, BoolFloat16AndEmpty) {
  Tensor b = run1("Gather", {}, {make<bool>({true, false, true}, Shape{3}), i64({1, 2, 1})});
  EXPECT_EQ(values<bool>(b), (std::vector<bool>{false, true, false}));
  Tensor h = Tensor::zeros(DType::kFloat16, Shape{2});
  h.as<uint16_t>()[1] = 0x3c00;
  Tensor hy = run1("Gather", {}, {h, i64({1, 1})});
  EXPECT_EQ(hy.dtype(), DType::kFloat16);
  EXPECT_EQ(values<uint16_t>(hy), (std::vector<uint16_t>{0x3c00, 0x3c00}));
  Tensor e = run1("Gather", {}, {iota<float>(Shape{3, 2}), i64({}, Shape{0})});
  EXPECT_EQ(e.shape(), (Shape{0, 2}));
}

TEST(TensorGather, OutOfRangeIndexIsNamed) {
  auto r = run_op_once("Gather", {}, {iota<float>(Shape{3, 2}), i64({0, 3})}, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("index 3"), std::string::npos) << r.status().message();
  EXPECT_FALSE(run_op_once("Gather", {}, {iota<float>(Shape{3}), i64({-4})}, 1).ok());
  EXPECT_FALSE(run_op_once("Gather", {{"axis", Attribute::Int(1)}}, {iota<float>(Shape{3}), i64({0})}, 1).ok());
  EXPECT_FALSE(run_op_once("Gather", {}, {iota<float>(Shape{3}), make<float>({0}, Shape{1})}, 1).ok());
}

TEST(TensorGatherElements, Axes) {
  Tensor d = iota<int32_t>(Shape{3, 4});
  Tensor y = run1("GatherElements", {}, {d, i64({0, -1, 1, 2, 2, 0, 0, -3}, Shape{2, 4})});
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{0, 9, 6, 11, 8, 1, 2, 3}));
  Tensor y1 = run1("GatherElements", {{"axis", Attribute::Int(-1)}}, {d, i64({3, 0, 1, 1, -1, 2}, Shape{3, 2})});
  EXPECT_EQ(values<int32_t>(y1), (std::vector<int32_t>{3, 0, 5, 5, 11, 10}));
  EXPECT_FALSE(run_op_once("GatherElements", {}, {d, i64({3, 0, 0, 0}, Shape{1, 4})}, 1).ok());
  EXPECT_FALSE(run_op_once("GatherElements", {}, {d, i64({0}, Shape{1})}, 1).ok());  // rank mismatch
}

TEST(TensorGatherND, BatchDimsAndSlices) {
  Tensor d = iota<float>(Shape{2, 3, 4});
  Tensor y = run1("GatherND", {{"batch_dims", Attribute::Int(1)}}, {d, i64({1, 2, 0, -1}, Shape{2, 1, 2})});
  EXPECT_EQ(y.shape(), (Shape{2, 1}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{6, 15}));
  Tensor s = run1("GatherND", {}, {d, i64({1, 0}, Shape{2, 1})});
  EXPECT_EQ(s.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(std::vector<float>(s.as<float>(), s.as<float>() + 4), (std::vector<float>{12, 13, 14, 15}));
  EXPECT_FALSE(run_op_once("GatherND", {}, {d, i64({2}, Shape{1, 1})}, 1).ok());
  EXPECT_FALSE(run_op_once("GatherND", {}, {d, i64({0, 0, 0, 0}, Shape{1, 4})}, 1).ok());
  EXPECT_FALSE(run_op_once("GatherND", {{"batch_dims", Attribute::Int(1)}}, {d, i64({0, 0, 0}, Shape{3, 1})}, 1).ok());
}

// ---- Scatter family ----

TEST(TensorScatterElements, NoneAddMul) {
  Tensor y = run1("ScatterElements", {},
                  {Tensor::zeros(DType::kFloat32, Shape{3, 3}), i64({1, 0, 2, 0, 2, 1}, Shape{2, 3}),
                   make<float>({1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f}, Shape{2, 3})});
  EXPECT_EQ(values<float>(y), (std::vector<float>{2.0f, 1.1f, 0, 1.0f, 0, 2.2f, 0, 2.1f, 1.2f}));
  Tensor x = make<double>({1, 2, 3, 4, 5}, Shape{1, 5});
  Tensor idx = i64({1, 1, -1}, Shape{1, 3});
  Tensor upd = make<double>({1.1, 2.1, 3.0}, Shape{1, 3});
  Tensor a = run1("ScatterElements", {{"axis", Attribute::Int(1)}, {"reduction", Attribute::String("add")}}, {x, idx, upd});
  EXPECT_EQ(values<double>(a), (std::vector<double>{1, 2 + 1.1 + 2.1, 3, 4, 8}));
  Tensor m = run1("ScatterElements", {{"axis", Attribute::Int(1)}, {"reduction", Attribute::String("mul")}}, {x, idx, upd});
  EXPECT_EQ(values<double>(m), (std::vector<double>{1, 2 * 1.1 * 2.1, 3, 4, 15}));
  // Deprecated Scatter behaves like ScatterElements without reduction.
  Tensor s = run1("Scatter", {{"axis", Attribute::Int(1)}}, {x, idx, upd}, 10);
  EXPECT_EQ(values<double>(s), (std::vector<double>{1, 2.1, 3, 4, 3.0}));
}

TEST(TensorScatterElements, MaxMinAndFloat16Add) {
  Tensor x = make<int64_t>({1, 5, 3}, Shape{3});
  Tensor idx = i64({0, 1, 1});
  Tensor upd = make<int64_t>({4, 2, 7}, Shape{3});
  EXPECT_EQ(values<int64_t>(run1("ScatterElements", {{"reduction", Attribute::String("max")}}, {x, idx, upd}, 18)),
            v64({4, 7, 3}));
  EXPECT_EQ(values<int64_t>(run1("ScatterElements", {{"reduction", Attribute::String("min")}}, {x, idx, upd}, 18)),
            v64({1, 2, 3}));
  // float16 goes through float: 1 + 0.5 + 0.5 = 2 (0x4000), untouched 3 stays 0x4200.
  Tensor h = Tensor::zeros(DType::kFloat16, Shape{2});
  h.as<uint16_t>()[0] = 0x3c00;
  h.as<uint16_t>()[1] = 0x4200;
  Tensor hu = Tensor::zeros(DType::kFloat16, Shape{2});
  hu.as<uint16_t>()[0] = hu.as<uint16_t>()[1] = 0x3800;
  Tensor y = run1("ScatterElements", {{"reduction", Attribute::String("add")}}, {h, i64({0, 0}), hu});
  EXPECT_EQ(values<uint16_t>(y), (std::vector<uint16_t>{0x4000, 0x4200}));
}

TEST(TensorScatterElements, Errors) {
  Tensor x = iota<float>(Shape{2, 2});
  EXPECT_FALSE(run_op_once("ScatterElements", {}, {x, i64({2}, Shape{1, 1}), make<float>({1}, Shape{1, 1})}, 1).ok());
  EXPECT_FALSE(run_op_once("ScatterElements", {{"reduction", Attribute::String("avg")}},
                           {x, i64({0}, Shape{1, 1}), make<float>({1}, Shape{1, 1})}, 1).ok());
  EXPECT_FALSE(run_op_once("ScatterElements", {}, {x, i64({0}, Shape{1, 1}), make<double>({1}, Shape{1, 1})}, 1).ok());
  EXPECT_FALSE(run_op_once("ScatterElements", {}, {x, i64({0, 0}, Shape{1, 2}), make<float>({1}, Shape{1, 1})}, 1).ok());
}

TEST(TensorScatterND, NoneAddMulAndSlices) {
  Tensor d = make<int32_t>({1, 2, 3, 4, 5, 6, 7, 8}, Shape{8});
  Tensor y = run1("ScatterND", {}, {d, i64({4, 3, 1, 7}, Shape{4, 1}), make<int32_t>({9, 10, 11, 12}, Shape{4})});
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{1, 11, 3, 10, 9, 6, 7, 12}));
  Tensor d4 = make<int32_t>({1, 2, 3, 4}, Shape{4});
  Tensor idx = i64({0, 0, -1}, Shape{3, 1});
  Tensor upd = make<int32_t>({5, 6, 7}, Shape{3});
  EXPECT_EQ(values<int32_t>(run1("ScatterND", {{"reduction", Attribute::String("add")}}, {d4, idx, upd})),
            (std::vector<int32_t>{12, 2, 3, 11}));
  EXPECT_EQ(values<int32_t>(run1("ScatterND", {{"reduction", Attribute::String("mul")}}, {d4, idx, upd})),
            (std::vector<int32_t>{30, 2, 3, 28}));
  Tensor row = run1("ScatterND", {}, {Tensor::zeros(DType::kInt8, Shape{2, 3}), i64({1}, Shape{1, 1}),
                                      make<int8_t>({7, 8, 9}, Shape{1, 3})});
  EXPECT_EQ(values<int8_t>(row), (std::vector<int8_t>{0, 0, 0, 7, 8, 9}));
  EXPECT_FALSE(run_op_once("ScatterND", {}, {d4, i64({4}, Shape{1, 1}), make<int32_t>({1}, Shape{1})}, 1).ok());
  EXPECT_FALSE(run_op_once("ScatterND", {}, {d4, i64({0}, Shape{1, 1}), make<int32_t>({1, 2}, Shape{2})}, 1).ok());
}

// ---- OneHot, ReverseSequence ----

TEST(TensorOneHot, AxesAndNegativeIndices) {
  Tensor ind = make<float>({0, -1, 5, 2}, Shape{4});
  Tensor depth = make<float>({4}, Shape{});
  Tensor vals = i64({0, 1});
  Tensor y = run1("OneHot", {}, {ind, depth, vals});
  EXPECT_EQ(y.shape(), (Shape{4, 4}));
  EXPECT_EQ(values<int64_t>(y), v64({1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0}));
  Tensor y0 = run1("OneHot", {{"axis", Attribute::Int(0)}}, {i64({1, 3}), i64({4}, Shape{1}), make<float>({-1, 2}, Shape{2})});
  EXPECT_EQ(y0.shape(), (Shape{4, 2}));
  EXPECT_EQ(values<float>(y0), (std::vector<float>{-1, -1, 2, -1, -1, -1, -1, 2}));
  EXPECT_FALSE(run_op_once("OneHot", {}, {ind, make<float>({0}, Shape{}), vals}, 1).ok());
  EXPECT_FALSE(run_op_once("OneHot", {}, {ind, depth, i64({0, 1, 2})}, 1).ok());
  EXPECT_FALSE(run_op_once("OneHot", {{"axis", Attribute::Int(2)}}, {ind, depth, vals}, 1).ok());
}

TEST(TensorReverseSequence, TimeMajorAndBatchMajor) {
  Tensor x = make<float>({0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15}, Shape{4, 4});
  Tensor y = run1("ReverseSequence", {}, {x, i64({4, 3, 2, 1})});
  EXPECT_EQ(values<float>(y), (std::vector<float>{3, 6, 9, 12, 2, 5, 8, 13, 1, 4, 10, 14, 0, 7, 11, 15}));
  Tensor b = run1("ReverseSequence", {{"batch_axis", Attribute::Int(0)}, {"time_axis", Attribute::Int(1)}},
                  {iota<int64_t>(Shape{2, 3, 2}), i64({2, 3})});
  EXPECT_EQ(values<int64_t>(b), v64({2, 3, 0, 1, 4, 5, 10, 11, 8, 9, 6, 7}));
  EXPECT_FALSE(run_op_once("ReverseSequence", {}, {x, i64({5, 1, 1, 1})}, 1).ok());
  EXPECT_FALSE(run_op_once("ReverseSequence", {}, {x, i64({1, 1})}, 1).ok());
  EXPECT_FALSE(run_op_once("ReverseSequence", {{"batch_axis", Attribute::Int(2)}}, {x, i64({1, 1, 1, 1})}, 1).ok());
}

// ---- Compress, NonZero, Unique ----

TEST(TensorCompress, AxisAndFlattened) {
  Tensor d = iota<int64_t>(Shape{3, 4});
  Tensor y = run1("Compress", {{"axis", Attribute::Int(1)}}, {d, make<bool>({false, true, false, true}, Shape{4})});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<int64_t>(y), v64({1, 3, 5, 7, 9, 11}));
  Tensor f = run1("Compress", {}, {d, make<bool>({true, false, true}, Shape{3})});
  EXPECT_EQ(values<int64_t>(f), v64({0, 2}));
  Tensor n = run1("Compress", {{"axis", Attribute::Int(-2)}}, {d, make<bool>({false, true}, Shape{2})});
  EXPECT_EQ(values<int64_t>(n), v64({4, 5, 6, 7}));
  Tensor none = run1("Compress", {{"axis", Attribute::Int(0)}}, {d, make<bool>({false}, Shape{1})});
  EXPECT_EQ(none.shape(), (Shape{0, 4}));
  EXPECT_FALSE(run_op_once("Compress", {{"axis", Attribute::Int(0)}}, {d, make<bool>({0, 0, 0, 1}, Shape{4})}, 1).ok());
}

TEST(TensorNonZero, FloatBoolAndEmpty) {
  Tensor y = run1("NonZero", {}, {make<float>({0, 1.5f, -0.0f, -2, 0, 3}, Shape{2, 3})});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>(y), v64({0, 1, 1, 1, 0, 2}));
  Tensor b = run1("NonZero", {}, {make<bool>({false, true, true}, Shape{3})});
  EXPECT_EQ(values<int64_t>(b), v64({1, 2}));
  Tensor e = run1("NonZero", {}, {Tensor::zeros(DType::kInt32, Shape{2, 0, 3})});
  EXPECT_EQ(e.shape(), (Shape{3, 0}));
}

TEST(TensorUnique, SortedAndUnsortedFlattened) {
  Tensor x = make<float>({2, 1, 1, 3, 4, 3}, Shape{6});
  auto r = run_op_once("Unique", {}, {x}, 4);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(values<float>((*r)[0]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(values<int64_t>((*r)[1]), v64({1, 0, 3, 4}));
  EXPECT_EQ(values<int64_t>((*r)[2]), v64({1, 0, 0, 2, 3, 2}));
  EXPECT_EQ(values<int64_t>((*r)[3]), v64({2, 1, 2, 1}));
  auto u = run_op_once("Unique", {{"sorted", Attribute::Int(0)}}, {x}, 4);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(values<float>((*u)[0]), (std::vector<float>{2, 1, 3, 4}));
  EXPECT_EQ(values<int64_t>((*u)[1]), v64({0, 1, 3, 4}));
  EXPECT_EQ(values<int64_t>((*u)[2]), v64({0, 1, 1, 2, 3, 2}));
  EXPECT_EQ(values<int64_t>((*u)[3]), v64({1, 2, 2, 1}));
}

TEST(TensorUnique, WithAxis) {
  auto r = run_op_once("Unique", {{"axis", Attribute::Int(0)}}, {i64({1, 0, 0, 1, 0, 0, 2, 3, 4}, Shape{3, 3})}, 4);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>((*r)[0]), v64({1, 0, 0, 2, 3, 4}));
  EXPECT_EQ(values<int64_t>((*r)[1]), v64({0, 2}));
  EXPECT_EQ(values<int64_t>((*r)[2]), v64({0, 0, 1}));
  EXPECT_EQ(values<int64_t>((*r)[3]), v64({2, 1}));
  Tensor b = make<int32_t>({1, 1, 0, 1, 2, 1, 0, 1, 1, 1, 0, 1, 2, 1, 0, 1}, Shape{2, 4, 2});
  auto n = run_op_once("Unique", {{"axis", Attribute::Int(-2)}}, {b}, 4);
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ((*n)[0].shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values<int32_t>((*n)[0]), (std::vector<int32_t>{0, 1, 1, 1, 2, 1, 0, 1, 1, 1, 2, 1}));
  EXPECT_EQ(values<int64_t>((*n)[1]), v64({1, 0, 2}));
  EXPECT_EQ(values<int64_t>((*n)[2]), v64({1, 0, 2, 0}));
  EXPECT_EQ(values<int64_t>((*n)[3]), v64({2, 1, 1}));
  // Only the first output requested.
  auto one = run_op_once("Unique", {}, {make<int8_t>({3, 3, 3}, Shape{3})}, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(values<int8_t>((*one)[0]), (std::vector<int8_t>{3}));
  EXPECT_FALSE(run_op_once("Unique", {{"axis", Attribute::Int(2)}}, {iota<float>(Shape{2, 2})}, 4).ok());
}

}  // namespace
}  // namespace kiln
