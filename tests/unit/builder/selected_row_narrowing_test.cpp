// selected_row_narrowing: a transformer block's tail (attention queries, output projection, head
// split/merge Reshapes, residual adds, MLP, a Transpose) read through a one-row Gather is narrowed to that row: asserted
// on the rewritten graph and run with the pass on and off (same outputs). Also where it must not
// narrow: a causal attention whose selected query is not the last, a value someone else reads.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "builder/plan/build_plan.h"
#include "builder/passes/pass.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"
#include "unit/builder/graph_test_util.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

constexpr int64_t kS = 6, kD = 8, kF = 16;

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

void string_attr(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

void float_attr(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

struct Options {
  std::string mask = "bool";  // kiln::Attention mask kind: bool (mask input) or causal
  int64_t index = -1;         // the row the Gather keeps
  bool residual_is_output = false;  // the residual sum r is also a graph output
};

// x [1, S, D] -> LayerNorm -> q/k/v -> kiln::Attention -> out proj -> r = x + o -> MLP -> y2 = r + m
// -> Transpose [1, D, S] -> Gather(index, axis 2) -> y [1, D]; k is a graph output (the cache).
OnnxModelBuilder block_model(const Options& o) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{1}, kS, kD});
  if (o.mask == "bool") b.input("mask", DType::kBool, {kS, kS});
  uint32_t seed = 1;
  auto weight = [&](const std::string& name, int64_t rows, int64_t cols) {
    b.initializer_f(name, random_values(rows * cols, seed++), {rows, cols});
  };
  b.initializer_f("ln_s", random_values(kD, seed++), {kD});
  b.initializer_f("ln_b", random_values(kD, seed++), {kD});
  for (const char* w : {"wq", "wk", "wv", "wo"}) weight(w, kD, kD);
  weight("w1", kD, kF);
  weight("w2", kF, kD);
  b.initializer_f("b1", random_values(kF, seed++), {kF});
  b.initializer("idx", {o.index}, {});
  b.node("LayerNormalization", {"x", "ln_s", "ln_b"}, {"ln"}, "ln");
  b.node("MatMul", {"ln", "wq"}, {"q"}, "q_proj");
  b.node("MatMul", {"ln", "wk"}, {"k"}, "k_proj");
  b.node("MatMul", {"ln", "wv"}, {"v"}, "v_proj");
  auto& att = o.mask == "bool" ? b.node("Attention", {"q", "k", "v", "mask"}, {"att"}, "attention")
                                : b.node("Attention", {"q", "k", "v"}, {"att"}, "attention");
  att.set_domain("kiln");
  OnnxModelBuilder::int_attr(att, "num_heads", 2);
  float_attr(att, "scale", 0.5f);
  string_attr(att, "mask", o.mask);
  b.node("MatMul", {"att", "wo"}, {"o"}, "out_proj");
  // Heads split and merged again: Reshapes that regroup only the dims after the row axis.
  b.initializer("split_shape", {1, kS, 2, kD / 2}, {4});
  b.initializer("merge_shape", {0, -1, kD}, {3});
  b.node("Reshape", {"o", "split_shape"}, {"o4"}, "split");
  b.node("Reshape", {"o4", "merge_shape"}, {"o3"}, "merge");
  b.node("Add", {"x", "o3"}, {"r"}, "residual1");
  b.node("MatMul", {"r", "w1"}, {"h"}, "fc1");
  b.node("Add", {"h", "b1"}, {"hb"}, "fc1_bias");
  b.node("Relu", {"hb"}, {"e"}, "act");
  b.node("MatMul", {"e", "w2"}, {"m"}, "fc2");
  b.node("Add", {"r", "m"}, {"y2"}, "residual2");
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"y2"}, {"t"}, "to_dsf"), "perm", {0, 2, 1});
  OnnxModelBuilder::int_attr(b.node("Gather", {"t", "idx"}, {"y"}, "select"), "axis", 2);
  b.output("y");
  b.output("k");
  if (o.residual_is_output) b.output("r");
  auto& model = b.proto();
  auto* kiln_opset = model.add_opset_import();
  kiln_opset->set_domain("kiln");
  kiln_opset->set_version(1);
  return b;
}

// The graph after the pipeline at the model's shapes (without the epilogue fusion, so every node
// of the model is still there to look at).
Graph rewritten(const Options& o, PassContext* ctx) {
  ctx->disabled.insert("matmul_epilogue_fusion");
  ctx->disabled.insert("elementwise_fusion");  // the rows are asserted on the nodes it would merge
  auto g = block_model(o).import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return Graph{};
  std::map<std::string, Shape> shapes{{"x", Shape{1, kS, kD}}};
  if (o.mask == "bool") shapes["mask"] = Shape{kS, kS};
  EXPECT_TRUE(specialize_inputs(*g, shapes).ok());
  EXPECT_TRUE(run_pass_pipeline(*g, *ctx).ok());
  return std::move(*g);
}

