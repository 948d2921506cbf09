// keep_nchw16c_between_winograd_convs: on a small ResNet-like plan whose 3x3 stride-1 FusedConvs
// run on Winograd, exactly the values written and read only by Winograd FusedConvs (with whole
// 16-channel blocks) switch to nchw16c, and the plan computes the same outputs as before the
// rewrite and as the reference kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "builder/plan/build_plan.h"
#include "builder/plan/plan_winograd_layout.h"
#include "onnx_model_builder.h"
#include "runtime/engine_format.h"
#include "runtime/execution_context.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

std::vector<float> random_values(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// stem (16->32, 3x3) -> block: conv1 (32->32) -> conv2 (32->32) + stem output -> Relu, then conv3
// (32->24, 3x3) and a 1x1 downsample (32->24) both reading the block's output, conv4 (24->24) +
// downsample -> Relu -> y (the Add and Relu fuse into the downsample, with conv4's output as its
// residual).
OnnxModelBuilder resnet_like() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{16}, int64_t{11}, int64_t{9}}).output("y");
  uint32_t seed = 10;
  auto conv = [&](const std::string& x, const std::string& y, const std::string& name, int64_t cin, int64_t cout, int64_t k) {
    const std::string w = name + ".w", bias = name + ".b";
    b.initializer_f(w, random_values(cout * cin * k * k, seed++, 1.0f / std::sqrt(static_cast<float>(cin * k * k))), {cout, cin, k, k});
    b.initializer_f(bias, random_values(cout, seed++, 0.1f), {cout});
    auto& n = b.node("Conv", {x, w, bias}, {y}, name);
    if (k == 3) OnnxModelBuilder::ints_attr(n, "pads", {1, 1, 1, 1});
  };
  conv("x", "c0", "stem", 16, 32, 3);
  b.node("Relu", {"c0"}, {"r0"});
  conv("r0", "c1", "conv1", 32, 32, 3);
  b.node("Relu", {"c1"}, {"r1"});
  conv("r1", "c2", "conv2", 32, 32, 3);
  b.node("Add", {"c2", "r0"}, {"s2"});
  b.node("Relu", {"s2"}, {"r2"});
  conv("r2", "c3", "conv3", 32, 24, 3);
  b.node("Relu", {"c3"}, {"r3"});
  conv("r2", "d", "downsample", 32, 24, 1);
  conv("r3", "c4", "conv4", 24, 24, 3);
  b.node("Add", {"c4", "d"}, {"s4"});
  b.node("Relu", {"s4"}, {"y"});
  return b;
}

std::string attr(const PlanStep& s, const char* name) {
  auto it = s.attrs.find(name);
  return it == s.attrs.end() ? "nchw" : it->second.s;
}

