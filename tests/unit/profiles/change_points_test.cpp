// E-divisive change points: a planted step is found within one run of where it was planted, a
// flat history rarely yields one, segments are at least 3 runs.
#include "profiles/history/change_points.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace kiln::history {
namespace {

std::vector<double> history(std::mt19937_64& rng, int n, int step_at, double step) {
  std::normal_distribution<double> noise(0, 0.015);
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(40 * (i >= step_at ? 1 + step : 1.0) * std::exp(noise(rng)));
  return v;
}

TEST(HistoryChangePoints, StatisticMatchesTheDefinition) {
  const std::vector<double> x{1, 2, 1.5, 9, 10, 9.5, 10};
  // The running-sum search and the direct O(n^2) definition agree on the best split.
  double best = -1;
  size_t at = 0;
  for (size_t t = 3; t + 3 <= x.size(); ++t) {
    const double q = e_divisive_statistic(x, 0, t, x.size());
    if (q > best) best = q, at = t;
  }
  EXPECT_EQ(at, 3u);
  const auto cps = e_divisive_change_points(x, 3, 0.01);
  ASSERT_EQ(cps.size(), 1u);
  EXPECT_EQ(cps[0].index, 3u);
  EXPECT_NEAR(cps[0].median_before, 1.5, 1e-12);
  EXPECT_NEAR(cps[0].median_after, 9.75, 1e-12);
}

TEST(HistoryChangePoints, PlantedStepFoundWithinOneRun) {
  int found = 0;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    std::mt19937_64 rng(seed);
    const int at = 10 + static_cast<int>(seed % 20);
    const auto cps = e_divisive_change_points(history(rng, 40, at, 0.06), 3, 0.001);
    bool ok = false;
    for (const auto& cp : cps) ok = ok || std::abs(static_cast<int>(cp.index) - at) <= 1;
    found += ok;
  }
  EXPECT_GE(found, 49) << found << " of 50";
}

TEST(HistoryChangePoints, TwoStepsBothFound) {
  std::mt19937_64 rng(77);
  auto v = history(rng, 60, 20, 0.08);
  for (int i = 40; i < 60; ++i) v[static_cast<size_t>(i)] *= 0.9;
  const auto cps = e_divisive_change_points(v, 3, 0.001);
  ASSERT_EQ(cps.size(), 2u);
  EXPECT_NEAR(static_cast<double>(cps[0].index), 20, 1);
  EXPECT_NEAR(static_cast<double>(cps[1].index), 40, 1);
  EXPECT_EQ(cps[0].after_end, cps[1].index);
}

TEST(HistoryChangePoints, FlatHistoryRarelyHasOne) {
  int with_any = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    std::mt19937_64 rng(100 + seed);
    with_any += !e_divisive_change_points(history(rng, 40, 1000, 0), 3, 0.001).empty();
  }
  EXPECT_LE(with_any, 5);
}

TEST(HistoryChangePoints, MinimumSegmentLength) {
  // A single outlier run at the end is not a segment of its own.
  std::vector<double> v(20, 40.0);
  for (size_t i = 0; i < v.size(); ++i) v[i] += 0.01 * static_cast<double>(i % 3);
  v.back() = 80;
  for (const auto& cp : e_divisive_change_points(v, 3, 0.001)) {
    EXPECT_GE(cp.index, 3u);
    EXPECT_LE(cp.index, v.size() - 3);
  }
  EXPECT_TRUE(e_divisive_change_points({1, 2, 3, 4, 5}, 3, 0.5).empty());  // too short for two segments of 3
}

}  // namespace
}  // namespace kiln::history
