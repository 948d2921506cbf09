// The plugin registry (duplicates, version choice, library loading and its failures) and plugin
// steps built from ONNX nodes and run by an execution context.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "builder/plan/build_plan.h"
#include "builder/engine_build_job.h"
#include "onnx_model_builder.h"
#include "runtime/plugin_host/plugin_kernel.h"
#include "runtime/plugin_host/plugin_registry.h"
#include "runtime/execution_context.h"

namespace kiln {
namespace {

// y = x + offset (float32); needs `offset` floats of workspace per element it was prepared for, to
// check the kernel sizes the workspace from the current inputs and keeps it in steady state.
struct AddStats {
  int shape_changes = 0;
  void* last_workspace = nullptr;
  std::vector<PluginInputRange> configured;
};

class AddRun final : public PluginRun {
 public:
  AddRun(float offset, AddStats* stats) : offset_(offset), stats_(stats) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) noexcept override {
    if (in.size() != 1 || in[0].dtype != DType::kFloat32) return InvalidArgument("AddOffset takes one float32 input");
    out[0] = in[0].desc();
    return Status::Ok();
  }
  Status on_shape_change(std::span<const TensorView>, std::span<const TensorView>) noexcept override {
    ++stats_->shape_changes;
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out, void* workspace) noexcept override {
    stats_->last_workspace = workspace;
    float* scratch = static_cast<float*>(workspace);
    for (int64_t i = 0; i < in[0].numel(); ++i) scratch[i] = in[0].as<const float>()[i] + offset_;
    for (int64_t i = 0; i < in[0].numel(); ++i) out[0].as<float>()[i] = scratch[i];
    return Status::Ok();
  }

 private:
  float offset_;
  AddStats* stats_;
};

class AddBuild final : public PluginBuild {
 public:
  AddBuild(float offset, float bias, AddStats* stats) : offset_(offset), bias_(bias), stats_(stats) {}
  int num_outputs() const noexcept override { return 1; }
  bool supports(std::span<const DType> d) const noexcept override { return d.size() == 1 && d[0] == DType::kFloat32; }
  Status infer(std::span<const TensorDesc> in, std::span<TensorDesc> out) const noexcept override {
    if (in.size() != 1) return InvalidArgument("AddOffset takes one input");
    if (in[0].shape.rank() == 0) return InvalidArgument("AddOffset input 0 must not be a scalar");
    out[0] = in[0];
    return Status::Ok();
  }
  size_t workspace_bytes(std::span<const TensorDesc> in) const noexcept override {
    return static_cast<size_t>(in[0].shape.numel()) * sizeof(float);
  }
  Status configure(std::span<const PluginInputRange> in) noexcept override {
    stats_->configured.assign(in.begin(), in.end());
    return Status::Ok();
  }
  AttrMap fields() const noexcept override { return {{"offset", Attribute::Float(offset_)}}; }
  StatusOr<std::unique_ptr<PluginRun>> create_run() const noexcept override {
    return std::unique_ptr<PluginRun>(new AddRun(offset_ + bias_, stats_));
  }

 private:
  float offset_, bias_;
  AddStats* stats_;
};

class AddCreator final : public PluginCreator {
 public:
  AddCreator(const char* version, float bias) : version_(version), bias_(bias) {}
  const char* name() const noexcept override { return "AddOffset"; }
  const char* plugin_namespace() const noexcept override { return "kiln_test"; }
  const char* version() const noexcept override { return version_; }
  std::vector<PluginFieldSpec> field_specs() const noexcept override { return {{"offset", Attribute::Kind::kFloat, false}}; }
  StatusOr<std::unique_ptr<PluginBuild>> create(const AttrMap& fields) const noexcept override {
    float offset = 1;
    for (const auto& [k, v] : fields) {
      if (k != "offset") return InvalidArgument("AddOffset has no field '" + k + "'");
      if (v.kind != Attribute::Kind::kFloat) return InvalidArgument("AddOffset field 'offset' must be a float");
      offset = v.f;
    }
    // Versions differ by a bias so a test can tell which one ran.
    return std::unique_ptr<PluginBuild>(new AddBuild(offset, bias_, &stats));
  }
  mutable AddStats stats;

