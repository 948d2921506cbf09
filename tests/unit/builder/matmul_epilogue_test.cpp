// FusedMatMul (act(A x W + bias) + residual on one oneDNN matmul, or on kiln's panel kernel)
// against the unfused reference computed here (reference MatMul, then the epilogue in double), at shapes that divide no tile;
// and matmul_epilogue_fusion asserted on the rewritten graph and run with the pass on and off.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>

#include "builder/plan/build_plan.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"
#include "runtime/kernel_runner.h"
#include "runtime/kernels/panel_gemm.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

Tensor random_f32(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (float& x : v) x = dist(rng);
  return Tensor::from_vector<float>(v, s);
}

// The unfused computation: reference MatMul, then bias, GELU and residual one after the other.
Tensor unfused(const std::vector<Tensor>& in, const std::string& act) {
  auto mm = run_op_once("MatMul", {}, {in[0], in[1]}, 1, "reference");
  EXPECT_TRUE(mm.ok()) << mm.status().message();
  Tensor y = (*mm)[0];
  const int64_t N = in[1].shape()[1];
  for (int64_t i = 0; i < y.numel(); ++i) {
    double v = y.as<float>()[i];
    if (in.size() > 2 && !in[2].empty()) v += in[2].as<float>()[i % N];
    if (act == "gelu_erf") v = v * 0.5 * (1.0 + std::erf(v * 0.70710678118654752));
    if (act == "gelu_tanh") v = 0.5 * v * (1.0 + std::tanh(0.79788456080286536 * (v + 0.044715 * v * v * v)));
    y.as<float>()[i] = static_cast<float>(v);
  }
  if (in.size() < 4) return y;
  auto sum = run_op_once("Add", {}, {y, in[3]}, 1, "reference");
  EXPECT_TRUE(sum.ok()) << sum.status().message();
  return (*sum)[0];
}

// Runs FusedMatMul with `impl`; returns the output and the implementation that actually ran.
std::pair<Tensor, std::string> fused(const std::vector<Tensor>& in, const std::string& act, const std::string& impl) {
  KernelArgs args;
  args.op_type = "FusedMatMul";
  args.node_name = "test";
  args.num_inputs = static_cast<int>(in.size());
  args.num_outputs = 1;
  auto k = KernelRegistry::builtin().create(args, {{"activation", Attribute::String(act)}}, impl);
  EXPECT_TRUE(k.ok()) << k.status().message();
  if (!k.ok()) return {};
  std::vector<TensorView> views;
  for (const auto& t : in) views.push_back(t.view());
  auto got = run_kernel_once(**k, views, 1);
  EXPECT_TRUE(got.ok()) << got.status().message();
  if (!got.ok()) return {};
  return {(*got)[0], (*k)->impl_name()};
}

void expect_close(const Tensor& got, const Tensor& want, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int bad = 0;
  for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
    const double g = got.as<float>()[i], w = want.as<float>()[i];
    if (!(std::abs(g - w) <= atol + rtol * std::abs(w))) {
      ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
      ++bad;
    }
  }
}

struct Case {
  Shape a;
  int64_t N;
  Shape bias;  // empty rank-0 shape = no bias
  bool residual;
  std::string act;
};

std::vector<Case> awkward_cases() {
  std::vector<Case> cases;
  const std::string acts[] = {"none", "gelu_erf", "gelu_tanh"};
  int i = 0;
  for (int64_t M : {1, 3, 17, 129})
    for (int64_t K : {1, 17, 63})
      for (int64_t N : {3, 17, 129}) {
        const Shape a = i % 2 ? Shape{2, M, K} : Shape{M, K};
        const Shape bias = i % 3 == 0 ? Shape{N} : i % 3 == 1 ? Shape{1, 1, N} : Shape{};
        cases.push_back({a, N, a.rank() == 2 && bias.rank() == 3 ? Shape{1, N} : bias, i % 4 < 2, acts[i % 3]});
        ++i;
      }
  return cases;
}

