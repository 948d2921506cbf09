// Each pass is tested twice: its rewrite is asserted on the graph, and the model is run with the
// pass on and off and the outputs compared.
#include <gtest/gtest.h>

#include <cstring>

#include "builder/plan/build_plan.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"
#include "unit/builder/graph_test_util.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

using testing::count_op;

// x:[1, S, 8] -> Reshape(x, Concat(1, Unsqueeze(Gather(Shape(x), 1)), 2, 4)) -> Relu -> y
OnnxModelBuilder shape_subgraph_model() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{1}, std::string("S"), int64_t{8}});
  b.initializer("one", {1}, {1}).initializer("idx", {1}, {}).initializer("axes0", {0}, {1});
  b.initializer("two_four", {2, 4}, {2});
  b.node("Shape", {"x"}, {"shape_x"});
  b.node("Gather", {"shape_x", "idx"}, {"s"});
  b.node("Unsqueeze", {"s", "axes0"}, {"s1"});
  OnnxModelBuilder::int_attr(b.node("Concat", {"one", "s1", "two_four"}, {"target"}), "axis", 0);
  b.node("Reshape", {"x", "target"}, {"r"});
  b.node("Identity", {"r"}, {"r_id"});
  b.node("Relu", {"r_id"}, {"y"});
  b.node("Neg", {"x"}, {"unused"});  // dead: nobody reads it
  b.output("y");
  return b;
}

std::vector<float> run_model(const Graph& g, const std::set<std::string>& disabled, const Tensor& x) {
  BuildOptions opts;
  opts.input_shapes["x"] = x.shape();
  opts.disabled_passes = disabled;
  auto plan = build_plan(g, opts);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  EXPECT_TRUE((*ctx)->set_input("x", x.view()).ok());
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  const TensorView& y = (*ctx)->output(0);
  EXPECT_EQ(y.shape, (Shape{1, x.shape()[1], 2, 4}));
  return std::vector<float>(y.as<float>(), y.as<float>() + y.numel());
}

Tensor ramp(const Shape& s) {
  Tensor t = Tensor::zeros(DType::kFloat32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = static_cast<float>(i % 7) - 3.0f;
  return t;
}

TEST(ShapeInference, SymbolicDimsFlowThroughShapeArithmetic) {
  auto g = shape_subgraph_model().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  PassContext ctx;
  ASSERT_TRUE(shape_inference(*g, ctx).ok());
  const Value& y = g->values[g->find_value("y")];
  ASSERT_TRUE(y.shape.has_value());
  EXPECT_EQ(sym_shape_str(*y.shape), "[1, S, 2, 4]");
  EXPECT_EQ(y.dtype, DType::kFloat32);
  const Value& target = g->values[g->find_value("target")];
  ASSERT_TRUE(target.sym_value.has_value());
  EXPECT_EQ(sym_shape_str(*target.sym_value), "[1, S, 2, 4]");
}

TEST(ConstantFolding, ShapeSubgraphFoldsOnceShapesAreKnown) {
  auto g = shape_subgraph_model().import();
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(specialize_inputs(*g, {{"x", Shape{1, 5, 8}}}).ok());
  PassContext ctx;
  ASSERT_TRUE(run_pass_pipeline(*g, ctx).ok());
  EXPECT_EQ(count_op(*g, "Shape"), 0);
  EXPECT_EQ(count_op(*g, "Gather"), 0);
  EXPECT_EQ(count_op(*g, "Unsqueeze"), 0);
  EXPECT_EQ(count_op(*g, "Concat"), 0);
  EXPECT_EQ(count_op(*g, "Reshape"), 1);
  const Value& target = g->values[g->find_value("target")];
  ASSERT_TRUE(target.is_constant());
  EXPECT_EQ(std::vector<int64_t>(target.constant.as<int64_t>(), target.constant.as<int64_t>() + 4),
            (std::vector<int64_t>{1, 5, 2, 4}));
}

TEST(ConstantFolding, SymbolicShapeSubgraphStaysWhenDimsAreUnknown) {
  auto g = shape_subgraph_model().import();
  ASSERT_TRUE(g.ok());
  PassContext ctx;
  ASSERT_TRUE(run_pass_pipeline(*g, ctx).ok());
  EXPECT_EQ(count_op(*g, "Shape"), 1);  // S is unknown: the subgraph must survive to run time
}

TEST(IdentityElimination, RemovesIdentityAndKeepsOutputNames) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{3}});
  b.node("Identity", {"x"}, {"a"});
  b.node("Relu", {"a"}, {"b"});
  b.node("Identity", {"b"}, {"y"});
  b.output("y");
  auto g = b.import();
  ASSERT_TRUE(g.ok());
  PassContext ctx;
  ASSERT_TRUE(identity_elimination(*g, ctx).ok());
  g->compact();
  EXPECT_EQ(count_op(*g, "Identity"), 0);
  ASSERT_EQ(g->nodes.size(), 1u);
  EXPECT_EQ(g->values[g->nodes[0].outputs[0]].name, "y");
  EXPECT_EQ(g->values[g->nodes[0].inputs[0]].name, "x");
}

