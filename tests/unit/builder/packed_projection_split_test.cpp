// packed_projection_split: Slices of a packed projection's product become one MatMul each on the
// weight's columns (with the bias' columns); asserted on the rewritten graph and run with the pass
// on and off (same outputs) at odd sizes, with and without a bias, with the bias Add's operands in
// either order, negative and open-ended Slice bounds. Also where it must not split: the product
// read by something else, overlapping Slices, a Slice of another axis or with a step.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "builder/plan/build_plan.h"
#include "builder/passes/pass.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"
#include "unit/builder/graph_test_util.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

constexpr int64_t kB = 2, kS = 5, kK = 7, kE = 5, kN = 3 * kE;
constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

struct SliceSpec {
  int64_t start, end, axis, step = 1;
};

struct Options {
  bool bias = true;
  bool bias_first = true;  // Add(b, product) as PyTorch exports it; else Add(product, b)
  bool product_is_output = false;
  std::vector<SliceSpec> slices = {{0, kE, -1}, {kE, 2 * kE, 2}, {-kE, kEnd, -1}};
};

// x [B, S, K] -> MatMul(W [K, 3E]) (-> Add b [3E]) -> one Slice per spec -> outputs out0, out1, ...
OnnxModelBuilder model(const Options& o) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {kB, kS, kK});
  b.initializer_f("w", random_values(kK * kN, 1), {kK, kN});
  b.initializer_f("b", random_values(kN, 2), {kN});
  b.node("MatMul", {"x", "w"}, {"mm"}, "in_proj");
  std::string product = "mm";
  if (o.bias) {
    b.node("Add", o.bias_first ? std::vector<std::string>{"b", "mm"} : std::vector<std::string>{"mm", "b"}, {"proj"}, "in_proj_bias");
    product = "proj";
  }
  for (size_t i = 0; i < o.slices.size(); ++i) {
    const std::string s = std::to_string(i);
    const SliceSpec& sp = o.slices[i];
    b.initializer("start" + s, {sp.start}, {1});
    b.initializer("end" + s, {sp.end}, {1});
    b.initializer("axis" + s, {sp.axis}, {1});
    b.initializer("step" + s, {sp.step}, {1});
    b.node("Slice", {product, "start" + s, "end" + s, "axis" + s, "step" + s}, {"out" + s}, "slice" + s);
    b.output("out" + s);
  }
  if (o.product_is_output) b.output(product);
  return b;
}

using testing::count_op;

Graph rewritten(const Options& o) {
  PassContext ctx;
  ctx.disabled.insert("matmul_epilogue_fusion");
  auto g = model(o).import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return Graph{};
  EXPECT_TRUE(specialize_inputs(*g, {{"x", Shape{kB, kS, kK}}}).ok());
  EXPECT_TRUE(run_pass_pipeline(*g, ctx).ok());
  return std::move(*g);
}

std::vector<std::vector<float>> run(const Options& o, bool split) {
  auto g = model(o).import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return {};
  BuildOptions opts;
  opts.input_shapes["x"] = Shape{kB, kS, kK};
  if (!split) opts.disabled_passes = {"packed_projection_split"};
  auto plan = build_plan(*g, opts);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok());
  Tensor x = Tensor::from_vector<float>(random_values(kB * kS * kK, 3), Shape{kB, kS, kK});
  EXPECT_TRUE((*ctx)->set_input("x", x.view()).ok());
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<std::vector<float>> outs;
  for (size_t i = 0; i < (*plan)->outputs.size(); ++i) {
    const TensorView& t = (*ctx)->output(static_cast<int>(i));
    outs.emplace_back(t.as<float>(), t.as<float>() + t.numel());
  }
  return outs;
}

void expect_same_outputs(const Options& o) {
  const auto on = run(o, true), off = run(o, false);
  ASSERT_EQ(on.size(), off.size());
  ASSERT_FALSE(on.empty());
  for (size_t i = 0; i < on.size(); ++i) {
    ASSERT_EQ(on[i].size(), off[i].size()) << "output " << i;
    for (size_t j = 0; j < on[i].size(); ++j) EXPECT_NEAR(on[i][j], off[i][j], 1e-5) << "output " << i << " element " << j;
  }
}

TEST(PackedProjectionSplit, EachSliceGetsItsOwnMatMul) {
  for (bool bias : {true, false})
    for (bool bias_first : {true, false}) {
      Options o;
      o.bias = bias;
      o.bias_first = bias_first;
      Graph g = rewritten(o);
      EXPECT_EQ(count_op(g, "MatMul"), 3) << "bias " << bias;
      EXPECT_EQ(count_op(g, "Slice"), 0) << "bias " << bias;
      EXPECT_EQ(count_op(g, "Add"), bias ? 3 : 0);
      for (const auto& n : g.nodes)
        if (n.op_type == "MatMul") {
          const Value& w = g.values[n.inputs[1]];
          ASSERT_TRUE(w.is_constant());
          EXPECT_EQ(w.constant.shape(), (Shape{kK, kE}));
        }
      expect_same_outputs(o);
    }
}

TEST(PackedProjectionSplit, UnevenSlicesThatLeaveColumnsOut) {
  Options o;
  o.slices = {{1, 4, -1}, {4, 12, -1}};  // 3 + 8 of 15 columns
  Graph g = rewritten(o);
  EXPECT_EQ(count_op(g, "MatMul"), 2);
  EXPECT_EQ(count_op(g, "Slice"), 0);
  expect_same_outputs(o);
}

TEST(PackedProjectionSplit, LeavesThePackedProductWhenItCannotSplit) {
  std::vector<Options> cases(4);
  cases[0].product_is_output = true;                                      // read whole elsewhere
  cases[1].slices = {{0, 10, -1}, {5, 15, -1}};                           // overlapping: more work
  cases[2].slices = {{0, kE, -1}, {0, 2, 1}};                             // a Slice of the rows
  cases[3].slices = {{0, kE, -1}, {kE, kN, -1, 2}};                       // a step
  for (size_t i = 0; i < cases.size(); ++i) {
    Graph g = rewritten(cases[i]);
    EXPECT_EQ(count_op(g, "MatMul"), 1) << "case " << i;
    expect_same_outputs(cases[i]);
  }
}

}  // namespace
}  // namespace kiln
