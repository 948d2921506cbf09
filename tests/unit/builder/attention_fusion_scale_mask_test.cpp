// attention_fusion on hand-built graphs of two patterns the unseen exports of the peer benchmark
// (models/attention_variants.py) write: q (or k) multiplied by a constant before the head split
// (BERT-style q * Dh**-0.5), which must fold into the plugin's scale; and a constant additive causal
// mask (Llama-style full(-inf).triu(past + 1), folded at fixed shapes), which must become
// mask "causal" while near misses stay "additive"; and a constant bool "hidden" mask
// (masked_fill(~tril_buffer), folded at fixed shapes), which must be inverted at build time and
// become "causal" when it is the causal mask. Each fused graph also runs against the unfused one.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "builder/plan/build_plan.h"
#include "builder/passes/pass.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

constexpr int64_t kHeads = 2, kHeadDim = 4, kDim = kHeads * kHeadDim;

std::vector<const Node*> attention_nodes(const Graph& g) {
  std::vector<const Node*> r;
  for (const auto& n : g.nodes)
    if (!n.removed && n.domain == "kiln" && n.op_type == "Attention") r.push_back(&n);
  return r;
}

int live(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes) n += !node.removed && node.op_type == op && node.domain.empty();
  return n;
}

std::string sites_text(const PassContext& ctx) {
  std::string r;
  for (const auto& s : ctx.attention_sites) r += s.softmax + " -> " + (s.fused_node.empty() ? s.reason : s.fused_node) + "\n";
  return r;
}

Tensor random_tensor(const Shape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (auto& x : v) x = dist(rng);
  return Tensor::from_vector(v, shape);
}

std::vector<Tensor> run(const Graph& g, const std::map<std::string, Tensor>& inputs, bool fusion) {
  BuildOptions opts;
  for (const auto& [name, t] : inputs) opts.input_shapes[name] = t.shape();
  if (!fusion) opts.disabled_passes.insert("attention_fusion");
  auto plan = build_plan(g, opts);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  for (const auto& [name, t] : inputs) EXPECT_TRUE((*ctx)->set_input(name, t.view()).ok()) << name;
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<Tensor> out;
  for (size_t i = 0; st.ok() && i < (*ctx)->num_outputs(); ++i) out.push_back(Tensor::copy_of((*ctx)->output(i)));
  return out;
}

void expect_fused_matches_unfused(const Graph& g, const std::map<std::string, Tensor>& inputs) {
  auto on = run(g, inputs, true), off = run(g, inputs, false);
  ASSERT_EQ(on.size(), off.size());
  ASSERT_FALSE(on.empty());
  for (size_t i = 0; i < on.size(); ++i) {
    ASSERT_EQ(on[i].shape(), off[i].shape()) << "output " << i;
    double worst = 0;
    for (int64_t j = 0; j < on[i].numel(); ++j)
      worst = std::max(worst, std::abs(read_double(on[i].view(), j) - read_double(off[i].view(), j)));
    EXPECT_LE(worst, 1e-5) << "output " << i << " fused vs unfused";
  }
}

// ---- q / k scaled before the head split ---------------------------------------------------------

// [1,S,D] q, k, v split into heads by Reshape+Transpose; q (and optionally k) multiplied by a
// constant before the split, scores divided by `div` (0: no Div).
OnnxModelBuilder scaled_before_split(float q_mul, float k_mul, float div) {
  OnnxModelBuilder b;
  for (const char* n : {"q", "k", "v"}) b.input(n, DType::kFloat32, {int64_t{1}, std::string("S"), kDim});
  b.initializer("split", {0, 0, kHeads, kHeadDim}, {4});
  b.initializer("merge", {0, 0, kDim}, {3});
  b.initializer_f("q_mul", {q_mul}, {});
  b.initializer_f("k_mul", {k_mul}, {});
  b.initializer_f("div", {div}, {});
  b.node("Mul", {"q", "q_mul"}, {"q_scaled"}, "q_scale");
  b.node("Mul", {"k_mul", "k"}, {"k_scaled"}, "k_scale");  // constant first: either operand order folds
  b.node("Reshape", {"q_scaled", "split"}, {"q4"}, "q_split");
  b.node("Reshape", {"k_scaled", "split"}, {"k4"}, "k_split");
  b.node("Reshape", {"v", "split"}, {"v4"}, "v_split");
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"q4"}, {"qh"}, "q_heads"), "perm", {0, 2, 1, 3});
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"k4"}, {"kh"}, "k_heads"), "perm", {0, 2, 3, 1});
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"v4"}, {"vh"}, "v_heads"), "perm", {0, 2, 1, 3});
  b.node("MatMul", {"qh", "kh"}, {"scores"}, "qk");
  std::string s = "scores";
  if (div != 0) {
    b.node("Div", {"scores", "div"}, {"scores_scaled"}, "score_div");
    s = "scores_scaled";
  }
  OnnxModelBuilder::int_attr(b.node("Softmax", {s}, {"p"}, "softmax"), "axis", -1);
  b.node("MatMul", {"p", "vh"}, {"o4"}, "pv");
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"o4"}, {"o_merged"}, "o_heads"), "perm", {0, 2, 1, 3});
  b.node("Reshape", {"o_merged", "merge"}, {"out"}, "o_merge");
  b.output("out");
  return b;
}

