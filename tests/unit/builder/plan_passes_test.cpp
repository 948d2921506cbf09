// The plan pass list (builder/plan/plan_passes.h): its order, and each pass on and off through the
// one build path (build_plan -> build_profile). plugin_configuration's on/off test is in
// tests/unit/plugins/plugin_registry_test.cpp (it needs the test plugin registered there).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "builder/build_profile.h"
#include "builder/plan/build_plan.h"
#include "builder/plan/plan_passes.h"
#include "onnx_model_builder.h"
#include "runtime/engine_format.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = scale * std::sin(0.37f * static_cast<float>(i));
  return v;
}

// x[2, K] -> MatMul(W[K, 6]) + b -> Relu -> y: a FusedMatMul (several candidate kernels), then Relu.
// K >= 16 makes the FusedMatMul an int8 candidate (builder/plan/int8_lowering.h).
StatusOr<Graph> linear_model(int64_t k = 8) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, k}).output("y");
  b.initializer_f("w", ramp(k * 6, 0.5f), {k, 6});
  b.initializer_f("b", ramp(6, 0.1f), {6});
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Add", {"m", "b"}, {"a"});
  b.node("Relu", {"a"}, {"y"});
  return b.import();
}

const PlanStep& fused_matmul(const Plan& plan) {
  for (const auto& s : plan.steps)
    if (s.op_type == "FusedMatMul") return s;
  ADD_FAILURE() << "no FusedMatMul step";
  return plan.steps.at(0);
}

TEST(PlanPasses, RunInTheirListedOrder) {
  EXPECT_EQ(plan_pass_names(), (std::vector<std::string>{"plugin_configuration", "bf16_lowering", "int8_lowering", "tactic_selection", "winograd_layout"}));
  // The config's passes.disable takes graph and plan pass names alike.
  const auto all = all_pass_names();
  for (const auto& n : plan_pass_names()) EXPECT_NE(std::find(all.begin(), all.end(), n), all.end()) << n;
  for (const auto& n : pass_names()) EXPECT_NE(std::find(all.begin(), all.end(), n), all.end()) << n;
}

TEST(PlanPasses, AnUnknownPassNameIsAnError) {
  auto g = linear_model();
  ASSERT_TRUE(g.ok()) << g.status().message();
  BuildOptions opts;
  opts.disabled_passes = {"no_such_pass"};
  auto plan = build_plan(*g, opts);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("no_such_pass"), std::string::npos) << plan.status().message();
}

TEST(PlanPasses, TacticSelectionRunsTheHookUnlessDisabled) {
  auto g = linear_model();
  ASSERT_TRUE(g.ok()) << g.status().message();
  for (bool off : {false, true}) {
    int calls = 0;
    BuildOptions opts;
    opts.tactics = [&](Plan& plan, const ResolvedProfile&) {
      ++calls;
      for (auto& s : plan.steps)
        if (s.op_type == "FusedMatMul") s.impl = "reference";
      return Status::Ok();
    };
    if (off) opts.disabled_passes = {"tactic_selection"};
    auto plan = build_plan(*g, opts);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    EXPECT_EQ(calls, off ? 0 : 1);
    EXPECT_EQ(fused_matmul(**plan).impl, off ? "" : "reference");
  }
}

TEST(PlanPasses, Bf16LoweringSwitchesKernelsAndKeepsTheFp32Plan) {
  auto g = linear_model();
  ASSERT_TRUE(g.ok()) << g.status().message();
  ResolvedProfile p;
  p.name = "only";
  p.input_order = {"x"};
  p.inputs["x"] = InputRange{Shape{2, 8}, Shape{2, 8}, Shape{2, 8}};
  for (bool off : {false, true}) {
    ProfileBuildOptions opts;
    opts.bf16 = true;
    if (off) opts.disabled_passes = {"bf16_lowering"};
    auto built = build_profile(*g, p, opts);
    ASSERT_TRUE(built.ok()) << built.status().message();
    EXPECT_EQ(fused_matmul(*built->plan).impl, off ? "" : "onednn_bf16");
    EXPECT_EQ(built->fp32_plan != nullptr, !off);
    if (!off) {
      EXPECT_EQ(fused_matmul(*built->fp32_plan).impl, "");
    }
  }
  // Without precision bf16 the pass changes nothing.
  auto fp32 = build_profile(*g, p, ProfileBuildOptions{});
  ASSERT_TRUE(fp32.ok()) << fp32.status().message();
  EXPECT_EQ(fused_matmul(*fp32->plan).impl, "");
  EXPECT_EQ(fp32->fp32_plan, nullptr);
}

TEST(PlanPasses, Int8LoweringQuantizesCalibratedMatMulsUnlessDisabled) {
  auto g = linear_model(32);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ResolvedProfile p;
  p.name = "only";
  p.input_order = {"x"};
  p.inputs["x"] = InputRange{Shape{2, 32}, Shape{2, 32}, Shape{2, 32}};
  auto fp32 = build_profile(*g, p, ProfileBuildOptions{});
  ASSERT_TRUE(fp32.ok()) << fp32.status().message();
  const std::map<std::string, float> scales = {{fused_matmul(*fp32->plan).name, 0.01f}};
  for (bool off : {false, true}) {
    ProfileBuildOptions opts;
    opts.int8_scales = &scales;
    if (off) opts.disabled_passes = {"int8_lowering"};
    auto built = build_profile(*g, p, opts);
    ASSERT_TRUE(built.ok()) << built.status().message();
    const PlanStep& mm = fused_matmul(*built->plan);
    EXPECT_EQ(mm.impl, off ? "" : "onednn_int8");
    EXPECT_EQ(mm.attrs.count("a_scale"), off ? 0u : 1u);
    EXPECT_EQ(built->fp32_plan != nullptr, !off);
    if (!off) EXPECT_EQ(fused_matmul(*built->fp32_plan).impl, "");
  }
  // A step calibration gave no scale stays as it was.
  const std::map<std::string, float> none;
  ProfileBuildOptions opts;
  opts.int8_scales = &none;
  auto built = build_profile(*g, p, opts);
  ASSERT_TRUE(built.ok()) << built.status().message();
  EXPECT_EQ(fused_matmul(*built->plan).impl, "");
}

}  // namespace
}  // namespace kiln
