// precision: bf16. The bf16 kernels (FusedMatMul, MatMul, Gemm, Conv "onednn_bf16") against the
// float32 reference kernels with a bf16 tolerance at awkward shapes; an engine built with precision
// bf16 keeps its bf16 kernels through the file; and with AVX512_BF16 hidden (KILN_DISABLE_BF16)
// the build falls back to fp32 with a warning.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

#include "builder/build_config.h"
#include "builder/engine_build_job.h"
#include "onnx_model_builder.h"
#include "runtime/plugin_host/plugin_registry.h"
#include "runtime/engine.h"
#include "runtime/engine_format.h"
#include "runtime/execution_context.h"
#include "runtime/kernel_runner.h"

namespace kiln {
namespace {

bool host_bf16() { return (host_cpu_features() & kCpuAvx512Bf16) != 0; }

Tensor random_f32(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (float& x : v) x = dist(rng);
  return Tensor::from_vector<float>(v, s);
}

// Operands rounded to bf16 (8 significant bits) make each product off by up to ~2^-8 relative;
// over K terms of random sign the sum's error grows like sqrt(K).
void expect_bf16_close(const Tensor& got, const Tensor& want, int64_t K, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const double atol = 8e-3 * std::sqrt(static_cast<double>(std::max<int64_t>(K, 1))), rtol = 1e-2;
  int bad = 0;
  double max_err = 0;
  for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
    const double g = got.as<float>()[i], w = want.as<float>()[i];
    max_err = std::max(max_err, std::abs(g - w));
    if (!(std::abs(g - w) <= atol + rtol * std::abs(w))) {
      ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
      ++bad;
    }
  }
}

void compare_bf16(const std::string& op, const AttrMap& attrs, const std::vector<Tensor>& in, int64_t K, const std::string& what) {
  KernelArgs args;
  args.op_type = op;
  args.node_name = "test";
  args.num_inputs = static_cast<int>(in.size());
  args.num_outputs = 1;
  auto k = KernelRegistry::builtin().create(args, attrs, "onednn_bf16");
  ASSERT_TRUE(k.ok()) << k.status().message();
  std::vector<TensorView> views;
  for (const auto& t : in) views.push_back(t.view());
  auto got = run_kernel_once(**k, views, 1);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
  EXPECT_STREQ((*k)->impl_name(), "onednn_bf16") << what;
  auto want = run_op_once(op, attrs, in, 1, "reference");
  ASSERT_TRUE(want.ok()) << what << ": " << want.status().message();
  expect_bf16_close((*got)[0], (*want)[0], K, op + " " + what);
}

TEST(Bf16Kernels, FusedMatMulMatchesFp32ReferenceAtAwkwardShapes) {
  if (!host_bf16()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  uint32_t seed = 1;
  const char* acts[] = {"none", "gelu_erf", "gelu_tanh"};
  int i = 0;
  for (int64_t M : {1, 5, 130})
    for (int64_t K : {3, 17, 129})
      for (int64_t N : {1, 31, 65}) {
        const Shape a = i % 2 ? Shape{2, M, K} : Shape{M, K};
        Shape y = a;
        y[y.rank() - 1] = N;
        std::vector<Tensor> in{random_f32(a, seed++), random_f32(Shape{K, N}, seed++), random_f32(Shape{N}, seed++)};
        if (i % 3 != 1) in.push_back(random_f32(y, seed++));
        compare_bf16("FusedMatMul", {{"activation", Attribute::String(acts[i % 3])}}, in, K,
                     a.str() + " x [" + std::to_string(K) + ", " + std::to_string(N) + "] " + acts[i % 3]);
        ++i;
      }
}

TEST(Bf16Kernels, MatMulGemmConvMatchFp32Reference) {
  if (!host_bf16()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  uint32_t seed = 100;
  for (const auto& [a, b] : std::vector<std::pair<Shape, Shape>>{{Shape{1, 17}, Shape{17, 3}},
                                                                 {Shape{2, 3, 63, 17}, Shape{2, 1, 17, 65}},
                                                                 {Shape{129, 1}, Shape{1, 33}}})
    compare_bf16("MatMul", {}, {random_f32(a, seed++), random_f32(b, seed++)}, a[a.rank() - 1], a.str() + " x " + b.str());
  for (int tb = 0; tb < 2; ++tb) {
    const int64_t M = 19, K = 35, N = 7;
    AttrMap attrs{{"transB", Attribute::Int(tb)}, {"alpha", Attribute::Float(0.5f)}};
    compare_bf16("Gemm", attrs,
                 {random_f32(Shape{M, K}, seed++), random_f32(tb ? Shape{N, K} : Shape{K, N}, seed++), random_f32(Shape{N}, seed++)},
                 K, "transB=" + std::to_string(tb));
  }
  AttrMap conv{{"kernel_shape", Attribute::Ints({3, 3})}, {"pads", Attribute::Ints({1, 1, 1, 1})},
               {"strides", Attribute::Ints({2, 2})}};
  compare_bf16("Conv", conv, {random_f32(Shape{2, 5, 13, 11}, seed++), random_f32(Shape{7, 5, 3, 3}, seed++), random_f32(Shape{7}, seed++)},
               5 * 9, "3x3 stride 2");
}

// y = x (a stand-in for kiln::Attention) with a "precision" field, which the builder sets to bf16
// for precision: bf16; configure() records the precision it saw.
std::string configured_precision;
class PrecisionRun final : public PluginRun {
 public:
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) noexcept override {
    out[0] = in[0].desc();
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out, void*) noexcept override {
    for (int64_t i = 0; i < in[0].numel(); ++i) out[0].as<float>()[i] = in[0].as<const float>()[i];
    return Status::Ok();
  }
};
class PrecisionBuild final : public PluginBuild {
 public:
  explicit PrecisionBuild(std::string precision) : precision_(std::move(precision)) {}
  int num_outputs() const noexcept override { return 1; }
  bool supports(std::span<const DType> d) const noexcept override { return d.size() == 1 && d[0] == DType::kFloat32; }
  Status infer(std::span<const TensorDesc> in, std::span<TensorDesc> out) const noexcept override {
    out[0] = in[0];
    return Status::Ok();
  }
  Status configure(std::span<const PluginInputRange>) noexcept override {
    configured_precision = precision_;
    return Status::Ok();
  }
  AttrMap fields() const noexcept override { return {{"precision", Attribute::String(precision_)}}; }
  StatusOr<std::unique_ptr<PluginRun>> create_run() const noexcept override { return std::unique_ptr<PluginRun>(new PrecisionRun); }

 private:
  std::string precision_;
};
class PrecisionCreator final : public PluginCreator {
 public:
  const char* name() const noexcept override { return "Copy"; }
  const char* plugin_namespace() const noexcept override { return "kiln_bf16_test"; }
  const char* version() const noexcept override { return "1"; }
  std::vector<PluginFieldSpec> field_specs() const noexcept override { return {{"precision", Attribute::Kind::kString, false}}; }
  StatusOr<std::unique_ptr<PluginBuild>> create(const AttrMap& fields) const noexcept override {
    auto it = fields.find("precision");
    return std::unique_ptr<PluginBuild>(new PrecisionBuild(it == fields.end() ? "fp32" : it->second.s));
  }
};

// y = Copy(Relu(x @ w1 + b1) @ w2 + b2 + x), written to disk for build_engine.
struct TempModel {
  std::filesystem::path dir;
  TempModel() {
    static PrecisionCreator creator;
    static const bool registered = PluginRegistry::global().add(&creator, "bf16_test").ok();
    EXPECT_TRUE(registered);
    dir = std::filesystem::temp_directory_path() / ("kiln_bf16_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    testing::OnnxModelBuilder b;
    b.input("x", DType::kFloat32, {std::string("n"), int64_t{40}});
    auto init = [&](const std::string& name, const std::vector<int64_t>& dims, uint32_t seed) {
      Shape s;
      for (auto d : dims) s.push_back(d);
      const Tensor t = random_f32(s, seed);
      b.initializer_f(name, std::vector<float>(t.as<float>(), t.as<float>() + t.numel()), dims);
    };
    init("w1", {40, 72}, 1);
    init("b1", {72}, 2);
    init("w2", {72, 40}, 3);
    init("b2", {40}, 4);
    b.node("MatMul", {"x", "w1"}, {"h"}, "fc1");
    b.node("Add", {"h", "b1"}, {"hb"}, "fc1_bias");
    b.node("Relu", {"hb"}, {"r"}, "relu");
    b.node("MatMul", {"r", "w2"}, {"o"}, "fc2");
    b.node("Add", {"o", "b2"}, {"ob"}, "fc2_bias");
    b.node("Add", {"ob", "x"}, {"s"}, "residual");
    b.node("Copy", {"s"}, {"y"}, "copy").set_domain("kiln_bf16_test");
    b.output("y");
    std::ofstream f(dir / "m.onnx", std::ios::binary);
    f << b.proto().SerializeAsString();
  }
  ~TempModel() { std::filesystem::remove_all(dir); }

  StatusOr<BuildResult> build(const std::string& precision, const std::string& engine, std::vector<std::string>* log) const {
    auto cfg = parse_build_config("model: m.onnx\noutput: " + engine + "\nprecision: " + precision +
                                      "\nprofiles:\n  p:\n    dims: {n: {min: 1, opt: 9, max: 33}}\n",
                                  (dir / "b.yaml").string());
    if (!cfg.ok()) return cfg.status();
    return build_engine(*cfg, [log](const std::string& line) { log->push_back(line); });
  }
};

std::vector<float> run_engine(const Engine& e, const Tensor& x) {
  auto ctx = e.create_context("p");
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  EXPECT_TRUE((*ctx)->set_input("x", x.view()).ok());
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  const TensorView& y = (*ctx)->output(0);
  return std::vector<float>(y.as<float>(), y.as<float>() + y.numel());
}

TEST(Bf16Engine, RoundTripKeepsBf16KernelsAndStaysCloseToFp32) {
  if (!host_bf16()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  TempModel m;
  std::vector<std::string> log;
  auto fp32 = m.build("fp32", "fp32.engine", &log);
  ASSERT_TRUE(fp32.ok()) << fp32.status().message();
  auto bf16 = m.build("bf16", "bf16.engine", &log);
  ASSERT_TRUE(bf16.ok()) << bf16.status().message();
  ASSERT_TRUE(bf16->profiles.at(0).fp32_plan);
  auto e32 = Engine::load_file((m.dir / "fp32.engine").string());
  auto e16 = Engine::load_file((m.dir / "bf16.engine").string());
  ASSERT_TRUE(e32.ok() && e16.ok());
  EXPECT_EQ((*e32)->info().precision, "fp32");
  EXPECT_EQ((*e16)->info().precision, "bf16");
  EXPECT_TRUE((*e16)->info().required_cpu_features & kCpuAvx512Bf16);
  EXPECT_FALSE((*e32)->info().required_cpu_features & kCpuAvx512Bf16);
  int bf16_steps = 0;
  for (const auto& s : (*e16)->plan(0)->steps) {
    if (s.op_type == "FusedMatMul") {
      EXPECT_EQ(s.impl, "onednn_bf16") << s.name;
    }
    bf16_steps += s.impl == "onednn_bf16";
  }
  EXPECT_EQ(bf16_steps, 2);
  // The plugin declares a precision field: bf16 is set, and configure() saw it.
  for (const auto& s : (*e16)->plan(0)->steps) {
    if (s.op_type == "Copy") {
      EXPECT_EQ(s.attrs.at("precision").s, "bf16");
    }
  }
  for (const auto& s : (*e32)->plan(0)->steps) {
    if (s.op_type == "Copy") {
      EXPECT_EQ(s.attrs.at("precision").s, "fp32");
    }
  }
  EXPECT_EQ(configured_precision, "bf16");
  for (const auto& s : (*e32)->plan(0)->steps) EXPECT_NE(s.impl, "onednn_bf16") << s.name;
  const Tensor x = random_f32(Shape{13, 40}, 7);
  const auto y32 = run_engine(**e32, x), y16 = run_engine(**e16, x);
  ASSERT_EQ(y32.size(), y16.size());
  double max_err = 0;
  for (size_t i = 0; i < y32.size(); ++i) max_err = std::max(max_err, static_cast<double>(std::abs(y32[i] - y16[i])));
  EXPECT_GT(max_err, 0.0) << "the bf16 engine computed exactly the fp32 results: bf16 kernels did not run";
  EXPECT_LT(max_err, 0.1);
}

TEST(Bf16Engine, WithoutAvx512Bf16TheBuildFallsBackToFp32WithAWarning) {
  TempModel m;
  std::vector<std::string> log;
  ::setenv("KILN_DISABLE_BF16", "1", 1);
  auto built = m.build("bf16", "fallback.engine", &log);
  ::unsetenv("KILN_DISABLE_BF16");
  ASSERT_TRUE(built.ok()) << built.status().message();
  EXPECT_FALSE(built->profiles.at(0).fp32_plan);
  int warnings = 0;
  for (const auto& line : log) warnings += line.find("warning: precision bf16 needs AVX512_BF16") != std::string::npos;
  EXPECT_EQ(warnings, 1);
  auto e = Engine::load_file((m.dir / "fallback.engine").string());
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ((*e)->info().precision, "fp32");
  EXPECT_FALSE((*e)->info().required_cpu_features & kCpuAvx512Bf16);
  for (const auto& s : (*e)->plan(0)->steps) EXPECT_NE(s.impl, "onednn_bf16") << s.name;
  EXPECT_EQ(run_engine(**e, random_f32(Shape{3, 40}, 1)).size(), 120u);
}

}  // namespace
}  // namespace kiln
