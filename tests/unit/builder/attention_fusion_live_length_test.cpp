// attention_fusion on hand-built decoder steps over a fixed-size cache whose keys after a runtime
// position are masked (the T5 step of models/t5_seq2seq.py: `positions <= cur_pos`): the fused
// node must get live_length = 1 and the position (+ 1 where the mask shows key == pos) as input 6,
// for the mask as a Where on the additive bias and as a Where on the scores, in the comparison's
// either operand order; a mask that shows a suffix of the keys must not. Each fused graph also runs
// against the unfused one at several positions.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "builder/passes/pass.h"
#include "builder/plan/build_plan.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

constexpr int64_t kHeads = 3, kHeadDim = 5, kLen = 10;

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

Tensor random_tensor(const Shape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (auto& x : v) x = dist(rng);
  return Tensor::from_vector(v, shape);
}

// How the step masks keys after `pos`.
enum class Form {
  kBiasLessOrEqual,    // Where(Not(positions <= pos), -1e9, bias) added to the scores
  kBiasLessShown,      // Where(positions < pos, bias, -1e4): keys [0, pos)
  kScoresGreaterEq,    // Where(pos >= positions, scores, -inf) on the scores (bool mask)
  kBiasSuffix,         // Where(positions >= pos, bias, -1e9): a suffix, not a live length
};

OnnxModelBuilder step_graph(Form form) {
  OnnxModelBuilder b;
  b.input("q", DType::kFloat32, {int64_t{1}, kHeads, int64_t{1}, kHeadDim});
  for (const char* n : {"cache_k", "cache_v"}) b.input(n, DType::kFloat32, {int64_t{1}, kHeads, kLen, kHeadDim});
  b.input("bias", DType::kFloat32, {int64_t{1}, kHeads, int64_t{1}, kLen});
  b.input("pos", DType::kInt64, {});
  std::vector<int64_t> positions(kLen);
  for (int64_t i = 0; i < kLen; ++i) positions[i] = i;
  b.initializer("positions", positions, {kLen});
  b.initializer_f("fill", {-1e9f}, {});
  b.initializer_f("small_fill", {-1e4f}, {});
  b.initializer_f("neg_inf", {-INFINITY}, {});
  b.initializer("axes", {0, 1, 2}, {3});
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"cache_k"}, {"kt"}, "kt"), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"q", "kt"}, {"scores"}, "qk");
  std::string masked = "masked";
  switch (form) {
    case Form::kBiasLessOrEqual:
      b.node("LessOrEqual", {"positions", "pos"}, {"live"}, "live");
      b.node("Unsqueeze", {"live", "axes"}, {"live4"}, "live4");
      b.node("Not", {"live4"}, {"hidden"}, "hidden");
      b.node("Where", {"hidden", "fill", "bias"}, {"mask"}, "mask");
      b.node("Add", {"scores", "mask"}, {"masked"}, "add_mask");
      break;
    case Form::kBiasLessShown:
      b.node("Less", {"positions", "pos"}, {"live"}, "live");
      b.node("Where", {"live", "bias", "small_fill"}, {"mask"}, "mask");
      b.node("Add", {"mask", "scores"}, {"masked"}, "add_mask");
      break;
    case Form::kScoresGreaterEq:
      b.node("GreaterOrEqual", {"pos", "positions"}, {"live"}, "live");
      b.node("Where", {"live", "scores", "neg_inf"}, {"masked"}, "mask");
      break;
    case Form::kBiasSuffix:
      b.node("GreaterOrEqual", {"positions", "pos"}, {"live"}, "live");
      b.node("Where", {"live", "bias", "fill"}, {"mask"}, "mask");
      b.node("Add", {"scores", "mask"}, {"masked"}, "add_mask");
      break;
  }
  OnnxModelBuilder::int_attr(b.node("Softmax", {masked}, {"p"}, "softmax"), "axis", -1);
  b.node("MatMul", {"p", "cache_v"}, {"out"}, "pv");
  b.output("out");
  return b;
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

// Fuses `form` and returns the fused node's live input's producer op ("" when it has none).
void check_form(Form form, bool want_live, const char* want_mask, int64_t first_pos) {
  auto g = step_graph(form).import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  PassContext ctx;
  ASSERT_TRUE(run_pass_pipeline(*g, ctx).ok());
  auto att = attention_nodes(*g);
  ASSERT_EQ(att.size(), 1u) << sites_text(ctx);
  const Node& a = *att[0];
  EXPECT_EQ(a.attrs.count("live_length") != 0, want_live);
  EXPECT_EQ(a.attrs.at("mask").s, want_mask);
  if (want_live) {
    ASSERT_EQ(a.inputs.size(), 7u);
    EXPECT_EQ(a.inputs[4], -1);
    EXPECT_EQ(a.inputs[5], -1);
    if (std::string(want_mask) == "additive") EXPECT_EQ(g->values[a.inputs[3]].name, "bias");
    else EXPECT_EQ(a.inputs[3], -1);
  }
  // Fused against unfused at several positions (the keys past the live ones hold other values).
  for (int64_t pos = first_pos; pos < kLen; pos += 3) {
    auto g1 = step_graph(form).import();
    ASSERT_TRUE(g1.ok());
    const std::map<std::string, Tensor> in = {{"q", random_tensor({1, kHeads, 1, kHeadDim}, 1)},
                                              {"cache_k", random_tensor({1, kHeads, kLen, kHeadDim}, 2)},
                                              {"cache_v", random_tensor({1, kHeads, kLen, kHeadDim}, 3)},
                                              {"bias", random_tensor({1, kHeads, 1, kLen}, 4)},
                                              {"pos", Tensor::scalar_i64(pos)}};
    auto on = run(*g1, in, true), off = run(*g1, in, false);
    ASSERT_EQ(on.size(), 1u);
    ASSERT_EQ(off.size(), 1u);
    for (int64_t j = 0; j < on[0].numel(); ++j)
      ASSERT_NEAR(on[0].as<float>()[j], off[0].as<float>()[j], 1e-5) << "pos " << pos << " element " << j;
  }
}

TEST(AttentionFusionLiveLength, WhereOnTheBiasLessOrEqual) { check_form(Form::kBiasLessOrEqual, true, "additive", 0); }
TEST(AttentionFusionLiveLength, WhereOnTheBiasLessShowsTheTrueBranch) { check_form(Form::kBiasLessShown, true, "additive", 1); }
TEST(AttentionFusionLiveLength, WhereOnTheScoresMirroredComparison) { check_form(Form::kScoresGreaterEq, true, "none", 0); }
TEST(AttentionFusionLiveLength, ASuffixMaskIsNoLiveLength) { check_form(Form::kBiasSuffix, false, "additive", 0); }

}  // namespace
}  // namespace kiln
