// Tactic selection and the timing cache: every MatMul/Conv step gets a timed choice recorded in
// the engine, a rebuild with the cache times nothing and writes a byte-identical engine, and a
// malformed cache is an error naming the file and line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "builder/build_config.h"
#include "builder/engine_build_job.h"
#include "onnx_model_builder.h"
#include "profiles/tactic_selection.h"
#include "runtime/engine.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class Tactics : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_tactics_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // y = Relu(x @ w1) @ w2 with awkward sizes (37 x 19 x 23).
    testing::OnnxModelBuilder b;
    b.input("x", DType::kFloat32, {std::string("n"), int64_t{19}}).output("y");
    std::vector<float> w1(19 * 23), w2(23 * 5);
    for (size_t i = 0; i < w1.size(); ++i) w1[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
    for (size_t i = 0; i < w2.size(); ++i) w2[i] = 0.02f * static_cast<float>(i % 7) - 0.06f;
    b.initializer_f("w1", w1, {19, 23}).initializer_f("w2", w2, {23, 5});
    b.node("MatMul", {"x", "w1"}, {"h"}, "mm1");
    b.node("Relu", {"h"}, {"r"});
    b.node("MatMul", {"r", "w2"}, {"y"}, "mm2");
    std::ofstream(dir_ / "model.onnx", std::ios::binary) << b.proto().SerializeAsString();
  }
  void TearDown() override { fs::remove_all(dir_); }

  StatusOr<TacticLog> build(const std::string& engine_name) {
    const std::string yaml = "model: model.onnx\noutput: " + engine_name +
                             "\nprofiles: {p: {dims: {n: {min: 1, opt: 37, max: 64}}}}\ntactics: {timing_cache: cache/tc.cache}\n";
    KILN_ASSIGN_OR_RETURN(BuildConfig cfg, parse_build_config(yaml, (dir_ / "build.yaml").string()));
    KILN_ASSIGN_OR_RETURN(TimingCache cache, TimingCache::load(cfg.timing_cache));
    TacticLog log;
    KILN_RETURN_IF_ERROR(build_engine(cfg, [](const std::string&) {}, tactic_selection_hook(cfg, cache, [](const std::string&) {}, &log)).status());
    KILN_RETURN_IF_ERROR(cache.save(cfg.timing_cache));
    return log;
  }

  fs::path dir_;
};

TEST_F(Tactics, TimesCandidatesRecordsChoicesAndRebuildsIdenticallyFromTheCache) {
  auto first = build("a.engine");
  ASSERT_TRUE(first.ok()) << first.status().message();
  const auto& decisions = first->at("p");
  ASSERT_EQ(decisions.size(), 2u);
  for (const auto& d : decisions) {
    EXPECT_FALSE(d.from_cache);
    ASSERT_EQ(d.timings.size(), 2u) << d.node;  // onednn and reference
    bool chosen_is_fastest = true;
    double chosen_ms = -1;
    for (const auto& t : d.timings)
      if (t.impl == d.chosen) chosen_ms = t.ms;
    ASSERT_GE(chosen_ms, 0) << d.node;
    for (const auto& t : d.timings) chosen_is_fastest = chosen_is_fastest && (t.ms < 0 || t.ms >= chosen_ms);
    EXPECT_TRUE(chosen_is_fastest) << d.node;
  }
  // The engine records the choices.
  auto engine = Engine::load_file((dir_ / "a.engine").string());
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  for (const auto& step : (*engine)->plan(0)->steps)
    if (step.op_type == "MatMul")
      for (const auto& d : decisions)
        if (d.node == step.name) EXPECT_EQ(step.impl, d.chosen) << step.name;

  auto second = build("b.engine");
  ASSERT_TRUE(second.ok()) << second.status().message();
  for (const auto& d : second->at("p")) EXPECT_TRUE(d.from_cache) << d.node;
  EXPECT_EQ(read_all(dir_ / "a.engine"), read_all(dir_ / "b.engine"));
}

TEST_F(Tactics, TheCacheDecidesAndAMalformedCacheIsAnError) {
  ASSERT_TRUE(build("a.engine").ok());
  // Rewrite every choice to "reference": the next build must follow the cache, not re-time.
  std::string text = read_all(dir_ / "cache" / "tc.cache"), out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) out += line[0] == '#' ? line + "\n" : line.substr(0, line.rfind('\t')) + "\treference\n";
  std::ofstream(dir_ / "cache" / "tc.cache") << out;
  auto forced = build("c.engine");
  ASSERT_TRUE(forced.ok()) << forced.status().message();
  for (const auto& d : forced->at("p")) EXPECT_EQ(d.chosen, "reference") << d.node;

  std::ofstream(dir_ / "cache" / "tc.cache") << "# header\nno tab on this line\n";
  auto bad = build("d.engine");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cache/tc.cache' line 2"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace kiln
