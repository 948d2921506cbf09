// The statistics behind `engine-perf compare`, `ab` and `history`: quantiles with order-statistic
// confidence intervals, a bootstrap interval for the relative change of a quantile, the
// Mann-Whitney U test on raw samples, Welch's t-test, Clopper-Pearson intervals for a miss rate and
// Fisher's exact test for two of them. Plain functions over vectors of doubles; no allocation
// beyond copies of the inputs.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::history {

// Hyndman-Fan type 7 (linear between order statistics), q in [0, 1]; `sorted` ascending.
double quantile_sorted(const std::vector<double>& sorted, double q);
double quantile(std::vector<double> v, double q);

struct Interval {
  double lo = 0, hi = 0;
};

// Distribution-free interval for the q-quantile from order statistics: ranks l < u with
// P(X(l) <= Q_q <= X(u)) >= 1 - alpha under Binomial(n, q). Where the sample is too small for
// the upper (or lower) rank, that end is the sample's max (min) and `exact` is false.
struct QuantileCi {
  double estimate = 0;
  Interval ci;
  bool exact = true;
};
QuantileCi quantile_ci(std::vector<double> v, double q, double alpha);

// Percentile bootstrap of quantile_q(b) / quantile_q(a) - 1 (resampling each side), seeded so
// the same samples give the same interval.
Interval bootstrap_relative_change(const std::vector<double>& a, const std::vector<double>& b, double q, double alpha,
                                   int resamples, uint64_t seed);

struct TestResult {
  double statistic = 0;
  double p_value = 1;  // two-sided
};

// Mann-Whitney U (Wilcoxon rank-sum): normal approximation with tie and continuity corrections.
// statistic = U of b (the number of pairs where b's value is larger, ties counting half).
TestResult mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b);

// Welch's unequal-variance t-test (statistic = t of mean(b) - mean(a)). Fewer than 2 values a
// side, or zero variance on both: p = 1 unless the means differ with zero variance (p = 0).
TestResult welch_t_test(const std::vector<double>& a, const std::vector<double>& b);

// Clopper-Pearson ("exact") interval for k successes in n trials at level 1 - alpha.
Interval clopper_pearson(int64_t k, int64_t n, double alpha);

// Fisher's exact test for k1 of n1 against k2 of n2 (two-sided, summing tables no more likely).
double fisher_exact_p(int64_t k1, int64_t n1, int64_t k2, int64_t n2);

// Building blocks, exposed for tests: regularized incomplete beta I_x(a, b), its inverse in x,
// Student's t CDF, the standard normal CDF.
double incomplete_beta(double x, double a, double b);
double incomplete_beta_inverse(double p, double a, double b);
double student_t_cdf(double t, double dof);
double normal_cdf(double z);

}  // namespace kiln::history
