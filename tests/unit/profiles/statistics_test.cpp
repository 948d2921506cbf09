// The statistics behind engine-perf against known values and by simulation: A/A false alarms,
// power for a +5 % shift, interval coverage.
#include "profiles/history/statistics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "profiles/history/compare.h"

namespace kiln::history {
namespace {

// Latency-like samples: log-normal around `median_ms` with a 4 % spread, and 2 % of runs hit by a
// spike of 1.3-2x (another tenant, a page fault), as this shared host shows.
std::vector<double> latency_samples(std::mt19937_64& rng, double median_ms, int n) {
  std::normal_distribution<double> noise(0, 0.04);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> v;
  for (int i = 0; i < n; ++i) {
    double x = median_ms * std::exp(noise(rng));
    if (u(rng) < 0.02) x *= 1.3 + 0.7 * u(rng);
    v.push_back(x);
  }
  return v;
}

ProfileRecord profile_of(std::vector<double> samples) {
  ProfileRecord p;
  p.name = "incremental";
  p.budget_ms = 100;
  p.samples_ms = std::move(samples);
  return p;
}

TEST(HistoryStatistics, KnownValues) {
  EXPECT_NEAR(incomplete_beta(0.3, 1, 1), 0.3, 1e-12);
  EXPECT_NEAR(incomplete_beta(0.5, 2, 3), 0.6875, 1e-12);  // P(Binomial(4, 0.5) >= 2) = 11/16
  EXPECT_NEAR(student_t_cdf(2.0, 10), 0.963306, 1e-6);
  EXPECT_NEAR(student_t_cdf(-1.0, 3), 0.195501, 1e-6);
  EXPECT_NEAR(normal_cdf(1.959964), 0.975, 1e-6);
  // Clopper-Pearson: 0 of 50 -> [0, 1 - 0.025^(1/50)]; 5 of 20 (R's binom.test: 0.0866, 0.4910).
  const Interval z = clopper_pearson(0, 50, 0.05);
  EXPECT_EQ(z.lo, 0);
  EXPECT_NEAR(z.hi, 1 - std::pow(0.025, 1.0 / 50), 1e-9);
  const Interval five = clopper_pearson(5, 20, 0.05);
  EXPECT_NEAR(five.lo, 0.08657, 1e-4);
  EXPECT_NEAR(five.hi, 0.49105, 1e-4);
  // Mann-Whitney U: {1,2,3} vs {4,5,6}: U = 9, z = (4.5 - 0.5) / sqrt(5.25).
  const TestResult mw = mann_whitney_u({1, 2, 3}, {4, 5, 6});
  EXPECT_EQ(mw.statistic, 9);
  EXPECT_NEAR(mw.p_value, 2 * (1 - normal_cdf(4.0 / std::sqrt(5.25))), 1e-12);
  // Ties are ranked half-half; identical samples are no evidence at all.
  EXPECT_NEAR(mann_whitney_u({1, 1, 1, 1}, {1, 1, 1, 1}).p_value, 1.0, 1e-12);
  // Welch: t = 2.5 / sqrt(5/12 + 20/12) = 1.7321 with 4.41 degrees of freedom, p = 0.1516 (the
  // t density integrated numerically).
  const TestResult w = welch_t_test({1, 2, 3, 4}, {2, 4, 6, 8});
  EXPECT_NEAR(w.statistic, std::sqrt(3.0), 1e-9);
  EXPECT_NEAR(w.p_value, 0.151581, 1e-5);
  // Fisher's exact test, R's fisher.test(matrix(c(3, 1, 1, 3), 2)): p = 0.4857.
  EXPECT_NEAR(fisher_exact_p(3, 4, 1, 4), 0.485714, 1e-5);
  EXPECT_NEAR(quantile({4, 1, 3, 2}, 0.5), 2.5, 1e-12);
}

// 200 A/A comparisons of 50 samples a side: `regressed` no more often than alpha allows (plus
// binomial slack: sd of the count is sqrt(200 * 0.05 * 0.95) = 3.1), and the Mann-Whitney test
// itself rejects at about its level.
TEST(HistoryStatistics, AaFalseAlarmsWithinAlpha) {
  CompareOptions opts;
  int regressed = 0, flagged = 0, rejected = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    const auto a = latency_samples(rng, 40, 50), b = latency_samples(rng, 40, 50);
    const ProfileComparison c = compare_profiles(profile_of(a), profile_of(b), opts);
    regressed += c.verdict == "regressed";
    flagged += c.verdict == "regressed" || c.verdict == "improved";
    rejected += c.p_value < opts.alpha;
  }
  EXPECT_LE(regressed, 200 * opts.alpha + 2 * 3.1);
  EXPECT_LE(flagged, 200 * opts.alpha + 2 * 3.1);
  EXPECT_LE(rejected, 200 * opts.alpha + 2 * 3.1);
  EXPECT_GE(rejected, 1);  // a test that never rejects is not at its level either
}

TEST(HistoryStatistics, FivePercentShiftFound) {
  CompareOptions opts;
  int found = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(1000 + seed);
    const auto a = latency_samples(rng, 40, 50), b = latency_samples(rng, 40 * 1.05, 50);
    found += compare_profiles(profile_of(a), profile_of(b), opts).verdict == "regressed";
  }
  EXPECT_GE(found, 180) << "found " << found << " of 200";
}