TEST(DeadNodeElimination, RemovesUnreadNodes) {
  auto g = shape_subgraph_model().import();
  ASSERT_TRUE(g.ok());
  PassContext ctx;
  ASSERT_TRUE(dead_node_elimination(*g, ctx).ok());
  g->compact();
  EXPECT_EQ(count_op(*g, "Neg"), 0);
  EXPECT_EQ(count_op(*g, "Relu"), 1);
}

// Pass on vs off: same outputs, for every pass of the pipeline.
TEST(PassPipeline, EachPassOnAndOffGivesTheSameOutputs) {
  auto g = shape_subgraph_model().import();
  ASSERT_TRUE(g.ok());
  Tensor x = ramp(Shape{1, 5, 8});
  const std::vector<float> all_on = run_model(*g, {}, x);
  ASSERT_EQ(all_on.size(), 40u);
  for (const auto& name : pass_names()) {
    const std::vector<float> off = run_model(*g, {name}, x);
    EXPECT_EQ(off, all_on) << "with pass " << name << " disabled";
  }
  const auto names = pass_names();
  const std::vector<float> none = run_model(*g, {names.begin(), names.end()}, x);
  EXPECT_EQ(none, all_on);
  for (size_t i = 0; i < all_on.size(); ++i) EXPECT_EQ(all_on[i], std::max(0.0f, x.as<float>()[i]));
}

TEST(PassPipeline, UnknownDisabledPassIsAnError) {
  auto g = shape_subgraph_model().import();
  ASSERT_TRUE(g.ok());
  PassContext ctx;
  ctx.disabled.insert("no_such_pass");
  Status st = run_pass_pipeline(*g, ctx);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no_such_pass"), std::string::npos);
}

TEST(Specialize, ConflictingSymbolBindingNamesBothInputs) {
  OnnxModelBuilder b;
  b.input("a", DType::kFloat32, {std::string("S"), int64_t{4}});
  b.input("c", DType::kFloat32, {std::string("S"), int64_t{4}});
  b.node("Add", {"a", "c"}, {"y"});
  b.output("y");
  auto g = b.import();
  ASSERT_TRUE(g.ok());
  Status st = specialize_inputs(*g, {{"a", Shape{3, 4}}, {"c", Shape{5, 4}}});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'S'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("input 'a'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("input 'c'"), std::string::npos) << st.message();
  Status st2 = specialize_inputs(*g, {{"a", Shape{3, 5}}});
  ASSERT_FALSE(st2.ok());
  EXPECT_NE(st2.message().find("dim 1 must be 4"), std::string::npos) << st2.message();
}

TEST(Importer, UnknownInputNameIsAClearError) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}});
  b.node("Relu", {"nope"}, {"y"}, "my_relu");
  b.output("y");
  auto g = b.import();
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("my_relu"), std::string::npos);
  EXPECT_NE(g.status().message().find("'nope'"), std::string::npos);
}

TEST(Importer, UnsupportedOpNamesNodeAndOpType) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}});
  b.node("FancyOp", {"x"}, {"y"}, "fancy");
  b.output("y");
  auto g = b.import();
  ASSERT_TRUE(g.ok());
  auto plan = build_plan(*g, {});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("fancy"), std::string::npos);
  EXPECT_NE(plan.status().message().find("FancyOp"), std::string::npos);
}

}  // namespace
}  // namespace kiln