const Node* node_named(const Graph& g, const std::string& name) {
  for (const auto& n : g.nodes)
    if (!n.removed && n.name == name) return &n;
  return nullptr;
}

// The row dim of node `name`'s first output (axis 1 of [1, S, D]-like values), or -1.
int64_t rows_of(const Graph& g, const std::string& name) {
  const Node* n = node_named(g, name);
  if (!n || n->outputs.empty()) return -1;
  const Value& v = g.values[n->outputs[0]];
  return v.shape && v.shape->size() > 1 && (*v.shape)[1].is_known() ? (*v.shape)[1].value : -1;
}

using testing::count_op;

// Runs the model with `disabled` passes; returns every output's values.
std::vector<std::vector<float>> run(const Options& o, const std::set<std::string>& disabled) {
  auto g = block_model(o).import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return {};
  BuildOptions opts;
  opts.input_shapes["x"] = Shape{1, kS, kD};
  if (o.mask == "bool") opts.input_shapes["mask"] = Shape{kS, kS};
  opts.disabled_passes = disabled;
  auto plan = build_plan(*g, opts);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok());
  Tensor x = Tensor::from_vector<float>(random_values(kS * kD, 99), Shape{1, kS, kD});
  Tensor mask = Tensor::zeros(DType::kBool, Shape{kS, kS});
  for (int64_t i = 0; i < kS; ++i)
    for (int64_t j = 0; j < kS; ++j) mask.as<bool>()[i * kS + j] = (i + j) % 3 != 1 || j == 0;
  EXPECT_TRUE((*ctx)->set_input("x", x.view()).ok());
  if (o.mask == "bool") {
    EXPECT_TRUE((*ctx)->set_input("mask", mask.view()).ok());
  }
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
  const auto on = run(o, {});
  const auto off = run(o, {"selected_row_narrowing"});
  ASSERT_EQ(on.size(), off.size());
  ASSERT_FALSE(on.empty());
  EXPECT_EQ(on[0].size(), static_cast<size_t>(kD));
  for (size_t i = 0; i < on.size(); ++i) {
    ASSERT_EQ(on[i].size(), off[i].size());
    for (size_t j = 0; j < on[i].size(); ++j) EXPECT_NEAR(on[i][j], off[i][j], 1e-5) << "output " << i << " element " << j;
  }
}

TEST(SelectedRowNarrowing, TransformerTailComputesOnlyTheSelectedRow) {
  for (int64_t index : {int64_t{-1}, int64_t{0}, int64_t{4}}) {
    Options o;
    o.index = index;
    PassContext ctx;
    Graph g = rewritten(o, &ctx);
    for (const char* n : {"q_proj", "attention", "out_proj", "split", "merge", "residual1", "fc1", "fc1_bias", "act", "fc2",
                           "residual2"})
      EXPECT_EQ(rows_of(g, n), 1) << n << " index " << index;
    // K and V (the cache every token needs) and the LayerNorm they share stay whole.
    EXPECT_EQ(rows_of(g, "k_proj"), kS);
    EXPECT_EQ(rows_of(g, "v_proj"), kS);
    EXPECT_EQ(rows_of(g, "ln"), kS);
    // One-row Slices where the narrowed nodes read whole values: ln (for q), x (the residual), mask.
    EXPECT_EQ(count_op(g, "Slice"), 3);
    expect_same_outputs(o);
  }
}

TEST(SelectedRowNarrowing, CausalAttentionNarrowsOnlyForTheLastQuery) {
  Options last;
  last.mask = "causal";
  last.index = -1;
  PassContext c1;
  Graph g1 = rewritten(last, &c1);
  EXPECT_EQ(rows_of(g1, "attention"), 1);
  expect_same_outputs(last);

  // Query 2 of a causal attention sits at position 2 only among all six: alone it would be the last.
  Options middle = last;
  middle.index = 2;
  PassContext c2;
  Graph g2 = rewritten(middle, &c2);
  EXPECT_EQ(rows_of(g2, "attention"), kS);
  EXPECT_EQ(rows_of(g2, "out_proj"), 1);  // reads a one-row Slice of the attention output
  EXPECT_EQ(rows_of(g2, "fc2"), 1);  // what follows the attention still narrows
  expect_same_outputs(middle);
}

