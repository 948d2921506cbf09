// Folding of the exporter's Shape arithmetic under a profile with a ranged dim: Shape -> Gather/Slice
// -> arithmetic chains that read only static dims of a value with a symbolic batch become
// constants; chains that read the batch stay and run at run time. On a ViT-like sequence-first block
// with a ranged batch this lets packed_projection_split split the q/k/v Slices (their bounds come
// from Shape(x)[-1]) and selected_row_narrowing narrow through the Reshapes whose run-time targets
// merge the batch into the row axis. Asserted on the rewritten graph, and run at both batches with
// the rewrites on and off (same outputs).
#include <gtest/gtest.h>

#include <cmath>

#include "builder/build_profile.h"
#include "builder/passes/pass.h"
#include "builder/optimization_profile.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

constexpr int64_t kS = 5, kD = 6;

std::vector<float> values(int64_t n, float phase) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * std::sin(0.37f * static_cast<float>(i) + phase);
  return v;
}

const Value* value_named(const Graph& g, const std::string& name) {
  const int v = g.find_value(name);
  return v < 0 ? nullptr : &g.values[v];
}

const Node* node_named(const Graph& g, const std::string& name) {
  for (const auto& n : g.nodes)
    if (!n.removed && n.name == name) return &n;
  return nullptr;
}

int live_ops(const Graph& g, const std::string& op) {
  int c = 0;
  for (const auto& n : g.nodes) c += !n.removed && n.op_type == op;
  return c;
}

// Runs the pipeline as build_profile_plan does for a profile whose batch ranges over [1, 2].
PassContext run_ranged(Graph& g, std::set<std::string> disabled = {}) {
  PassContext ctx;
  ctx.dim_ranges["batch"] = {1, 2};
  ctx.disabled = std::move(disabled);
  Status st = run_pass_pipeline(g, ctx);
  EXPECT_TRUE(st.ok()) << st.message();
  return ctx;
}

// Builds the model's plan for the ranged profile and runs it on x [batch, S, D]; returns output 0.
std::vector<float> run_plan(const Graph& g, int64_t batch, const std::set<std::string>& disabled, Shape* out_shape) {
  auto rp = resolve_profile(g, ProfileConfig{"ranged", {{"batch", DimRange{1, 2, 2}}}, {}, 0});
  EXPECT_TRUE(rp.ok()) << rp.status().message();
  if (!rp.ok()) return {};
  auto plan = build_profile_plan(g, *rp, disabled);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  Tensor x = Tensor::from_vector<float>(values(batch * kS * kD, 0.3f), Shape{batch, kS, kD});
  EXPECT_TRUE((*ctx)->set_input("x", x.view()).ok());
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return {};
  const TensorView& y = (*ctx)->output(0);
  *out_shape = y.shape;
  return std::vector<float>(y.as<float>(), y.as<float>() + y.numel());
}

// x [batch, S, D]: e = (Shape(x)[-1:] + 2) / 3 and s = Shape(x)[1] read static dims; b = Shape(x)[0]
// reads the batch. y = Reshape(Slice(x, 0, e, axis -1), [b, s, e]).
Graph shape_chain_model() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {std::string("batch"), kS, kD});
  b.initializer("last", {-1}, {1}).initializer("one", {1}, {}).initializer("zero", {0}, {});
  b.initializer("two", {2}, {1}).initializer("three", {3}, {1}).initializer("start", {0}, {1});
  b.initializer("axes0", {0}, {1});
  b.node("Shape", {"x"}, {"shp"}, "shape");
  b.node("Gather", {"shp", "last"}, {"e_full"}, "gather_last");
  b.node("Add", {"e_full", "two"}, {"e_plus"}, "add");
  b.node("Div", {"e_plus", "three"}, {"e"}, "div");
  b.node("Gather", {"shp", "one"}, {"s"}, "gather_seq");
  b.node("Gather", {"shp", "zero"}, {"b"}, "gather_batch");
  b.node("Unsqueeze", {"s", "axes0"}, {"s1"}, "unsqueeze_seq");
  b.node("Unsqueeze", {"b", "axes0"}, {"b1"}, "unsqueeze_batch");
  OnnxModelBuilder::int_attr(b.node("Concat", {"b1", "s1", "e"}, {"target"}, "concat"), "axis", 0);
  b.node("Slice", {"x", "start", "e", "last"}, {"sliced"}, "slice");
  b.node("Reshape", {"sliced", "target"}, {"y"}, "reshape");
  b.output("y");
  auto g = b.import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::move(g).value();
}

