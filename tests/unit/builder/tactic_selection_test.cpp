// Tactic selection and the timing cache: every MatMul/Conv step gets a timed choice recorded in
// the engine, a rebuild with the cache times nothing and writes a byte-identical engine, and a
// malformed cache is an error naming the file and line. FusedConv's Winograd candidate is timed
// where oneDNN has it, reported unavailable elsewhere, keyed into the cache, and an engine using
// it requires AVX-512.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "builder/build_config.h"
#include "builder/engine_build_job.h"
#include "onnx_model_builder.h"
#include "builder/tactics/tactic_selection.h"
#include "runtime/engine.h"
#include "runtime/engine_format.h"
#include "runtime/execution_context.h"

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

  StatusOr<TacticLog> build(const std::string& engine_name, const std::string& model = "model.onnx", const std::string& dims = "{min: 1, opt: 37, max: 64}") {
    const std::string yaml = "model: " + model + "\noutput: " + engine_name + "\nprofiles: {p: {dims: {n: " + dims +
                             "}}}\ntactics: {timing_cache: cache/tc.cache}\n";
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
    // onednn and reference, and FusedMatMul's panel kernel (AVX2 + FMA, kiln's baseline).
    std::vector<std::string> timed;
    for (const auto& t : d.timings) timed.push_back(t.impl);
    std::vector<std::string> want{"onednn", "reference"};
    if (d.op_type == "FusedMatMul") want = {"onednn", "panel", "reference"};
    std::sort(timed.begin(), timed.end());
    ASSERT_EQ(timed, want) << d.node;
    bool chosen_is_fastest = true;
    double chosen_ms = -1;
    for (const auto& t : d.timings)
      if (t.impl == d.chosen) chosen_ms = t.ms;
    ASSERT_GE(chosen_ms, 0) << d.node;
    for (const auto& t : d.timings) chosen_is_fastest = chosen_is_fastest && (t.ms < 0 || t.ms >= chosen_ms);
    // Unless the isolated call was close and whole runs decided between the two (with several
    // contested steps, whole-run totals can overrule a step's own faster side: tactic_refinement.h).
    if (d.in_context.size() == 2)
      EXPECT_TRUE(d.chosen == d.in_context[0].impl || d.chosen == d.in_context[1].impl) << d.node;
    else
      EXPECT_TRUE(chosen_is_fastest) << d.node;
  }
  // The engine records the choices.
  auto engine = Engine::load_file((dir_ / "a.engine").string());
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  for (const auto& step : (*engine)->plan(0)->steps)
    if (step.op_type == "MatMul")
      for (const auto& d : decisions)
        if (d.node == step.name) {
          EXPECT_EQ(step.impl, d.chosen) << step.name;
        }

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

// y = Conv_s2(Relu(Conv(x))): c1 is 3x3 stride 1 (a Winograd case), c2 stride 2 (not one).
void write_conv_model(const fs::path& path) {
  testing::OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {std::string("n"), int64_t{16}, int64_t{13}, int64_t{13}}).output("y");
  std::vector<float> w1(32 * 16 * 9), w2(16 * 32 * 9);
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = 0.01f * static_cast<float>(i % 13) - 0.06f;
  for (size_t i = 0; i < w2.size(); ++i) w2[i] = 0.01f * static_cast<float>(i % 11) - 0.05f;
  b.initializer_f("w1", w1, {32, 16, 3, 3}).initializer_f("w2", w2, {16, 32, 3, 3});
  auto& c1 = b.node("Conv", {"x", "w1"}, {"h"}, "c1");
  testing::OnnxModelBuilder::ints_attr(c1, "pads", {1, 1, 1, 1});
  b.node("Relu", {"h"}, {"r"});
  auto& c2 = b.node("Conv", {"r", "w2"}, {"y"}, "c2");
  testing::OnnxModelBuilder::ints_attr(c2, "pads", {1, 1, 1, 1});
  testing::OnnxModelBuilder::ints_attr(c2, "strides", {2, 2});
  std::ofstream(path, std::ios::binary) << b.proto().SerializeAsString();
}

