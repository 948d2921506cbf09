// nhwc_transpose_folding on a ConvNeXt-shaped graph at awkward shapes (batch 2, odd sizes, 12 and 20
// channels: not whole blocks of 8): the Transposes around the depthwise convolutions, the stem, the
// downsampling and the head disappear, and the outputs match the pass off and the unfused graph,
// under both of conv_channels_last's layouts. Graphs it must leave alone are run too.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "builder/passes/pass.h"
#include "onnx_model_builder.h"
#include "unit/builder/graph_test_util.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::attr_or;
using testing::Built;
using testing::build_and_run;
using testing::count_op;
using testing::OnnxModelBuilder;
using testing::producer;
using testing::random_f32;

void init(OnnxModelBuilder& b, const std::string& name, std::vector<int64_t> dims, uint32_t seed, float scale = 0.0f) {
  Shape s;
  for (auto d : dims) s.push_back(d);
  const Tensor t = random_f32(s, seed);
  std::vector<float> v(t.as<float>(), t.as<float>() + t.numel());
  // Scaled so that activations stay near 1 through the chain.
  if (scale == 0.0f) scale = 1.7f / std::sqrt(static_cast<float>(t.numel() / dims[0]));
  for (float& f : v) f *= scale;
  b.initializer_f(name, v, dims);
}

void scalar(OnnxModelBuilder& b, const std::string& name, float v) { b.initializer_f(name, {v}, {}); }

void transpose(OnnxModelBuilder& b, const std::string& x, const std::string& y, std::vector<int64_t> perm) {
  auto& n = b.node("Transpose", {x}, {y}, y + "/Transpose");
  OnnxModelBuilder::ints_attr(n, "perm", perm);
}

// LayerNormalization over the last axis (C) with its own scale and bias.
void layer_norm(OnnxModelBuilder& b, const std::string& x, const std::string& y, int64_t C, uint32_t seed) {
  init(b, y + "_g", {C}, seed, 1.0f);
  init(b, y + "_b", {C}, seed + 1, 0.5f);
  auto& n = b.node("LayerNormalization", {x, y + "_g", y + "_b"}, {y}, y + "/LayerNormalization");
  OnnxModelBuilder::int_attr(n, "axis", -1);
  OnnxModelBuilder::float_attr(n, "epsilon", 1e-6f);
}

// NCHW x -> Transpose -> LayerNorm -> Transpose -> NCHW y (torchvision's LayerNorm2d).
void layer_norm_2d(OnnxModelBuilder& b, const std::string& x, const std::string& y, int64_t C, uint32_t seed) {
  transpose(b, x, y + "_t", {0, 2, 3, 1});
  layer_norm(b, y + "_t", y + "_n", C, seed);
  transpose(b, y + "_n", y, {0, 3, 1, 2});
}

void conv(OnnxModelBuilder& b, const std::string& x, const std::string& y, int64_t C, int64_t OC, int64_t k, int64_t stride,
          int64_t pad, int64_t group, uint32_t seed) {
  init(b, y + "_w", {OC, C / group, k, k}, seed);
  init(b, y + "_b", {OC}, seed + 1, 0.3f);
  auto& n = b.node("Conv", {x, y + "_w", y + "_b"}, {y}, y + "/Conv");
  OnnxModelBuilder::ints_attr(n, "kernel_shape", {k, k});
  OnnxModelBuilder::ints_attr(n, "strides", {stride, stride});
  OnnxModelBuilder::ints_attr(n, "pads", {pad, pad, pad, pad});
  OnnxModelBuilder::int_attr(n, "group", group);
}

// torchvision's CNBlock: x + gamma * Transpose(Linear(GELU(Linear(LN(Transpose(dwconv7x7(x))))))).
void block(OnnxModelBuilder& b, const std::string& x, const std::string& y, int64_t C, uint32_t seed) {
  conv(b, x, y + "_dw", C, C, 7, 1, 3, C, seed);
  transpose(b, y + "_dw", y + "_t", {0, 2, 3, 1});
  layer_norm(b, y + "_t", y + "_ln", C, seed + 2);
  init(b, y + "_w1", {C, 4 * C}, seed + 3);
  init(b, y + "_b1", {4 * C}, seed + 4, 0.3f);
  init(b, y + "_w2", {4 * C, C}, seed + 5);
  init(b, y + "_b2", {C}, seed + 6, 0.3f);
  init(b, y + "_gamma", {C, 1, 1}, seed + 7, 0.8f);
  b.node("MatMul", {y + "_ln", y + "_w1"}, {y + "_m1"});
  b.node("Add", {y + "_m1", y + "_b1"}, {y + "_h"});
  // GELU as torch.onnx writes it at opset 17: 0.5 * h * (1 + erf(h / sqrt(2))).
  b.node("Div", {y + "_h", "sqrt2"}, {y + "_hd"});
  b.node("Erf", {y + "_hd"}, {y + "_he"});
  b.node("Add", {y + "_he", "one"}, {y + "_h1"});
  b.node("Mul", {y + "_h", y + "_h1"}, {y + "_hm"});
  b.node("Mul", {y + "_hm", "half"}, {y + "_g"});
  b.node("MatMul", {y + "_g", y + "_w2"}, {y + "_m2"});
  b.node("Add", {y + "_m2", y + "_b2"}, {y + "_o"});
  transpose(b, y + "_o", y + "_u", {0, 3, 1, 2});
  b.node("Mul", {y + "_gamma", y + "_u"}, {y + "_s"});
  b.node("Add", {y + "_s", x}, {y}, y + "/Add");
}