std::vector<Tensor> inputs_for(const Case& c, uint32_t seed) {
  const int64_t K = c.a[c.a.rank() - 1];
  std::vector<Tensor> in{random_f32(c.a, seed), random_f32(Shape{K, c.N}, seed + 1)};
  if (c.bias.rank() > 0 || c.residual) in.push_back(c.bias.rank() > 0 ? random_f32(c.bias, seed + 2) : Tensor());
  if (c.residual) {
    Shape y = c.a;
    y[y.rank() - 1] = c.N;
    in.push_back(random_f32(y, seed + 3));
  }
  return in;
}

std::string describe(const Case& c) {
  return c.a.str() + " x [K, " + std::to_string(c.N) + "] bias " + c.bias.str() + (c.residual ? " +residual " : " ") + c.act;
}

// "panel" needs AVX2 + FMA; elsewhere it runs the reference.
std::string expected_impl(const std::string& impl) { return impl == "panel" && !panel_gemm::supported() ? "reference" : impl; }

TEST(FusedMatMul, OnednnAndPanelMatchUnfusedReferenceAtAwkwardShapes) {
  uint32_t seed = 1;
  for (const Case& c : awkward_cases()) {
    const auto in = inputs_for(c, seed += 4);
    const Tensor want = unfused(in, c.act);
    const double K = static_cast<double>(c.a[c.a.rank() - 1]);
    for (const char* impl : {"onednn", "panel", "reference"}) {
      auto [got, ran] = fused(in, c.act, impl);
      EXPECT_EQ(ran, expected_impl(impl)) << describe(c);
      expect_close(got, want, 1e-5 * std::sqrt(K), 1e-4, std::string(impl) + " " + describe(c));
    }
  }
}

// The panel kernel at the sizes it is built for and past its blocking: K over several depth
// blocks (1000 = 3 uneven blocks), N ending in a partial panel or splitting the rows over the
// threads (130 = 3 panels), 274 rows (45 register blocks and 4 rows), GELU far into both tails.
TEST(FusedMatMul, PanelMatchesUnfusedReferenceAtStepShapes) {
  uint32_t seed = 200;
  for (int64_t M : {1, 274})
    for (int64_t K : {384, 1000})
      for (int64_t N : {130, 384})
        for (const char* act : {"none", "gelu_erf", "gelu_tanh"}) {
          const Case c{Shape{1, M, K}, N, Shape{N}, (seed / 4) % 2 == 0, act};
          const auto in = inputs_for(c, seed += 4);
          const Tensor want = unfused(in, act);
          auto [got, ran] = fused(in, act, "panel");
          EXPECT_EQ(ran, expected_impl("panel")) << describe(c);
          expect_close(got, want, 1e-5 * std::sqrt(static_cast<double>(K)), 1e-4, "panel " + describe(c));
        }
}

// Called from inside a parallel region (nested parallelism off), the kernel gets a team of one:
// it must still compute every panel, not the share it planned for the threads it asked for.
TEST(FusedMatMul, PanelInsideAParallelRegionComputesEverything) {
  const Case c{Shape{40, 50}, 300, Shape{300}, false, "none"};
  const auto in = inputs_for(c, 91);
  const Tensor want = unfused(in, "none");
  const int levels = omp_get_max_active_levels();
  omp_set_max_active_levels(1);
  std::pair<Tensor, std::string> got;
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    got = fused(in, "none", "panel");
  }
  omp_set_max_active_levels(levels);
  EXPECT_EQ(got.second, expected_impl("panel"));
  expect_close(got.first, want, 1e-4, 1e-4, "panel in a parallel region");
}

// A residual that is the output buffer itself (a caller may bind them so): read before any
// partial sum over K is stored.
TEST(FusedMatMul, PanelResidualMayBeTheOutput) {
  const int64_t M = 20, K = 1000, N = 70;
  const Case c{Shape{M, K}, N, Shape{N}, true, "gelu_erf"};
  const auto in = inputs_for(c, 77);
  const Tensor want = unfused(in, "gelu_erf");
  KernelArgs args;
  args.op_type = "FusedMatMul";
  args.node_name = "fc";
  args.num_inputs = 4;
  args.num_outputs = 1;
  auto k = KernelRegistry::builtin().create(args, {{"activation", Attribute::String("gelu_erf")}}, "panel");
  ASSERT_TRUE(k.ok()) << k.status().message();
  Tensor y = Tensor::copy_of(in[3].view());
  const std::vector<TensorView> v{in[0].view(), in[1].view(), in[2].view(), y.view()};
  const std::vector<TensorView> out{y.view()};
  std::vector<TensorDesc> desc(1);
  ASSERT_TRUE((*k)->infer(v, desc).ok());
  ASSERT_TRUE((*k)->prepare(v, out).ok());
  ASSERT_TRUE((*k)->run(v, out).ok());
  EXPECT_EQ(std::string((*k)->impl_name()), expected_impl("panel"));
  expect_close(y, want, 1e-5 * std::sqrt(static_cast<double>(K)), 1e-4, "residual as output");
}