TEST(SelectedRowNarrowing, ValuesReadElsewhereStayWhole) {
  Options o;
  o.residual_is_output = true;
  PassContext ctx;
  Graph g = rewritten(o, &ctx);
  // r is a graph output: r and everything before it stay whole, the MLP after it narrows.
  EXPECT_EQ(rows_of(g, "residual1"), kS);
  EXPECT_EQ(rows_of(g, "attention"), kS);
  EXPECT_EQ(rows_of(g, "fc1"), 1);
  EXPECT_EQ(rows_of(g, "residual2"), 1);
  expect_same_outputs(o);
}

TEST(SelectedRowNarrowing, OffLeavesTheGraphWhole) {
  Options o;
  PassContext ctx;
  ctx.disabled = {"selected_row_narrowing"};
  Graph g = rewritten(o, &ctx);
  EXPECT_EQ(rows_of(g, "fc2"), kS);
  EXPECT_EQ(count_op(g, "Slice"), 0);
}

// ---- sequence-first attention (nn.MultiheadAttention, as torchvision's ViT exports it) ----------

constexpr int64_t kB = 3, kH = 2;

struct SeqFirstOptions {
  std::string mask = "none";  // kiln::Attention mask: none or causal
  int64_t index = 0;          // the token the Gather keeps
  // The merge Reshape regroups [S, B·H, Dh] as [S·B·D / 9, 9] (and back): a token's B·D = 24
  // elements are not whole rows of 9, so the unmerge Reshape and everything before it stay whole.
  bool uneven_merge = false;
};

// x [B, S, D] -> Transpose [S, B, D] -> q/k/v -> kiln::Attention (sbd) -> Reshape [S, B·H, Dh]
// -> Reshape [S·B, D] -> Gemm -> Reshape [S, B, D] -> Transpose [B, S, D] -> + x -> Gather(index,
// axis 1) -> y [B, D]. Token i of the attention output is the block of B rows [i·B, (i+1)·B) of
// the Gemm's input.
OnnxModelBuilder seq_first_model(const SeqFirstOptions& o) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {kB, kS, kD});
  uint32_t seed = 11;
  for (const char* w : {"wq", "wk", "wv", "wo"}) b.initializer_f(w, random_values(kD * kD, seed++), {kD, kD});
  b.initializer_f("bo", random_values(kD, seed++), {kD});
  b.initializer("idx", {o.index}, {});
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"x"}, {"xt"}, "to_sbd"), "perm", {1, 0, 2});
  b.node("MatMul", {"xt", "wq"}, {"q"}, "q_proj");
  b.node("MatMul", {"xt", "wk"}, {"k"}, "k_proj");
  b.node("MatMul", {"xt", "wv"}, {"v"}, "v_proj");
  auto& att = b.node("Attention", {"q", "k", "v"}, {"att"}, "attention");
  att.set_domain("kiln");
  OnnxModelBuilder::int_attr(att, "num_heads", kH);
  float_attr(att, "scale", 0.5f);
  string_attr(att, "layout", "sbd");
  string_attr(att, "mask", o.mask);
  const int64_t rows = o.uneven_merge ? kS * kB * kD / 9 : kS * kB, cols = o.uneven_merge ? 9 : kD;
  b.initializer("heads_shape", {0, -1, kD / kH}, {3});
  b.initializer("merge_shape", {rows, cols}, {2});
  b.initializer("unmerge_shape", {kS, kB, kD}, {3});
  b.node("Reshape", {"att", "heads_shape"}, {"att_heads"}, "split_heads");
  b.node("Reshape", {"att_heads", "merge_shape"}, {"flat"}, "merge");
  if (o.uneven_merge) {
    b.node("Relu", {"flat"}, {"proj"}, "out_proj");  // row-wise, but its rows are not tokens
  } else {
    b.node("Gemm", {"flat", "wo", "bo"}, {"proj"}, "out_proj");
  }
  b.node("Reshape", {"proj", "unmerge_shape"}, {"o"}, "unmerge");
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"o"}, {"ob"}, "to_bsd"), "perm", {1, 0, 2});
  b.node("Add", {"x", "ob"}, {"r"}, "residual");
  OnnxModelBuilder::int_attr(b.node("Gather", {"r", "idx"}, {"y"}, "select"), "axis", 1);
  b.output("y");
  auto* kiln_opset = b.proto().add_opset_import();
  kiln_opset->set_domain("kiln");
  kiln_opset->set_version(1);
  return b;
}