 private:
  const char* version_;
  float bias_;
};

AddCreator& add_v2() {
  static AddCreator c("2", 0);
  return c;
}
AddCreator& add_v10() {
  static AddCreator c("10", 100);
  return c;
}

// The global registry gets the test plugin once per process.
void register_test_plugins() {
  static bool done = [] {
    EXPECT_TRUE(PluginRegistry::global().add(&add_v2(), "test").ok());
    EXPECT_TRUE(PluginRegistry::global().add(&add_v10(), "test").ok());
    return true;
  }();
  (void)done;
}

TEST(PluginRegistry, RejectsDuplicatesAndFindsHighestVersion) {
  PluginRegistry r;
  AddCreator v1("1", 0), v2("2", 0), v9("9", 0), v10("10", 0), v1b("1", 0);
  ASSERT_TRUE(r.add(&v1, "liba.so").ok());
  ASSERT_TRUE(r.add(&v10, "liba.so").ok());
  ASSERT_TRUE(r.add(&v9, "liba.so").ok());
  ASSERT_TRUE(r.add(&v2, "liba.so").ok());
  Status dup = r.add(&v1b, "libb.so");
  EXPECT_FALSE(dup.ok());
  EXPECT_NE(dup.message().find("kiln_test::AddOffset@1"), std::string::npos) << dup.message();
  EXPECT_NE(dup.message().find("libb.so"), std::string::npos) << dup.message();
  EXPECT_NE(dup.message().find("liba.so"), std::string::npos) << dup.message();
  ASSERT_NE(r.find("kiln_test", "AddOffset"), nullptr);
  EXPECT_EQ(r.find("kiln_test", "AddOffset")->version, "10");  // numeric, not "9" > "10"
  EXPECT_EQ(r.find("kiln_test", "AddOffset", "9")->creator, &v9);
  EXPECT_EQ(r.find("kiln_test", "AddOffset", "3"), nullptr);
  EXPECT_EQ(r.find("other", "AddOffset"), nullptr);
  EXPECT_EQ(r.find("kiln_test", "Missing"), nullptr);
  EXPECT_EQ(r.plugin_ids().size(), 4u);
  EXPECT_FALSE(r.add(nullptr, "libc.so").ok());
}

TEST(PluginRegistry, VersionOrder) {
  EXPECT_LT(compare_plugin_versions("1", "2"), 0);
  EXPECT_GT(compare_plugin_versions("10", "9"), 0);
  EXPECT_GT(compare_plugin_versions("1.10", "1.9"), 0);
  EXPECT_EQ(compare_plugin_versions("1.0", "1"), 0);
  EXPECT_GT(compare_plugin_versions("2-beta", "10-beta"), 0);  // not numeric: lexicographic
}

TEST(PluginRegistry, BuiltinTableRegistersCleanly) {
  PluginRegistry r;
  EXPECT_TRUE(register_builtin_plugins(r).ok());
}

TEST(PluginRegistry, LoadsTheExampleLibraryOnce) {
  PluginRegistry r;
  ASSERT_TRUE(r.load_library(KILN_EXAMPLE_PLUGIN).ok());
  const PluginEntry* e = r.find("example", "ScaledTanh");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->version, "1");
  EXPECT_EQ(e->library, PluginRegistry::canonical_library_path(KILN_EXAMPLE_PLUGIN));
  // Same file under another spelling: a no-op, not a duplicate.
  const std::filesystem::path p(KILN_EXAMPLE_PLUGIN);
  const std::string other = (p.parent_path() / "." / p.filename()).string();
  EXPECT_TRUE(r.load_library(other).ok());
  EXPECT_EQ(r.loaded_libraries().size(), 1u);
  EXPECT_EQ(r.plugin_ids(), std::vector<std::string>{"example::ScaledTanh@1"});