TEST(FusedMatMul, ZeroSizeRowsRunOnTheReference) {
  for (const Shape& a : {Shape{0, 5}, Shape{2, 0, 5}}) {
    Shape y = a;
    y[y.rank() - 1] = 3;
    const std::vector<Tensor> in{random_f32(a, 1), random_f32(Shape{5, 3}, 2), random_f32(Shape{3}, 3), random_f32(y, 4)};
    auto [got, ran] = fused(in, "gelu_erf", "onednn");
    EXPECT_EQ(ran, "reference");
    EXPECT_EQ(got.shape(), y);
  }
}

// The pass fuses a residual Add without seeing shapes, so the kernel keeps Add's broadcasting
// (on the reference path); a 1-D A is MatMul's vector case.
TEST(FusedMatMul, BroadcastingResidualAndVectorInput) {
  const int64_t M = 5, K = 7, N = 3;
  const std::pair<Shape, Shape> cases[] = {{Shape{M, K}, Shape{1, N}},    {Shape{M, K}, Shape{3, 1, N}},
                                           {Shape{2, M, K}, Shape{M, 1}}, {Shape{K}, Shape{4, N}},
                                           {Shape{K}, Shape{N}},          {Shape{M, K}, Shape{2, M, N}}};
  uint32_t seed = 50;
  for (const auto& [a, r] : cases) {
    const std::vector<Tensor> in{random_f32(a, seed), random_f32(Shape{K, N}, seed + 1), random_f32(Shape{N}, seed + 2),
                                 random_f32(r, seed + 3)};
    seed += 4;
    const Tensor want = unfused(in, "gelu_erf");
    auto [got, ran] = fused(in, "gelu_erf", "onednn");
    expect_close(got, want, 1e-5, 1e-4, "A " + a.str() + " residual " + r.str());
    if (a.rank() == 1 && r == Shape{N}) {
      EXPECT_EQ(ran, "onednn");
    }
  }
  // A residual that cannot broadcast against the product is an error naming it.
  KernelArgs args;
  args.op_type = "FusedMatMul";
  args.node_name = "fc";
  args.num_inputs = 4;
  args.num_outputs = 1;
  auto k = KernelRegistry::builtin().create(args, {}, "onednn");
  ASSERT_TRUE(k.ok());
  const Tensor a = random_f32(Shape{M, K}, 1), w = random_f32(Shape{K, N}, 2), b = random_f32(Shape{N}, 3),
               r = random_f32(Shape{M + 1, N}, 4);
  std::vector<TensorView> v{a.view(), w.view(), b.view(), r.view()};
  std::vector<TensorDesc> out(1);
  Status st = (*k)->infer(v, out);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("residual"), std::string::npos) << st.message();
}

TEST(FusedMatMul, BadBiasIsAnError) {
  KernelArgs args;
  args.op_type = "FusedMatMul";
  args.node_name = "fc";
  args.num_inputs = 3;
  args.num_outputs = 1;
  auto k = KernelRegistry::builtin().create(args, {}, "onednn");
  ASSERT_TRUE(k.ok());
  const Tensor a = random_f32(Shape{4, 5}, 1), w = random_f32(Shape{5, 3}, 2);
  std::vector<TensorDesc> out(1);
  for (const Shape& bad : {Shape{3, 1}, Shape{4}, Shape{1, 1, 1, 3}}) {
    const Tensor bias = random_f32(bad, 3);
    std::vector<TensorView> v{a.view(), w.view(), bias.view()};
    Status st = (*k)->infer(v, out);
    EXPECT_FALSE(st.ok()) << bad.str();
    EXPECT_NE(st.message().find("bias"), std::string::npos) << st.message();
  }
}

