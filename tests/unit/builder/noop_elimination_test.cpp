// noop_elimination: Dropouts and Pads that copy their input are removed once folding has made their
// ratio, training mode and pads constants (asserted on the graph), the ones that do not copy are
// kept, and the model gives the same outputs with the pass on and off.
#include <gtest/gtest.h>

#include "builder/passes/pass.h"
#include "builder/plan/build_plan.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"
#include "unit/builder/graph_test_util.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

using testing::count_op;

// x -> Dropout(ratio 0, training true: a folded Cast) -> Relu -> Pad(pads: a folded Sub, all 0)
//   -> Dropout(no training input) -> y (a graph output: Relu writes it directly afterwards).
OnnxModelBuilder noop_model() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}});
  b.initializer_f("ratio0", {0.0f}, {});
  b.initializer("one", {1}, {});
  b.initializer("eights", {1, 0, 2, 0, 1, 0, 2, 0}, {8});
  OnnxModelBuilder::int_attr(b.node("Cast", {"one"}, {"train"}), "to", 9);  // BOOL
  b.node("Dropout", {"x", "ratio0", "train"}, {"d1"});
  b.node("Relu", {"d1"}, {"r"});
  b.node("Sub", {"eights", "eights"}, {"zero_pads"});
  b.node("Pad", {"r", "zero_pads"}, {"p"});
  b.node("Dropout", {"p"}, {"y"});
  b.output("y");
  return b;
}

TEST(NoopElimination, RemovesCopyingDropoutsAndZeroPadsAfterFolding) {
  auto g = noop_model().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  PassContext ctx;
  ASSERT_TRUE(shape_inference(*g, ctx).ok());
  ASSERT_TRUE(constant_folding(*g, ctx).ok());
  g->compact();
  ASSERT_EQ(count_op(*g, "Dropout"), 2);
  ASSERT_EQ(count_op(*g, "Pad"), 1);
  ASSERT_TRUE(noop_elimination(*g, ctx).ok());
  g->compact();
  EXPECT_EQ(count_op(*g, "Dropout"), 0);
  EXPECT_EQ(count_op(*g, "Pad"), 0);
  ASSERT_EQ(count_op(*g, "Relu"), 1);
  for (const auto& n : g->nodes)
    if (!n.removed && n.op_type == "Relu") {
      EXPECT_EQ(g->values[n.inputs[0]].name, "x");
      EXPECT_EQ(g->values[n.outputs[0]].name, "y");  // the output keeps its name
    }
}

TEST(NoopElimination, KeepsDropoutsAndPadsThatChangeTheirInput) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{3}});
  b.initializer_f("half", {0.5f}, {});
  b.initializer("one", {1}, {});
  b.initializer("pads", {0, 1, 0, 0}, {4});
  OnnxModelBuilder::int_attr(b.node("Cast", {"one"}, {"train"}), "to", 9);
  b.node("Dropout", {"x", "half", "train"}, {"d_train"});     // training with ratio 0.5: not a copy
  b.node("Dropout", {"x"}, {"d_mask", "mask"});                // its mask is read
  b.node("Pad", {"x", "pads"}, {"padded"});                    // a real pad
  b.node("Relu", {"x"}, {"rx"});
  b.node("Dropout", {"rx", "half"}, {"d_inference"});          // inference: a copy, removed
  b.output("d_train").output("d_mask").output("mask").output("padded").output("d_inference");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  PassContext ctx;
  ASSERT_TRUE(shape_inference(*g, ctx).ok());
  ASSERT_TRUE(constant_folding(*g, ctx).ok());
  ASSERT_TRUE(noop_elimination(*g, ctx).ok());
  g->compact();
  EXPECT_EQ(count_op(*g, "Dropout"), 2);
  EXPECT_EQ(count_op(*g, "Pad"), 1);
  for (const auto& n : g->nodes)
    if (!n.removed && n.op_type == "Relu") {
      EXPECT_EQ(g->values[n.outputs[0]].name, "d_inference");
    }
}

TEST(NoopElimination, SameOutputsWithThePassOnAndOff) {
  auto g = noop_model().import();
  ASSERT_TRUE(g.ok());
  Tensor x = Tensor::zeros(DType::kFloat32, Shape{2, 3, 4, 5});
  for (int64_t i = 0; i < x.numel(); ++i) x.as<float>()[i] = static_cast<float>(i % 7) - 3.0f;
  std::vector<std::vector<float>> outs;
  for (const bool on : {true, false}) {
    BuildOptions opts;
    opts.input_shapes["x"] = x.shape();
    if (!on) opts.disabled_passes = {"noop_elimination"};
    auto plan = build_plan(*g, opts);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    auto ctx = ExecutionContext::create(*plan);
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
    ASSERT_TRUE((*ctx)->run().ok());
    const TensorView& y = (*ctx)->output(0);
    outs.emplace_back(y.as<float>(), y.as<float>() + y.numel());
  }
  EXPECT_EQ(outs[0], outs[1]);
  ASSERT_EQ(outs[0].size(), 120u);
  for (size_t i = 0; i < outs[0].size(); ++i) EXPECT_EQ(outs[0][i], std::max(0.0f, x.as<float>()[i]));
}

}  // namespace
}  // namespace kiln
