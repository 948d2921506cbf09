// patch_embedding_transpose_folding on a ViT-shaped stem at awkward shapes (batch 2, a 13x11 image,
// 20 channels, 6x5 patches): the patch convolution writes NHWC, the Transpose to tokens goes, and the
// outputs match the pass off and the unfused graph under both of conv_channels_last's layouts. Stems
// it must leave alone (the flattened value or the tokens a graph output, a Reshape that is not a
// flatten of H and W) are run too.
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

constexpr int64_t kN = 2, kH = 13, kW = 11, kC = 20, kPatches = 6 * 5;

void init(OnnxModelBuilder& b, const std::string& name, std::vector<int64_t> dims, uint32_t seed, float scale) {
  Shape s;
  for (auto d : dims) s.push_back(d);
  const Tensor t = random_f32(s, seed);
  std::vector<float> v(t.as<float>(), t.as<float>() + t.numel());
  for (float& f : v) f *= scale;
  b.initializer_f(name, v, dims);
}

// x [2, 3, 13, 11] -> Conv 3->20 2x2/2 (+ ReLU when `relu`) [2, 20, 6, 5] -> Reshape `flat_shape`
// -> Transpose(0, 2, 1) [2, 30, 20] -> Concat with a class token [2, 1, 20] -> + position embedding
// -> LayerNorm -> MatMul -> y [2, 31, 7].
OnnxModelBuilder vit_stem(const std::vector<int64_t>& flat_shape, bool relu) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {kN, int64_t{3}, kH, kW});
  init(b, "w", {kC, 3, 2, 2}, 1, 0.5f);
  init(b, "bias", {kC}, 2, 0.3f);
  auto& c = b.node("Conv", {"x", "w", "bias"}, {relu ? "c" : "p"}, "patch/Conv");
  OnnxModelBuilder::ints_attr(c, "kernel_shape", {2, 2});
  OnnxModelBuilder::ints_attr(c, "strides", {2, 2});
  if (relu) b.node("Relu", {"c"}, {"p"}, "patch/Relu");
  b.initializer("flat_shape", flat_shape, {static_cast<int64_t>(flat_shape.size())});
  b.node("Reshape", {"p", "flat_shape"}, {"flat"}, "flat/Reshape");
  auto& t = b.node("Transpose", {"flat"}, {"tokens"}, "tokens/Transpose");
  OnnxModelBuilder::ints_attr(t, "perm", {0, 2, 1});
  init(b, "cls", {kN, 1, kC}, 3, 1.0f);
  auto& cat = b.node("Concat", {"cls", "tokens"}, {"seq"}, "seq/Concat");
  OnnxModelBuilder::int_attr(cat, "axis", 1);
  init(b, "pos", {1, kPatches + 1, kC}, 4, 0.2f);
  b.node("Add", {"seq", "pos"}, {"emb"}, "emb/Add");
  init(b, "g", {kC}, 5, 1.0f);
  init(b, "beta", {kC}, 6, 0.5f);
  auto& ln = b.node("LayerNormalization", {"emb", "g", "beta"}, {"ln"}, "ln/LayerNormalization");
  OnnxModelBuilder::int_attr(ln, "axis", -1);
  init(b, "fc", {kC, 7}, 7, 0.3f);
  b.node("MatMul", {"ln", "fc"}, {"y"}, "fc/MatMul");
  b.output("y");
  return b;
}

std::string y_layout(const Graph& g, const std::string& value) { return attr_or(producer(g, value), "y_layout", "nchw"); }

void expect_same(const Built& a, const Built& b, const std::string& what) {
  ASSERT_EQ(a.y.size(), b.y.size()) << what;
  ASSERT_FALSE(a.y.empty()) << what;
  for (size_t i = 0; i < a.y.size(); ++i) EXPECT_NEAR(a.y[i], b.y[i], 1e-5 * (1.0 + std::abs(b.y[i]))) << what << ", element " << i;
}

const std::set<std::string> kUnfused = {"conv_epilogue_fusion", "matmul_epilogue_fusion", "elementwise_fusion",
                                         "patch_embedding_transpose_folding"};

