// An external plugin library end to end: engine-build loads it (plugins: {load: [...]}) to build
// a model with an example::ScaledTanh node, the engine records it by name, version and file name,
// and loading the engine (in this process and in engine-run) finds it again on the plugin search
// path (the API's, KILN_PLUGIN_PATH, the engine's folder); a missing or wrong-version library is a
// one-line error naming it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "onnx_model_builder.h"
#include "runtime/plugin_host/plugin_registry.h"
#include "runtime/engine.h"
#include "runtime/npy_io.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

// x [2, n] -> example::ScaledTanh(alpha, beta) -> Relu -> y
std::string scaled_tanh_model(float alpha, float beta, const std::string& domain = "example", const std::string& op = "ScaledTanh") {
  testing::OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, std::string("n")}).output("y");
  auto* o = b.proto().add_opset_import();
  o->set_domain(domain);
  o->set_version(1);
  auto& n = b.node(op, {"x"}, {"t"}, "scaled");
  n.set_domain(domain);
  for (auto [name, value] : {std::pair{"alpha", alpha}, std::pair{"beta", beta}}) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(value);
  }
  b.node("Relu", {"t"}, {"y"});
  return b.proto().SerializeAsString();
}

class PluginEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_plugin_engine_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "lib");
    // A private copy, so the test can move it away without breaking other tests.
    lib_ = dir_ / "lib" / "libkiln_example_plugin.so";
    fs::copy_file(KILN_EXAMPLE_PLUGIN, lib_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write_config(const std::string& model_bytes, bool with_plugin) {
    write_file(dir_ / "model.onnx", model_bytes);
    std::string yaml =
        "model: model.onnx\n"
        "output: model.engine\n"
        "profiles:\n"
        "  p:\n"
        "    dims: {n: {min: 1, opt: 3, max: 5}}\n";
    if (with_plugin) yaml += "plugins: {load: [lib/libkiln_example_plugin.so]}\n";  // relative to the config
    write_file(dir_ / "build.yaml", yaml);
    return dir_ / "build.yaml";
  }

  fs::path dir_, lib_;
};