std::map<std::string, Tensor> qkv_inputs(int64_t seq) {
  return {{"q", random_tensor({1, seq, kDim}, 1)}, {"k", random_tensor({1, seq, kDim}, 2)}, {"v", random_tensor({1, seq, kDim}, 3)}};
}

TEST(AttentionFusionScaleMask, ScaleOnQBeforeTheHeadSplitFoldsIntoTheScale) {
  auto g = scaled_before_split(0.5f, 1.0f, 0).import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  PassContext ctx;
  ASSERT_TRUE(run_pass_pipeline(*g, ctx).ok());
  auto att = attention_nodes(*g);
  ASSERT_EQ(att.size(), 1u) << sites_text(ctx);
  EXPECT_EQ(att[0]->attrs.at("layout").s, "bsd");
  EXPECT_NEAR(att[0]->attrs.at("scale").f, 0.5, 1e-7);
  EXPECT_EQ(live(*g, "Mul"), 0) << "the q and k Muls run as graph ops instead of folding into the scale";
  EXPECT_EQ(g->values[att[0]->inputs[0]].name, "q");
  EXPECT_EQ(g->values[att[0]->inputs[1]].name, "k");
  auto g0 = scaled_before_split(0.5f, 1.0f, 0).import();
  ASSERT_TRUE(g0.ok());
  expect_fused_matches_unfused(*g0, qkv_inputs(5));
}

TEST(AttentionFusionScaleMask, ScalesOnQKAndScoresMultiply) {
  auto g = scaled_before_split(0.5f, 3.0f, 2.0f).import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  PassContext ctx;
  ASSERT_TRUE(run_pass_pipeline(*g, ctx).ok());
  auto att = attention_nodes(*g);
  ASSERT_EQ(att.size(), 1u) << sites_text(ctx);
  EXPECT_NEAR(att[0]->attrs.at("scale").f, 0.5 * 3.0 / 2.0, 1e-6);
  auto g0 = scaled_before_split(0.5f, 3.0f, 2.0f).import();
  ASSERT_TRUE(g0.ok());
  expect_fused_matches_unfused(*g0, qkv_inputs(7));
}

// A q scale that is also read elsewhere cannot be folded away: the Mul stays, the site still fuses.
TEST(AttentionFusionScaleMask, SharedScaledQKeepsItsMul) {
  OnnxModelBuilder b = scaled_before_split(0.5f, 1.0f, 0);
  b.output("q_scaled");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  PassContext ctx;
  ASSERT_TRUE(run_pass_pipeline(*g, ctx).ok());
  auto att = attention_nodes(*g);
  ASSERT_EQ(att.size(), 1u) << sites_text(ctx);
  EXPECT_NEAR(att[0]->attrs.at("scale").f, 1.0, 1e-7);
  EXPECT_EQ(g->values[att[0]->inputs[0]].name, "q_scaled");
}

// ---- constant additive causal mask ------------------------------------------------------------------

constexpr int64_t kSq = 3, kPast = 2, kSk = kPast + kSq;

