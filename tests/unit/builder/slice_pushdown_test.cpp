// slice_pushdown: a Slice of an elementwise Add's output moves onto the Add's inputs (the input
// that broadcasts along the axis stays whole), asserted on the rewritten graph, and the outputs
// are the same with the pass on and off; an Add whose output is read elsewhere stays whole.
// (The run-time bounds and ranged profiles of the ControlTransformer's step are covered by its
// end-to-end tests against PyTorch.)
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "builder/plan/build_plan.h"
#include "builder/passes/pass.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

constexpr int64_t kCached = 5, kNew = 3, kD = 8, kTable = 16;

std::vector<float> values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// all = concat(cached, new) + table[:total] (+ bias), y = all[:, -kNew:]; with `all_is_output`
// the sum is a graph output too.
OnnxModelBuilder model(bool bias, bool all_is_output) {
  OnnxModelBuilder b;
  b.input("cached", DType::kFloat32, {int64_t{1}, int64_t{kCached}, int64_t{kD}})
      .input("fresh", DType::kFloat32, {int64_t{1}, int64_t{kNew}, int64_t{kD}});
  b.initializer_f("table", values(kTable * kD, 7), {kTable, kD});
  b.initializer_f("bias", values(kD, 8), {kD});
  b.initializer("zero", {0}, {1});
  b.initializer("total", {kCached + kNew}, {1});
  b.initializer("minus_new", {-kNew}, {1});
  b.initializer("end", {std::numeric_limits<int64_t>::max()}, {1});
  b.initializer("axis0", {0}, {1});
  b.initializer("axis1", {1}, {1});
  OnnxModelBuilder::int_attr(b.node("Concat", {"cached", "fresh"}, {"projected"}), "axis", 1);
  b.node("Slice", {"table", "zero", "total", "axis0"}, {"positions"});
  b.node("Add", {"projected", "positions"}, {bias ? "with_pos" : "all"}, "add_positions");
  if (bias) b.node("Add", {"with_pos", "bias"}, {"all"}, "add_bias");
  b.node("Slice", {"all", "minus_new", "end", "axis1"}, {"y"}, "keep_new");
  b.output("y");
  if (all_is_output) b.output("all");
  return b;
}

Graph rewritten(bool bias, bool all_is_output) {
  auto g = model(bias, all_is_output).import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return Graph{};
  PassContext ctx;
  EXPECT_TRUE(run_pass_pipeline(*g, ctx).ok());
  return std::move(*g);
}

// Rows (axis 1) of the output of node `name`, or -1.
int64_t rows_of(const Graph& g, const std::string& name) {
  for (const auto& n : g.nodes)
    if (!n.removed && n.name == name && !n.outputs.empty()) {
      const auto& s = g.values[n.outputs[0]].shape;
      return s && s->size() == 3 && (*s)[1].is_known() ? (*s)[1].value : -1;
    }
  return -1;
}

std::vector<std::vector<float>> run(bool bias, bool all_is_output, bool pushdown) {
  auto g = model(bias, all_is_output).import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return {};
  BuildOptions opts;
  if (!pushdown) opts.disabled_passes = {"slice_pushdown"};
  auto plan = build_plan(*g, opts);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok());
  const Tensor cached = Tensor::from_vector<float>(values(kCached * kD, 1), Shape{1, kCached, kD});
  const Tensor fresh = Tensor::from_vector<float>(values(kNew * kD, 2), Shape{1, kNew, kD});
  EXPECT_TRUE((*ctx)->set_input("cached", cached.view()).ok());
  EXPECT_TRUE((*ctx)->set_input("fresh", fresh.view()).ok());
  const Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<std::vector<float>> outs;
  for (size_t i = 0; i < (*plan)->outputs.size(); ++i) {
    const TensorView& t = (*ctx)->output(static_cast<int>(i));
    outs.emplace_back(t.as<float>(), t.as<float>() + t.numel());
  }
  return outs;
}

TEST(SlicePushdown, AddComputesOnlyTheKeptRowsAndOutputsStayTheSame) {
  for (bool bias : {false, true}) {
    const Graph g = rewritten(bias, false);
    // Both Adds (the second's [D] bias broadcasts along the rows and stays whole) keep kNew rows.
    EXPECT_EQ(rows_of(g, "add_positions"), kNew) << "bias " << bias;
    if (bias) {
      EXPECT_EQ(rows_of(g, "add_bias"), kNew);
    }
    const auto on = run(bias, false, true), off = run(bias, false, false);
    ASSERT_EQ(on.size(), 1u);
    ASSERT_EQ(off.size(), 1u);
    ASSERT_EQ(on[0].size(), static_cast<size_t>(kNew * kD));
    EXPECT_EQ(on[0], off[0]) << "bias " << bias;
  }
}

TEST(SlicePushdown, AnAddReadElsewhereStaysWhole) {
  const Graph g = rewritten(false, true);
  EXPECT_EQ(rows_of(g, "add_positions"), kCached + kNew);
  const auto on = run(false, true, true), off = run(false, true, false);
  ASSERT_EQ(on.size(), 2u);
  EXPECT_EQ(on, off);
}

}  // namespace
}  // namespace kiln
