// int8 lowering (builder/plan/int8_lowering.h) on a hand-made plan, and the calibration thresholds
// (builder/quantization/calibration.h) on known distributions.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "builder/plan/int8_lowering.h"
#include "builder/quantization/calibration.h"
#include "runtime/kernel.h"

namespace kiln {
namespace {

// x -> FusedMatMul "a" (W 32x8) -> FusedMatMul "b" (W 8x4: K < 16) -> FusedMatMul "c" (W 8x8 from
// an input, not a constant), plus a bf16 plugin step.
Plan make_plan() {
  Plan p;
  auto value = [&](const std::string& name, int constant = -1) {
    PlanValue v;
    v.name = name;
    v.dtype = DType::kFloat32;
    v.constant = constant;
    p.values.push_back(v);
    return static_cast<int>(p.values.size()) - 1;
  };
  p.constants.push_back(Tensor::zeros(DType::kFloat32, Shape{32, 8}));
  p.constants.push_back(Tensor::zeros(DType::kFloat32, Shape{8, 4}));
  const int x = value("x"), wa = value("wa", 0), ya = value("ya"), wb = value("wb", 1), yb = value("yb"), wc = value("wc"), yc = value("yc");
  auto step = [&](const std::string& name, std::vector<int> in, int out, std::vector<std::string> replaced) {
    PlanStep s;
    s.name = name;
    s.op_type = "FusedMatMul";
    s.domain = std::string(kKilnDomain);
    s.inputs = std::move(in);
    s.outputs = {out};
    s.replaced_nodes = std::move(replaced);
    p.steps.push_back(s);
  };
  step("a", {x, wa}, ya, {"/blocks.0/fc/MatMul", "/blocks.0/fc/Add"});
  step("b", {ya, wb}, yb, {"/head/MatMul"});
  step("c", {yb, wc}, yc, {});
  PlanStep att;
  att.name = "att";
  att.domain = "kiln";
  att.op_type = "Attention";
  p.steps.push_back(att);
  return p;
}

TEST(Int8Lowering, QuantizesConstantWeightMatMulsWithAScale) {
  Plan fp32 = make_plan();
  EXPECT_EQ(int8_candidate_steps(fp32), std::vector<std::string>{"a"});  // b: K = 8 < 16; c: weights not constant
  Plan p = fp32;
  p.steps[3].attrs["precision"] = Attribute::String("bf16");  // as bf16 lowering leaves the plugin
  const Int8Lowering r = lower_to_int8(p, fp32, {{"a", 0.5f}}, {}, true);
  EXPECT_EQ(r.quantized, 1);
  EXPECT_EQ(p.steps[0].impl, "onednn_int8");
  EXPECT_FLOAT_EQ(p.steps[0].attrs.at("a_scale").f, 0.5f);
  EXPECT_EQ(p.steps[1].impl, "");
  // A candidate calibration gave no scale stays as it was.
  Plan q = fp32;
  const Int8Lowering none = lower_to_int8(q, fp32, {}, {}, true);
  EXPECT_EQ(none.quantized, 0);
  EXPECT_EQ(none.without_scale, std::vector<std::string>{"a"});
  EXPECT_EQ(q.steps[0].impl, "");
}

// x -> FusedConv "stem" (W 8x3x7x7: reduction 147) relu -> MaxPool -> FusedConv "dw" (depthwise
// W 8x1x3x3: reduction 9) -> FusedConv "pw" (W 16x8x1x1: reduction 8) -> FusedConv "c3" (W 16x16x3x3)
// from "pw"'s output (no activation) -> FusedConv "c4" (W 16x16x3x3) from "c3"'s (clip at 0..6).
TEST(Int8Lowering, QuantizesConvsWithLongReductionsAndMarksNonNegativeInputs) {
  Plan p;
  auto value = [&](const std::string& name, int constant = -1) {
    PlanValue v;
    v.name = name;
    v.dtype = DType::kFloat32;
    v.constant = constant;
    p.values.push_back(v);
    return static_cast<int>(p.values.size()) - 1;
  };
  for (Shape s : {Shape{8, 3, 7, 7}, Shape{8, 1, 3, 3}, Shape{16, 8, 1, 1}, Shape{16, 16, 3, 3}, Shape{16, 16, 3, 3}})
    p.constants.push_back(Tensor::zeros(DType::kFloat32, s));
  const int x = value("x"), y0 = value("y0"), pool = value("pool"), y1 = value("y1"), y2 = value("y2"), y3 = value("y3"), y4 = value("y4");
  auto step = [&](const std::string& name, const std::string& op, std::vector<int> in, int out, const std::string& act) {
    PlanStep s;
    s.name = name;
    s.op_type = op;
    s.domain = op == "MaxPool" ? "" : std::string(kKilnDomain);
    s.inputs = std::move(in);
    s.outputs = {out};
    if (!act.empty()) s.attrs["activation"] = Attribute::String(act);
    p.steps.push_back(s);
  };
  step("stem", "FusedConv", {x, value("w0", 0)}, y0, "relu");
  step("pool", "MaxPool", {y0}, pool, "");
  step("dw", "FusedConv", {pool, value("w1", 1)}, y1, "");
  step("pw", "FusedConv", {y1, value("w2", 2)}, y2, "");
  step("c3", "FusedConv", {y2, value("w3", 3)}, y3, "clip");
  p.steps.back().attrs["activation_alpha"] = Attribute::Float(0.0f);
  step("c4", "FusedConv", {y3, value("w4", 4)}, y4, "");
  const Plan fp32 = p;
  EXPECT_EQ(int8_candidate_steps(fp32), (std::vector<std::string>{"stem", "c3", "c4"}));
  const Int8Lowering r = lower_to_int8(p, fp32, {{"stem", 0.1f}, {"c3", 0.2f}, {"c4", 0.3f}}, {}, false);
  EXPECT_EQ(r.quantized, 3);
  EXPECT_EQ(p.steps[0].impl, "onednn_int8");
  EXPECT_EQ(p.steps[0].attrs.count("a_unsigned"), 0u);  // the graph input may be negative
  EXPECT_EQ(p.steps[2].impl, "");
  EXPECT_EQ(p.steps[3].impl, "");
  EXPECT_EQ(p.steps[4].attrs.count("a_unsigned"), 0u);  // after a conv without activation
  EXPECT_EQ(p.steps[5].attrs.at("a_unsigned").i, 1);   // after clip(0, ...)
  // An override restores the fp32 step, a_unsigned included.
  Plan q = fp32;
  lower_to_int8(q, fp32, {{"stem", 0.1f}, {"c3", 0.2f}, {"c4", 0.3f}}, {{"c4", "fp32"}}, false);
  EXPECT_EQ(q.steps[5].impl, "");
  EXPECT_EQ(q.steps[5].attrs.count("a_unsigned"), 0u);
  EXPECT_EQ(q.steps[5].attrs.count("a_scale"), 0u);
}

TEST(Int8Lowering, OverridesMatchStepOrReplacedNodeNames) {
  Plan fp32 = make_plan();
  Plan p = fp32;
  p.steps[3].attrs["precision"] = Attribute::String("bf16");
  // A glob on a replaced ONNX node pins "a" to bf16; one on the step name pins the plugin to fp32.
  const std::vector<PrecisionOverride> o = {{"/blocks.0/*", "bf16"}, {"at?", "fp32"}};
  const Int8Lowering r = lower_to_int8(p, fp32, {{"a", 0.5f}}, o, true);
  EXPECT_EQ(r.quantized, 0);
  EXPECT_EQ(p.steps[0].impl, "onednn_bf16");
  EXPECT_EQ(p.steps[0].attrs.count("a_scale"), 0u);
  EXPECT_EQ(p.steps[3].attrs.count("precision"), 0u);
  EXPECT_EQ(r.overridden.at("a"), "bf16");
  EXPECT_EQ(r.overridden.at("att"), "fp32");
  // Without bf16 on the CPU a bf16 override keeps fp32; the first matching override wins.
  Plan q = fp32;
  lower_to_int8(q, fp32, {{"a", 0.5f}}, {{"a", "fp32"}, {"*", "bf16"}}, false);
  EXPECT_EQ(q.steps[0].impl, "");
  EXPECT_EQ(find_precision_override(fp32.steps[1], {{"/head/*", "fp32"}})->precision, "fp32");
  EXPECT_EQ(find_precision_override(fp32.steps[1], {{"/blocks.*", "fp32"}}), nullptr);
}

AbsHistogram histogram_of(const std::vector<float>& x, double range) {
  AbsHistogram h;
  h.range = range;
  h.add(x.data(), static_cast<int64_t>(x.size()));
  return h;
}

TEST(Calibration, PercentileAndEntropyThresholds) {
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(400000);
  for (float& v : x) v = n(rng);
  // A few outliers 20x beyond the bulk: minmax would spend most int8 levels on them.
  for (int i = 0; i < 20; ++i) x[i] = 40.0f;
  const AbsHistogram h = histogram_of(x, 40.0);
  // The outliers are 5e-5 of the samples, so the 99.99th percentile leaves 5e-5 of |N(0, 1)|
  // beyond it: 4.06 (to a 40 / 2048 bin).
  EXPECT_NEAR(percentile_threshold(h, 99.99), 4.06, 0.05);
  EXPECT_NEAR(percentile_threshold(h, 100.0), 40.0, 0.05);
  // KL keeps the bulk (beyond 3 sigma) and clips the outliers.
  const double t = entropy_threshold(h);
  EXPECT_GT(t, 3.0);
  EXPECT_LT(t, 10.0);
  // Uniform |x|: nothing to clip, the threshold is the whole range.
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : x) v = u(rng);
  EXPECT_NEAR(entropy_threshold(histogram_of(x, 1.0)), 1.0, 0.02);
}

}  // namespace
}  // namespace kiln
