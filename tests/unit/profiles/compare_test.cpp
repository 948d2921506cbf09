// compare_runs: verdicts per metric, the overall verdict, and layer attribution across a fusion
// (a fused attention on one side, its unfused ops on the other, count as one entry).
#include "profiles/history/compare.h"
#include "profiles/history/ab_runner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

namespace kiln::history {
namespace {

ProfileRecord profile(const std::string& name, double median, uint64_t seed, int n = 50) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0, 0.02);
  ProfileRecord p;
  p.name = name;
  p.budget_ms = 100;
  for (int i = 0; i < n; ++i) p.samples_ms.push_back(median * std::exp(noise(rng)));
  return p;
}

TEST(HistoryCompare, VerdictsAndWorstOverall) {
  RunRecord a, b;
  a.profiles = {profile("full", 190, 1), profile("incremental", 41, 2)};
  b.profiles = {profile("full", 190 * 1.10, 3), profile("incremental", 41, 4, 400)};
  a.profiles[1] = profile("incremental", 41, 2, 400);
  const Comparison c = compare_runs(a, b, CompareOptions{});
  ASSERT_EQ(c.profiles.size(), 2u);
  EXPECT_EQ(c.profiles[0].verdict, "regressed");
  EXPECT_EQ(c.profiles[1].verdict, "same");
  EXPECT_EQ(c.verdict, "regressed");
  EXPECT_NEAR(c.profiles[0].p50_change, 0.10, 0.02);
  EXPECT_LT(c.profiles[0].p50_change_ci.lo, c.profiles[0].p50_change);
  EXPECT_GT(c.profiles[0].p50_change_ci.hi, c.profiles[0].p50_change);
  // The other way round it is an improvement.
  EXPECT_EQ(compare_runs(b, a, CompareOptions{}).profiles[0].verdict, "improved");
  // The JSON carries the keys CI gates read.
  const auto j = nlohmann::json::parse(comparison_json(c));
  EXPECT_EQ(j["verdict"], "regressed");
  EXPECT_EQ(j["profiles"]["full"]["verdict"], "regressed");
  for (const char* k : {"p50_ms", "p99_ms", "miss_rate"}) {
    EXPECT_TRUE(j["profiles"]["full"][k].contains("a")) << k;
    EXPECT_TRUE(j["profiles"]["full"][k].contains("b")) << k;
  }
  EXPECT_EQ(j["profiles"]["full"]["p50_change_ci"].size(), 2u);
  EXPECT_TRUE(j["profiles"]["full"]["p_value"].is_number());
  EXPECT_TRUE(j["profiles"]["full"]["layers"].is_array());
}

TEST(HistoryCompare, MissRateMetric) {
  ProfileRecord a = profile("full", 90, 1, 100), b = profile("full", 90, 2, 100);
  for (int i = 0; i < 30; ++i) b.samples_ms[static_cast<size_t>(i)] = 120;  // 30 % over the 100 ms budget
  CompareOptions o;
  o.metric = "miss_rate";
  const ProfileComparison c = compare_profiles(a, b, o);
  EXPECT_EQ(c.a.misses, 0);
  EXPECT_EQ(c.b.misses, 30);
  EXPECT_EQ(c.verdict, "regressed");
  EXPECT_LT(c.miss_p_value, 1e-6);
  EXPECT_GE(c.b.miss_rate_ci.lo, 0.2);
}

TEST(HistoryCompare, LayerAttributionFollowsTheFusion) {
  ProfileRecord a = profile("full", 190, 1), b = profile("full", 215, 2);
  a.layer_runs = b.layer_runs = 3;
  // A: a fused attention (2.0 ms) that replaced three ONNX nodes; a matmul that is in both.
  a.layers = {{"/blocks.3/attn/Attention", "kiln::Attention", {"/blocks.3/attn/MatMul", "/blocks.3/attn/Softmax", "/blocks.3/attn/MatMul_1"}, {2.0, 2.1, 1.9}},
              {"/blocks.3/mlp/fc1", "FusedMatMul", {}, {5.0, 5.1, 4.9}}};
  // B: the same attention unfused, 6.5 ms in all; the matmul unchanged.
  b.layers = {{"/blocks.3/attn/MatMul", "MatMul", {}, {3.0, 3.1, 2.9}},
              {"/blocks.3/attn/Softmax", "Softmax", {}, {1.5, 1.4, 1.6}},
              {"/blocks.3/attn/MatMul_1", "MatMul", {}, {2.0, 2.0, 2.0}},
              {"/blocks.3/mlp/fc1", "FusedMatMul", {}, {5.0, 5.0, 5.0}}};
  const ProfileComparison c = compare_profiles(a, b, CompareOptions{});
  ASSERT_GE(c.layers.size(), 2u);
  EXPECT_EQ(c.layers[0].name, "/blocks.3/attn/Attention");
  EXPECT_NEAR(c.layers[0].a_ms, 2.0, 1e-9);
  EXPECT_NEAR(c.layers[0].b_ms, 6.5, 1e-9);
  EXPECT_NEAR(c.layers[0].delta_ms, 4.5, 1e-9);
  EXPECT_EQ(c.layers[0].members.size(), 3u);
  EXPECT_LT(c.layers[0].p_value, 0.01);
  EXPECT_NE(c.layers[0].op_type.find("kiln::Attention"), std::string::npos);
  EXPECT_NEAR(c.layers[1].delta_ms, 0.0, 1e-9);
  // Per op type, without grouping: MatMul and Softmax appeared, kiln::Attention went.
  bool saw_attention = false;
  for (const auto& o : c.op_types)
    if (o.op_type == "kiln::Attention") {
      saw_attention = true;
      EXPECT_NEAR(o.delta_ms, -2.0, 1e-9);
    }
  EXPECT_TRUE(saw_attention);
}