constexpr int64_t kN = 2, kH = 13, kW = 11, kClasses = 5;

// x [2, 3, 13, 11] -> stem Conv 3->12 2x2/2 -> LayerNorm2d -> two blocks at 12 channels [2, 12, 6, 5]
// -> LayerNorm2d -> Conv 12->20 2x2/2 -> a block at 20 channels [2, 20, 3, 2] -> GlobalAveragePool
// -> LayerNorm2d -> Flatten -> Linear -> y [2, 5]. 12 Transposes.
OnnxModelBuilder convnext_like() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {kN, int64_t{3}, kH, kW});
  scalar(b, "sqrt2", 1.4142135f);
  scalar(b, "one", 1.0f);
  scalar(b, "half", 0.5f);
  conv(b, "x", "stem", 3, 12, 2, 2, 0, 1, 10);
  layer_norm_2d(b, "stem", "x0", 12, 20);
  block(b, "x0", "x1", 12, 30);
  block(b, "x1", "x2", 12, 40);
  layer_norm_2d(b, "x2", "d", 12, 50);
  conv(b, "d", "x3", 12, 20, 2, 2, 0, 1, 60);
  block(b, "x3", "x4", 20, 70);
  b.node("GlobalAveragePool", {"x4"}, {"pool"}, "pool/GlobalAveragePool");
  layer_norm_2d(b, "pool", "head", 20, 80);
  b.node("Flatten", {"head"}, {"flat"}, "flat/Flatten");
  init(b, "fc_w", {20, kClasses}, 90);
  b.node("MatMul", {"flat", "fc_w"}, {"y"}, "fc/MatMul");
  b.output("y");
  return b;
}

void expect_same(const Built& a, const Built& b, const std::string& what) {
  ASSERT_EQ(a.y.size(), b.y.size()) << what;
  for (size_t i = 0; i < a.y.size(); ++i) EXPECT_NEAR(a.y[i], b.y[i], 1e-4 * (1.0 + std::abs(b.y[i]))) << what << ", element " << i;
}

const std::set<std::string> kUnfused = {"conv_epilogue_fusion", "matmul_epilogue_fusion", "elementwise_fusion", "nhwc_transpose_folding",
                                         "matmul_scale_fusion"};

TEST(NhwcTransposeFolding, ConvNextTransposesVanishAndOutputsMatch) {
  auto g = convnext_like().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(count_op(*g, "Transpose"), 12);
  const Tensor x = random_f32(Shape{kN, 3, kH, kW}, 7);
  const Built unfused = build_and_run(*g, kUnfused, "", x);
  ASSERT_EQ(unfused.y.size(), static_cast<size_t>(kN * kClasses));
  const Built off = build_and_run(*g, {"nhwc_transpose_folding"}, "", x);
  EXPECT_EQ(count_op(off.graph, "Transpose"), 12);
  expect_same(off, unfused, "pass off");
  for (const char* layout : {"nhwc", "nchw8c"}) {
    const Built on = build_and_run(*g, {}, layout, x);
    // Only the head's last Transpose stays: Flatten reads its output.
    EXPECT_EQ(count_op(on.graph, "Transpose"), 1) << layout;
    const Graph& b = on.graph;
    // The stem writes NHWC from its NCHW input; the blocks' depthwise convolutions read and write it,
    // as does the downsampling convolution; the GlobalAveragePool reads it.
    EXPECT_EQ(attr_or(producer(b, "stem"), "x_layout", "nchw"), "nchw") << layout;
    EXPECT_EQ(attr_or(producer(b, "stem"), "y_layout", "nchw"), "nhwc") << layout;
    for (const char* dw : {"x1_dw", "x2_dw", "x4_dw"}) {
      EXPECT_EQ(attr_or(producer(b, dw), "x_layout", "nchw"), "nhwc") << dw << " " << layout;
      EXPECT_EQ(attr_or(producer(b, dw), "y_layout", "nchw"), "nhwc") << dw << " " << layout;
    }
    EXPECT_EQ(attr_or(producer(b, "x3"), "x_layout", "nchw"), "nhwc") << layout;
    EXPECT_EQ(attr_or(producer(b, "x3"), "y_layout", "nchw"), "nhwc") << layout;
    EXPECT_EQ(attr_or(producer(b, "pool"), "layout", "nchw"), "nhwc") << layout;
    // With the Transposes gone matmul_scale_fusion takes each layer scale and residual add.
    EXPECT_EQ(count_op(b, "FusedElementwise") + count_op(b, "Mul") + count_op(b, "Add"), 0) << layout;
    const Value& x1 = b.values[b.find_value("x1")];
    ASSERT_TRUE(x1.shape.has_value());
    EXPECT_EQ(sym_shape_str(*x1.shape), sym_shape_str(from_shape(Shape{kN, 6, 5, 12}))) << layout;
    bool logged = false;
    for (const auto& line : on.log) logged = logged || line.rfind("nhwc_transpose_folding: 11 Transposes removed", 0) == 0;
    EXPECT_TRUE(logged) << layout;
    expect_same(on, unfused, std::string("pass on, ") + layout);
  }
}