TEST(ShapeFolding, StaticDimsOfASymbolicShapeFoldAndTheBatchStaysSymbolic) {
  Graph g = shape_chain_model();
  run_ranged(g);
  // (6 + 2) / 3 = 2 from the static last dim, 5 from the static sequence dim.
  const Value* e = value_named(g, "e");
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->is_constant());
  EXPECT_EQ(e->constant.shape(), Shape{1});
  EXPECT_EQ(e->constant.as<int64_t>()[0], 2);
  const Value* s = value_named(g, "s");
  ASSERT_TRUE(s->is_constant());
  EXPECT_EQ(s->constant.shape(), Shape{});  // a scalar index gives a scalar
  EXPECT_EQ(s->constant.as<int64_t>()[0], kS);
  // The batch is read at run time: its Gather and the target built from it stay nodes.
  EXPECT_FALSE(value_named(g, "b")->is_constant());
  EXPECT_FALSE(value_named(g, "target")->is_constant());
  EXPECT_NE(node_named(g, "gather_batch"), nullptr);
  EXPECT_NE(node_named(g, "concat"), nullptr);
  EXPECT_EQ(node_named(g, "gather_last"), nullptr);
  EXPECT_EQ(node_named(g, "div"), nullptr);
  const Value* y = value_named(g, "y");
  ASSERT_TRUE(y->shape.has_value());
  EXPECT_EQ(sym_shape_str(*y->shape), sym_shape_str({Dim::sym("batch"), Dim::known(kS), Dim::known(2)}));

  // And it runs: the batch part of the target is computed per run.
  for (int64_t batch : {int64_t{1}, int64_t{2}}) {
    Shape shape;
    const auto out = run_plan(shape_chain_model(), batch, {}, &shape);
    EXPECT_EQ(shape, (Shape{batch, kS, 2}));
    const auto x = values(batch * kS * kD, 0.3f);
    ASSERT_EQ(out.size(), static_cast<size_t>(batch * kS * 2));
    for (int64_t r = 0; r < batch * kS; ++r)
      for (int64_t c = 0; c < 2; ++c) EXPECT_EQ(out[r * 2 + c], x[r * kD + c]) << "row " << r << " batch " << batch;
  }
}

TEST(ShapeFolding, ElementsDoNotPassACastToFloat) {
  // Integer rules (Div truncates) would give a float value the wrong elements.
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {std::string("batch"), kS, kD});
  b.initializer("last", {-1}, {1});
  b.node("Shape", {"x"}, {"shp"});
  b.node("Gather", {"shp", "last"}, {"e"});
  OnnxModelBuilder::int_attr(b.node("Cast", {"shp"}, {"shp_f"}), "to", static_cast<int64_t>(DType::kFloat32));
  OnnxModelBuilder::int_attr(b.node("Cast", {"shp"}, {"shp_i32"}), "to", static_cast<int64_t>(DType::kInt32));
  b.output("e").output("shp_f").output("shp_i32");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  for (auto& n : g->nodes) infer_node(*g, n);
  EXPECT_FALSE(value_named(*g, "shp_f")->sym_value.has_value());
  ASSERT_TRUE(value_named(*g, "shp_i32")->sym_value.has_value());
  EXPECT_EQ(value_named(*g, "shp_i32")->sym_value->size(), 3u);
}

