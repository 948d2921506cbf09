// softmax_prologue_fusion: an unfused attention's scale and mask (Div then Add of a float mask, or
// Where(mask, -inf) over a mask computed in the graph) with the Softmax after them, built as ONNX and
// run with the pass on and off: the outputs agree within 1e-6 and the Softmax is no step of its own.
// A lone mask Add or scale joins too. It stays one where the scores are read elsewhere too or the
// Softmax is not over the last axis.
// Shapes are awkward (rows of 37 and 600, across the 512-element blocks, heads broadcast).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "builder/plan/build_plan.h"
#include "builder/passes/pass.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

std::vector<float> values(int64_t n, uint32_t seed, float lo = -3.0f, float hi = 3.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

struct Input {
  std::string name;
  Shape shape;
  std::vector<float> data;
};

struct Result {
  std::vector<float> y;
  size_t steps = 0;
  size_t softmax_steps = 0;
};

Result run(const OnnxModelBuilder& b, const std::vector<Input>& inputs, std::set<std::string> disabled) {
  auto g = b.import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return {};
  BuildOptions opts;
  opts.disabled_passes = std::move(disabled);
  auto plan = build_plan(*g, opts);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  std::vector<Tensor> keep;
  for (const Input& in : inputs) {
    keep.push_back(Tensor::from_vector<float>(in.data, in.shape));
    EXPECT_TRUE((*ctx)->set_input(in.name, keep.back().view()).ok());
  }
  const Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  const TensorView& t = (*ctx)->output(0);
  Result r{std::vector<float>(t.as<float>(), t.as<float>() + t.numel()), (*plan)->steps.size(), 0};
  for (const auto& s : (*plan)->steps) r.softmax_steps += s.op_type == "Softmax" ? 1 : 0;
  return r;
}

// Runs with the pass and without; outputs agree. Returns {with, without}.
std::pair<Result, Result> check_on_off(const OnnxModelBuilder& b, const std::vector<Input>& inputs,
                                       std::set<std::string> off_passes = {"softmax_prologue_fusion"}) {
  Result on = run(b, inputs, {});
  Result off = run(b, inputs, std::move(off_passes));
  EXPECT_EQ(on.y.size(), off.y.size());
  for (size_t i = 0; i < on.y.size() && i < off.y.size(); ++i) EXPECT_NEAR(on.y[i], off.y[i], 1e-6) << "element " << i;
  return {on, off};
}

OnnxModelBuilder& scalar(OnnxModelBuilder& b, const std::string& name, float v) { return b.initializer_f(name, {v}, {}); }

onnx::AttributeProto int_attr(const char* name, int64_t v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(v);
  return a;
}

TEST(SoftmaxPrologueFusion, ScaleAndFloatMaskThenSoftmaxIsOneStep) {
  for (int64_t cols : {37, 600}) {
    OnnxModelBuilder b;
    b.input("s", DType::kFloat32, {int64_t{2}, int64_t{3}, int64_t{5}, cols});
    b.input("m", DType::kFloat32, {int64_t{5}, cols});
    scalar(b, "scale", 8.0f);
    b.node("Div", {"s", "scale"}, {"d"});
    b.node("Add", {"d", "m"}, {"masked"});
    b.node("Softmax", {"masked"}, {"y"}).add_attribute()->CopyFrom(int_attr("axis", -1));
    b.output("y");
    const auto [on, off] = check_on_off(b, {{"s", Shape{2, 3, 5, cols}, values(30 * cols, 1, -20, 20)},
                                            {"m", Shape{5, cols}, values(5 * cols, 2, -4, 0)}});
    EXPECT_EQ(on.softmax_steps, 0u) << cols;
    EXPECT_EQ(off.softmax_steps, 1u) << cols;
    EXPECT_EQ(on.steps + 1, off.steps) << cols;
  }
}

// A lone mask Add (a padding mask [batch, 1, 1, keys] broadcast over heads and queries) is no
// elementwise chain, yet joins the Softmax too; the scale alone (Mul by a constant) likewise.
TEST(SoftmaxPrologueFusion, LoneMaskAddOrScaleThenSoftmaxIsOneStep) {
  for (int64_t cols : {29, 513}) {
    for (bool scale : {false, true}) {
      OnnxModelBuilder b;
      b.input("s", DType::kFloat32, {int64_t{2}, int64_t{3}, int64_t{7}, cols});
      std::vector<Input> inputs = {{"s", Shape{2, 3, 7, cols}, values(42 * cols, 6, -20, 20)}};
      std::vector<float> m = values(2 * cols, 7, -2, 0);
      m[3] = -INFINITY;  // key 3 of batch 0 is padding
      if (scale) {
        scalar(b, "scale", 0.125f);
        b.node("Mul", {"s", "scale"}, {"masked"});
      } else {
        b.input("m", DType::kFloat32, {int64_t{2}, int64_t{1}, int64_t{1}, cols});
        inputs.push_back({"m", Shape{2, 1, 1, cols}, m});
        b.node("Add", {"s", "m"}, {"masked"});
      }
      b.node("Softmax", {"masked"}, {"y"}).add_attribute()->CopyFrom(int_attr("axis", 3));
      b.output("y");
      const auto [on, off] = check_on_off(b, inputs);
      EXPECT_EQ(on.softmax_steps, 0u) << cols << " scale " << scale;
      EXPECT_EQ(off.softmax_steps, 1u) << cols << " scale " << scale;
      EXPECT_EQ(on.steps + 1, off.steps) << cols << " scale " << scale;
      if (!scale) {
        for (int64_t row = 0; row < 21; ++row) EXPECT_EQ(on.y[static_cast<size_t>(row * cols + 3)], 0.0f) << row;
      }
    }
  }
}

TEST(SoftmaxPrologueFusion, WhereMinusInfinityMaskGivesExactZeros) {
  OnnxModelBuilder b;
  b.input("s", DType::kFloat32, {int64_t{1}, int64_t{4}, int64_t{9}, int64_t{53}});
  b.input("m", DType::kFloat32, {int64_t{9}, int64_t{53}});
  scalar(b, "scale", 0.125f);
  scalar(b, "zero", 0.0f);
  scalar(b, "ninf", -INFINITY);
  b.node("Mul", {"s", "scale"}, {"d"});
  b.node("Less", {"m", "zero"}, {"drop"});
  b.node("Where", {"drop", "ninf", "d"}, {"masked"});
  b.node("Softmax", {"masked"}, {"y"});  // opset 17's default axis: -1
  b.output("y");
  // Column 0 is never dropped, so no row is all -inf.
  std::vector<float> m = values(9 * 53, 4);
  for (int r = 0; r < 9; ++r) m[static_cast<size_t>(r * 53)] = 1.0f;
  const auto [on, off] = check_on_off(b, {{"s", Shape{1, 4, 9, 53}, values(4 * 9 * 53, 3, -10, 10)}, {"m", Shape{9, 53}, m}});
  EXPECT_EQ(on.softmax_steps, 0u);
  for (size_t i = 0; i < on.y.size(); ++i) {
    if (m[i % (9 * 53)] < 0) {
      ASSERT_EQ(on.y[i], 0.0f) << i;
    }
  }
}

TEST(SoftmaxPrologueFusion, ScoresReadElsewhereOrAnotherAxisStaySeparate) {
  for (int variant : {0, 1}) {
    OnnxModelBuilder b;
    b.input("s", DType::kFloat32, {int64_t{2}, int64_t{7}, int64_t{11}});
    scalar(b, "scale", 3.0f);
    scalar(b, "bias", 0.5f);
    b.node("Div", {"s", "scale"}, {"d"});
    b.node("Add", {"d", "bias"}, {"masked"});
    auto& sm = b.node("Softmax", {"masked"}, {"y"});
    if (variant == 1) sm.add_attribute()->CopyFrom(int_attr("axis", 1));
    b.output("y");
    if (variant == 0) b.output("masked");  // the scores leave the graph too
    const auto [on, off] = check_on_off(b, {{"s", Shape{2, 7, 11}, values(154, 5)}});
    EXPECT_EQ(on.softmax_steps, 1u) << "variant " << variant;
    EXPECT_EQ(on.steps, off.steps) << "variant " << variant;
  }
}

// Swin's window attention: scores + relative-position bias [1, H, N, N], and in the shifted blocks
// the region mask added through Reshapes to [1, W, H, N, N] and back (unit_reshape_unwrap takes the
// Add out of them): one FusedElementwise step with the Softmax, against the unfused graph (all three
// passes off) and each pass off alone. N = 13 (rows across no vector multiple), masked entries -100
// (exp far below FLT_MIN), W = 6 windows, H = 3 heads.
TEST(SoftmaxPrologueFusion, SwinBiasAndShiftedMaskThroughReshapesIsOneStep) {
  const int64_t W = 6, H = 3, N = 13;
  for (bool shifted : {false, true}) {
    OnnxModelBuilder b;
    b.input("s", DType::kFloat32, {W, H, N, N});
    b.initializer_f("bias", values(H * N * N, 7, -2, 2), {1, H, N, N});
    std::vector<float> mask(static_cast<size_t>(W * N * N), 0.0f);
    for (size_t i = 0; i < mask.size(); ++i)
      if ((i * 7919) % 5 == 1 && i % static_cast<size_t>(N) != 0) mask[i] = -100.0f;  // column 0 never masked
    b.initializer_f("mask", mask, {1, W, 1, N, N});
    b.initializer("wide", {1, W, H, N, N}, {5});
    b.initializer("narrow", {-1, H, N, N}, {4});
    b.node("Add", {"s", "bias"}, {"biased"});
    if (shifted) {
      b.node("Reshape", {"biased", "wide"}, {"w5"});
      b.node("Add", {"w5", "mask"}, {"m5"});
      b.node("Reshape", {"m5", "narrow"}, {"scores"});
    } else {
      b.node("Identity", {"biased"}, {"scores"});
    }
    b.node("Softmax", {"scores"}, {"y"}).add_attribute()->CopyFrom(int_attr("axis", -1));
    b.output("y");
    const std::vector<Input> in = {{"s", Shape{W, H, N, N}, values(W * H * N * N, 8, -6, 6)}};
    const auto [on, off] =
        check_on_off(b, in, {"softmax_prologue_fusion", "elementwise_fusion", "unit_reshape_unwrap"});
    EXPECT_EQ(on.steps, 1u) << "shifted " << shifted;
    EXPECT_EQ(on.softmax_steps, 0u);
    EXPECT_EQ(off.softmax_steps, 1u);
    EXPECT_EQ(off.steps, shifted ? 5u : 2u);
    for (const char* pass : {"softmax_prologue_fusion", "elementwise_fusion", "unit_reshape_unwrap"}) {
      const auto [on1, off1] = check_on_off(b, in, {pass});
      EXPECT_GT(off1.steps, shifted || std::string(pass) != "unit_reshape_unwrap" ? 1u : 0u) << pass;
    }
  }
}

// The Reshape pair stays where the wide value is read elsewhere too, or where the second Reshape
// does not restore the first one's input shape.
TEST(SoftmaxPrologueFusion, UnitReshapesStayWhenNotASandwich) {
  const int64_t W = 4, H = 2, N = 9;
  for (int variant : {0, 1}) {
    OnnxModelBuilder b;
    b.input("s", DType::kFloat32, {W, H, N, N});
    b.initializer_f("mask", values(W * N * N, 9, -1, 0), {1, W, 1, N, N});
    b.initializer("wide", {1, W, H, N, N}, {5});
    b.initializer("narrow", variant == 1 ? std::vector<int64_t>{W * H, 1, N, N} : std::vector<int64_t>{W, H, N, N}, {4});
    b.node("Reshape", {"s", "wide"}, {"w5"});
    b.node("Add", {"w5", "mask"}, {"m5"});
    b.node("Reshape", {"m5", "narrow"}, {"scores"});
    b.node("Softmax", {"scores"}, {"y"});
    b.output("y");
    if (variant == 0) b.output("w5");
    const std::vector<Input> in = {{"s", Shape{W, H, N, N}, values(W * H * N * N, 10)}};
    const Result on = run(b, in, {});
    const Result off = run(b, in, {"unit_reshape_unwrap"});
    ASSERT_EQ(on.y.size(), off.y.size());
    for (size_t i = 0; i < on.y.size(); ++i) EXPECT_NEAR(on.y[i], off.y[i], 1e-6) << i;
    EXPECT_EQ(on.steps, off.steps) << "variant " << variant;
  }
}

}  // namespace
}  // namespace kiln
