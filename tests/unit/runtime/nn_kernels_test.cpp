// Reference nn kernels against values computed offline with numpy/PyTorch (and the ONNX numpy
// reference for Resize). Inputs are exact patterns: pat(n, mul, mod, scale, off)[i] = ((i*mul)%mod - off)*scale.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/kernel_runner.h"

namespace kiln {
namespace {

std::vector<float> pat(int n, int mul = 7, int mod = 11, float scale = 0.25f, int off = 5) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>((i * mul) % mod - off) * scale;
  return v;
}
Tensor F(const std::vector<float>& v, Shape s) { return Tensor::from_vector<float>(v, s); }
Tensor I64(const std::vector<int64_t>& v, Shape s) { return Tensor::from_vector<int64_t>(v, s); }

std::vector<Tensor> run(const std::string& op, const AttrMap& attrs, const std::vector<Tensor>& in, int nout = 1,
                        int opset = 17) {
  auto r = run_op_once(op, attrs, in, nout, "reference", opset);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : std::vector<Tensor>{};
}

void expect_values(const Tensor& t, const Shape& shape, const std::vector<double>& want, double tol = 1e-5) {
  ASSERT_EQ(t.shape(), shape);
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(read_double(t.view(), i), want[i], tol * (1 + std::abs(want[i]))) << "element " << i;
}

bool fails(const std::string& op, const AttrMap& attrs, const std::vector<Tensor>& in, int nout = 1) {
  return !run_op_once(op, attrs, in, nout, "reference").ok();
}

// ---- MatMul / Gemm ------------------------------------------------------------------------------

TEST(NnMatMul, BatchBroadcast) {
  auto y = run("MatMul", {}, {F(pat(12), {2, 1, 2, 3}), F(pat(18, 5, 13, 0.5f, 6), {3, 3, 2})});
  expect_values(y[0], Shape{2, 3, 2, 2},
                {4.5, -1.875, -3.625, -3.375, -1.25, -1.125, -3.75, 3, -0.5, 4.5, 2.625, -3.625,
                 -3.5, -3.5, -3.375, -3.625, -3.5, 3, -3.25, 3, 3, -3.5, 3.375, -3.375});
}

TEST(NnMatMul, OneDimensionalOperands) {
  auto dot = run("MatMul", {}, {F({1, 2, 3}, {3}), F({4, 5, 6}, {3})});
  expect_values(dot[0], Shape{}, {32});
  auto vm = run("MatMul", {}, {F({1, 2}, {2}), F({1, 2, 3, 4, 5, 6}, {2, 3})});
  expect_values(vm[0], Shape{3}, {9, 12, 15});
  auto mv = run("MatMul", {}, {F({1, 2, 3, 4, 5, 6}, {2, 3}), F({1, 0, -1}, {3})});
  expect_values(mv[0], Shape{2}, {-2, -2});
  auto bmv = run("MatMul", {}, {F({1, 2, 3, 4}, {2, 1, 2}), F({1, 1}, {2})});
  expect_values(bmv[0], Shape{2, 1}, {3, 7});
}

TEST(NnMatMul, IntegerAndZeroSize) {
  auto y = run("MatMul", {}, {I64({1, 2, 3, 4}, {2, 2}), I64({5, 6, 7, 8}, {2, 2})});
  ASSERT_EQ(y[0].dtype(), DType::kInt64);
  expect_values(y[0], Shape{2, 2}, {19, 22, 43, 50});
  auto k0 = run("MatMul", {}, {F({}, {2, 0}), F({}, {0, 3})});
  expect_values(k0[0], Shape{2, 3}, {0, 0, 0, 0, 0, 0});
  auto m0 = run("MatMul", {}, {F({}, {0, 2, 4}), F(pat(8), {4, 2})});
  EXPECT_EQ(m0[0].shape(), (Shape{0, 2, 2}));
}

TEST(NnMatMul, Errors) {
  EXPECT_TRUE(fails("MatMul", {}, {F(pat(6), {2, 3}), F(pat(8), {4, 2})}));
  EXPECT_TRUE(fails("MatMul", {}, {F(pat(12), {2, 2, 3}), F(pat(18), {3, 3, 2})}));
  EXPECT_TRUE(fails("MatMul", {}, {F(pat(6), {2, 3}), I64({1, 2, 3}, {3, 1})}));
}

TEST(NnGemm, TransposesAlphaBetaBroadcastC) {
  AttrMap attrs{{"transA", Attribute::Int(1)}, {"transB", Attribute::Int(1)},
                {"alpha", Attribute::Float(0.5f)}, {"beta", Attribute::Float(2.0f)}};
  auto y = run("Gemm", attrs, {F(pat(6), {3, 2}), F(pat(12, 5, 13, 0.5f, 6), {4, 3}), F({1, -2}, {2, 1})});
  expect_values(y[0], Shape{2, 4}, {4.25, 3.5, 1.9375, 1.1875, -5.8125, -5.3125, -2.375, -1.875});
}

TEST(NnGemm, NoBiasScalarBiasAndInt) {
  auto y = run("Gemm", {}, {F({1, 2, 3, 4}, {2, 2}), F({1, 0, 0, 1}, {2, 2})});
  expect_values(y[0], Shape{2, 2}, {1, 2, 3, 4});
  auto s = run("Gemm", {}, {F({1, 2, 3, 4}, {2, 2}), F({1, 0, 0, 1}, {2, 2}), F({10}, {})});
  expect_values(s[0], Shape{2, 2}, {11, 12, 13, 14});
  auto i = run("Gemm", {}, {Tensor::from_vector<int32_t>({1, 2, 3, 4}, {2, 2}),
                            Tensor::from_vector<int32_t>({2, 0, 0, 2}, {2, 2}),
                            Tensor::from_vector<int32_t>({1, 2}, {2})});
  expect_values(i[0], Shape{2, 2}, {3, 6, 7, 10});
}

TEST(NnGemm, Errors) {
  EXPECT_TRUE(fails("Gemm", {}, {F(pat(6), {2, 3}), F(pat(6), {2, 3})}));
  EXPECT_TRUE(fails("Gemm", {}, {F(pat(6), {2, 3}), F(pat(6), {3, 2}), F(pat(3), {3})}));
  EXPECT_TRUE(fails("Gemm", {{"transC", Attribute::Int(1)}}, {F(pat(6), {2, 3}), F(pat(6), {3, 2})}));
}

// ---- Conv / ConvTranspose -----------------------------------------------------------------------

TEST(NnConv, GroupedStridedDilatedPaddedWithBias) {
  AttrMap attrs{{"group", Attribute::Int(2)}, {"strides", Attribute::Ints({2, 1})},
                {"dilations", Attribute::Ints({1, 2})}, {"pads", Attribute::Ints({1, 0, 2, 1})}};
  std::vector<float> bias{0, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  auto y = run("Conv", attrs, {F(pat(120), {1, 4, 5, 6}), F(pat(72, 5, 13, 0.5f, 6), {6, 2, 3, 2}), F(bias, {6})});
  expect_values(y[0], Shape{1, 6, 3, 5},
                {2.75, -2, -4, 7.75, -0.875, -6.875, -3.125, 11.625, -6.625, -2.625, 0, 11, -6.875, 1.375, 3.625,
                 -5.525, 9.475, 1.1, -7.275, 1.225, 17.975, -1.4, -9.775, 10.725, 1.975, -3.275, -5.15, 8.1, -3.4,
                 -2.775, 5.7, -6.675, 2.95, -1.175, -1.55, -10.8, 6.825, -0.3, -6.05, 3.325, 6.45, -1.8, -4.55,
                 6.45, -2.675, -3.45, 15.3, -3.075, -4.95, 4.675, 14.8, -5.825, -5.825, 14.8, -0.7, -4.95, -3.075,
                 15.3, -3.45, -4.825, 6.65, -8.475, 6.65, -1.6, -1.475, -11.225, 13.775, -2.475, -7.725, 4.525,
                 11.4, 0.4, -7.85, 4.525, 0.775, -2.75, 1.875, -3.125, 0.125, 2.125, 5, -7.25, 2.5, -4.25, -3.25,
                 -4.75, 2.25, -1.75, 1.125, 1.5});
}

TEST(NnConv, OneDimensionalSameLower) {
  AttrMap attrs{{"auto_pad", Attribute::String("SAME_LOWER")}, {"strides", Attribute::Ints({2})},
                {"kernel_shape", Attribute::Ints({4})}};
  auto y = run("Conv", attrs, {F(pat(14), {1, 2, 7}), F(pat(24, 5, 13, 0.5f, 6), {3, 2, 4})});
  expect_values(y[0], Shape{1, 3, 4}, {-5, -4.125, 4.5, 3, -5.875, 2.125, 6.125, -0.625, -6.75, 1.875, 6.125, -1});
}

TEST(NnConv, ThreeDimensionalOnesKernel) {
  // A 2x2x2 ones kernel with VALID padding sums each 2x2x2 block of arange(27).
  std::vector<float> x(27);
  for (int i = 0; i < 27; ++i) x[i] = static_cast<float>(i);
  auto y = run("Conv", {{"auto_pad", Attribute::String("VALID")}},
               {F(x, {1, 1, 3, 3, 3}), F(std::vector<float>(8, 1.0f), {1, 1, 2, 2, 2})});
  expect_values(y[0], Shape{1, 1, 2, 2, 2}, {52, 60, 76, 84, 124, 132, 148, 156});
}

TEST(NnConv, ZeroBatchAndErrors) {
  auto y = run("Conv", {}, {F({}, {0, 2, 4, 4}), F(pat(36), {2, 2, 3, 3})});
  EXPECT_EQ(y[0].shape(), (Shape{0, 2, 2, 2}));
  EXPECT_TRUE(fails("Conv", {{"group", Attribute::Int(2)}}, {F(pat(48), {1, 3, 4, 4}), F(pat(27), {3, 1, 3, 3})}));
  EXPECT_TRUE(fails("Conv", {}, {F(pat(16), {1, 1, 4, 4}), F(pat(18), {1, 2, 3, 3})}));
  EXPECT_TRUE(fails("Conv", {}, {F(pat(4), {1, 1, 2, 2}), F(pat(9), {1, 1, 3, 3})}));
  EXPECT_TRUE(fails("Conv", {{"auto_pad", Attribute::String("BOGUS")}}, {F(pat(16), {1, 1, 4, 4}), F(pat(9), {1, 1, 3, 3})}));
}

TEST(NnConvTranspose, OneDimensionalGroupedOutputPaddingPads) {
  AttrMap attrs{{"group", Attribute::Int(2)}, {"strides", Attribute::Ints({2})},
                {"output_padding", Attribute::Ints({1})}, {"pads", Attribute::Ints({1, 0})}};
  auto y = run("ConvTranspose", attrs, {F(pat(12), {1, 4, 3}), F(pat(12, 5, 13, 0.5f, 6), {4, 1, 3})});
  expect_values(y[0], Shape{1, 2, 7}, {1.25, -0.75, -0.125, 4.75, -0.125, -3.25, 0, 3.375, -3.625, -0.625, 1.375,
                                       -4.625, 4.375, 0});
}

TEST(NnConvTranspose, OutputShapeAndErrors) {
  auto y = run("ConvTranspose", {{"output_shape", Attribute::Ints({5})}, {"strides", Attribute::Ints({2})}},
               {F({1, 2}, {1, 1, 2}), F({1, 1}, {1, 1, 2})});
  expect_values(y[0], Shape{1, 1, 5}, {1, 1, 2, 2, 0});
  EXPECT_TRUE(fails("ConvTranspose", {}, {F(pat(6), {1, 2, 3}), F(pat(3), {1, 1, 3})}));
}

// ---- Pools --------------------------------------------------------------------------------------

TEST(NnPool, MaxPoolCeilModeWithIndices) {
  AttrMap attrs{{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})},
                {"ceil_mode", Attribute::Int(1)}};
  auto y = run("MaxPool", attrs, {F(pat(50, 7, 23, 0.5f, 11), {1, 2, 5, 5})}, 2);
  expect_values(y[0], Shape{1, 2, 3, 3}, {4, 5, 3, 4.5, 5.5, 3.5, -1, 2.5, -2, 5, 3, 4, 5.5, 3.5, 4.5, 2.5, 1.5, 5});
  ASSERT_EQ(y[1].dtype(), DType::kInt64);
  expect_values(y[1], Shape{1, 2, 3, 3}, {6, 3, 9, 16, 13, 19, 21, 22, 24, 26, 32, 29, 36, 42, 39, 45, 48, 49});
}