// A Transpose pair around ops that are not FusedConvs or followers (a graph input, a Reshape
// reader), and a residual stream one reader of which needs NCHW, keep their Transposes: the
// pass changes nothing there, and the outputs still match.
TEST(NhwcTransposeFolding, LeavesWhatItCannotKeepAlone) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {kN, int64_t{12}, int64_t{5}, int64_t{7}});
  scalar(b, "sqrt2", 1.4142135f);
  scalar(b, "one", 1.0f);
  scalar(b, "half", 0.5f);
  // The block reads the graph input (no producer to write NHWC): its residual Add needs x in NCHW,
  // so its Transpose(0, 3, 1, 2) stays, but the depthwise output still loses its Transpose.
  block(b, "x", "x1", 12, 1);
  // x1 is also read by a Reshape, which needs NCHW: the second block's residual stream stays NCHW.
  block(b, "x1", "x2", 12, 11);
  b.initializer("flat_shape", {kN, -1}, {2});
  b.node("Reshape", {"x1", "flat_shape"}, {"r"}, "r/Reshape");
  b.node("Transpose", {"x2"}, {"y0"}, "y0/Transpose");  // default perm (reverse): left alone
  auto& t = b.node("Transpose", {"y0"}, {"y"}, "y/Transpose");
  OnnxModelBuilder::ints_attr(t, "perm", {3, 2, 1, 0});
  b.output("y");
  b.output("r");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(count_op(*g, "Transpose"), 6);
  const Tensor x = random_f32(Shape{kN, 12, 5, 7}, 9);
  const Built unfused = build_and_run(*g, kUnfused, "", x);
  const Built on = build_and_run(*g, {}, "", x);
  // The two depthwise outputs' Transpose(0, 2, 3, 1) go; the blocks' Transpose(0, 3, 1, 2) and the
  // two others stay.
  EXPECT_EQ(count_op(on.graph, "Transpose"), 4);
  EXPECT_EQ(attr_or(producer(on.graph, "x1_dw"), "x_layout", "nchw"), "nchw");
  EXPECT_EQ(attr_or(producer(on.graph, "x1_dw"), "y_layout", "nchw"), "nhwc");
  EXPECT_EQ(attr_or(producer(on.graph, "x2_dw"), "x_layout", "nchw"), "nchw");
  const Value& x1 = on.graph.values[on.graph.find_value("x1")];
  ASSERT_TRUE(x1.shape.has_value());
  EXPECT_EQ(sym_shape_str(*x1.shape), sym_shape_str(from_shape(Shape{kN, 12, 5, 7})));
  expect_same(on, unfused, "pass on");
}

// Between FusedConvs without a Transpose nearby the pass keeps nothing, leaving the layout to
// conv_channels_last: a residual block of 1x1 convolutions.
TEST(NhwcTransposeFolding, NoTransposeNoChange) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {kN, int64_t{16}, int64_t{5}, int64_t{7}});
  conv(b, "x", "a", 16, 16, 1, 1, 0, 1, 1);
  conv(b, "a", "c", 16, 16, 3, 1, 1, 16, 3);
  b.node("Add", {"a", "c"}, {"s"}, "s/Add");
  conv(b, "s", "y", 16, 8, 1, 1, 0, 1, 5);
  b.output("y");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Tensor x = random_f32(Shape{kN, 16, 5, 7}, 9);
  const Built on = build_and_run(*g, {}, "nchw8c", x);
  for (const auto& line : on.log) EXPECT_NE(line.rfind("nhwc_transpose_folding", 0), 0u) << line;
  EXPECT_EQ(attr_or(producer(on.graph, "a"), "y_layout", "nchw"), "nchw8c");
  const Built unfused = build_and_run(*g, kUnfused, "", x);
  expect_same(on, unfused, "pass on");
}

}  // namespace
}  // namespace kiln