// [1,H,Sq,Dh] q with a [1,H,past,Dh] cache, scores * 0.5 + mask[Sq, Sk] (a constant).
OnnxModelBuilder additive_mask_decoder(const std::vector<float>& mask, std::vector<int64_t> mask_dims) {
  OnnxModelBuilder b;
  for (const char* n : {"q", "k", "v"}) b.input(n, DType::kFloat32, {int64_t{1}, kHeads, kSq, kHeadDim});
  for (const char* n : {"past_k", "past_v"}) b.input(n, DType::kFloat32, {int64_t{1}, kHeads, kPast, kHeadDim});
  b.initializer_f("half", {0.5f}, {});
  b.initializer_f("mask", mask, mask_dims);
  OnnxModelBuilder::int_attr(b.node("Concat", {"past_k", "k"}, {"k_all"}, "k_cat"), "axis", 2);
  OnnxModelBuilder::int_attr(b.node("Concat", {"past_v", "v"}, {"v_all"}, "v_cat"), "axis", 2);
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"k_all"}, {"kt"}, "kt"), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"q", "kt"}, {"scores"}, "qk");
  b.node("Mul", {"scores", "half"}, {"scaled"}, "scale");
  b.node("Add", {"scaled", "mask"}, {"masked"}, "add_mask");
  OnnxModelBuilder::int_attr(b.node("Softmax", {"masked"}, {"p"}, "softmax"), "axis", -1);
  b.node("MatMul", {"p", "v_all"}, {"out"}, "pv");
  b.output("out");
  b.output("k_all");
  b.output("v_all");
  return b;
}

// mask[i][j] = 0 where key j is visible to query i (j <= past + i + lookahead), `fill` elsewhere.
std::vector<float> causal_mask(float fill, int64_t lookahead = 0) {
  std::vector<float> m(kSq * kSk);
  for (int64_t i = 0; i < kSq; ++i)
    for (int64_t j = 0; j < kSk; ++j) m[i * kSk + j] = j <= kPast + i + lookahead ? 0.0f : fill;
  return m;
}

std::string fused_mask(const std::vector<float>& mask, std::vector<int64_t> dims) {
  auto g = additive_mask_decoder(mask, dims).import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return "<import failed>";
  PassContext ctx;
  EXPECT_TRUE(run_pass_pipeline(*g, ctx).ok());
  auto att = attention_nodes(*g);
  EXPECT_EQ(att.size(), 1u) << sites_text(ctx);
  if (att.size() != 1) return "<not fused>";
  const std::string kind = att[0]->attrs.at("mask").s;
  if (kind == "causal") {
    EXPECT_TRUE(att[0]->inputs.size() > 3 && att[0]->inputs[3] < 0) << "a causal site reads no mask";
    EXPECT_EQ(att[0]->attrs.at("kv_cache").i, 1);
  }
  return kind;
}

std::map<std::string, Tensor> decoder_inputs() {
  return {{"q", random_tensor({1, kHeads, kSq, kHeadDim}, 4)},         {"k", random_tensor({1, kHeads, kSq, kHeadDim}, 5)},
          {"v", random_tensor({1, kHeads, kSq, kHeadDim}, 6)},         {"past_k", random_tensor({1, kHeads, kPast, kHeadDim}, 7)},
          {"past_v", random_tensor({1, kHeads, kPast, kHeadDim}, 8)}};
}

TEST(AttentionFusionScaleMask, ConstantAdditiveCausalMaskBecomesCausal) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fused_mask(causal_mask(-inf), {kSq, kSk}), "causal");
  EXPECT_EQ(fused_mask(causal_mask(-inf), {1, 1, kSq, kSk}), "causal");
  EXPECT_EQ(fused_mask(causal_mask(-1e9f), {kSq, kSk}), "causal");  // finfo.min-style fills
  for (float fill : {-inf, -1e9f}) {
    auto g = additive_mask_decoder(causal_mask(fill), {kSq, kSk}).import();
    ASSERT_TRUE(g.ok());
    expect_fused_matches_unfused(*g, decoder_inputs());
  }
}

TEST(AttentionFusionScaleMask, AdditiveMasksThatAreNotCausalStayAdditive) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fused_mask(causal_mask(-inf, 1), {kSq, kSk}), "additive");  // each query also sees the next key
  EXPECT_EQ(fused_mask(causal_mask(-100.0f), {kSq, kSk}), "additive");  // a soft penalty, not a fill
  std::vector<float> biased = causal_mask(-inf);
  biased[0] = 0.25f;  // a bias on a visible key
  EXPECT_EQ(fused_mask(biased, {kSq, kSk}), "additive");
  std::vector<float> per_head(2 * kSq * kSk);
  for (size_t i = 0; i < per_head.size(); ++i) per_head[i] = causal_mask(-inf)[i % (kSq * kSk)];
  EXPECT_EQ(fused_mask(per_head, {1, 2, kSq, kSk}), "additive");  // leading dims must be 1
  auto g = additive_mask_decoder(causal_mask(-inf, 1), {kSq, kSk}).import();
  ASSERT_TRUE(g.ok());
  expect_fused_matches_unfused(*g, decoder_inputs());
}