TEST(NnPool, MaxPoolStorageOrderDilationsUint8) {
  // Column-major indices: element (h, w) of a 2x3 plane has index w*2 + h.
  AttrMap attrs{{"kernel_shape", Attribute::Ints({2, 2})}, {"storage_order", Attribute::Int(1)}};
  auto y = run("MaxPool", attrs, {F({1, 9, 2, 3, 4, 5}, {1, 1, 2, 3})}, 2);
  expect_values(y[0], Shape{1, 1, 1, 2}, {9, 9});
  expect_values(y[1], Shape{1, 1, 1, 2}, {2, 2});
  auto u = run("MaxPool", {{"kernel_shape", Attribute::Ints({2})}, {"dilations", Attribute::Ints({2})}},
               {Tensor::from_vector<uint8_t>({1, 200, 3, 7, 5}, {1, 1, 5})});
  ASSERT_EQ(u[0].dtype(), DType::kUInt8);
  expect_values(u[0], Shape{1, 1, 3}, {3, 200, 5});
}

TEST(NnPool, AveragePoolCountIncludePad) {
  AttrMap base{{"kernel_shape", Attribute::Ints({3, 3})}, {"strides", Attribute::Ints({2, 2})},
               {"pads", Attribute::Ints({1, 1, 1, 1})}};
  AttrMap incl = base;
  incl["count_include_pad"] = Attribute::Int(1);
  auto a = run("AveragePool", incl, {F(pat(20), {1, 1, 4, 5})});
  expect_values(a[0], Shape{1, 1, 2, 3}, {-0.05555556, 0.1388889, 0.1388889, -0.1944444, -0.1111111, -0.05555556});
  auto b = run("AveragePool", base, {F(pat(20), {1, 1, 4, 5})});
  expect_values(b[0], Shape{1, 1, 2, 3}, {-0.125, 0.2083333, 0.3125, -0.2916667, -0.1111111, -0.08333333});
}