// Dim 0 of node `name`'s first output, or -1.
int64_t dim0_of(const Graph& g, const std::string& name) {
  const Node* n = node_named(g, name);
  if (!n || n->outputs.empty()) return -1;
  const Value& v = g.values[n->outputs[0]];
  return v.shape && !v.shape->empty() && (*v.shape)[0].is_known() ? (*v.shape)[0].value : -1;
}

Graph seq_first_rewritten(const SeqFirstOptions& o, bool narrowing) {
  PassContext ctx;
  ctx.disabled.insert("matmul_epilogue_fusion");
  if (!narrowing) ctx.disabled.insert("selected_row_narrowing");
  auto g = seq_first_model(o).import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return Graph{};
  EXPECT_TRUE(specialize_inputs(*g, {{"x", Shape{kB, kS, kD}}}).ok());
  EXPECT_TRUE(run_pass_pipeline(*g, ctx).ok());
  return std::move(*g);
}

std::vector<float> run_seq_first(const SeqFirstOptions& o, bool narrowing) {
  auto g = seq_first_model(o).import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return {};
  BuildOptions opts;
  opts.input_shapes["x"] = Shape{kB, kS, kD};
  if (!narrowing) opts.disabled_passes = {"selected_row_narrowing"};
  auto plan = build_plan(*g, opts);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok());
  Tensor x = Tensor::from_vector<float>(random_values(kB * kS * kD, 98), Shape{kB, kS, kD});
  EXPECT_TRUE((*ctx)->set_input("x", x.view()).ok());
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  const TensorView& t = (*ctx)->output(0);
  return std::vector<float>(t.as<float>(), t.as<float>() + t.numel());
}

void expect_seq_first_same_outputs(const SeqFirstOptions& o) {
  const auto on = run_seq_first(o, true), off = run_seq_first(o, false);
  ASSERT_EQ(on.size(), static_cast<size_t>(kB * kD));
  ASSERT_EQ(on.size(), off.size());
  for (size_t j = 0; j < on.size(); ++j) EXPECT_NEAR(on[j], off[j], 1e-5) << "element " << j;
}

TEST(SelectedRowNarrowing, SequenceFirstTailNarrowsThroughMergedRows) {
  for (int64_t index : {int64_t{0}, int64_t{3}, int64_t{-1}}) {
    SeqFirstOptions o;
    o.index = index;
    Graph g = seq_first_rewritten(o, true);
    // One token in [S, B, D] values, the block of its B rows in the [S·B, D] ones.
    for (const char* n : {"q_proj", "attention", "split_heads", "unmerge"}) EXPECT_EQ(dim0_of(g, n), 1) << n << " index " << index;
    for (const char* n : {"merge", "out_proj"}) EXPECT_EQ(dim0_of(g, n), kB) << n << " index " << index;
    EXPECT_EQ(dim0_of(g, "k_proj"), kS);
    EXPECT_EQ(dim0_of(g, "v_proj"), kS);
    EXPECT_EQ(dim0_of(seq_first_rewritten(o, false), "out_proj"), kS * kB);
    expect_seq_first_same_outputs(o);
  }
}

TEST(SelectedRowNarrowing, SequenceFirstCausalNarrowsTheAttentionOnlyForTheLastToken) {
  SeqFirstOptions last;
  last.mask = "causal";
  last.index = -1;
  Graph g1 = seq_first_rewritten(last, true);
  EXPECT_EQ(dim0_of(g1, "attention"), 1);
  EXPECT_EQ(dim0_of(g1, "out_proj"), kB);
  expect_seq_first_same_outputs(last);

  SeqFirstOptions first = last;
  first.index = 0;
  Graph g2 = seq_first_rewritten(first, true);
  EXPECT_EQ(dim0_of(g2, "attention"), kS);
  EXPECT_EQ(dim0_of(g2, "out_proj"), kB);  // reads a block Slice of the merged attention output
  expect_seq_first_same_outputs(first);
}

TEST(SelectedRowNarrowing, ReshapeWhoseRowsSplitInputRowsStopsNarrowing) {
  SeqFirstOptions o;
  o.uneven_merge = true;
  o.index = 2;
  Graph g = seq_first_rewritten(o, true);
  EXPECT_EQ(dim0_of(g, "out_proj"), kS * kB * kD / 9);
  EXPECT_EQ(dim0_of(g, "merge"), kS * kB * kD / 9);
  EXPECT_EQ(dim0_of(g, "attention"), kS);
  EXPECT_EQ(dim0_of(g, "unmerge"), kS);
  EXPECT_EQ(dim0_of(g, "to_bsd"), kB);  // [B, 1, D]: the Transpose after the inserted Slice narrows
  expect_seq_first_same_outputs(o);
}

}  // namespace
}  // namespace kiln