// x:[1, S, 24] -> Linear(24 -> 40) -> GELU (erf, as exported at opset 17) -> Linear(40 -> 24) ->
// + x, then a Linear(24 -> 5) written as (x*0.5)*(1+erf(x/sqrt2)) whose pre-GELU value is also a
// graph output (so its bias Add may fuse but its GELU may not).
OnnxModelBuilder mlp_model() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{1}, std::string("S"), int64_t{24}});
  auto init = [&](const std::string& name, const std::vector<int64_t>& dims, uint32_t seed) {
    Shape s;
    for (auto d : dims) s.push_back(d);
    const Tensor t = random_f32(s, seed);
    b.initializer_f(name, std::vector<float>(t.as<float>(), t.as<float>() + t.numel()), dims);
  };
  init("w1", {24, 40}, 11);
  init("b1", {40}, 12);
  init("w2", {40, 24}, 13);
  init("b2", {24}, 14);
  init("w3", {24, 5}, 15);
  init("b3", {5}, 16);
  b.initializer_f("sqrt2", {1.4142135381698608f}, {}).initializer_f("one", {1.0f}, {}).initializer_f("half", {0.5f}, {});
  b.node("MatMul", {"x", "w1"}, {"h1"}, "fc1/MatMul");
  b.node("Add", {"b1", "h1"}, {"h1b"}, "fc1/Add");
  b.node("Div", {"h1b", "sqrt2"}, {"g_div"}, "gelu/Div");
  b.node("Erf", {"g_div"}, {"g_erf"}, "gelu/Erf");
  b.node("Add", {"g_erf", "one"}, {"g_add"}, "gelu/Add");
  b.node("Mul", {"h1b", "g_add"}, {"g_mul"}, "gelu/Mul");
  b.node("Mul", {"g_mul", "half"}, {"g"}, "gelu/Mul_1");
  b.node("MatMul", {"g", "w2"}, {"h2"}, "fc2/MatMul");
  b.node("Add", {"b2", "h2"}, {"h2b"}, "fc2/Add");
  b.node("Add", {"x", "h2b"}, {"y"}, "residual/Add");
  b.node("MatMul", {"y", "w3"}, {"h3"}, "fc3/MatMul");
  b.node("Add", {"h3", "b3"}, {"h3b"}, "fc3/Add");
  b.node("Div", {"h3b", "sqrt2"}, {"z_div"}, "gelu2/Div");
  b.node("Erf", {"z_div"}, {"z_erf"}, "gelu2/Erf");
  b.node("Add", {"z_erf", "one"}, {"z_add"}, "gelu2/Add");
  b.node("Mul", {"h3b", "half"}, {"z_half"}, "gelu2/Mul");
  b.node("Mul", {"z_half", "z_add"}, {"z"}, "gelu2/Mul_1");
  b.output("y").output("z").output("h3b");
  return b;
}

std::vector<std::vector<float>> run_mlp(const Graph& g, const std::set<std::string>& disabled, const Tensor& x) {
  BuildOptions opts;
  opts.input_shapes["x"] = x.shape();
  opts.disabled_passes = disabled;
  auto plan = build_plan(g, opts);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  EXPECT_TRUE((*ctx)->set_input("x", x.view()).ok());
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<std::vector<float>> outs;
  for (int i = 0; i < 3; ++i) {
    const TensorView& y = (*ctx)->output(i);
    outs.emplace_back(y.as<float>(), y.as<float>() + y.numel());
  }
  return outs;
}

