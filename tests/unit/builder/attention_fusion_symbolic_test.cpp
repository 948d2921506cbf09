// attention_fusion under optimization profiles whose dims stay symbolic (ranged), as engine-build
// builds a profile: GPT-2's prefill and decode profiles and ViT's dynamic batch fuse every layer,
// and the causal-mask proof fails (with a reason) when the profile lets the key length run past the
// mask buffer. Also the symbolic dim arithmetic the proofs rest on (builder/shapes/dim.h, Range, Slice).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <unistd.h>

#include "builder/build_profile.h"
#include "builder/onnx/onnx_importer.h"
#include "builder/passes/pass.h"
#include "builder/shapes/dim.h"
#include "onnx_model_builder.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::OnnxModelBuilder;

fs::path work_dir() {
  static const fs::path d = [] {
    fs::path p = fs::temp_directory_path() / ("kiln_attention_symbolic_" + std::to_string(getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
}

std::string export_small(const std::string& model) {
  static std::map<std::string, std::string> done;
  if (done.count(model)) return done[model];
  const fs::path out = work_dir() / (model + ".onnx");
  const std::string cmd = std::string("cd '") + KILN_SOURCE_DIR + "' && /usr/bin/python3 models/export_models.py " + model +
                          " --size small --quiet --out '" + out.string() + "' > '" +
                          (work_dir() / (model + ".log")).string() + "' 2>&1";
  done[model] = std::system(cmd.c_str()) == 0 ? out.string() : "";
  return done[model];
}

#define IMPORT_SMALL(var, model)                                                              \
  const std::string var##_path = export_small(model);                                          \
  ASSERT_FALSE(var##_path.empty()) << "export of " << model << " failed, see " << work_dir();   \
  auto var = import_onnx_file(var##_path);                                                     \
  ASSERT_TRUE(var.ok()) << var.status().message()

// What build_profile_plan does with a profile: fixed symbols become sizes, ranged ones stay
// symbols and their ranges go to the passes.
PassContext run_profile(Graph& g, const std::map<std::string, std::pair<int64_t, int64_t>>& dims) {
  PassContext ctx;
  for (auto& v : g.values)
    if (v.shape)
      for (auto& d : *v.shape) {
        auto it = dims.find(d.sym_name());
        if (it != dims.end() && it->second.first == it->second.second) d = Dim::known(it->second.first);
      }
  for (const auto& [sym, r] : dims)
    if (r.first != r.second) ctx.dim_ranges[sym] = r;
  Status st = run_pass_pipeline(g, ctx);
  EXPECT_TRUE(st.ok()) << st.message();
  return ctx;
}

std::vector<const Node*> attention_nodes(const Graph& g) {
  std::vector<const Node*> r;
  for (const auto& n : g.nodes)
    if (!n.removed && n.domain == "kiln" && n.op_type == "Attention") r.push_back(&n);
  return r;
}

std::string sites_text(const PassContext& ctx) {
  std::string r;
  for (const auto& s : ctx.attention_sites) r += s.softmax + " -> " + (s.fused_node.empty() ? s.reason : s.fused_node) + "\n";
  return r;
}

int fused(const PassContext& ctx) {
  int n = 0;
  for (const auto& s : ctx.attention_sites) n += s.reason.empty();
  return n;
}

std::string name_of(const Graph& g, int v) { return v >= 0 ? g.values[v].name : "<absent>"; }

bool replaced(const Node& n, const std::string& name) {
  return std::find(n.replaced_nodes.begin(), n.replaced_nodes.end(), name) != n.replaced_nodes.end();
}

void check_gpt2_fused(const Graph& g, const PassContext& ctx) {
  EXPECT_EQ(fused(ctx), 2) << sites_text(ctx);
  auto att = attention_nodes(g);
  ASSERT_EQ(att.size(), 2u) << sites_text(ctx);
  for (int l = 0; l < 2; ++l) {
    const Node& n = *att[l];
    const std::string i = std::to_string(l), p = "/h." + i + "/attn/";
    EXPECT_EQ(n.attrs.at("mask").s, "causal") << n.name;
    EXPECT_EQ(n.attrs.at("layout").s, "bhsd");
    EXPECT_EQ(n.attrs.at("kv_cache").i, 1);
    EXPECT_EQ(n.attrs.at("num_heads").i, 2);
    EXPECT_NEAR(n.attrs.at("scale").f, 1.0 / std::sqrt(32.0), 1e-7);
    EXPECT_EQ(name_of(g, n.inputs[0]), p + "Transpose_output_0");
    EXPECT_EQ(name_of(g, n.inputs[3]), "<absent>");
    EXPECT_EQ(name_of(g, n.inputs[4]), "past_key_" + i);
    EXPECT_EQ(name_of(g, n.inputs[5]), "past_value_" + i);
    EXPECT_EQ(name_of(g, n.outputs[0]), p + "MatMul_1_output_0");
    EXPECT_EQ(name_of(g, n.outputs[1]), "present_key_" + i);
    EXPECT_EQ(name_of(g, n.outputs[2]), "present_value_" + i);
    for (const char* r : {"Softmax", "Where", "Div", "MatMul", "MatMul_1", "Transpose_3", "Concat_2", "Concat_4"})
      EXPECT_TRUE(replaced(n, p + r)) << n.name << " does not list " << p + r;
  }
  for (const auto& n : g.nodes) EXPECT_FALSE(!n.removed && n.op_type == "Softmax") << n.name;
}

TEST(AttentionFusionSymbolic, Gpt2DecodeProfile) {
  IMPORT_SMALL(g, "gpt2");
  // The decode profile: one token on 1..1024 cached tokens (the buffer has 1152 positions).
  auto ctx = run_profile(*g, {{"seq", {1, 1}}, {"past", {1, 1024}}});
  check_gpt2_fused(*g, ctx);
}

TEST(AttentionFusionSymbolic, Gpt2PrefillProfile) {
  IMPORT_SMALL(g, "gpt2");
  auto ctx = run_profile(*g, {{"seq", {1, 128}}, {"past", {0, 0}}});
  check_gpt2_fused(*g, ctx);
}

TEST(AttentionFusionSymbolic, Gpt2SeqAndPastBothRanged) {
  IMPORT_SMALL(g, "gpt2");
  auto ctx = run_profile(*g, {{"seq", {1, 64}}, {"past", {0, 1088}}});  // 1088 + 64 = 1152: still inside
  check_gpt2_fused(*g, ctx);
}

// Layer 0 of GPT-2 when the profile lets the key length pass the mask buffer: its sliced buffer is
// not proven causal, so it is kept as a bool mask (the fused kernel checks the mask's shape against
// the scores at run time, as PyTorch would fail to broadcast a clamped slice). Its slice bounds read
// the graph inputs (shape_sources), not the present key the fusion writes. Layer 1 follows a hidden
// state whose sequence dim shape inference left unknown (the buffer slice's dims are), so it cannot
// be proven either way and stays unfused, with the reason.
void check_gpt2_not_causal(const Graph& g, const PassContext& ctx) {
  ASSERT_EQ(ctx.attention_sites.size(), 2u);
  EXPECT_EQ(fused(ctx), 1) << sites_text(ctx);
  auto att = attention_nodes(g);
  ASSERT_EQ(att.size(), 1u) << sites_text(ctx);
  EXPECT_EQ(att[0]->name, "/h.0/attn/Attention");
  EXPECT_EQ(att[0]->attrs.at("mask").s, "bool");
  EXPECT_NE(ctx.attention_sites[1].reason.find("not proven causal"), std::string::npos) << ctx.attention_sites[1].reason;
}

TEST(AttentionFusionSymbolic, Gpt2KeysBeyondTheCausalBufferAreNotCausal) {
  IMPORT_SMALL(g, "gpt2");
  // past + seq reaches 1153 > 1152 rows: the sliced mask would be clamped, so it is not causal.
  auto ctx = run_profile(*g, {{"seq", {1, 1}}, {"past", {1, 1152}}});
  check_gpt2_not_causal(*g, ctx);
}

TEST(AttentionFusionSymbolic, Gpt2UnboundedSymbolsAreNotCausal) {
  IMPORT_SMALL(g, "gpt2");
  PassContext ctx;  // the bare import: seq and past have no range
  ASSERT_TRUE(run_pass_pipeline(*g, ctx).ok());
  check_gpt2_not_causal(*g, ctx);
}

TEST(AttentionFusionSymbolic, VitDynamicBatch) {
  IMPORT_SMALL(g, "vit");
  auto ctx = run_profile(*g, {{"batch", {1, 2}}});
  EXPECT_EQ(fused(ctx), 2) << sites_text(ctx);
  auto att = attention_nodes(*g);
  ASSERT_EQ(att.size(), 2u);
  for (const Node* n : att) {
    EXPECT_EQ(n->attrs.at("layout").s, "sbd");
    EXPECT_EQ(n->attrs.at("mask").s, "none");
    EXPECT_EQ(n->attrs.at("num_heads").i, 2);
    EXPECT_NEAR(n->attrs.at("scale").f, 1.0 / std::sqrt(32.0), 1e-7);
    EXPECT_EQ(n->inputs.size(), 3u);
    const std::string p = n->name.substr(0, n->name.rfind('/') + 1);
    for (const char* r : {"Softmax", "Div_2", "MatMul_1", "MatMul_2", "Reshape", "Transpose_1", "Transpose_4"})
      EXPECT_TRUE(replaced(*n, p + r)) << n->name << " does not list " << p + r;
  }
}

TEST(AttentionFusionSymbolic, VitDynamicBatchSplitsAndNarrows) {
  // The packed q/k/v Slices' bounds and the merge Reshapes' targets come from Shape arithmetic over
  // [S, batch, E]: with the batch ranged, the static dims they read must still fold, so each
  // layer's in-projection splits and the last layer computes the class token only.
  IMPORT_SMALL(g, "vit");
  auto ctx = run_profile(*g, {{"batch", {1, 2}}});
  int split = 0;
  for (const auto& n : g->nodes) split += !n.removed && n.name.ends_with("/MatMul_cols");
  EXPECT_EQ(split, 2 * 3);
  auto att = attention_nodes(*g);
  ASSERT_EQ(att.size(), 2u);
  auto dim0 = [&](const Node* n) { return (*g->values[n->outputs[0]].shape)[0].str(); };
  EXPECT_NE(dim0(att[0]), "1");
  EXPECT_EQ(dim0(att[1]), "1");  // the last layer's queries: the class token only
  bool narrowed = false;
  for (const auto& l : ctx.log) narrowed |= l.starts_with("selected_row_narrowing:");
  EXPECT_TRUE(narrowed);
}

// A GPT-style decoder kiln's models do not contain (models/attention_variants.py): separate q/k/v,
// a 2-D bool causal buffer sliced [past : past+seq, : past+seq], masked_fill(~mask, -inf), Mul scale.
TEST(AttentionFusionSymbolic, VariantDecoderWithA2dCausalBuffer) {
  const std::string cmd = std::string("cd '") + KILN_SOURCE_DIR + "' && /usr/bin/python3 models/attention_variants.py gpt_sep_qkv --out '" +
                          work_dir().string() + "' > '" + (work_dir() / "gpt_sep_qkv.log").string() + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "export failed, see " << work_dir();
  for (auto [seq, past] : {std::pair<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>>{{1, 1}, {1, 1024}},
                           {{1, 64}, {0, 0}}}) {
    auto g = import_onnx_file((work_dir() / "gpt_sep_qkv.onnx").string());
    ASSERT_TRUE(g.ok()) << g.status().message();
    auto ctx = run_profile(*g, {{"seq", seq}, {"past", past}});
    EXPECT_EQ(fused(ctx), 2) << sites_text(ctx);
    auto att = attention_nodes(*g);
    ASSERT_EQ(att.size(), 2u);
    for (const Node* n : att) {
      EXPECT_EQ(n->attrs.at("mask").s, "causal") << n->name;
      EXPECT_EQ(n->attrs.at("kv_cache").i, 1);
      EXPECT_EQ(n->attrs.at("num_heads").i, 3);
      EXPECT_NEAR(n->attrs.at("scale").f, 0.25, 1e-7);
    }
  }
  // tril(diagonal=1) looks the same but lets each query see the next key: never "causal".
  const std::string la = std::string("cd '") + KILN_SOURCE_DIR + "' && /usr/bin/python3 models/attention_variants.py gpt_lookahead --out '" +
                         work_dir().string() + "' > '" + (work_dir() / "gpt_lookahead.log").string() + "' 2>&1";
  ASSERT_EQ(std::system(la.c_str()), 0) << "export failed, see " << work_dir();
  {
    auto g = import_onnx_file((work_dir() / "gpt_lookahead.onnx").string());
    ASSERT_TRUE(g.ok()) << g.status().message();
    auto ctx = run_profile(*g, {{"seq", {1, 64}}, {"past", {0, 0}}});
    EXPECT_EQ(fused(ctx), 2) << sites_text(ctx);
    for (const Node* n : attention_nodes(*g)) EXPECT_EQ(n->attrs.at("mask").s, "bool") << n->name;
  }
  // The buffer has 1100 positions: a decode profile up to past 1100 could run past it.
  auto g = import_onnx_file((work_dir() / "gpt_sep_qkv.onnx").string());
  ASSERT_TRUE(g.ok());
  auto ctx = run_profile(*g, {{"seq", {1, 1}}, {"past", {1, 1100}}});
  ASSERT_FALSE(ctx.attention_sites.empty());
  for (const Node* n : attention_nodes(*g)) EXPECT_NE(n->attrs.at("mask").s, "causal") << n->name;
}

// [1, 2, S, 8] attention whose scores are divided by sqrt(S): not a constant, so not fused, and the
// report says which dim the divisor reads.
TEST(AttentionFusionSymbolic, ScaleFromASymbolicDimIsReported) {
  OnnxModelBuilder b;
  for (const char* n : {"q", "k", "v"}) b.input(n, DType::kFloat32, {int64_t{1}, int64_t{2}, std::string("S"), int64_t{8}});
  b.initializer("two", {2}, {});
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"k"}, {"kt"}, "kt"), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"q", "kt"}, {"scores"}, "qk");
  b.node("Shape", {"q"}, {"q_shape"}, "shape");
  b.node("Gather", {"q_shape", "two"}, {"s_len"}, "gather");
  OnnxModelBuilder::int_attr(b.node("Cast", {"s_len"}, {"s_f"}, "cast"), "to", 1);
  b.node("Sqrt", {"s_f"}, {"root"}, "sqrt");
  b.node("Div", {"scores", "root"}, {"scaled"}, "div");
  OnnxModelBuilder::int_attr(b.node("Softmax", {"scaled"}, {"p"}, "softmax"), "axis", -1);
  b.node("MatMul", {"p", "v"}, {"out"}, "pv");
  b.output("out");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto ctx = run_profile(*g, {{"S", {1, 64}}});
  ASSERT_EQ(ctx.attention_sites.size(), 1u);
  const std::string& r = ctx.attention_sites[0].reason;
  EXPECT_NE(r.find("does not divide by a constant scalar"), std::string::npos) << r;
  EXPECT_NE(r.find("dim 2 (S) of 'q'"), std::string::npos) << r;
  // With S fixed the same graph fuses, scale 1/sqrt(16).
  auto g2 = b.import();
  ASSERT_TRUE(g2.ok());
  auto ctx2 = run_profile(*g2, {{"S", {16, 16}}});
  ASSERT_EQ(attention_nodes(*g2).size(), 1u) << sites_text(ctx2);
  EXPECT_NEAR(attention_nodes(*g2)[0]->attrs.at("scale").f, 0.25, 1e-7);
}

// ---- the symbolic arithmetic -------------------------------------------------------------------------

TEST(SymLinear, CanonicalSumsAndDifferences) {
  const Dim seq = Dim::sym("seq"), past = Dim::sym("past");
  const Dim total = linear_add(seq, past, 1);
  EXPECT_EQ(total.str(), "(past+seq)");
  EXPECT_EQ(linear_add(past, seq, 1), total);
  EXPECT_EQ(linear_add(total, past, -1), seq);
  EXPECT_EQ(linear_add(total, total, -1), Dim::known(0));
  EXPECT_EQ(linear_add(Dim::known(1152), linear_add(past, Dim::known(1), 1), -1).str(), "(-past+1151)");
  EXPECT_EQ(linear_scale(seq, 2).str(), "(2*seq)");
  EXPECT_EQ(linear_add(linear_scale(seq, 2), seq, -1), seq);
  EXPECT_FALSE(linear_add(Dim{}, seq, 1).is_known() || linear_add(Dim{}, seq, 1).is_symbol());
  // dim_params that are not identifiers are opaque atoms, never parsed as arithmetic.
  const Dim odd = Dim::sym("seq-len");
  EXPECT_EQ(linear_add(odd, seq, 1).str(), "(seq+[seq-len])");
  EXPECT_EQ(linear_add(linear_add(odd, seq, 1), seq, -1), odd);
  EXPECT_EQ(linear_add(Dim::sym("(a*b)"), Dim::sym("(a*b)"), -1), Dim::known(0));
}

TEST(SymExpr, ProductsQuotientsEvaluationAndSubstitution) {
  const Dim b = Dim::sym("batch"), s = Dim::sym("seq"), p = Dim::sym("past");
  // Interned: the same expression is the same object, whatever the order it was written in.
  EXPECT_EQ(dim_mul(b, s), dim_mul(s, b));
  EXPECT_EQ(dim_mul(b, s).str(), "(batch*seq)");
  EXPECT_EQ(dim_mul(Dim::known(2), dim_mul(b, s)), linear_scale(dim_mul(s, b), 2));
  EXPECT_EQ(dim_floordiv(dim_mul(b, s), s), b);                        // [B*S, D] -> [B, S, D]
  EXPECT_EQ(dim_floordiv(linear_scale(s, 6), Dim::known(3)), linear_scale(s, 2));
  EXPECT_EQ(dim_floordiv(s, Dim::known(2)).str(), "floor(seq/2)");
  EXPECT_FALSE(dim_floordiv(s, Dim::known(0)).is_symbol());
  const Dim total = linear_add(p, s, 1), prod = dim_mul(total, b);
  EXPECT_EQ(prod.str(), "((past+seq)*batch)");
  const SymbolValues at = {{"batch", 2}, {"seq", 5}, {"past", 10}};
  EXPECT_EQ(dim_evaluate(prod, at), 30);
  EXPECT_EQ(dim_evaluate(dim_floordiv(linear_add(s, Dim::known(1), 1), Dim::known(2)), at), 3);
  EXPECT_EQ(dim_evaluate(total, {{"seq", 5}}), std::nullopt);         // past missing
  EXPECT_EQ(dim_substitute(prod, {{"seq", 1}}), dim_mul(linear_add(p, Dim::known(1), 1), b));
  EXPECT_EQ(dim_substitute(total, {{"seq", 1}, {"past", 3}}), Dim::known(4));
  EXPECT_EQ(dim_symbols(prod), (std::vector<std::string>{"batch", "past", "seq"}));
  // Bounds of products and quotients of sizes.
  const DimRanges r = {{"batch", {1, 4}}, {"seq", {2, 8}}};
  EXPECT_EQ(dim_bounds(dim_mul(b, s), r), std::make_pair(int64_t{2}, int64_t{32}));
  EXPECT_EQ(dim_bounds(dim_floordiv(s, Dim::known(2)), r), std::make_pair(int64_t{1}, int64_t{4}));
}

TEST(SymLinear, ProductRatios) {
  const Dim batch = Dim::sym("batch"), six = Dim::known(6);
  auto ratio = [](const Dim& f, std::vector<Dim> num, std::vector<Dim> den) {
    auto r = dim_product_ratio(f, num, den);
    return r ? r->str() : std::string("none");
  };
  EXPECT_EQ(ratio(Dim::known(1), {batch, six}, {six}), "batch");  // [S·B, E] -> [S, B, E]
  EXPECT_EQ(ratio(batch, {six}, {batch, six}), "1");              // [S, B, E] -> [S·B, E]
  EXPECT_EQ(ratio(batch, {six}, {linear_scale(batch, 6)}), "1");
  EXPECT_EQ(ratio(Dim::known(2), {six}, {Dim::known(4)}), "3");
  EXPECT_EQ(ratio(Dim::known(1), {linear_scale(Dim::sym("seq"), 2)}, {Dim::known(2)}), "seq");
  EXPECT_EQ(ratio(Dim::known(3), {batch}, {}), "(3*batch)");
  EXPECT_EQ(ratio(Dim::known(1), {six}, {batch, six}), "none");      // 1 / batch
  EXPECT_EQ(ratio(Dim::known(1), {batch, batch}, {}), "(batch*batch)");  // a product is a dim too
  EXPECT_EQ(ratio(Dim::known(1), {Dim::known(7)}, {Dim::known(2)}), "none");
  EXPECT_EQ(ratio(Dim::known(1), {Dim{}}, {}), "none");              // unknown
}

TEST(SymLinear, BoundsOverRanges) {
  const DimRanges r = {{"past", {1, 1024}}, {"seq", {1, 128}}};
  const Dim total = linear_add(Dim::sym("past"), Dim::sym("seq"), 1);
  EXPECT_EQ(dim_bounds(total, r), std::make_pair(int64_t{2}, int64_t{1152}));
  EXPECT_EQ(dim_bounds(linear_add(Dim::known(1152), total, -1), r), std::make_pair(int64_t{0}, int64_t{1150}));
  auto open = dim_bounds(Dim::sym("batch"), r);  // no range: [0, inf)
  ASSERT_TRUE(open);
  EXPECT_EQ(open->first, 0);
  EXPECT_EQ(open->second, kUnbounded);
  EXPECT_EQ(dim_bounds(linear_add(Dim::known(5), Dim::sym("batch"), -1), r)->first, -kUnbounded);
  EXPECT_FALSE(dim_bounds(Dim{}, r));
  // A product with a factor that may be negative (a difference) has no bound either way.
  auto opaque = dim_bounds(dim_mul(linear_add(Dim::sym("seq"), Dim::sym("past"), -1), Dim::sym("seq")), r);
  ASSERT_TRUE(opaque);
  EXPECT_EQ(opaque->first, -kUnbounded);
  EXPECT_EQ(opaque->second, kUnbounded);
}

// ids[1, seq] -> Range(past, past + seq) positions, and a [1, 1, 64, 64] buffer sliced at
// [past : past + seq]: both get symbolic sizes; the slice only when the ranges keep it inside.
OnnxModelBuilder positions_model() {
  OnnxModelBuilder b;
  b.input("ids", DType::kInt64, {int64_t{1}, std::string("seq")});
  b.input("cache", DType::kFloat32, {int64_t{1}, std::string("past")});
  b.initializer_f("buffer", std::vector<float>(64 * 64, 1.0f), {1, 1, 64, 64});
  b.initializer("zero", {0}, {1});
  b.initializer("one", {1}, {1});
  b.initializer("axis2", {2}, {1});
  b.node("Shape", {"ids"}, {"ids_shape"}, "s1");
  b.node("Gather", {"ids_shape", "one"}, {"seq_len"}, "g1");
  b.node("Shape", {"cache"}, {"cache_shape"}, "s2");
  b.node("Gather", {"cache_shape", "one"}, {"past_len"}, "g2");
  b.node("Add", {"past_len", "seq_len"}, {"end"}, "add");
  b.node("Squeeze", {"past_len", "zero"}, {"start_s"}, "sq1");
  b.node("Squeeze", {"end", "zero"}, {"end_s"}, "sq2");
  b.node("Range", {"start_s", "end_s", "one_s"}, {"positions"}, "range");
  b.initializer("one_s", {1}, {});
  b.node("Slice", {"buffer", "past_len", "end", "axis2"}, {"rows"}, "slice");
  b.output("positions");
  b.output("rows");
  return b;
}

TEST(SymbolicShapes, RangeAndSliceWithSymbolicBounds) {
  auto g = positions_model().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  {
    Graph c = *g;
    PassContext ctx;
    ctx.dim_ranges = {{"seq", {1, 16}}, {"past", {0, 48}}};
    ASSERT_TRUE(run_pass_pipeline(c, ctx).ok());
    const Value& pos = c.values[c.find_value("positions")];
    ASSERT_TRUE(pos.shape);
    EXPECT_EQ(sym_shape_str(*pos.shape), "[seq]");
    const Value& rows = c.values[c.find_value("rows")];
    ASSERT_TRUE(rows.shape);
    EXPECT_EQ(sym_shape_str(*rows.shape), "[1, 1, seq, 64]");
  }
  {
    Graph c = *g;
    PassContext ctx;
    ctx.dim_ranges = {{"seq", {1, 16}}, {"past", {0, 49}}};  // 49 + 16 > 64: the Slice may clamp
    ASSERT_TRUE(run_pass_pipeline(c, ctx).ok());
    const Value& rows = c.values[c.find_value("rows")];
    ASSERT_TRUE(rows.shape);
    EXPECT_EQ(sym_shape_str(*rows.shape), "[1, 1, ?, 64]");
  }
}

// torch.outer(positions, inv_freq) exports Einsum "i,j->ij": the symbolic length carries through.
TEST(SymbolicShapes, EinsumKeepsSymbolicDims) {
  for (auto [eq, want] : {std::pair<std::string, std::string>{"i,j->ij", "[S, 8]"}, {"i, j", "[S, 8]"}, {"i,j->ji", "[8, S]"}}) {
    OnnxModelBuilder b;
    b.input("a", DType::kFloat32, {std::string("S")});
    b.input("c", DType::kFloat32, {int64_t{8}});
    auto& n = b.node("Einsum", {"a", "c"}, {"o"}, "einsum");
    auto* at = n.add_attribute();
    at->set_name("equation");
    at->set_type(onnx::AttributeProto::STRING);
    at->set_s(eq);
    b.output("o");
    auto g = b.import();
    ASSERT_TRUE(g.ok()) << g.status().message();
    PassContext ctx;
    ASSERT_TRUE(run_pass_pipeline(*g, ctx).ok());
    const Value& o = g->values[g->find_value("o")];
    ASSERT_TRUE(o.shape) << eq;
    EXPECT_EQ(sym_shape_str(*o.shape), want) << eq;
  }
}

}  // namespace
}  // namespace kiln
