// pool_before_pointwise_conv: an AveragePool after a 1x1 stride-1 unpadded Conv moves before it.
// The rewrite is asserted on the graph (which patterns swap, which stay) and each model is run with
// the pass on and off (and with the passes around it off), the outputs compared.
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

namespace kiln {
namespace {

using testing::OnnxModelBuilder;
using testing::random_f32;

void init(OnnxModelBuilder& b, const std::string& name, std::vector<int64_t> dims, uint32_t seed) {
  Shape s;
  for (auto d : dims) s.push_back(d);
  const Tensor t = random_f32(s, seed);
  b.initializer_f(name, std::vector<float>(t.as<float>(), t.as<float>() + t.numel()), dims);
}

struct Variant {
  const char* what;
  int64_t kernel, group;
  std::vector<int64_t> conv_pads, conv_strides, pool_kernel, pool_strides, pool_pads;
  int64_t ceil_mode, count_include_pad;
  bool bias, relu_between, second_reader;
  bool swaps;
};

// x [2, 16, 11, 9] -> Relu -> Conv -> [Relu] -> AveragePool -> Neg -> y (and, for second_reader, the
// Conv's output also into the graph's second output).
OnnxModelBuilder model(const Variant& v) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{16}, int64_t{11}, int64_t{9}});
  init(b, "w", {24, 16 / v.group, v.kernel, v.kernel}, 1);
  init(b, "b", {24}, 2);
  b.node("Relu", {"x"}, {"a"}, "a/Relu");
  std::vector<std::string> in{"a", "w"};
  if (v.bias) in.push_back("b");
  auto& conv = b.node("Conv", in, {"c"}, "c/Conv");
  OnnxModelBuilder::int_attr(conv, "group", v.group);
  if (!v.conv_pads.empty()) OnnxModelBuilder::ints_attr(conv, "pads", v.conv_pads);
  if (!v.conv_strides.empty()) OnnxModelBuilder::ints_attr(conv, "strides", v.conv_strides);
  std::string pooled = "c";
  if (v.relu_between) {
    b.node("Relu", {"c"}, {"cr"}, "cr/Relu");
    pooled = "cr";
  }
  auto& pool = b.node("AveragePool", {pooled}, {"p"}, "p/AveragePool");
  OnnxModelBuilder::ints_attr(pool, "kernel_shape", v.pool_kernel);
  OnnxModelBuilder::ints_attr(pool, "strides", v.pool_strides);
  if (!v.pool_pads.empty()) OnnxModelBuilder::ints_attr(pool, "pads", v.pool_pads);
  OnnxModelBuilder::int_attr(pool, "ceil_mode", v.ceil_mode);
  OnnxModelBuilder::int_attr(pool, "count_include_pad", v.count_include_pad);
  b.node("Neg", {"p"}, {"y"}, "y/Neg");
  b.output("y");
  if (v.second_reader) {
    b.node("Abs", {"c"}, {"z"}, "z/Abs");
    b.output("z");
  }
  return b;
}

const Variant kVariants[] = {
    {"DenseNet transition: 2x2/2, no bias", 1, 1, {}, {}, {2, 2}, {2, 2}, {}, 0, 0, false, false, false, true},
    {"3x3/2 ceil mode, bias, grouped 1x1", 1, 4, {0, 0, 0, 0}, {1, 1}, {3, 3}, {2, 2}, {}, 1, 0, true, false, false, true},
    {"3x2/1 with bias, count_include_pad without ceil", 1, 1, {}, {}, {3, 2}, {1, 1}, {}, 0, 1, true, false, false, true},
    {"a Relu between", 1, 1, {}, {}, {2, 2}, {2, 2}, {}, 0, 0, true, true, false, false},
    {"3x3 conv", 3, 1, {1, 1, 1, 1}, {}, {2, 2}, {2, 2}, {}, 0, 0, true, false, false, false},
    {"1x1 stride 2", 1, 1, {}, {2, 2}, {2, 2}, {2, 2}, {}, 0, 0, true, false, false, false},
    {"padded pool", 1, 1, {}, {}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0, 0, true, false, false, false},
    {"count_include_pad with ceil mode", 1, 1, {}, {}, {2, 2}, {2, 2}, {}, 1, 1, true, false, false, false},
    {"conv output read twice", 1, 1, {}, {}, {2, 2}, {2, 2}, {}, 0, 0, true, false, true, false},
};

std::vector<std::vector<float>> run(const Graph& g0, const std::set<std::string>& disabled, const Tensor& x, Graph* after = nullptr) {
  Graph g = g0;
  PassContext ctx;
  ctx.disabled = disabled;
  EXPECT_TRUE(run_pass_pipeline(g, ctx).ok());
  if (after) *after = g;
  auto plan = lower_to_plan(g);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  auto ec = ExecutionContext::create(*plan);
  EXPECT_TRUE(ec.ok());
  if (!ec.ok()) return {};
  EXPECT_TRUE((*ec)->set_input("x", x.view()).ok());
  const Status st = (*ec)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<std::vector<float>> outs;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const TensorView& y = (*ec)->output(i);
    outs.emplace_back(y.as<float>(), y.as<float>() + y.numel());
  }
  return outs;
}

// Whether the AveragePool now runs before the convolution (reads what the Relu writes).
bool pool_first(const Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.removed || n.op_type != "AveragePool") continue;
    const int in = n.inputs[0];
    for (size_t j = 0; j < i; ++j)
      if (!g.nodes[j].removed && g.nodes[j].outputs[0] == in) return g.values[in].name == "a";
  }
  return false;
}

TEST(PoolBeforePointwiseConv, SwapsExactlyTheCommutingPatternsAndMatchesOff) {
  const Tensor x = random_f32(Shape{2, 16, 11, 9}, 3);
  for (const Variant& v : kVariants) {
    auto g = model(v).import();
    ASSERT_TRUE(g.ok()) << v.what << ": " << g.status().message();
    Graph on;
    const auto y_on = run(*g, {}, x, &on);
    EXPECT_EQ(pool_first(on), v.swaps) << v.what;
    for (const std::set<std::string>& off : {std::set<std::string>{"pool_before_pointwise_conv"},
                                             std::set<std::string>{"conv_epilogue_fusion"},
                                             std::set<std::string>{"conv_channels_last"}}) {
      const auto y_off = run(*g, off, x);
      ASSERT_EQ(y_on.size(), y_off.size()) << v.what;
      for (size_t o = 0; o < y_on.size(); ++o) {
        ASSERT_EQ(y_on[o].size(), y_off[o].size()) << v.what;
        for (size_t i = 0; i < y_on[o].size(); ++i)
          EXPECT_NEAR(y_on[o][i], y_off[o][i], 1e-5 * (1.0 + std::abs(y_off[o][i]))) << v.what << " vs " << *off.begin() << " off, output " << o << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kiln