TEST(NnPool, GlobalPoolsAndLpPool) {
  auto avg = run("GlobalAveragePool", {}, {F({1, 2, 3, 4, 5, 6}, {1, 2, 3})});
  expect_values(avg[0], Shape{1, 2, 1}, {2, 5});
  auto mx = run("GlobalMaxPool", {}, {F({1, 7, 3, 4, 5, 6, 0, 0}, {2, 1, 2, 2})});
  expect_values(mx[0], Shape{2, 1, 1, 1}, {7, 6});
  auto lp = run("LpPool", {{"kernel_shape", Attribute::Ints({2})}, {"p", Attribute::Int(2)}}, {F({3, 4, 0}, {1, 1, 3})});
  expect_values(lp[0], Shape{1, 1, 2}, {5, 4});
}

TEST(NnPool, Errors) {
  EXPECT_TRUE(fails("MaxPool", {}, {F(pat(16), {1, 1, 4, 4})}));
  EXPECT_TRUE(fails("MaxPool", {{"kernel_shape", Attribute::Ints({2})}}, {F(pat(16), {1, 1, 4, 4})}));
  EXPECT_TRUE(fails("AveragePool", {{"kernel_shape", Attribute::Ints({2, 2})}}, {I64({1, 2, 3, 4}, {1, 1, 2, 2})}));
}