// A ViT encoder block's attention half as torchvision exports it (sequence-first), with a Relu in
// place of the attention (which needs every token's k and v; here those are a graph output):
//   x [batch, S, D] -> Transpose [S, batch, D] -> x·W[D, 3D] + b -> q/k/v Slices with bounds
//   (Shape(proj)[-1] + 2) / 3 · {1, 2, 3} -> Relu(q) -> Reshape [S·batch, D] -> Gemm -> Reshape
//   [S, batch, D] -> Transpose -> + x -> Gather(class token, axis 1) -> y [batch, D]
// with both Reshape targets computed from Shape of the value they reshape.
// `flat_is_output`: the merged [S·batch, D] value is also a graph output, so it stays whole.
Graph vit_like_model(bool flat_is_output = false) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {std::string("batch"), kS, kD});
  b.initializer_f("w_in", values(kD * 3 * kD, 1.0f), {kD, 3 * kD});
  b.initializer_f("b_in", values(3 * kD, 2.0f), {3 * kD});
  b.initializer_f("wo", values(kD * kD, 3.0f), {kD, kD});
  b.initializer_f("bo", values(kD, 4.0f), {kD});
  b.initializer("last", {-1}, {1}).initializer("two", {2}, {1}).initializer("three", {3}, {1});
  b.initializer("one1", {1}, {1}).initializer("zero1", {0}, {1}).initializer("axes0", {0}, {1});
  b.initializer("i0", {0}, {}).initializer("i1", {1}, {}).initializer("i2", {2}, {});
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"x"}, {"xt"}, "to_sbd"), "perm", {1, 0, 2});
  b.node("MatMul", {"xt", "w_in"}, {"mm"}, "in_proj");
  b.node("Add", {"b_in", "mm"}, {"proj"}, "in_proj_bias");
  b.node("Shape", {"proj"}, {"proj_shape"}, "proj_shape");
  b.node("Gather", {"proj_shape", "last"}, {"e3"}, "e3");
  b.node("Add", {"e3", "two"}, {"e3p"}, "e3p");
  b.node("Div", {"e3p", "three"}, {"e"}, "e");
  b.node("Mul", {"e", "one1"}, {"e1"}, "e1");
  b.node("Mul", {"e", "two"}, {"e2"}, "e2");
  b.node("Mul", {"e", "three"}, {"e3x"}, "e3x");
  b.node("Slice", {"proj", "zero1", "e1", "last"}, {"q"}, "q_slice");
  b.node("Slice", {"proj", "e1", "e2", "last"}, {"k"}, "k_slice");
  b.node("Slice", {"proj", "e2", "e3x", "last"}, {"v"}, "v_slice");
  b.node("Add", {"k", "v"}, {"kv"}, "kv");
  b.node("Relu", {"q"}, {"att"}, "attention");
  // [S·batch, D] from Shape(att): S·batch from dims 0 and 1 (run time), D from dim 2 (static).
  b.node("Shape", {"att"}, {"att_shape"}, "att_shape");
  b.node("Gather", {"att_shape", "i0"}, {"s"}, "s");
  b.node("Gather", {"att_shape", "i1"}, {"bt"}, "bt");
  b.node("Gather", {"att_shape", "i2"}, {"d"}, "d");
  b.node("Mul", {"s", "bt"}, {"sb"}, "sb");
  b.node("Unsqueeze", {"sb", "axes0"}, {"sb1"});
  b.node("Unsqueeze", {"d", "axes0"}, {"d1"});
  OnnxModelBuilder::int_attr(b.node("Concat", {"sb1", "d1"}, {"merge_target"}), "axis", 0);
  b.node("Reshape", {"att", "merge_target"}, {"flat"}, "merge");
  b.node("Gemm", {"flat", "wo", "bo"}, {"o_flat"}, "out_proj");
  b.node("Shape", {"o_flat"}, {"o_shape"}, "o_shape");
  b.node("Gather", {"o_shape", "i1"}, {"od"}, "od");
  b.node("Unsqueeze", {"s", "axes0"}, {"s1"});
  b.node("Unsqueeze", {"bt", "axes0"}, {"bt1"});
  b.node("Unsqueeze", {"od", "axes0"}, {"od1"});
  OnnxModelBuilder::int_attr(b.node("Concat", {"s1", "bt1", "od1"}, {"unmerge_target"}), "axis", 0);
  b.node("Reshape", {"o_flat", "unmerge_target"}, {"o"}, "unmerge");
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"o"}, {"ob"}, "to_bsd"), "perm", {1, 0, 2});
  b.node("Add", {"x", "ob"}, {"r"}, "residual");
  OnnxModelBuilder::int_attr(b.node("Gather", {"r", "i0"}, {"y"}, "class_token"), "axis", 1);
  b.output("y").output("kv");
  if (flat_is_output) b.output("flat");
  auto g = b.import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::move(g).value();
}

// Dim 0 of value `name`, as text ("?" when unknown).
std::string dim0(const Graph& g, const std::string& name) {
  const Value* v = value_named(g, name);
  return v && v->shape && !v->shape->empty() ? (*v->shape)[0].str() : "?";
}

