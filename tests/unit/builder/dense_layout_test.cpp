// conv_channels_last on a DenseNet-shaped graph: dense Concats of every earlier feature map, each
// read by a pre-activation BatchNorm + ReLU (a Mul and an Add by per-channel constants after
// batchnorm_folding, one FusedElementwise after elementwise_fusion), a transition whose
// AveragePool follows a Pad by zeros (the exporter's), and a classifier head (BN + ReLU,
// GlobalAveragePool, Flatten, Gemm). The whole graph must stay in the layout between its first
// and last convolution, and match the unfused graph with each pass involved on and off, in both
// layouts (NHWC: an AVX-512 build machine's choice; nChw8c: an AVX2 one's).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "builder/passes/pass.h"
#include "builder/plan/build_plan.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"
#include "unit/runtime/kernel_test_util.h"
#include "unit/builder/graph_test_util.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;
using testing::random_f32;

void init(OnnxModelBuilder& b, const std::string& name, std::vector<int64_t> dims, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Shape s;
  for (auto d : dims) s.push_back(d);
  const Tensor t = random_f32(s, seed, lo, hi);
  std::vector<float> v(t.as<float>(), t.as<float>() + t.numel());
  if (dims.size() == 4) {  // conv weights: activations stay near 1 through the chain
    const float scale = 1.7f / std::sqrt(static_cast<float>(t.numel() / dims[0]));
    for (float& f : v) f *= scale;
  }
  b.initializer_f(name, v, dims);
}

// Batch 2, 3x13x11 input: stem conv (16) + ReLU + MaxPool; dense block of two layers (growth 8);
// transition (BN, ReLU, 1x1 conv to 16, zero Pad, AveragePool 2x2/2 with ceil mode, the odd
// width cut); one more dense layer; head.
OnnxModelBuilder dense_model() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{3}, int64_t{13}, int64_t{11}});
  uint32_t seed = 1;
  auto conv = [&](const std::string& x, int64_t cin, int64_t cout, int64_t k, const std::string& y) {
    init(b, y + "_w", {cout, cin, k, k}, seed++);
    auto& n = b.node("Conv", {x, y + "_w"}, {y}, y + "/Conv");
    const int64_t p = k / 2;
    OnnxModelBuilder::ints_attr(n, "pads", {p, p, p, p});
  };
  auto bn_relu = [&](const std::string& x, int64_t c, const std::string& y) {
    init(b, y + "_g", {c}, seed++, 0.5f, 1.5f);
    init(b, y + "_b", {c}, seed++);
    init(b, y + "_m", {c}, seed++);
    init(b, y + "_v", {c}, seed++, 0.5f, 2.0f);
    b.node("BatchNormalization", {x, y + "_g", y + "_b", y + "_m", y + "_v"}, {y + "_bn"}, y + "/BatchNormalization");
    b.node("Relu", {y + "_bn"}, {y}, y + "/Relu");
  };
  auto concat = [&](const std::vector<std::string>& xs, const std::string& y) {
    OnnxModelBuilder::int_attr(b.node("Concat", xs, {y}, y + "/Concat"), "axis", 1);
  };
  auto dense_layer = [&](const std::string& cat, int64_t c, const std::string& y) {
    bn_relu(cat, c, y + "_a");
    conv(y + "_a", c, 24, 1, y + "_c1");
    b.node("Relu", {y + "_c1"}, {y + "_r"}, y + "_r/Relu");
    conv(y + "_r", 24, 8, 3, y);
  };
  conv("x", 3, 16, 3, "c0");
  b.node("Relu", {"c0"}, {"r0"}, "r0/Relu");
  auto& pool = b.node("MaxPool", {"r0"}, {"p0"}, "p0/MaxPool");
  OnnxModelBuilder::ints_attr(pool, "kernel_shape", {3, 3});
  OnnxModelBuilder::ints_attr(pool, "strides", {2, 2});
  OnnxModelBuilder::ints_attr(pool, "pads", {1, 1, 1, 1});
  concat({"p0"}, "cat1");
  dense_layer("cat1", 16, "y1");
  concat({"p0", "y1"}, "cat2");
  dense_layer("cat2", 24, "y2");
  concat({"p0", "y1", "y2"}, "block");
  bn_relu("block", 32, "t_a");
  conv("t_a", 32, 16, 1, "t_c");
  b.initializer("zeros", {0, 0, 0, 0, 0, 0, 0, 0}, {8});
  b.node("Pad", {"t_c", "zeros"}, {"t_pad"}, "t/Pad");
  auto& avg = b.node("AveragePool", {"t_pad"}, {"t"}, "t/AveragePool");
  OnnxModelBuilder::ints_attr(avg, "kernel_shape", {2, 2});
  OnnxModelBuilder::ints_attr(avg, "strides", {2, 2});
  OnnxModelBuilder::int_attr(avg, "ceil_mode", 1);
  concat({"t"}, "cat3");
  dense_layer("cat3", 16, "y3");
  concat({"t", "y3"}, "block2");
  bn_relu("block2", 24, "h_a");
  b.node("GlobalAveragePool", {"h_a"}, {"gap"}, "gap/GlobalAveragePool");
  b.node("Flatten", {"gap"}, {"flat"}, "flat/Flatten");
  init(b, "fc_w", {5, 24}, seed++);
  init(b, "fc_b", {5}, seed++);
  auto& fc = b.node("Gemm", {"flat", "fc_w", "fc_b"}, {"y"}, "fc/Gemm");
  OnnxModelBuilder::int_attr(fc, "transB", 1);
  b.output("y");
  return b;
}

