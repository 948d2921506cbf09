// softmax_prologue_fusion: an unfused attention's scale and mask (Div then Add of a float mask, or
// Where(mask, -inf) over a mask computed in the graph) with the Softmax after them, built as ONNX and
// run with the pass on and off: the outputs agree within 1e-6 and the Softmax is no step of its own.
// It stays one where the scores are read elsewhere too or the Softmax is not over the last axis.
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
std::pair<Result, Result> check_on_off(const OnnxModelBuilder& b, const std::vector<Input>& inputs) {
  Result on = run(b, inputs, {});
  Result off = run(b, inputs, {"softmax_prologue_fusion"});
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

}  // namespace
}  // namespace kiln