  // The creator checks its fields.
  EXPECT_FALSE(e->creator->create({}).ok());
  auto bad = e->creator->create({{"alpha", Attribute::Float(1)}, {"gamma", Attribute::Float(1)}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gamma"), std::string::npos);
  EXPECT_FALSE(e->creator->create({{"alpha", Attribute::Int(1)}}).ok());
  auto ok = e->creator->create({{"alpha", Attribute::Float(2)}});
  ASSERT_TRUE(ok.ok());
  const AttrMap fields = ok.value()->fields();
  EXPECT_FLOAT_EQ(fields.at("beta").f, 1.0f);  // the default is saved explicitly
}

TEST(PluginRegistry, RejectsAWrongApiVersion) {
  PluginRegistry r;
  Status st = r.load_library(KILN_TEST_PLUGIN_BAD_API);
  ASSERT_FALSE(st.ok());
  const std::string& m = st.message();
  EXPECT_NE(m.find(PluginRegistry::canonical_library_path(KILN_TEST_PLUGIN_BAD_API)), std::string::npos) << m;
  EXPECT_NE(m.find("version 999"), std::string::npos) << m;
  EXPECT_NE(m.find("version " + std::to_string(kKilnPluginApiVersion)), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_TRUE(r.loaded_libraries().empty());
  // Still rejected the second time (a failed load is not remembered as loaded).
  EXPECT_FALSE(r.load_library(KILN_TEST_PLUGIN_BAD_API).ok());
}

TEST(PluginRegistry, CatchesAThrowingEntryPoint) {
  PluginRegistry r;
  Status st = r.load_library(KILN_TEST_PLUGIN_THROWING);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("boom from the entry point"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("kiln_test_plugin_throwing"), std::string::npos) << st.message();
}

TEST(PluginRegistry, NamesAMissingOrInvalidLibrary) {
  PluginRegistry r;
  Status st = r.load_library("/nonexistent/libnothing.so");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'/nonexistent/libnothing.so'"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
  // A file that is not a shared library: dlerror()'s reason is included.
  const auto tmp = std::filesystem::temp_directory_path() / "kiln_not_a_library.so";
  { std::FILE* f = std::fopen(tmp.c_str(), "w"); std::fputs("not elf", f); std::fclose(f); }
  st = r.load_library(tmp.string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(tmp.string()), std::string::npos) << st.message();
  std::filesystem::remove(tmp);
}

// A model with kiln_test::AddOffset between two standard ops.
testing::OnnxModelBuilder add_offset_model(std::vector<testing::DimSpec> dims, float offset) {
  testing::OnnxModelBuilder b;
  b.input("x", DType::kFloat32, dims).output("y");
  b.node("Relu", {"x"}, {"r"});
  auto& n = b.node("AddOffset", {"r"}, {"a"}, "add");
  n.set_domain("kiln_test");
  auto* attr = n.add_attribute();
  attr->set_name("offset");
  attr->set_type(onnx::AttributeProto::FLOAT);
  attr->set_f(offset);
  b.node("Neg", {"a"}, {"y"});
  return b;
}

TEST(PluginKernel, BuildsAndRunsAPluginStep) {
  register_test_plugins();
  auto g = add_offset_model({"n"}, 0.5f).import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto plan = build_plan(*g, {});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const PlanStep* step = nullptr;
  for (const auto& s : (*plan)->steps)
    if (s.name == "add") step = &s;
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->domain, "kiln_test");
  EXPECT_EQ(step->impl, "plugin@10");  // highest version
  EXPECT_FLOAT_EQ(step->attrs.at("offset").f, 0.5f);  // fields() of the created plugin
  // With a symbolic dim the plugin still gives its output dtype, which Neg passes on.
  EXPECT_EQ((*plan)->values[(*plan)->find_value("y")].dtype, DType::kFloat32);
  {
    // With concrete shapes, inference goes through the plugin: Neg's output is known at build time.
    BuildOptions opts;
    opts.input_shapes["x"] = Shape{3};
    auto fixed = build_plan(*g, opts);
    ASSERT_TRUE(fixed.ok()) << fixed.status().message();
    EXPECT_EQ((*fixed)->values[(*fixed)->find_value("y")].dtype, DType::kFloat32);
  }

  auto ctx = ExecutionContext::create(*plan);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  AddStats& stats = add_v10().stats;
  stats = {};
  std::vector<float> x = {-1, 2, 3};
  ASSERT_TRUE((*ctx)->set_input("x", TensorView{x.data(), DType::kFloat32, Shape{3}}).ok());
  ASSERT_TRUE((*ctx)->run().ok());
  const TensorView out = (*ctx)->output(0);
  ASSERT_EQ(out.shape, Shape{3});
  EXPECT_FLOAT_EQ(out.as<float>()[0], -100.5f);
  EXPECT_FLOAT_EQ(out.as<float>()[1], -102.5f);
  EXPECT_FLOAT_EQ(out.as<float>()[2], -103.5f);
  void* ws = stats.last_workspace;
  ASSERT_NE(ws, nullptr);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*ctx)->run().ok());
  EXPECT_EQ(stats.last_workspace, ws);  // steady state: same workspace
  EXPECT_EQ(stats.shape_changes, 1);
  // A smaller shape re-prepares but keeps the (larger) workspace.
  std::vector<float> x2 = {4};
  ASSERT_TRUE((*ctx)->set_input("x", TensorView{x2.data(), DType::kFloat32, Shape{1}}).ok());
  ASSERT_TRUE((*ctx)->run().ok());
  EXPECT_EQ(stats.last_workspace, ws);
  EXPECT_FLOAT_EQ((*ctx)->output(0).as<float>()[0], -104.5f);

  // An explicit older version through impl.
  PlanStep v2 = *step;
  v2.impl = "plugin@2";
  EXPECT_TRUE(create_plugin_kernel(v2).ok());
  v2.impl = "plugin@7";
  auto missing = create_plugin_kernel(v2);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("kiln_test::AddOffset@7"), std::string::npos) << missing.status().message();
  EXPECT_NE(missing.status().message().find("node 'add'"), std::string::npos) << missing.status().message();
  v2.impl = "reference";
  EXPECT_FALSE(create_plugin_kernel(v2).ok());
}

