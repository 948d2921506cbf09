// shape_sources: a Shape of a value an attention fusion takes inside its node, whose dims are known
// sizes or sums of graph-input dims, reads the graph inputs instead (no longer a reader of that
// value, so the attention fuses); one with a dim it cannot express (a product), and Shapes of values
// away from any attention, are left alone. Asserted on the rewritten graph and by running the plan
// with the pass on and off at points of the profile.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "builder/build_profile.h"
#include "builder/optimization_profile.h"
#include "builder/passes/pass.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

constexpr int64_t kD = 4;

// One head with a KV cache: q, k_new, v_new [batch, 1, S, 4], past_k, past_v [batch, 1, P, 4];
// k = Concat(past_k, k_new) [batch, 1, P+S, 4] (v alike); out = Softmax(q·kᵀ)·v [batch, 1, S, 4].
// k_shape = Shape(k) (a graph output; its dim 2 sizes an additive zero mask on the scores, its
// batch gives y = Reshape(out, [batch, -1]));
// flat = Reshape(out, [-1, 4]) and flat_shape = Shape(flat) ([batch·S, 4]: a product);
// q_relu_shape = Shape(Relu(q)) (no attention value).
Graph model() {
  OnnxModelBuilder b;
  for (const char* n : {"q", "k_new", "v_new"}) b.input(n, DType::kFloat32, {std::string("batch"), int64_t{1}, std::string("S"), kD});
  for (const char* n : {"past_k", "past_v"}) b.input(n, DType::kFloat32, {std::string("batch"), int64_t{1}, std::string("P"), kD});
  b.initializer("i0", {0}, {}).initializer("axes0", {0}, {1}).initializer("minus1", {-1}, {1});
  b.initializer("flat_target", {-1, kD}, {2});
  OnnxModelBuilder::int_attr(b.node("Concat", {"past_k", "k_new"}, {"k"}, "concat_k"), "axis", 2);
  OnnxModelBuilder::int_attr(b.node("Concat", {"past_v", "v_new"}, {"v"}, "concat_v"), "axis", 2);
  b.node("Shape", {"k"}, {"k_shape"}, "shape_k");
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"k"}, {"kt"}, "kt"), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"q", "kt"}, {"scores"}, "qk");
  // An additive mask of zeros [1, P+S] whose shape comes from Shape(k): built from the Concat the
  // fusion takes in, so without the rewrite it would be computed from the fused node's own output.
  b.initializer("two1", {2}, {1}).initializer("three1", {3}, {1}).initializer("one1", {1}, {1});
  b.initializer_f("zero_f", {0.0f}, {1});
  b.node("Slice", {"k_shape", "two1", "three1"}, {"total1"}, "slice_total");
  OnnxModelBuilder::int_attr(b.node("Concat", {"one1", "total1"}, {"mask_shape"}, "mask_shape"), "axis", 0);
  b.node("Expand", {"zero_f", "mask_shape"}, {"mask"}, "mask");
  b.node("Add", {"scores", "mask"}, {"masked"}, "add_mask");
  OnnxModelBuilder::int_attr(b.node("Softmax", {"masked"}, {"p"}, "softmax"), "axis", -1);
  b.node("MatMul", {"p", "v"}, {"out"}, "pv");
  b.node("Gather", {"k_shape", "i0"}, {"batch"}, "gather_batch");
  b.node("Unsqueeze", {"batch", "axes0"}, {"batch1"}, "unsqueeze_batch");
  OnnxModelBuilder::int_attr(b.node("Concat", {"batch1", "minus1"}, {"y_target"}, "y_target"), "axis", 0);
  b.node("Reshape", {"out", "y_target"}, {"y"}, "reshape_y");
  b.node("Reshape", {"out", "flat_target"}, {"flat"}, "reshape_flat");
  b.node("Shape", {"flat"}, {"flat_shape"}, "shape_flat");
  b.node("Relu", {"q"}, {"q_relu"}, "relu");
  b.node("Shape", {"q_relu"}, {"q_relu_shape"}, "shape_relu");
  b.output("y").output("k_shape").output("flat_shape").output("q_relu_shape");
  auto g = b.import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::move(g).value();
}

int live_ops(const Graph& g, const std::string& op) {
  int c = 0;
  for (const auto& n : g.nodes) c += !n.removed && n.op_type == op;
  return c;
}

const Node* node_named(const Graph& g, const std::string& name) {
  for (const auto& n : g.nodes)
    if (!n.removed && n.name == name) return &n;
  return nullptr;
}