TEST(HistoryCompare, DifferentMachinesAreNamed) {
  RunRecord a, b;
  a.machine.fingerprint = "aaaa", b.machine.fingerprint = "bbbb";
  a.profiles = {profile("full", 10, 1)};
  b.profiles = {profile("full", 10, 2), profile("extra", 1, 3)};
  const Comparison c = compare_runs(a, b, CompareOptions{});
  EXPECT_FALSE(c.same_machine);
  ASSERT_EQ(c.notes.size(), 2u);
  EXPECT_NE(c.notes[0].find("different machines"), std::string::npos);
  EXPECT_NE(c.notes[1].find("only in B"), std::string::npos);
}

TEST(HistoryCompare, LoadDifferenceIsNamed) {
  RunRecord a, b;
  a.machine.cores = b.machine.cores = 2;
  a.profiles = {profile("full", 10, 1)};
  b.profiles = {profile("full", 10, 2)};
  a.load_before = {0.3, 0.3, 0.3, true};
  b.load_before = {0.5, 0.4, 0.3, true};
  EXPECT_TRUE(compare_runs(a, b, CompareOptions{}).notes.empty());
  b.load_before = {3.5, 2.0, 1.0, true};
  const Comparison c = compare_runs(a, b, CompareOptions{});
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("load average"), std::string::npos);
}

TEST(HistoryAb, LooksCountTheFirstVerdictAndEachFurtherBatch) {
  EXPECT_EQ(ab_looks(6, 18), 3);
  EXPECT_EQ(ab_looks(2, 4), 2);
  EXPECT_EQ(ab_looks(4, 4), 1);
  EXPECT_EQ(ab_looks(4, 5), 2);  // a last, shorter batch is still a look
  EXPECT_EQ(ab_looks(6, 3), 1);
}

// engine-perf ab stops at the first significant verdict. On A/A samples (one distribution, no
// min_effect to hide behind) the whole sequential procedure must call a change at most about alpha
// of the time once alpha is split over the looks; at the full alpha per look it would not.
TEST(HistoryAb, SplittingAlphaOverLooksKeepsTheAaFalseAlarmRate) {
  const int sims = 600, per_look = 8, looks = ab_looks(2, 6);
  ASSERT_EQ(looks, 3);
  auto false_alarms = [&](double alpha) {
    CompareOptions o;
    o.min_effect = 0;
    o.alpha = alpha;
    o.bootstrap_resamples = 100;
    int alarms = 0;
    for (int s = 0; s < sims; ++s) {
      const ProfileRecord a = profile("p", 40, 1000 + 2 * s, per_look * looks), b = profile("p", 40, 1001 + 2 * s, per_look * looks);
      for (int k = 1; k <= looks; ++k) {
        RunRecord ra, rb;
        ra.profiles = {a}, rb.profiles = {b};
        ra.profiles[0].samples_ms.resize(static_cast<size_t>(per_look * k));
        rb.profiles[0].samples_ms.resize(static_cast<size_t>(per_look * k));
        const std::string v = compare_runs(ra, rb, o).verdict;
        if (v == "improved" || v == "regressed") {
          ++alarms;
          break;
        }
      }
    }
    return static_cast<double>(alarms) / sims;
  };
  const double split = false_alarms(0.05 / looks), unsplit = false_alarms(0.05);
  std::printf("A/A false alarms over %d sequential runs: %.3f split, %.3f unsplit\n", sims, split, unsplit);
  EXPECT_LE(split, 0.07) << "split alpha";
  EXPECT_GT(unsplit, split) << "peeking at the full alpha alarms more often";
}

}  // namespace
}  // namespace kiln::history