TEST(PluginKernel, BuildErrorsNameTheNodeAndPlugin) {
  register_test_plugins();
  // The plugin's build-time infer rejects a scalar.
  auto g = add_offset_model({}, 1).import();
  ASSERT_TRUE(g.ok());
  auto plan = build_plan(*g, {});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("must not be a scalar"), std::string::npos) << plan.status().message();

  // Unsupported dtype.
  testing::OnnxModelBuilder b;
  b.input("x", DType::kFloat64, {2}).output("y");
  b.node("AddOffset", {"x"}, {"y"}, "add").set_domain("kiln_test");
  auto g2 = b.import();
  ASSERT_TRUE(g2.ok());
  plan = build_plan(*g2, {});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("does not support input dtypes (float64)"), std::string::npos) << plan.status().message();

  // Unknown field.
  testing::OnnxModelBuilder b3;
  b3.input("x", DType::kFloat32, {2}).output("y");
  testing::OnnxModelBuilder::int_attr(b3.node("AddOffset", {"x"}, {"y"}, "add"), "scale", 2);
  b3.proto().mutable_graph()->mutable_node(0)->set_domain("kiln_test");
  auto g3 = b3.import();
  ASSERT_TRUE(g3.ok());
  plan = build_plan(*g3, {});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("no field 'scale'"), std::string::npos) << plan.status().message();
  EXPECT_NE(plan.status().message().find("node 'add'"), std::string::npos) << plan.status().message();

  // Unregistered custom op.
  testing::OnnxModelBuilder b4;
  b4.input("x", DType::kFloat32, {2}).output("y");
  b4.node("Frobnicate", {"x"}, {"y"}, "frob").set_domain("acme");
  auto g4 = b4.import();
  ASSERT_TRUE(g4.ok());
  plan = build_plan(*g4, {});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(plan.status().message().find("'acme::Frobnicate'"), std::string::npos) << plan.status().message();
  EXPECT_NE(plan.status().message().find("plugins: {load: [...]}"), std::string::npos) << plan.status().message();
}

TEST(PluginKernel, ConfigureSeesTheProfileRange) {
  register_test_plugins();
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_plugin_configure_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir / "m.onnx", std::ios::binary);
    f << add_offset_model({"n"}, 0.5f).proto().SerializeAsString();
  }
  auto cfg = parse_build_config("model: m.onnx\noutput: m.engine\nprofiles:\n  p:\n    dims: {n: {min: 1, opt: 3, max: 5}}\n",
                                (dir / "b.yaml").string());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  add_v10().stats = {};
  auto built = build_engine(*cfg, [](const std::string&) {});
  ASSERT_TRUE(built.ok()) << built.status().message();
  const auto& ranges = add_v10().stats.configured;
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].dtype, DType::kFloat32);
  EXPECT_EQ(ranges[0].min, Shape{1});
  EXPECT_EQ(ranges[0].opt, Shape{3});
  EXPECT_EQ(ranges[0].max, Shape{5});
  std::filesystem::remove_all(dir);
}

// plugin_configuration is a plan pass: disabled, the plugin is never configured.
TEST(PluginKernel, ConfigurationIsAPlanPassThatCanBeDisabled) {
  register_test_plugins();
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_plugin_configure_off_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir / "m.onnx", std::ios::binary);
    f << add_offset_model({"n"}, 0.5f).proto().SerializeAsString();
  }
  for (bool off : {false, true}) {
    auto cfg = parse_build_config(std::string("model: m.onnx\noutput: m.engine\nprofiles:\n  p:\n    dims: {n: {min: 1, opt: 3, max: 5}}\n") +
                                      (off ? "passes: {disable: [plugin_configuration]}\n" : ""),
                                  (dir / "b.yaml").string());
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    add_v10().stats = {};
    auto built = build_engine(*cfg, [](const std::string&) {});
    ASSERT_TRUE(built.ok()) << built.status().message();
    EXPECT_EQ(add_v10().stats.configured.size(), off ? 0u : 1u);
  }
  std::filesystem::remove_all(dir);
}

TEST(PluginKernel, APluginNamedLikeAViewOpIsNotAView) {
  // A custom-domain "Identity" must run its plugin, not alias its input.
  Plan plan;
  plan.values.resize(2);
  plan.values[0].name = "x";
  plan.values[1].name = "y";
  plan.values[0].dtype = plan.values[1].dtype = DType::kFloat32;
  PlanStep s;
  s.name = "id";
  s.op_type = "Identity";
  s.domain = "acme";
  s.inputs = {0};
  s.outputs = {1};
  plan.steps.push_back(s);
  plan.inputs = {0};
  plan.outputs = {1};
  auto ctx = ExecutionContext::create(std::make_shared<Plan>(plan));
  ASSERT_FALSE(ctx.ok());
  EXPECT_NE(ctx.status().message().find("acme::Identity"), std::string::npos) << ctx.status().message();
}

}  // namespace
}  // namespace kiln