TEST(PatchEmbeddingTransposeFolding, TokensComeStraightFromTheConvolution) {
  // The shapes torch.onnx writes ([N, C, -1]) and a fully spelled one with a 0 for N; with and
  // without a ReLU in the convolution's epilogue.
  for (const auto& [flat_shape, relu] : std::vector<std::pair<std::vector<int64_t>, bool>>{
           {{kN, kC, -1}, false}, {{0, kC, kPatches}, true}}) {
    const std::string what = "flat_shape[2] " + std::to_string(flat_shape[2]) + (relu ? ", relu" : "");
    auto g = vit_stem(flat_shape, relu).import();
    ASSERT_TRUE(g.ok()) << g.status().message();
    const Tensor x = random_f32(Shape{kN, 3, kH, kW}, 9);
    const Built unfused = build_and_run(*g, kUnfused, "", x);
    ASSERT_EQ(unfused.y.size(), static_cast<size_t>(kN * (kPatches + 1) * 7)) << what;
    const Built off = build_and_run(*g, {"patch_embedding_transpose_folding"}, "", x);
    EXPECT_EQ(count_op(off.graph, "Transpose"), 1) << what;
    expect_same(off, unfused, "pass off, " + what);
    for (const char* layout : {"nhwc", "nchw8c"}) {
      const Built on = build_and_run(*g, {}, layout, x);
      EXPECT_EQ(count_op(on.graph, "Transpose"), 0) << what << ", " << layout;
      EXPECT_EQ(y_layout(on.graph, "p"), "nhwc") << what << ", " << layout;
      const Value& p = on.graph.values[on.graph.find_value("p")];
      ASSERT_TRUE(p.shape.has_value());
      EXPECT_EQ(sym_shape_str(*p.shape), sym_shape_str(from_shape(Shape{kN, 6, 5, kC}))) << what;
      bool logged = false;
      for (const auto& line : on.log) logged = logged || line.rfind("patch_embedding_transpose_folding: 1 convolutions", 0) == 0;
      EXPECT_TRUE(logged) << what << ", " << layout;
      expect_same(on, unfused, "pass on, " + what + ", " + layout);
    }
  }
}

TEST(PatchEmbeddingTransposeFolding, LeavesOtherStemsAlone) {
  struct Case {
    const char* what;
    std::vector<int64_t> flat_shape;
    bool flat_is_output, tokens_is_output;
  };
  const std::vector<Case> cases = {
      {"the flattened value is also a graph output", {kN, kC, -1}, true, false},
      {"the tokens are a graph output", {kN, kC, -1}, false, true},
  };
  for (const auto& c : cases) {
    OnnxModelBuilder b = vit_stem(c.flat_shape, false);
    if (c.flat_is_output) b.output("flat");
    if (c.tokens_is_output) b.output("tokens");
    auto g = b.import();
    ASSERT_TRUE(g.ok()) << c.what << ": " << g.status().message();
    const Tensor x = random_f32(Shape{kN, 3, kH, kW}, 9);
    const Built on = build_and_run(*g, {}, "", x);
    EXPECT_EQ(count_op(on.graph, "Transpose"), 1) << c.what;
    EXPECT_NE(y_layout(on.graph, "p"), "nhwc") << c.what;
    for (const auto& line : on.log) EXPECT_NE(line.rfind("patch_embedding_transpose_folding", 0), 0u) << c.what << ": " << line;
    const Built unfused = build_and_run(*g, kUnfused, "", x);
    expect_same(on, unfused, c.what);
  }
  // A Reshape that is not a flatten of H and W ([2, 20, 6, 5] -> [2, 10, 60]) keeps its Transpose.
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {kN, int64_t{3}, kH, kW});
  init(b, "w", {kC, 3, 2, 2}, 1, 0.5f);
  auto& conv = b.node("Conv", {"x", "w"}, {"p"}, "patch/Conv");
  OnnxModelBuilder::ints_attr(conv, "kernel_shape", {2, 2});
  OnnxModelBuilder::ints_attr(conv, "strides", {2, 2});
  b.initializer("split_shape", {kN, kC / 2, -1}, {3});
  b.node("Reshape", {"p", "split_shape"}, {"split"}, "split/Reshape");
  auto& t = b.node("Transpose", {"split"}, {"t"}, "t/Transpose");
  OnnxModelBuilder::ints_attr(t, "perm", {0, 2, 1});
  b.node("Relu", {"t"}, {"y"}, "y/Relu");
  b.output("y");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Tensor x = random_f32(Shape{kN, 3, kH, kW}, 9);
  const Built on = build_and_run(*g, {}, "", x);
  EXPECT_EQ(count_op(on.graph, "Transpose"), 1);
  EXPECT_NE(y_layout(on.graph, "p"), "nhwc");
  expect_same(on, build_and_run(*g, kUnfused, "", x), "channels split");
}

}  // namespace
}  // namespace kiln