using testing::Built;
using testing::build_and_run;

using testing::attr_or;
using testing::count_op;
using testing::producer;

// The value's recorded rank: 5 in nChw8c, 4 in NHWC and NCHW.
size_t rank_of(const Graph& g, const std::string& value) {
  const Value& v = g.values[g.find_value(value)];
  return v.shape ? v.shape->size() : 0;
}

TEST(DenseLayout, EveryValueBetweenConvolutionsStaysInTheLayout) {
  auto g = dense_model().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  for (const char* layout : {"nchw8c", "nhwc"}) {
    const bool blocked = std::string(layout) == "nchw8c";
    Built on = build_and_run(*g, {}, layout, random_f32(Shape{2, 3, 13, 11}, 7));
    const Graph& b = on.graph;
    EXPECT_EQ(count_op(b, "Pad"), 0) << "the zero Pad is an identity";
    for (const char* v : {"p0", "cat1", "cat2", "block", "t", "cat3", "block2"}) {
      EXPECT_EQ(rank_of(b, v), blocked ? 5u : 4u) << layout << " " << v;
    }
    // The transition pools first (pool_before_pointwise_conv): the pool writes t_c, the conv t.
    ASSERT_NE(producer(b, "t_c"), nullptr);
    EXPECT_EQ(producer(b, "t_c")->op_type, "AveragePool");
    EXPECT_EQ(attr_or(producer(b, "t_c"), "layout", "nchw"), layout);
    EXPECT_EQ(attr_or(producer(b, "t"), "x_layout", "nchw"), layout);
    EXPECT_EQ(attr_or(producer(b, "p0"), "layout", "nchw"), layout);
    // The BN + ReLU steps read the Concats in the layout, their constants in its broadcast shape.
    const Node* act = producer(b, "y1_a");
    ASSERT_NE(act, nullptr);
    EXPECT_EQ(act->op_type, "FusedElementwise");
    for (int v : act->inputs) {
      const Value& in = b.values[v];
      if (!in.is_constant()) continue;
      EXPECT_EQ(in.constant.shape(), blocked ? (Shape{2, 1, 1, 8}) : (Shape{16})) << layout;
    }
    EXPECT_EQ(attr_or(producer(b, "y1_r"), "x_layout", "nchw"), layout);  // conv1 with its ReLU
    // The head pool computes in the layout; a Reshape hands the Flatten NCHW.
    EXPECT_EQ(count_op(b, "Reshape"), 1);
    const Node* reshape = producer(b, "gap");
    ASSERT_NE(reshape, nullptr);
    EXPECT_EQ(reshape->op_type, "Reshape");
    EXPECT_EQ(rank_of(b, "gap"), 4u);
  }
}

// Against the graph without FusedConvs (so without any layout), with each pass that shapes this
// graph's layout turned off in turn, in both layouts.
TEST(DenseLayout, EachPassOnAndOffMatchesTheUnfusedGraph) {
  auto g = dense_model().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Tensor x = random_f32(Shape{2, 3, 13, 11}, 11);
  const Built ref = build_and_run(*g, {"conv_epilogue_fusion", "elementwise_fusion", "batchnorm_folding", "noop_elimination"}, "", x);
  ASSERT_EQ(ref.y.size(), 10u);
  for (const char* layout : {"nchw8c", "nhwc"})
    for (const char* off :
         {"", "conv_channels_last", "elementwise_fusion", "batchnorm_folding", "noop_elimination", "pool_before_pointwise_conv"}) {
      std::set<std::string> disabled;
      if (*off) disabled.insert(off);
      const Built on = build_and_run(*g, disabled, layout, x);
      ASSERT_EQ(on.y.size(), ref.y.size());
      for (size_t i = 0; i < ref.y.size(); ++i)
        EXPECT_NEAR(on.y[i], ref.y[i], 1e-4 * (1.0 + std::abs(ref.y[i]))) << layout << " without " << off << ", element " << i;
    }
}

// A Pad by zeros is dropped (noop_elimination); a Pad by anything else stays.
TEST(DenseLayout, OnlyZeroPadsAreIdentities) {
  for (const std::vector<int64_t>& pads : {std::vector<int64_t>{0, 0, 0, 0}, std::vector<int64_t>{0, 1, 0, 0}}) {
    OnnxModelBuilder b;
    b.input("x", DType::kFloat32, {int64_t{2}, int64_t{3}});
    b.initializer("pads", pads, {4});
    b.node("Pad", {"x", "pads"}, {"p"}, "Pad");
    b.node("Relu", {"p"}, {"y"}, "Relu");
    b.output("y");
    auto g = b.import();
    ASSERT_TRUE(g.ok());
    PassContext ctx;
    ASSERT_TRUE(noop_elimination(*g, ctx).ok());
    g->compact();
    EXPECT_EQ(count_op(*g, "Pad"), pads[1] == 0 ? 0 : 1);
  }
}

}  // namespace
}  // namespace kiln
