// Partial-shape folding under a ranged profile: a scale computed at run time from a static dim of a
// value whose other dims are symbolic (Hugging Face GPT-2's w / v.size(-1) ** 0.5, k.shape[-1] **
// -0.5, sdpa's 1 / sqrt(Shape(q)[-1:])) folds to a constant, the Shape reading the attention's own
// operand goes with it, and the attention fuses with that scale; a Cast to the dtype a value already
// has (T5's scores.float()) folds away. Checked on the rewritten graph and by running the plan at
// both ends of the range against the unfused plan.
#include <gtest/gtest.h>

#include <cmath>

#include "builder/build_profile.h"
#include "builder/optimization_profile.h"
#include "builder/passes/pass.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

constexpr int64_t kH = 2, kDh = 8;

enum class ScaleForm { kDivBySlicePow, kMulByGatherPowNeg, kMulBySqrtReciprocal };

// q, k, v [1, H, S, Dh] with S symbolic; scores = q·kᵀ scaled by a value computed from Shape(v)
// (or Shape(k)) at run time; Softmax; ·V. `extra_cast` puts Cast(to float) on the float scores
// before the Softmax and after it.
OnnxModelBuilder scaled_attention(ScaleForm form, bool extra_cast = false) {
  OnnxModelBuilder b;
  for (const char* n : {"q", "k", "v"}) b.input(n, DType::kFloat32, {int64_t{1}, kH, std::string("S"), kDh});
  b.initializer("last1", {-1}, {1}).initializer("big", {INT64_MAX}, {1}).initializer("zero1", {0}, {1});
  b.initializer("step1", {1}, {1});
  b.initializer("last", {-1}, {});
  b.initializer_f("half", {0.5f}, {}).initializer_f("neg_half", {-0.5f}, {}).initializer_f("one", {1.0f}, {});
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"k"}, {"kt"}, "kt"), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"q", "kt"}, {"scores"}, "qk");
  const auto to_float = static_cast<int64_t>(DType::kFloat32);
  switch (form) {
    case ScaleForm::kDivBySlicePow:  // w / (v.size(-1) ** 0.5)
      b.node("Shape", {"v"}, {"v_shape"}, "v_shape");
      b.node("Slice", {"v_shape", "last1", "big", "zero1"}, {"dh1"}, "dh_slice");
      b.node("Squeeze", {"dh1", "zero1"}, {"dh"}, "dh_squeeze");
      OnnxModelBuilder::int_attr(b.node("Cast", {"dh"}, {"dh_f"}, "dh_cast"), "to", to_float);
      b.node("Pow", {"dh_f", "half"}, {"root"}, "pow");
      b.node("Div", {"scores", "root"}, {"scaled"}, "scale");
      break;
    case ScaleForm::kMulByGatherPowNeg:  // w * k.shape[-1] ** -0.5
      b.node("Shape", {"k"}, {"k_shape"}, "k_shape");
      b.node("Gather", {"k_shape", "last"}, {"dh"}, "dh_gather");
      OnnxModelBuilder::int_attr(b.node("Cast", {"dh"}, {"dh_f"}, "dh_cast"), "to", to_float);
      b.node("Pow", {"dh_f", "neg_half"}, {"inv_root"}, "pow");
      b.node("Mul", {"scores", "inv_root"}, {"scaled"}, "scale");
      break;
    case ScaleForm::kMulBySqrtReciprocal:  // sdpa: 1 / sqrt(Shape(q)[-1:]) on the scores
      b.node("Shape", {"q"}, {"q_shape"}, "q_shape");
      b.node("Slice", {"q_shape", "last1", "big", "zero1", "step1"}, {"dh1"}, "dh_slice");  // axes, steps given
      OnnxModelBuilder::int_attr(b.node("Cast", {"dh1"}, {"dh_f"}, "dh_cast"), "to", to_float);
      b.node("Sqrt", {"dh_f"}, {"root"}, "sqrt");
      b.node("Div", {"one", "root"}, {"inv_root"}, "inv");
      b.node("Mul", {"scores", "inv_root"}, {"scaled"}, "scale");
      break;
  }
  std::string sm_in = "scaled", pv_in = "p";
  if (extra_cast) {
    OnnxModelBuilder::int_attr(b.node("Cast", {"scaled"}, {"scaled_f"}, "noop_cast_in"), "to", to_float);
    sm_in = "scaled_f";
    pv_in = "p_f";
  }
  OnnxModelBuilder::int_attr(b.node("Softmax", {sm_in}, {"p"}, "softmax"), "axis", -1);
  if (extra_cast) OnnxModelBuilder::int_attr(b.node("Cast", {"p"}, {"p_f"}, "noop_cast_out"), "to", to_float);
  b.node("MatMul", {pv_in, "v"}, {"out"}, "pv");
  b.output("out");
  return b;
}