// ---- Normalization ------------------------------------------------------------------------------

TEST(NnNorm, LayerNormAxis1WithStatistics) {
  std::vector<float> bias{0, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  auto y = run("LayerNormalization", {{"axis", Attribute::Int(1)}},
               {F(pat(12), {2, 3, 2}), F(pat(6, 5, 13, 0.5f, 6), {3, 2}), F(bias, {3, 2})}, 3);
  expect_values(y[0], Shape{2, 3, 2}, {4.179126, -0.2482605, -0.7950301, -2.884096, 0.599006, -1.888072, -4.08588,
                                       0.02433556, -1.918604, -1.818604, 0.3243356, -3.58588}, 1e-5);
  expect_values(y[1], Shape{2, 1, 1}, {-0.08333333, -0.125});
  expect_values(y[2], Shape{2, 1, 1}, {1.194036, 1.210631});
}

TEST(NnNorm, LayerNormLastAxisBroadcastScaleDouble) {
  // Row [1, 3]: mean 2, inverse std 1/sqrt(1 + eps) ~ 1.
  auto y = run("LayerNormalization", {{"axis", Attribute::Int(-1)}, {"epsilon", Attribute::Float(0)}},
               {F({1, 3, 10, 14}, {2, 2}), F({2, 2}, {2})});
  expect_values(y[0], Shape{2, 2}, {-2, 2, -2, 2});
  auto b = run("LayerNormalization", {}, {F({1, 3}, {2}), F({3}, {1})});  // scale broadcast over the row
  expect_values(b[0], Shape{2}, {-3, 3}, 1e-4);
  auto d = run("LayerNormalization", {{"epsilon", Attribute::Float(0)}},
               {Tensor::from_vector<double>({5, 7}, {1, 2}), Tensor::from_vector<double>({1, 1}, {2}),
                Tensor::from_vector<double>({1, 0}, {2})});
  ASSERT_EQ(d[0].dtype(), DType::kFloat64);
  expect_values(d[0], Shape{1, 2}, {0, 1});
  EXPECT_TRUE(fails("LayerNormalization", {{"axis", Attribute::Int(2)}}, {F(pat(4), {2, 2}), F(pat(2), {2})}));
  EXPECT_TRUE(fails("LayerNormalization", {}, {F(pat(4), {2, 2}), F(pat(3), {3})}));
}

TEST(NnNorm, BatchAndInstanceNorm) {
  auto bn = run("BatchNormalization", {{"epsilon", Attribute::Float(0)}},
                {F({1, 2, 3, 4}, {1, 2, 2}), F({1, 2}, {2}), F({0, 1}, {2}), F({1, 3}, {2}), F({4, 1}, {2})});
  expect_values(bn[0], Shape{1, 2, 2}, {0, 0.5, 1, 3});
  EXPECT_TRUE(fails("BatchNormalization", {{"training_mode", Attribute::Int(1)}},
                    {F({1, 2}, {1, 2}), F({1, 1}, {2}), F({0, 0}, {2}), F({0, 0}, {2}), F({1, 1}, {2})}));
  auto in = run("InstanceNormalization", {}, {F(pat(12), {2, 2, 3}), F({1.5f, -1}, {2}), F({0.5f, 0.25f}, {2})});
  expect_values(in[0], Shape{2, 2, 3}, {-1.243698, 2.418067, 0.3256302, -0.9747357, 0.25, 1.474736, 2.337104, 0.5,
                                        -1.337104, -0.9747357, 0.25, 1.474736}, 1e-5);
}

TEST(NnNorm, LrnAndMvn) {
  auto l = run("LRN", {{"size", Attribute::Int(3)}, {"alpha", Attribute::Float(0.1f)}, {"bias", Attribute::Float(2)}},
               {F(pat(8), {1, 4, 1, 2})});
  expect_values(l[0], Shape{1, 4, 1, 2}, {-0.7268482, 0.2907393, -0.290519, 0.7219266, 0.1462578, -0.4344626,
                                          0.5868269, 0}, 1e-5);
  auto m = run("MeanVarianceNormalization", {}, {F(pat(12), {2, 2, 1, 3})});
  expect_values(m[0], Shape{2, 2, 1, 3}, {-1.30856, 0.8898207, -0.3663967, 1.46385, 0.29277, -0.8783101, 1.517929,
                                          0.261712, -0.9945055, 0.8783101, -0.29277, -1.46385}, 1e-5);
  EXPECT_TRUE(fails("LRN", {}, {F(pat(8), {1, 4, 1, 2})}));
}

// ---- Resize -------------------------------------------------------------------------------------

TEST(NnResize, LinearHalfPixelScales) {
  auto y = run("Resize", {{"mode", Attribute::String("linear")}},
               {F(pat(12), {1, 1, 3, 4}), Tensor(), F({1, 1, 1.5f, 0.75f}, {4})});
  expect_values(y[0], Shape{1, 1, 4, 3}, {-0.9583333, 0, 0.9583333, -0.4375, 0.0625, 0.5625, -0.04861111, 0.1458333,
                                          -0.04166667, -0.5763889, 0.2291667, -0.875}, 1e-5);
}

TEST(NnResize, CubicAlignCornersSizes) {
  AttrMap attrs{{"mode", Attribute::String("cubic")}, {"cubic_coeff_a", Attribute::Float(-0.5f)},
                {"coordinate_transformation_mode", Attribute::String("align_corners")}};
  auto y = run("Resize", attrs, {F(pat(12), {1, 1, 3, 4}), Tensor(), Tensor(), I64({1, 1, 5, 3}, {4})});
  expect_values(y[0], Shape{1, 1, 5, 3}, {-1.25, 0, 1.25, -0.421875, 0.04394531, 0.703125, 0.25, 0.125, 0, -0.28125,
                                          0.28125, -0.703125, -1, 0.421875, -1.25}, 1e-5);
}

TEST(NnResize, NearestCeilAsymmetricAndInt) {
  AttrMap attrs{{"nearest_mode", Attribute::String("ceil")},
                {"coordinate_transformation_mode", Attribute::String("asymmetric")}};
  auto y = run("Resize", attrs, {F(pat(12), {1, 1, 3, 4}), Tensor(), Tensor(), I64({1, 1, 2, 7}, {4})});
  expect_values(y[0], Shape{1, 1, 2, 7}, {-1.25, 0.5, -0.5, -0.5, 1.25, 1.25, 1.25, -1, 0.75, -0.25, -0.25, -1.25,
                                          -1.25, -1.25});
  auto i = run("Resize", {}, {I64({1, 2}, {1, 2}), Tensor(), F({1, 2}, {2})});
  expect_values(i[0], Shape{1, 4}, {1, 1, 2, 2});
}

TEST(NnResize, TfCropAndResizeExtrapolation) {
  AttrMap attrs{{"mode", Attribute::String("linear")}, {"extrapolation_value", Attribute::Float(9)},
                {"coordinate_transformation_mode", Attribute::String("tf_crop_and_resize")}};
  auto y = run("Resize", attrs, {F(pat(12), {1, 1, 3, 4}), F({0, 0, 0.2f, 0.1f, 1, 1, 1.3f, 0.8f}, {8}), Tensor(),
                                 I64({1, 1, 3, 3}, {4})});
  expect_values(y[0], Shape{1, 1, 3, 3}, {-0.455, 0.035, 0.36, -0.2625, 0.1312499, -0.02499986, 9, 9, 9}, 1e-5);
}

TEST(NnResize, UpsampleAndErrors) {
  auto u = run("Upsample", {}, {F({1, 2, 3, 4}, {1, 2, 2}), F({1, 1, 2}, {3})}, 1, 9);
  expect_values(u[0], Shape{1, 2, 4}, {1, 1, 2, 2, 3, 3, 4, 4});
  auto u7 = run("Upsample", {{"scales", Attribute::Floats({1, 2, 1})}}, {F({1, 2}, {1, 1, 2})}, 1, 7);
  expect_values(u7[0], Shape{1, 2, 2}, {1, 2, 1, 2});
  EXPECT_TRUE(fails("Resize", {}, {F(pat(4), {2, 2}), Tensor(), F({1, 2}, {2}), I64({2, 4}, {2})}));
  EXPECT_TRUE(fails("Resize", {}, {F(pat(4), {2, 2}), Tensor(), F({2}, {1})}));
  EXPECT_TRUE(fails("Resize", {{"mode", Attribute::String("area")}}, {F(pat(4), {2, 2}), Tensor(), F({1, 2}, {2})}));
}

TEST(NnGridSample, ModesAndPadding) {
  // Plane [[0, 1], [2, 3]] with align_corners=1; grid points (x, y): corners, centre, and x=3 (outside).
  const Tensor x = F({0, 1, 2, 3}, {1, 1, 2, 2});
  const Tensor grid = F({-1, -1, 1, 1, 0, 0, 3, 0}, {1, 1, 4, 2});
  auto sample = [&](const char* mode, const char* pad) {
    return run("GridSample", {{"mode", Attribute::String(mode)}, {"padding_mode", Attribute::String(pad)},
                              {"align_corners", Attribute::Int(1)}},
               {x, grid});
  };
  expect_values(sample("bilinear", "zeros")[0], Shape{1, 1, 1, 4}, {0, 3, 1.5, 0});
  expect_values(sample("bilinear", "border")[0], Shape{1, 1, 1, 4}, {0, 3, 1.5, 2});
  expect_values(sample("bilinear", "reflection")[0], Shape{1, 1, 1, 4}, {0, 3, 1.5, 1});
  expect_values(sample("nearest", "zeros")[0], Shape{1, 1, 1, 4}, {0, 3, 0, 0});
  EXPECT_TRUE(fails("GridSample", {{"mode", Attribute::String("area")}}, {x, grid}));
  EXPECT_TRUE(fails("GridSample", {}, {x, F({0, 0, 0}, {1, 1, 1, 3})}));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// torch 1.13 writes LayerNorm without affine parameters as LayerNormalization(X, "", ""): the
// absent Scale means ones. Expected values from numpy: (x - mean) / sqrt(var + 1e-5).
TEST(LayerNormalization, AbsentScaleMeansOnes) {
  Tensor x = Tensor::zeros(DType::kFloat32, Shape{2, 3, 4});
  for (int i = 0; i < 24; ++i) x.as<float>()[i] = static_cast<float>(i % 5);
  AttrMap attrs;
  attrs["epsilon"] = Attribute::Float(1e-5f);
  auto out = run_op_once("LayerNormalization", attrs, {x}, 1);
  ASSERT_TRUE(out.ok()) << out.status().message();
  const float want[4] = {-1.3416355f, -0.44721183f, 0.44721183f, 1.3416355f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR((*out)[0].as<float>()[i], want[i], 1e-5);
}

}  // namespace
}  // namespace kiln