// ---- constant bool "hidden" mask ------------------------------------------------------------------

// The additive decoder with Where(hidden, -inf, scores): `hidden` (1 = may not attend) is a float
// constant cast to bool, which constant folding turns into a bool constant, as a folded
// masked_fill(~buffer[past:past+Sq, :Sk]) is.
OnnxModelBuilder hidden_mask_decoder(const std::vector<float>& hidden) {
  OnnxModelBuilder b;
  for (const char* n : {"q", "k", "v"}) b.input(n, DType::kFloat32, {int64_t{1}, kHeads, kSq, kHeadDim});
  for (const char* n : {"past_k", "past_v"}) b.input(n, DType::kFloat32, {int64_t{1}, kHeads, kPast, kHeadDim});
  b.initializer_f("half", {0.5f}, {});
  b.initializer_f("fill", {-std::numeric_limits<float>::infinity()}, {});
  b.initializer_f("hidden_f", hidden, {kSq, kSk});
  OnnxModelBuilder::int_attr(b.node("Cast", {"hidden_f"}, {"hidden"}, "hidden_cast"), "to",
                             static_cast<int64_t>(DType::kBool));
  OnnxModelBuilder::int_attr(b.node("Concat", {"past_k", "k"}, {"k_all"}, "k_cat"), "axis", 2);
  OnnxModelBuilder::int_attr(b.node("Concat", {"past_v", "v"}, {"v_all"}, "v_cat"), "axis", 2);
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"k_all"}, {"kt"}, "kt"), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"q", "kt"}, {"scores"}, "qk");
  b.node("Mul", {"scores", "half"}, {"scaled"}, "scale");
  b.node("Where", {"hidden", "fill", "scaled"}, {"masked"}, "masked_fill");
  OnnxModelBuilder::int_attr(b.node("Softmax", {"masked"}, {"p"}, "softmax"), "axis", -1);
  b.node("MatMul", {"p", "v_all"}, {"out"}, "pv");
  b.output("out");
  b.output("k_all");
  b.output("v_all");
  return b;
}

// 1 where key j is hidden from query i (j > past + i + lookahead).
std::vector<float> hidden_mask(int64_t lookahead) {
  std::vector<float> m(kSq * kSk);
  for (int64_t i = 0; i < kSq; ++i)
    for (int64_t j = 0; j < kSk; ++j) m[i * kSk + j] = j > kPast + i + lookahead ? 1.0f : 0.0f;
  return m;
}

TEST(AttentionFusionScaleMask, ConstantHiddenBoolMaskIsInvertedAtBuildTime) {
  for (int64_t lookahead : {0, 1}) {
    SCOPED_TRACE("lookahead " + std::to_string(lookahead));
    auto g = hidden_mask_decoder(hidden_mask(lookahead)).import();
    ASSERT_TRUE(g.ok()) << g.status().message();
    PassContext ctx;
    Graph fused = *g;
    ASSERT_TRUE(run_pass_pipeline(fused, ctx).ok());
    auto att = attention_nodes(fused);
    ASSERT_EQ(att.size(), 1u) << sites_text(ctx);
    EXPECT_EQ(live(fused, "Not"), 0) << "the inversion is done at build time";
    if (lookahead == 0) {
      EXPECT_EQ(att[0]->attrs.at("mask").s, "causal");
      EXPECT_TRUE(att[0]->inputs.size() > 3 && att[0]->inputs[3] < 0) << "a causal site reads no mask";
    } else {
      // Not causal: a constant "may attend" mask, true where the hidden one was false.
      EXPECT_EQ(att[0]->attrs.at("mask").s, "bool");
      ASSERT_TRUE(att[0]->inputs.size() > 3 && att[0]->inputs[3] >= 0);
      const Value& m = fused.values[att[0]->inputs[3]];
      ASSERT_TRUE(m.is_constant());
      const std::vector<float> hidden = hidden_mask(lookahead);
      for (int64_t i = 0; i < m.constant.numel(); ++i)
        EXPECT_EQ(m.constant.as<bool>()[i], hidden[static_cast<size_t>(i)] == 0.0f) << i;
    }
    expect_fused_matches_unfused(*g, decoder_inputs());
  }
}

}  // namespace
}  // namespace kiln