TEST(MatMulEpilogueFusion, RewritesLinearGeluResidualChains) {
  auto g = mlp_model().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(specialize_inputs(*g, {{"x", Shape{1, 7, 24}}}).ok());
  PassContext ctx;
  ctx.disabled.insert("elementwise_fusion");  // it would take the GELU left after fc3, counted below
  ASSERT_TRUE(run_pass_pipeline(*g, ctx).ok());
  std::map<std::string, const Node*> fused_nodes;
  int erf = 0;
  for (const auto& n : g->nodes) {
    if (n.op_type == "FusedMatMul") fused_nodes[n.name] = &n;
    erf += n.op_type == "Erf";
  }
  ASSERT_EQ(fused_nodes.size(), 3u);
  const Node& fc1 = *fused_nodes.at("fc1/MatMul");
  EXPECT_EQ(fc1.attrs.at("activation").s, "gelu_erf");
  EXPECT_EQ(fc1.replaced_nodes, (std::vector<std::string>{"fc1/MatMul", "fc1/Add", "gelu/Div", "gelu/Erf", "gelu/Add",
                                                          "gelu/Mul", "gelu/Mul_1"}));
  EXPECT_EQ(fc1.inputs.size(), 3u);
  const Node& fc2 = *fused_nodes.at("fc2/MatMul");
  EXPECT_EQ(fc2.attrs.at("activation").s, "none");
  EXPECT_EQ(fc2.replaced_nodes, (std::vector<std::string>{"fc2/MatMul", "fc2/Add", "residual/Add"}));
  ASSERT_EQ(fc2.inputs.size(), 4u);
  EXPECT_EQ(g->values[fc2.inputs[3]].name, "x");
  EXPECT_EQ(g->values[fc2.outputs[0]].name, "y");
  // h3b is a graph output: the bias fuses, the GELU after it stays.
  const Node& fc3 = *fused_nodes.at("fc3/MatMul");
  EXPECT_EQ(fc3.attrs.at("activation").s, "none");
  EXPECT_EQ(fc3.replaced_nodes, (std::vector<std::string>{"fc3/MatMul", "fc3/Add"}));
  EXPECT_EQ(erf, 1);
}

TEST(MatMulEpilogueFusion, OnAndOffGiveTheSameOutputs) {
  auto g = mlp_model().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  for (int64_t S : {1, 13}) {
    const Tensor x = random_f32(Shape{1, S, 24}, 99);
    const auto on = run_mlp(*g, {}, x);
    const auto off = run_mlp(*g, {"matmul_epilogue_fusion"}, x);
    ASSERT_EQ(on.size(), off.size());
    for (size_t o = 0; o < on.size(); ++o) {
      ASSERT_EQ(on[o].size(), off[o].size());
      for (size_t i = 0; i < on[o].size(); ++i)
        EXPECT_NEAR(on[o][i], off[o][i], 1e-4 * (1.0 + std::abs(off[o][i]))) << "output " << o << " element " << i;
    }
  }
}

TEST(MatMulEpilogueFusion, GemmWithTransposedWeightsFuses) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{5}, int64_t{7}});
  const Tensor w = random_f32(Shape{3, 7}, 1), c = random_f32(Shape{3}, 2);
  b.initializer_f("w", std::vector<float>(w.as<float>(), w.as<float>() + 21), {3, 7});
  b.initializer_f("c", std::vector<float>(c.as<float>(), c.as<float>() + 3), {3});
  OnnxModelBuilder::int_attr(b.node("Gemm", {"x", "w", "c"}, {"y"}, "fc"), "transB", 1);
  b.output("y");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Tensor x = random_f32(Shape{5, 7}, 3);
  std::vector<float> results[2];
  for (int off = 0; off < 2; ++off) {
    BuildOptions opts;
    opts.input_shapes["x"] = x.shape();
    if (off) opts.disabled_passes = {"matmul_epilogue_fusion"};
    auto plan = build_plan(*g, opts);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    EXPECT_EQ((*plan)->steps.at(0).op_type, off ? "Gemm" : "FusedMatMul");
    auto ctx = ExecutionContext::create(*plan);
    ASSERT_TRUE(ctx.ok());
    ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
    ASSERT_TRUE((*ctx)->run().ok());
    const TensorView& y = (*ctx)->output(0);
    results[off].assign(y.as<float>(), y.as<float>() + y.numel());
  }
  ASSERT_EQ(results[0].size(), 15u);
  for (size_t i = 0; i < 15; ++i) EXPECT_NEAR(results[0][i], results[1][i], 1e-5);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Legacy attributes (opset-6 Gemm/Add 'broadcast') are not guessed at: those nodes stay unfused,
