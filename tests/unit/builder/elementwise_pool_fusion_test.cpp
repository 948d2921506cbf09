// elementwise_pool_fusion: a DenseNet transition (conv, pre-activation BN + ReLU, 1x1 conv, 2x2/2
// AveragePool, which pool_before_pointwise_conv moves before the 1x1 conv) run with the pass on and
// off in each layout (NCHW, nChw8c, NHWC): the outputs are the same to the bit and the pool is no
// step of its own. Awkward sizes: odd heights and widths (the last row / column dropped), rows
// longer than the FusedElementwise block (512 floats), channels 16 and 24. A pool with padding,
// ceil_mode, or whose input is read elsewhere too stays a step.
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

using testing::Built;
using testing::build_and_run;
using testing::count_op;
using testing::OnnxModelBuilder;
using testing::random_f32;

void init(OnnxModelBuilder& b, const std::string& name, std::vector<int64_t> dims, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Shape s;
  for (auto d : dims) s.push_back(d);
  const Tensor t = random_f32(s, seed, lo, hi);
  b.initializer_f(name, std::vector<float>(t.as<float>(), t.as<float>() + t.numel()), dims);
}

struct Variant {
  int64_t c = 16, h = 9, w = 7;
  bool ceil_mode = false, padded = false, read_twice = false;
};

// x [1, 3, h, w] -> two 3x3 convs concatenated to c channels -> BN -> ReLU -> 1x1 conv to 8 -> AveragePool 2x2/2 -> 3x3 conv to 8.
OnnxModelBuilder transition(const Variant& v) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{1}, int64_t{3}, v.h, v.w});
  // Two convolutions concatenated, as DenseNet's dense block: the BN then cannot fold into a conv.
  init(b, "w0", {v.c - 8, 3, 3, 3}, 1, -0.3f, 0.3f);
  OnnxModelBuilder::ints_attr(b.node("Conv", {"x", "w0"}, {"c0a"}, "c0a/Conv"), "pads", {1, 1, 1, 1});
  init(b, "w0b", {8, 3, 3, 3}, 8, -0.3f, 0.3f);
  OnnxModelBuilder::ints_attr(b.node("Conv", {"x", "w0b"}, {"c0b"}, "c0b/Conv"), "pads", {1, 1, 1, 1});
  OnnxModelBuilder::int_attr(b.node("Concat", {"c0a", "c0b"}, {"c0"}, "c0/Concat"), "axis", 1);
  init(b, "g", {v.c}, 2, 0.5f, 1.5f);
  init(b, "bb", {v.c}, 3);
  init(b, "m", {v.c}, 4);
  init(b, "var", {v.c}, 5, 0.5f, 2.0f);
  b.node("BatchNormalization", {"c0", "g", "bb", "m", "var"}, {"bn"}, "t/BatchNormalization");
  b.node("Relu", {"bn"}, {"a"}, "t/Relu");
  init(b, "w1", {8, v.c, 1, 1}, 6, -0.3f, 0.3f);
  b.node("Conv", {"a", "w1"}, {"c1"}, "t/Conv");
  auto& pool = b.node("AveragePool", {"c1"}, {"p"}, "t/AveragePool");
  OnnxModelBuilder::ints_attr(pool, "kernel_shape", {2, 2});
  OnnxModelBuilder::ints_attr(pool, "strides", {2, 2});
  if (v.ceil_mode) OnnxModelBuilder::int_attr(pool, "ceil_mode", 1);
  if (v.padded) OnnxModelBuilder::ints_attr(pool, "pads", {1, 1, 1, 1});
  init(b, "w2", {8, 8, 3, 3}, 7, -0.3f, 0.3f);
  OnnxModelBuilder::ints_attr(b.node("Conv", {"p", "w2"}, {"y"}, "y/Conv"), "pads", {1, 1, 1, 1});
  b.output("y");
  if (v.read_twice) b.output("a");  // the activation leaves the graph too
  return b;
}

// Each layout with the pass on and off: the same output bits; returns how many AveragePool steps
// the graph with the pass on kept (per layout, summed).
int check_on_off(const Variant& v) {
  auto g = transition(v).import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return -1;
  const Tensor x = random_f32(Shape{1, 3, v.h, v.w}, 11);
  int pools = 0;
  for (const char* layout : {"nchw8c", "nhwc", "nchw"}) {
    std::set<std::string> base;
    if (std::string(layout) == "nchw") base.insert("conv_channels_last");
    std::set<std::string> off = base;
    off.insert("elementwise_pool_fusion");
    const std::string lay = std::string(layout) == "nchw" ? "" : layout;
    const Built on = build_and_run(*g, base, lay, x);
    const Built ref = build_and_run(*g, off, lay, x);
    EXPECT_EQ(count_op(ref.graph, "AveragePool"), 1) << layout;
    pools += count_op(on.graph, "AveragePool");
    EXPECT_EQ(on.y.size(), ref.y.size()) << layout;
    if (on.y.size() != ref.y.size()) continue;
    size_t bad = 0;
    for (size_t i = 0; i < ref.y.size() && bad < 5; ++i)
      if (on.y[i] != ref.y[i]) ADD_FAILURE() << layout << " c " << v.c << " " << v.h << "x" << v.w << " element " << i << (++bad, "");
  }
  return pools;
}

TEST(ElementwisePoolFusion, TransitionPoolJoinsItsBnReluInEveryLayout) {
  for (const Variant& v : {Variant{16, 9, 7}, Variant{24, 12, 10}, Variant{16, 5, 70}, Variant{24, 2, 3}, Variant{16, 33, 2}}) {
    EXPECT_EQ(check_on_off(v), 0) << "c " << v.c << " " << v.h << "x" << v.w;
  }
}

TEST(ElementwisePoolFusion, PaddedCeilModeOrSharedInputStaysAStep) {
  Variant ceil{16, 9, 7};
  ceil.ceil_mode = true;
  Variant padded{16, 8, 8};
  padded.padded = true;
  Variant twice{16, 8, 6};
  twice.read_twice = true;
  // pool_before_pointwise_conv keeps a padded pool after the conv: no FusedElementwise before it.
  for (const Variant& v : {ceil, padded, twice}) EXPECT_EQ(check_on_off(v), 3);
}

}  // namespace
}  // namespace kiln