PassContext run_ranged(Graph& g, std::set<std::string> disabled) {
  PassContext ctx;
  ctx.dim_ranges = {{"batch", {1, 2}}, {"S", {1, 8}}, {"P", {1, 8}}};
  ctx.disabled = std::move(disabled);
  EXPECT_TRUE(run_pass_pipeline(g, ctx).ok());
  return ctx;
}

TEST(ShapeSources, AShapeOfTheCacheConcatReadsTheInputsAndTheAttentionFuses) {
  Graph g = model();
  run_ranged(g, {});
  EXPECT_EQ(node_named(g, "shape_k"), nullptr);
  EXPECT_NE(node_named(g, "shape_k/from_inputs/Concat"), nullptr);
  EXPECT_EQ(live_ops(g, "Attention"), 1);
  const Value& ks = g.values[g.find_value("k_shape")];
  ASSERT_TRUE(ks.sym_value.has_value());
  EXPECT_EQ(sym_shape_str(*ks.sym_value),
            sym_shape_str({Dim::sym("batch"), Dim::known(1), dim_add(Dim::sym("P"), Dim::sym("S")), Dim::known(kD)}));
  // batch·S is no sum of input dims, and Relu(q) is no attention value: those Shapes stay.
  EXPECT_NE(node_named(g, "shape_flat"), nullptr);
  EXPECT_NE(node_named(g, "shape_relu"), nullptr);

  // Without the pass the mask is computed from Shape(k), k the fused node's own output: not fused.
  Graph off = model();
  run_ranged(off, {"shape_sources"});
  EXPECT_EQ(live_ops(off, "Attention"), 0);
}

struct Outputs {
  std::vector<float> y;
  std::vector<int64_t> k_shape, flat_shape;
};

std::vector<float> wave(int64_t n, float phase) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + phase);
  return v;
}

Outputs run(int64_t batch, int64_t s, int64_t p, const std::set<std::string>& disabled) {
  Outputs o;
  const Graph g = model();
  auto rp = resolve_profile(g, ProfileConfig{"ranged",
                                             {{"batch", DimRange{1, 2, 2}}, {"S", DimRange{1, 4, 8}}, {"P", DimRange{1, 4, 8}}},
                                             {},
                                             0});
  EXPECT_TRUE(rp.ok()) << rp.status().message();
  if (!rp.ok()) return o;
  auto plan = build_profile_plan(g, *rp, disabled);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return o;
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return o;
  std::vector<Tensor> in;
  float phase = 0.1f;
  for (const char* n : {"q", "k_new", "v_new", "past_k", "past_v"}) {
    const int64_t len = n[0] == 'p' ? p : s;
    in.push_back(Tensor::from_vector<float>(wave(batch * len * kD, phase += 0.9f), Shape{batch, 1, len, kD}));
    EXPECT_TRUE((*ctx)->set_input(n, in.back().view()).ok());
  }
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return o;
  const TensorView& y = (*ctx)->output(0);
  EXPECT_EQ(y.shape, (Shape{batch, s * kD}));
  o.y.assign(y.as<float>(), y.as<float>() + y.numel());
  const TensorView& ks = (*ctx)->output(1);
  o.k_shape.assign(ks.as<int64_t>(), ks.as<int64_t>() + ks.numel());
  const TensorView& fs = (*ctx)->output(2);
  o.flat_shape.assign(fs.as<int64_t>(), fs.as<int64_t>() + fs.numel());
  return o;
}

TEST(ShapeSources, SameOutputsWithThePassOnAndOff) {
  for (auto [batch, s, p] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {2, 3, 5}, {2, 8, 8}}) {
    const Outputs on = run(batch, s, p, {});
    const Outputs off = run(batch, s, p, {"shape_sources"});
    EXPECT_EQ(on.k_shape, (std::vector<int64_t>{batch, 1, p + s, kD}));
    EXPECT_EQ(on.flat_shape, (std::vector<int64_t>{batch * s, kD}));
    EXPECT_EQ(on.k_shape, off.k_shape);
    EXPECT_EQ(on.flat_shape, off.flat_shape);
    ASSERT_EQ(on.y.size(), static_cast<size_t>(batch * s * kD));
    ASSERT_EQ(on.y.size(), off.y.size());
    for (size_t i = 0; i < on.y.size(); ++i) EXPECT_NEAR(on.y[i], off.y[i], 1e-5) << "element " << i;
  }
}

}  // namespace
}  // namespace kiln