TEST_F(PluginEngine, BuildsLoadsAndRunsAnExternalPlugin) {
  const fs::path cfg = write_config(scaled_tanh_model(2.0f, 0.5f), true);
  CommandResult build = run_command(std::string(KILN_ENGINE_BUILD) + " " + cfg.string() + " --no-bench --report " + (dir_ / "report.json").string());
  ASSERT_EQ(build.exit_code, 0) << build.output;
  EXPECT_NE(build.output.find("loaded plugin library 'kiln example plugins' version 1.0 from " + lib_.string()), std::string::npos)
      << build.output;

  LoadOptions options;
  options.plugin_dirs = {(dir_ / "lib").string()};
  auto engine = Engine::load_file((dir_ / "model.engine").string(), options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  ASSERT_EQ((*engine)->info().plugin_libraries.size(), 1u);
  const PluginLibraryInfo& recorded = (*engine)->info().plugin_libraries[0];
  EXPECT_EQ(recorded.name, "kiln example plugins");
  EXPECT_EQ(recorded.version, "1.0");
  EXPECT_EQ(recorded.file_name, "libkiln_example_plugin.so");
  EXPECT_EQ(recorded.built_from, lib_.string());   // absolute: a hint for error messages only
  EXPECT_EQ(recorded.plugins, std::vector<std::string>{"example::ScaledTanh@1"});
  const Plan& plan = *(*engine)->plan(0);
  const PlanStep* step = nullptr;
  for (const auto& s : plan.steps)
    if (s.name == "scaled") step = &s;
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->domain, "example");
  EXPECT_EQ(step->impl, "plugin@1");
  EXPECT_FLOAT_EQ(step->attrs.at("alpha").f, 2.0f);
  EXPECT_FLOAT_EQ(step->attrs.at("beta").f, 0.5f);

  auto ctx = (*engine)->create_context("p");
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  for (int64_t n : {3, 5, 1}) {
    std::vector<float> x(static_cast<size_t>(2 * n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = -2.0f + 0.7f * static_cast<float>(i);
    ASSERT_TRUE((*ctx)->set_input("x", TensorView{x.data(), DType::kFloat32, Shape{2, n}}).ok());
    Status st = (*ctx)->run();
    ASSERT_TRUE(st.ok()) << st.message();
    const TensorView y = (*ctx)->output(0);
    ASSERT_EQ(y.shape, (Shape{2, n}));
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y.as<float>()[i], std::max(0.0f, 2.0f * std::tanh(0.5f * x[i])), 1e-6f) << i;
  }

  // engine-run, a fresh process, finds the recorded library on each kind of search path.
  std::vector<float> x = {-1.5f, -0.25f, 0.0f, 0.3f, 1.0f, 4.0f};
  ASSERT_TRUE(write_npy((dir_ / "x.npy").string(), TensorView{x.data(), DType::kFloat32, Shape{2, 3}}).ok());
  auto run_engine = [&](const fs::path& engine, const std::string& prefix, const std::string& extra) {
    fs::remove_all(dir_ / "out");
    CommandResult run = run_command(prefix + std::string(KILN_ENGINE_RUN) + " " + engine.string() + " --profile p --input x=" +
                                    (dir_ / "x.npy").string() + " --output-dir " + (dir_ / "out").string() + extra);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    auto y = read_npy((dir_ / "out" / "y.npy").string());
    ASSERT_TRUE(y.ok()) << y.status().message();
    ASSERT_EQ(y->shape(), (Shape{2, 3}));
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y->as<float>()[i], std::max(0.0f, 2.0f * std::tanh(0.5f * x[i])), 1e-6f) << i;
  };
  run_engine(dir_ / "model.engine", "", " --plugin-dir " + (dir_ / "lib").string());
  run_engine(dir_ / "model.engine", "KILN_PLUGIN_PATH=/nonexistent:" + (dir_ / "lib").string() + " ", "");
  // Copied with its library to another folder, the engine loads from there (its own folder).
  fs::create_directories(dir_ / "elsewhere");
  fs::copy_file(dir_ / "model.engine", dir_ / "elsewhere" / "model.engine");
  fs::copy_file(lib_, dir_ / "elsewhere" / "libkiln_example_plugin.so");
  fs::rename(lib_, dir_ / "moved.so");   // the build path holds nothing now
  run_engine(dir_ / "elsewhere" / "model.engine", "", "");
  fs::rename(dir_ / "moved.so", lib_);   // back at the build path, which is not on the search path

  // Without the library on the search path the engine does not load, and says which library it
  // needs, where it looked and where it was built from; the build path itself is never opened.
  CommandResult missing = run_command(std::string(KILN_ENGINE_RUN) + " --inspect " + (dir_ / "model.engine").string());
  EXPECT_NE(missing.exit_code, 0) << missing.output;
  for (const std::string& needle : {std::string("'kiln example plugins' version 1.0"), std::string("libkiln_example_plugin.so"),
                                    std::string("not found on the plugin search path"), lib_.string()})
    EXPECT_NE(missing.output.find(needle), std::string::npos) << needle << " in " << missing.output;
  EXPECT_EQ(std::count(missing.output.begin(), missing.output.end(), '\n'), 1) << missing.output;

  // A library of another version under the recorded file name is not taken.
  fs::copy_file(KILN_TEST_PLUGIN_WRONG_VERSION, dir_ / "libkiln_example_plugin.so");
  CommandResult wrong = run_command(std::string(KILN_ENGINE_RUN) + " --inspect " + (dir_ / "model.engine").string());
  EXPECT_NE(wrong.exit_code, 0) << wrong.output;
  EXPECT_NE(wrong.output.find("it is 'kiln example plugins' version 2.0, not 'kiln example plugins' version 1.0"), std::string::npos)
      << wrong.output;
  EXPECT_EQ(std::count(wrong.output.begin(), wrong.output.end(), '\n'), 1) << wrong.output;
}

TEST_F(PluginEngine, AnUnregisteredCustomOpFailsTheBuild) {
  const fs::path cfg = write_config(scaled_tanh_model(1, 1, "acme", "Frobnicate"), false);
  CommandResult build = run_command(std::string(KILN_ENGINE_BUILD) + " " + cfg.string() + " --no-bench --report " + (dir_ / "report.json").string());
  EXPECT_NE(build.exit_code, 0) << build.output;
  EXPECT_NE(build.output.find("node 'scaled' (acme::Frobnicate)"), std::string::npos) << build.output;
  EXPECT_NE(build.output.find("plugins: {load: [...]}"), std::string::npos) << build.output;
  EXPECT_FALSE(fs::exists(dir_ / "model.engine"));
}

TEST_F(PluginEngine, AMissingLibraryInTheConfigFailsTheBuild) {
  const fs::path cfg = write_config(scaled_tanh_model(1, 1), true);
  fs::remove(lib_);
  CommandResult build = run_command(std::string(KILN_ENGINE_BUILD) + " " + cfg.string() + " --no-bench --report " + (dir_ / "report.json").string());
  EXPECT_NE(build.exit_code, 0) << build.output;
  EXPECT_NE(build.output.find("plugins.load"), std::string::npos) << build.output;
  EXPECT_NE(build.output.find(lib_.string()), std::string::npos) << build.output;
}

}  // namespace
}  // namespace kiln
