// rotary_fusion on hand-built graphs of x * cos + rotate_half(x) * sin as the exporter writes it
// (Slice, Neg, Concat, Mul, Mul, Add): the pattern becomes one FusedRotary whose outputs match the
// unfused graph's, in either operand order; near misses (halves swapped, a cos that broadcasts
// over the rows, an odd last dim) stay unfused and still run. The FusedRotary kernel is also
// checked against a direct computation at an awkward shape.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "builder/plan/build_plan.h"
#include "builder/passes/pass.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"
#include "runtime/kernel_runner.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

constexpr int64_t kH = 3, kS = 5;

std::vector<float> random_values(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

struct Options {
  int64_t D = 8;
  bool swap_halves = false;     // concat(x1, -x2): not rotate_half
  bool cos_broadcasts = false;  // cos [1, D]: broadcasts over the rows
  bool operands_swapped = false;
};

// y = x * cos + rotate_half(x) * sin for x [1, H, S, D], cos/sin constants [S, D].
OnnxModelBuilder rotary_graph(const Options& o) {
  const int64_t D = o.D, h = D / 2;
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{1}, kH, kS, D});
  const std::vector<int64_t> cos_dims = o.cos_broadcasts ? std::vector<int64_t>{1, D} : std::vector<int64_t>{kS, D};
  b.initializer_f("cos", random_values(cos_dims[0] * D, 1), cos_dims);
  b.initializer_f("sin", random_values(kS * D, 2), {kS, D});
  b.initializer("lo_b", {0}, {1}).initializer("lo_e", {h}, {1});
  b.initializer("hi_b", {h}, {1}).initializer("hi_e", {std::numeric_limits<int64_t>::max()}, {1});
  b.initializer("axis", {-1}, {1});
  b.node("Slice", {"x", "lo_b", "lo_e", "axis"}, {"x1"}, "slice_lo");
  b.node("Slice", {"x", "hi_b", "hi_e", "axis"}, {"x2"}, "slice_hi");
  b.node("Neg", {"x2"}, {"neg"}, "neg");
  const std::vector<std::string> halves =
      o.swap_halves ? std::vector<std::string>{"x1", "neg"} : std::vector<std::string>{"neg", "x1"};
  OnnxModelBuilder::int_attr(b.node("Concat", halves, {"rot"}, "cat"), "axis", -1);
  if (o.operands_swapped) {
    b.node("Mul", {"cos", "x"}, {"xc"}, "mul_cos");
    b.node("Mul", {"sin", "rot"}, {"rs"}, "mul_sin");
    b.node("Add", {"rs", "xc"}, {"y"}, "add");
  } else {
    b.node("Mul", {"x", "cos"}, {"xc"}, "mul_cos");
    b.node("Mul", {"rot", "sin"}, {"rs"}, "mul_sin");
    b.node("Add", {"xc", "rs"}, {"y"}, "add");
  }
  b.output("y");
  return b;
}

// Live nodes of `op` in the domain kiln gives it: its own fused ops are in kKilnDomain.
int live(const Graph& g, const std::string& op) {
  const std::string domain = op == "FusedRotary" ? std::string(kKilnDomain) : "";
  int n = 0;
  for (const auto& node : g.nodes) n += !node.removed && node.op_type == op && node.domain == domain;
  return n;
}

std::vector<float> run(const Graph& g, const Tensor& x, bool fusion) {
  BuildOptions opts;
  opts.input_shapes["x"] = x.shape();
  if (!fusion) opts.disabled_passes.insert("rotary_fusion");
  auto plan = build_plan(g, opts);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  EXPECT_TRUE((*ctx)->set_input("x", x.view()).ok());
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return {};
  const TensorView& y = (*ctx)->output(0);
  return std::vector<float>(y.as<float>(), y.as<float>() + y.numel());
}

// Runs the passes; returns the number of FusedRotary nodes, and checks outputs against the
// unfused graph.
int fused_count(const Options& o) {
  auto g = rotary_graph(o).import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return -1;
  Graph fused = *g;
  PassContext ctx;
  EXPECT_TRUE(run_pass_pipeline(fused, ctx).ok());
  const int n = live(fused, "FusedRotary");
  const Tensor x = Tensor::from_vector(random_values(kH * kS * o.D, 3), Shape{1, kH, kS, o.D});
  const std::vector<float> on = run(*g, x, true), off = run(*g, x, false);
  EXPECT_EQ(on.size(), off.size());
  for (size_t i = 0; i < on.size() && i < off.size(); ++i) EXPECT_NEAR(on[i], off[i], 1e-5f) << i;
  return n;
}

TEST(RotaryFusion, RotateHalfBecomesOneNodeWithTheSameOutputs) {
  EXPECT_EQ(fused_count({}), 1);
  Options swapped;
  swapped.operands_swapped = true;
  EXPECT_EQ(fused_count(swapped), 1);
  Options wide;
  wide.D = 34;  // halves of 17: not a multiple of the vector width
  EXPECT_EQ(fused_count(wide), 1);
}

TEST(RotaryFusion, NearMissesStayUnfused) {
  Options halves;
  halves.swap_halves = true;
  EXPECT_EQ(fused_count(halves), 0);
  Options broadcast;
  broadcast.cos_broadcasts = true;
  EXPECT_EQ(fused_count(broadcast), 0);
}

TEST(RotaryFusion, KernelMatchesDirectComputationAndRejectsBadShapes) {
  const int64_t B = 2, S = 7, D = 10;
  const Tensor x = Tensor::from_vector(random_values(B * kH * S * D, 4), Shape{B, kH, S, D});
  const Tensor c = Tensor::from_vector(random_values(S * D, 5), Shape{1, S, D});
  const Tensor s = Tensor::from_vector(random_values(S * D, 6), Shape{S, D});
  auto out = run_op_once("FusedRotary", {}, {x, c, s}, 1, "reference");
  ASSERT_TRUE(out.ok()) << out.status().message();
  const float* y = (*out)[0].as<float>();
  for (int64_t r = 0; r < B * kH * S; ++r)
    for (int64_t d = 0; d < D; ++d) {
      const float* xr = x.as<float>() + r * D;
      const int64_t t = (r % S) * D + d;
      const float rot = d < D / 2 ? -xr[d + D / 2] : xr[d - D / 2];
      EXPECT_NEAR(y[r * D + d], xr[d] * c.as<float>()[t] + rot * s.as<float>()[t], 1e-6f) << r << "," << d;
    }
  const Tensor odd = Tensor::from_vector(random_values(S * 3, 7), Shape{S, 3});
  const Tensor x_odd = Tensor::from_vector(random_values(S * 3, 8), Shape{S, 3});
  auto bad = run_op_once("FusedRotary", {}, {x_odd, odd, odd}, 1, "reference");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("even"), std::string::npos) << bad.status().message();
  const Tensor row = Tensor::from_vector(random_values(D, 9), Shape{1, D});  // broadcasts over the rows
  auto wrong = run_op_once("FusedRotary", {}, {x, row, s}, 1, "reference");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("input 1"), std::string::npos) << wrong.status().message();
}

}  // namespace
}  // namespace kiln