std::vector<float> run(const std::shared_ptr<Plan>& plan, const Tensor& x) {
  auto ctx = ExecutionContext::create(plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  EXPECT_TRUE((*ctx)->set_input("x", x.view()).ok());
  const Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  const TensorView& y = (*ctx)->output(0);
  return {y.as<float>(), y.as<float>() + y.numel()};
}

TEST(PlanWinogradLayout, KeepsOnlyValuesBetweenWinogradConvsInNchw16c) {
  if (!(host_cpu_features() & kCpuAvx512f)) GTEST_SKIP() << "oneDNN's Winograd convolution needs AVX-512";
  auto g = resnet_like().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto built = build_plan(*g, BuildOptions{});
  ASSERT_TRUE(built.ok()) << built.status().message();
  // What tactic selection would record: Winograd on every 3x3 convolution, the 1x1 on oneDNN direct.
  Plan with_impls = **built;
  std::map<std::string, size_t> step_of;
  for (size_t s = 0; s < with_impls.steps.size(); ++s) {
    PlanStep& step = with_impls.steps[s];
    step_of[step.name] = s;
    if (step.op_type == "FusedConv") step.impl = step.name == "downsample" ? "onednn" : "onednn_winograd";
  }
  for (const char* name : {"stem", "conv1", "conv2", "conv3", "downsample", "conv4"}) ASSERT_TRUE(step_of.count(name)) << name;
  auto before = std::make_shared<Plan>(with_impls);
  auto after = std::make_shared<Plan>(with_impls);
  EXPECT_EQ(keep_nchw16c_between_winograd_convs(*after), 2);  // r0 and r1
  auto step = [&](const char* name) -> const PlanStep& { return after->steps[step_of.at(name)]; };
  // r0: stem -> conv1 (X) and conv2 (residual); r1: conv1 -> conv2.
  EXPECT_EQ(attr(step("stem"), "x_layout"), "nchw");  // the graph input
  EXPECT_EQ(attr(step("stem"), "y_layout"), "nchw16c");
  EXPECT_EQ(attr(step("conv1"), "x_layout"), "nchw16c");
  EXPECT_EQ(attr(step("conv1"), "y_layout"), "nchw16c");
  EXPECT_EQ(attr(step("conv2"), "x_layout"), "nchw16c");
  EXPECT_EQ(attr(step("conv2"), "residual_layout"), "nchw16c");
  // r2 has a direct-convolution reader; r3 has 24 channels; conv4's output (24 channels) is the
  // residual of the downsample convolution (conv_epilogue_fusion fused the final Add and Relu into
  // the later of the two convolutions), whose output y is the graph output.
  EXPECT_EQ(attr(step("conv2"), "y_layout"), "nhwc");
  EXPECT_EQ(attr(step("conv3"), "x_layout"), "nhwc");
  EXPECT_EQ(attr(step("downsample"), "x_layout"), "nhwc");
  EXPECT_EQ(attr(step("conv3"), "y_layout"), "nhwc");
  EXPECT_EQ(attr(step("conv4"), "x_layout"), "nhwc");
  EXPECT_EQ(attr(step("conv4"), "y_layout"), "nhwc");
  EXPECT_EQ(attr(step("downsample"), "residual_layout"), "nhwc");
  EXPECT_EQ(attr(step("downsample"), "y_layout"), "nchw");
  // A second pass finds nothing left to switch.
  Plan again = *after;
  EXPECT_EQ(keep_nchw16c_between_winograd_convs(again), 0);

  Tensor x = Tensor::from_vector<float>(random_values(2 * 16 * 11 * 9, 99, 1.0f), Shape{2, 16, 11, 9});
  const std::vector<float> y_before = run(before, x), y_after = run(after, x);
  auto reference = std::make_shared<Plan>(**built);
  for (auto& s : reference->steps)
    if (s.op_type == "FusedConv") s.impl = "reference";
  const std::vector<float> y_ref = run(reference, x);
  ASSERT_EQ(y_before.size(), y_after.size());
  ASSERT_EQ(y_ref.size(), y_after.size());
  double same = 0, vs_ref = 0;
  for (size_t i = 0; i < y_after.size(); ++i) {
    same = std::max(same, static_cast<double>(std::abs(y_after[i] - y_before[i])));
    vs_ref = std::max(vs_ref, static_cast<double>(std::abs(y_after[i] - y_ref[i])));
  }
  EXPECT_EQ(same, 0.0);  // only reorders were removed: the same primitives see the same values
  EXPECT_LE(vs_ref, 1e-4);
}

// The same rewrite as the winograd_layout plan pass, after tactic selection (here a hook that puts
// the 3x3 convolutions on Winograd), and nothing of it when the pass is disabled.
TEST(PlanWinogradLayout, IsAPlanPassAfterTacticSelection) {
  if (!(host_cpu_features() & kCpuAvx512f)) GTEST_SKIP() << "oneDNN's Winograd convolution needs AVX-512";
  auto g = resnet_like().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  for (bool off : {false, true}) {
    BuildOptions opts;
    opts.tactics = [](Plan& plan, const ResolvedProfile&) {
      for (auto& s : plan.steps)
        if (s.op_type == "FusedConv") s.impl = s.name == "downsample" ? "onednn" : "onednn_winograd";
      return Status::Ok();
    };
    if (off) opts.disabled_passes = {"winograd_layout"};
    auto built = build_plan(*g, opts);
    ASSERT_TRUE(built.ok()) << built.status().message();
    int blocked = 0;
    for (const auto& s : (*built)->steps) blocked += attr(s, "y_layout") == "nchw16c";
    EXPECT_EQ(blocked, off ? 0 : 2);
  }
}

}  // namespace
}  // namespace kiln