TEST_F(Tactics, WinogradIsTimedWhereItRunsKeyedIntoTheCacheAndRequiresAvx512) {
  if (!(host_cpu_features() & kCpuAvx512f)) GTEST_SKIP() << "oneDNN's Winograd convolution needs AVX-512";
  write_conv_model(dir_ / "conv.onnx");
  // A cache written before the candidate existed: its key lists only onednn and reference, so it
  // must not decide a step whose candidates now include onednn_winograd.
  fs::create_directories(dir_ / "cache");
  auto log = build("w.engine", "conv.onnx", "{min: 1, opt: 2, max: 2}");
  ASSERT_TRUE(log.ok()) << log.status().message();
  const std::string cache_text = read_all(dir_ / "cache" / "tc.cache");
  EXPECT_NE(cache_text.find("FusedConv|onednn,onednn_winograd,"), std::string::npos) << cache_text;
  std::string old_style;
  {
    std::istringstream lines(cache_text);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("FusedConv|", 0) != 0) continue;
      const size_t at = line.find("onednn_winograd,");
      old_style += line.substr(0, at) + line.substr(at + 16, line.rfind('\t') - at - 16) + "\treference\n";
    }
  }
  std::ofstream(dir_ / "cache" / "tc.cache") << "# written before onednn_winograd\n" << old_style;
  log = build("w.engine", "conv.onnx", "{min: 1, opt: 2, max: 2}");
  ASSERT_TRUE(log.ok()) << log.status().message();
  for (const auto& d : log->at("p")) {
    if (d.op_type != "FusedConv") continue;
    EXPECT_FALSE(d.from_cache) << d.node;
    const TacticTiming* wino = nullptr;
    for (const auto& t : d.timings)
      if (t.impl == "onednn_winograd") wino = &t;
    ASSERT_NE(wino, nullptr) << d.node;
    if (d.node == "c1") {
      EXPECT_TRUE(wino->unavailable.empty()) << wino->unavailable;
    } else {
      EXPECT_NE(wino->unavailable.find("no Winograd"), std::string::npos) << d.node << ": " << wino->unavailable;
      EXPECT_NE(d.chosen, "onednn_winograd");
    }
  }
  const std::string report = tactics_report_json(*log);
  EXPECT_NE(report.find("\"onednn_winograd\": null"), std::string::npos) << report;
  // A close isolated call is decided again inside whole runs; with one contested step (c1), the
  // choice follows its in-context times.
  for (const auto& d : log->at("p"))
    if (d.in_context.size() == 2) {
      EXPECT_EQ(d.chosen, d.in_context[0].ms <= d.in_context[1].ms ? d.in_context[0].impl : d.in_context[1].impl)
          << d.node;
    }
  // The cache holds the final choices: a rebuild from it times nothing and is byte-identical.
  auto cached = build("w_again.engine", "conv.onnx", "{min: 1, opt: 2, max: 2}");
  ASSERT_TRUE(cached.ok()) << cached.status().message();
  for (const auto& d : cached->at("p")) EXPECT_TRUE(d.from_cache && d.in_context.empty()) << d.node;
  EXPECT_EQ(read_all(dir_ / "w.engine"), read_all(dir_ / "w_again.engine"));

  // Force c1 onto Winograd through the cache: the engine records it, requires AVX-512 and runs it.
  std::string forced, text = read_all(dir_ / "cache" / "tc.cache");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const bool c1 = line.rfind("FusedConv|", 0) == 0 && line.find("|float32[2, 16, 13, 13];") != std::string::npos;
    forced += c1 ? line.substr(0, line.rfind('\t')) + "\tonednn_winograd\n" : line + "\n";
  }
  std::ofstream(dir_ / "cache" / "tc.cache") << forced;
  log = build("wf.engine", "conv.onnx", "{min: 1, opt: 2, max: 2}");
  ASSERT_TRUE(log.ok()) << log.status().message();
  auto engine = Engine::load_file((dir_ / "wf.engine").string());
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  EXPECT_TRUE((*engine)->info().required_cpu_features & kCpuAvx512f);
  auto ctx = (*engine)->create_context("p");
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  Tensor x = Tensor::zeros(DType::kFloat32, Shape{1, 16, 13, 13});
  for (int64_t i = 0; i < x.numel(); ++i) x.as<float>()[i] = 0.001f * static_cast<float>(i % 101) - 0.05f;
  ASSERT_TRUE((*ctx)->set_input(0, x.view()).ok());
  ASSERT_TRUE((*ctx)->run().ok());
  const Plan& plan = *(*engine)->plan(0);
  bool found = false;
  for (size_t s = 0; s < plan.steps.size(); ++s)
    if (plan.steps[s].name == "c1") {
      found = true;
      EXPECT_EQ(plan.steps[s].impl, "onednn_winograd");
      EXPECT_STREQ((*ctx)->kernel(s).impl_name(), "onednn_winograd");
    }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace kiln