TEST(HistoryStatistics, IdenticalDistributionsOftenSame) {
  // With 200 samples a side the p50 interval is narrow enough to say `same` (within +-3 %).
  CompareOptions opts;
  int same = 0;
  for (uint64_t seed = 1; seed <= 25; ++seed) {
    std::mt19937_64 rng(5000 + seed);
    same += compare_profiles(profile_of(latency_samples(rng, 40, 200)), profile_of(latency_samples(rng, 40, 200)), opts).verdict == "same";
  }
  EXPECT_GE(same, 22);
}

TEST(HistoryStatistics, ClopperPearsonCoversAtItsLevel) {
  std::mt19937_64 rng(3);
  for (double p : {0.02, 0.1, 0.3, 0.5})
    for (int n : {20, 50, 200}) {
      std::binomial_distribution<int> draw(n, p);
      int covered = 0;
      const int trials = 2000;
      for (int t = 0; t < trials; ++t) {
        const Interval ci = clopper_pearson(draw(rng), n, 0.05);
        covered += ci.lo <= p && p <= ci.hi;
      }
      // "Exact" intervals are conservative: at least 95 %, less sampling slack (sd 0.5 %).
      EXPECT_GE(covered, 0.95 * trials - 2 * std::sqrt(trials * 0.05 * 0.95)) << "p " << p << " n " << n;
    }
}

TEST(HistoryStatistics, QuantileIntervalsCover) {
  std::mt19937_64 rng(4);
  std::lognormal_distribution<double> d(std::log(40.0), 0.05);
  int covered = 0;
  const int trials = 2000;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> v(50);
    for (auto& x : v) x = d(rng);
    const QuantileCi q = quantile_ci(v, 0.5, 0.05);
    EXPECT_TRUE(q.exact);
    covered += q.ci.lo <= 40.0 && 40.0 <= q.ci.hi;
  }
  EXPECT_GE(covered, 0.95 * trials - 2 * std::sqrt(trials * 0.05 * 0.95));
  // p99 of 50 samples: the upper order statistic does not exist, the interval is marked inexact.
  std::vector<double> v(50);
  for (auto& x : v) x = d(rng);
  EXPECT_FALSE(quantile_ci(v, 0.99, 0.05).exact);
}

TEST(HistoryStatistics, BootstrapIntervalHoldsTheChange) {
  std::mt19937_64 rng(9);
  const auto a = latency_samples(rng, 40, 100), b = latency_samples(rng, 48, 100);
  const Interval ci = bootstrap_relative_change(a, b, 0.5, 0.05, 2000, 1);
  EXPECT_LT(ci.lo, 0.2);
  EXPECT_GT(ci.hi, 0.2);
  EXPECT_GT(ci.lo, 0.1);
  // Seeded: the same samples give the same interval.
  const Interval again = bootstrap_relative_change(a, b, 0.5, 0.05, 2000, 1);
  EXPECT_EQ(ci.lo, again.lo);
  EXPECT_EQ(ci.hi, again.hi);
}

}  // namespace
}  // namespace kiln::history