TEST(ShapeFolding, RangedVitLikeBlockSplitsThePackedProjectionAndNarrows) {
  Graph g = vit_like_model();
  PassContext ctx = run_ranged(g, {"matmul_epilogue_fusion"});
  // packed_projection_split: one MatMul per Slice, no Slice of the product left.
  EXPECT_EQ(live_ops(g, "MatMul"), 3);
  for (const char* s : {"q_slice", "k_slice", "v_slice"}) EXPECT_EQ(node_named(g, s), nullptr) << s;
  // selected_row_narrowing: token 0 only up to the merge, the block of its batch rows between the
  // Reshapes (a symbolic block: their targets get -1 there), whole k and v.
  EXPECT_EQ(dim0(g, "q"), "1");
  EXPECT_EQ(dim0(g, "att"), "1");
  EXPECT_EQ(dim0(g, "flat"), "batch");
  EXPECT_EQ(dim0(g, "o_flat"), "batch");
  EXPECT_EQ(dim0(g, "o"), "1");
  EXPECT_EQ(dim0(g, "k"), std::to_string(kS));
  EXPECT_EQ(dim0(g, "v"), std::to_string(kS));
  bool logged = false;
  for (const auto& l : ctx.log) logged |= l.find("selected_row_narrowing:") != std::string::npos;
  EXPECT_TRUE(logged);

  // Same outputs with the rewrites off, at both batches of the profile.
  for (int64_t batch : {int64_t{1}, int64_t{2}}) {
    Shape on_shape, off_shape;
    const auto on = run_plan(vit_like_model(), batch, {}, &on_shape);
    const auto off = run_plan(vit_like_model(), batch, {"packed_projection_split", "selected_row_narrowing"}, &off_shape);
    EXPECT_EQ(on_shape, (Shape{batch, kD}));
    EXPECT_EQ(on_shape, off_shape);
    ASSERT_EQ(on.size(), off.size());
    for (size_t i = 0; i < on.size(); ++i) EXPECT_NEAR(on[i], off[i], 1e-5) << "element " << i << " batch " << batch;
  }
}

TEST(ShapeFolding, ASymbolicBlockThatWouldNeedASliceIsNotNarrowed) {
  // The Gemm could take the class token's block of batch rows only by slicing the whole merged
  // value, whose bounds (0, batch) are not constants: narrowing stops after the unmerge Reshape.
  Graph g = vit_like_model(/*flat_is_output=*/true);
  run_ranged(g, {"matmul_epilogue_fusion"});
  EXPECT_EQ(dim0(g, "o_flat"), "(5*batch)");
  EXPECT_EQ(dim0(g, "o"), std::to_string(kS));
  EXPECT_EQ(dim0(g, "att"), std::to_string(kS));
  const Value* ob = value_named(g, "ob");
  ASSERT_TRUE(ob && ob->shape && ob->shape->size() == 3);
  EXPECT_EQ((*ob->shape)[1].str(), "1");  // [batch, 1, D]: the tail after the inserted Slice narrows
  for (int64_t batch : {int64_t{1}, int64_t{2}}) {
    Shape on_shape, off_shape;
    const auto on = run_plan(vit_like_model(true), batch, {}, &on_shape);
    const auto off = run_plan(vit_like_model(true), batch, {"selected_row_narrowing"}, &off_shape);
    EXPECT_EQ(on_shape, (Shape{batch, kD}));
    ASSERT_EQ(on.size(), off.size());
    for (size_t i = 0; i < on.size(); ++i) EXPECT_NEAR(on[i], off[i], 1e-5) << "element " << i << " batch " << batch;
  }
}

TEST(ShapeFolding, FixedProfileStillFoldsEverything) {
  // With the batch fixed the batch-reading chains fold too (as before): no Shape is left.
  Graph g = vit_like_model();
  for (auto& v : g.values)
    if (v.shape)
      for (auto& d : *v.shape)
        if (d.sym_name() == "batch") d = Dim::known(2);
  PassContext ctx;
  ASSERT_TRUE(run_pass_pipeline(g, ctx).ok());
  EXPECT_EQ(live_ops(g, "Shape"), 0);
  EXPECT_EQ(live_ops(g, "Concat"), 0);
  EXPECT_EQ(dim0(g, "o_flat"), "2");
}

}  // namespace
}  // namespace kiln