// so their kernels report the attribute.
TEST(MatMulEpilogueFusion, NodesWithUnknownAttributesStayUnfused) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{5}, int64_t{7}});
  const Tensor w = random_f32(Shape{7, 3}, 1), c = random_f32(Shape{3}, 2);
  b.initializer_f("w", std::vector<float>(w.as<float>(), w.as<float>() + 21), {7, 3});
  b.initializer_f("c", std::vector<float>(c.as<float>(), c.as<float>() + 3), {3});
  OnnxModelBuilder::int_attr(b.node("Gemm", {"x", "w", "c"}, {"y"}, "legacy_gemm"), "broadcast", 1);
  b.node("MatMul", {"x", "w"}, {"m"}, "mm");
  OnnxModelBuilder::int_attr(b.node("Add", {"m", "c"}, {"z"}, "legacy_add"), "broadcast", 1);
  b.output("y").output("z");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  PassContext ctx;
  ASSERT_TRUE(run_pass_pipeline(*g, ctx).ok());
  std::map<std::string, std::string> ops;
  for (const auto& n : g->nodes) ops[n.name] = n.op_type;
  EXPECT_EQ(ops["legacy_gemm"], "Gemm");
  EXPECT_EQ(ops["legacy_add"], "Add");
  EXPECT_EQ(ops["mm"], "FusedMatMul");  // the MatMul itself still gets its prepacked kernel
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// GPT-2's written-out tanh GELU (0.5*x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))) fuses into
// the Linear before it as gelu_tanh, and gives the unfused graph's values.
TEST(MatMulEpilogueFusion, Gpt2TanhGeluFuses) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{1}, std::string("S"), int64_t{9}});
  const Tensor w = random_f32(Shape{9, 13}, 4), c = random_f32(Shape{13}, 5);
  b.initializer_f("w", std::vector<float>(w.as<float>(), w.as<float>() + w.numel()), {9, 13});
  b.initializer_f("c", std::vector<float>(c.as<float>(), c.as<float>() + c.numel()), {13});
  b.initializer_f("half", {0.5f}, {}).initializer_f("three", {3.0f}, {}).initializer_f("k", {0.044715f}, {});
  b.initializer_f("s", {static_cast<float>(std::sqrt(2.0 / M_PI))}, {}).initializer_f("one", {1.0f}, {});
  b.node("MatMul", {"x", "w"}, {"m"}, "fc/MatMul");
  b.node("Add", {"c", "m"}, {"h"}, "fc/Add");
  b.node("Mul", {"h", "half"}, {"hh"}, "g/Mul");
  b.node("Pow", {"h", "three"}, {"p"}, "g/Pow");
  b.node("Mul", {"p", "k"}, {"pk"}, "g/Mul_1");
  b.node("Add", {"h", "pk"}, {"a"}, "g/Add");
  b.node("Mul", {"a", "s"}, {"as"}, "g/Mul_2");
  b.node("Tanh", {"as"}, {"t"}, "g/Tanh");
  b.node("Add", {"t", "one"}, {"t1"}, "g/Add_1");
  b.node("Mul", {"hh", "t1"}, {"y"}, "g/Mul_3");
  b.output("y");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Tensor x = random_f32(Shape{1, 11, 9}, 6);
  std::vector<float> results[2];
  for (int off = 0; off < 2; ++off) {
    BuildOptions opts;
    opts.input_shapes["x"] = x.shape();
    if (off) opts.disabled_passes = {"matmul_epilogue_fusion"};
    auto plan = build_plan(*g, opts);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    if (!off) {
      ASSERT_EQ((*plan)->steps.size(), 1u);
      EXPECT_EQ((*plan)->steps[0].op_type, "FusedMatMul");
      EXPECT_EQ((*plan)->steps[0].attrs.at("activation").s, "gelu_tanh");
      EXPECT_EQ((*plan)->steps[0].replaced_nodes.size(), 10u);
    }
    auto ctx = ExecutionContext::create(*plan);
    ASSERT_TRUE(ctx.ok());
    ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
    ASSERT_TRUE((*ctx)->run().ok());
    const TensorView& y = (*ctx)->output(0);
    results[off].assign(y.as<float>(), y.as<float>() + y.numel());
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) EXPECT_NEAR(results[0][i], results[1][i], 1e-5 * (1 + std::abs(results[1][i]))) << i;
}

}  // namespace
}  // namespace kiln