Graph import(const OnnxModelBuilder& b) {
  auto g = b.import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::move(g).value();
}

std::vector<const Node*> live(const Graph& g, const std::string& op) {
  std::vector<const Node*> r;
  for (const auto& n : g.nodes)
    if (!n.removed && n.op_type == op) r.push_back(&n);
  return r;
}

std::vector<float> wave(int64_t n, float phase) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.31f * static_cast<float>(i) + phase);
  return v;
}

// The plan of the profile S in [1, 64], run at S; returns `out`.
std::vector<float> run_at(const Graph& g, int64_t s, const std::set<std::string>& disabled) {
  auto rp = resolve_profile(g, ProfileConfig{"ranged", {{"S", DimRange{1, 16, 64}}}, {}, 0});
  EXPECT_TRUE(rp.ok()) << rp.status().message();
  if (!rp.ok()) return {};
  auto plan = build_profile_plan(g, *rp, disabled);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  std::vector<Tensor> in;
  float phase = 0.2f;
  for (const char* n : {"q", "k", "v"}) {
    in.push_back(Tensor::from_vector<float>(wave(kH * s * kDh, phase += 0.7f), Shape{1, kH, s, kDh}));
    EXPECT_TRUE((*ctx)->set_input(n, in.back().view()).ok());
  }
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return {};
  const TensorView& y = (*ctx)->output(0);
  return std::vector<float>(y.as<float>(), y.as<float>() + y.numel());
}

void expect_fused_with_scale(ScaleForm form, bool extra_cast = false) {
  Graph g = import(scaled_attention(form, extra_cast));
  PassContext ctx;
  ctx.dim_ranges["S"] = {1, 64};
  ASSERT_TRUE(run_pass_pipeline(g, ctx).ok());
  const auto att = live(g, "Attention");
  ASSERT_EQ(att.size(), 1u) << (ctx.attention_sites.empty() ? "no site" : ctx.attention_sites[0].reason);
  EXPECT_NEAR(att[0]->attrs.at("scale").f, 1.0 / std::sqrt(static_cast<double>(kDh)), 1e-7);
  // The Shape that read the attention's operand folded away with its chain.
  EXPECT_TRUE(live(g, "Shape").empty());
  EXPECT_TRUE(live(g, "Cast").empty());
  // And the fused plan computes what the unfused one does, at both ends of the range.
  const Graph model = import(scaled_attention(form, extra_cast));
  for (int64_t s : {int64_t{1}, int64_t{37}, int64_t{64}}) {
    const auto fused = run_at(model, s, {});
    const auto plain = run_at(model, s, {"attention_fusion"});
    ASSERT_EQ(fused.size(), static_cast<size_t>(kH * s * kDh));
    ASSERT_EQ(fused.size(), plain.size());
    for (size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(fused[i], plain[i], 1e-5) << "S " << s << " element " << i;
  }
}

TEST(PartialShapeFolding, DivBySizePowHalfFuses) { expect_fused_with_scale(ScaleForm::kDivBySlicePow); }

TEST(PartialShapeFolding, MulBySizePowMinusHalfFuses) { expect_fused_with_scale(ScaleForm::kMulByGatherPowNeg); }

TEST(PartialShapeFolding, MulByReciprocalSqrtOfSizeFuses) { expect_fused_with_scale(ScaleForm::kMulBySqrtReciprocal); }

TEST(PartialShapeFolding, NoOpCastsAroundTheSoftmaxFoldAway) {
  expect_fused_with_scale(ScaleForm::kDivBySlicePow, /*extra_cast=*/true);
}

TEST(PartialShapeFolding, ElementsReadingTheSymbolicDimStayNodes) {
  // Shape(v)[2] is S: the chain must stay and run, and then the scale is not one number.
  OnnxModelBuilder b = scaled_attention(ScaleForm::kMulByGatherPowNeg);
  Graph g = import(b);
  for (auto& n : g.nodes)
    if (n.name == "dh_gather") g.values[n.inputs[1]].constant = Tensor::scalar_i64(2);
  PassContext ctx;
  ctx.dim_ranges["S"] = {1, 64};
  ASSERT_TRUE(run_pass_pipeline(g, ctx).ok());
  EXPECT_TRUE(live(g, "Attention").empty());
  EXPECT_EQ(live(g, "Shape").size(), 1u);
  ASSERT_EQ(ctx.attention_sites.size(), 1u);
  EXPECT_NE(ctx.attention_sites[0].reason.find("does not multiply by a constant scalar"), std::string::npos)
      << ctx.attention_sites[0].reason;
}

}  // namespace
}  // namespace kiln
