#include "profiles/history/statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

namespace kiln::history {

double quantile_sorted(const std::vector<double>& s, double q) {
  if (s.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double h = (static_cast<double>(s.size()) - 1) * std::clamp(q, 0.0, 1.0);
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (h - static_cast<double>(lo)) * (s[hi] - s[lo]);
}

namespace {
// Type 7 from the two order statistics it needs, by selection instead of a sort (the bootstrap
// takes thousands of these). Reorders v.
double quantile_unsorted(std::vector<double>& v, double q) {
  const double h = (static_cast<double>(v.size()) - 1) * std::clamp(q, 0.0, 1.0);
  const size_t lo = static_cast<size_t>(std::floor(h));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(lo), v.end());
  const double x = v[lo];
  if (lo + 1 >= v.size()) return x;
  const double y = *std::min_element(v.begin() + static_cast<long>(lo) + 1, v.end());
  return x + (h - static_cast<double>(lo)) * (y - x);
}
}  // namespace

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return quantile_sorted(v, q);
}

namespace {

double log_binomial_pmf(int64_t k, int64_t n, double p) {
  if (p <= 0) return k == 0 ? 0 : -INFINITY;
  if (p >= 1) return k == n ? 0 : -INFINITY;
  return std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0) + k * std::log(p) + (n - k) * std::log1p(-p);
}

// Continued fraction of the incomplete beta (modified Lentz), valid for x < (a + 1) / (a + b + 2).
double beta_continued_fraction(double x, double a, double b) {
  constexpr double kTiny = 1e-300, kEps = 1e-15;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 500; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 + aa * d;
    d = std::fabs(d) < kTiny ? 1 / kTiny : 1 / d;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 + aa * d;
    d = std::fabs(d) < kTiny ? 1 / kTiny : 1 / d;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < kEps) break;
  }
  return h;
}

}  // namespace

double incomplete_beta(double x, double a, double b) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double log_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  if (x < (a + 1) / (a + b + 2)) return std::exp(log_front) * beta_continued_fraction(x, a, b) / a;
  return 1 - std::exp(log_front) * beta_continued_fraction(1 - x, b, a) / b;
}

double incomplete_beta_inverse(double p, double a, double b) {
  if (p <= 0) return 0;
  if (p >= 1) return 1;
  // I_x is increasing in x: bisection to double precision is ~60 halvings, plenty fast here.
  double lo = 0, hi = 1;
  for (int i = 0; i < 100 && hi - lo > 1e-15; ++i) {
    const double mid = 0.5 * (lo + hi);
    (incomplete_beta(mid, a, b) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double student_t_cdf(double t, double dof) {
  if (!std::isfinite(t)) return t > 0 ? 1 : 0;
  const double tail = 0.5 * incomplete_beta(dof / (dof + t * t), dof / 2, 0.5);
  return t > 0 ? 1 - tail : tail;
}

double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

QuantileCi quantile_ci(std::vector<double> v, double q, double alpha) {
  QuantileCi r;
  std::sort(v.begin(), v.end());
  const int64_t n = static_cast<int64_t>(v.size());
  if (n == 0) return r;
  r.estimate = quantile_sorted(v, q);
  // Ranks (1-based) l and u: P(l <= B < u) >= 1 - alpha for B ~ Binomial(n, q), where B counts the
  // samples below the true quantile; X(l) <= Q < X(u) then holds with that probability. Grow the
  // interval around n*q from the mode outward, taking the likelier side first.
  std::vector<double> pmf(static_cast<size_t>(n + 1));
  for (int64_t k = 0; k <= n; ++k) pmf[static_cast<size_t>(k)] = std::exp(log_binomial_pmf(k, n, q));
  int64_t lo = std::clamp<int64_t>(static_cast<int64_t>(std::floor(n * q)), 0, n), hi = lo;  // B in [lo, hi]
  double mass = pmf[static_cast<size_t>(lo)];
  while (mass < 1 - alpha && (lo > 0 || hi < n)) {
    const double left = lo > 0 ? pmf[static_cast<size_t>(lo - 1)] : -1, right = hi < n ? pmf[static_cast<size_t>(hi + 1)] : -1;
    if (left >= right) mass += pmf[static_cast<size_t>(--lo)];
    else mass += pmf[static_cast<size_t>(++hi)];
  }
  // B in [lo, hi] <=> X(lo) <= Q <= X(hi + 1) (1-based; X(0) = -inf, X(n + 1) = +inf).
  r.exact = lo >= 1 && hi + 1 <= n && mass >= 1 - alpha;
  r.ci.lo = lo >= 1 ? v[static_cast<size_t>(lo - 1)] : v.front();
  r.ci.hi = hi + 1 <= n ? v[static_cast<size_t>(hi)] : v.back();
  return r;
}

Interval bootstrap_relative_change(const std::vector<double>& a, const std::vector<double>& b, double q, double alpha,
                                   int resamples, uint64_t seed) {
  Interval r;
  if (a.empty() || b.empty()) return r;
  std::mt19937_64 rng(seed);
  std::vector<double> ra(a.size()), rb(b.size()), change(static_cast<size_t>(resamples));
  std::uniform_int_distribution<size_t> pick_a(0, a.size() - 1), pick_b(0, b.size() - 1);
  for (int i = 0; i < resamples; ++i) {
    for (auto& x : ra) x = a[pick_a(rng)];
    for (auto& x : rb) x = b[pick_b(rng)];
    const double qa = quantile_unsorted(ra, q);
    change[static_cast<size_t>(i)] = qa > 0 ? quantile_unsorted(rb, q) / qa - 1 : 0;
  }
  std::sort(change.begin(), change.end());
  r.lo = quantile_sorted(change, alpha / 2);
  r.hi = quantile_sorted(change, 1 - alpha / 2);
  return r;
}

TestResult mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b) {
  TestResult r;
  const size_t n1 = a.size(), n2 = b.size();
  if (n1 == 0 || n2 == 0) return r;
  struct Item {
    double v;
    bool from_b;
  };
  std::vector<Item> all;
  all.reserve(n1 + n2);
  for (double v : a) all.push_back({v, false});
  for (double v : b) all.push_back({v, true});
  std::sort(all.begin(), all.end(), [](const Item& x, const Item& y) { return x.v < y.v; });
  const double n = static_cast<double>(n1 + n2);
  double rank_sum_b = 0, tie_term = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j].v == all[i].v) ++j;
    const double avg_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2, t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    for (size_t k = i; k < j; ++k)
      if (all[k].from_b) rank_sum_b += avg_rank;
    i = j;
  }
  const double u_b = rank_sum_b - static_cast<double>(n2) * (static_cast<double>(n2) + 1) / 2;
  const double mean = static_cast<double>(n1) * static_cast<double>(n2) / 2;
  const double var = static_cast<double>(n1) * static_cast<double>(n2) / 12 * ((n + 1) - tie_term / (n * (n - 1)));
  r.statistic = u_b;
  if (var <= 0) {
    r.p_value = 1;
    return r;
  }
  const double z = (std::fabs(u_b - mean) - 0.5) / std::sqrt(var);
  r.p_value = std::min(1.0, 2 * (1 - normal_cdf(std::max(z, 0.0))));
  return r;
}

TestResult welch_t_test(const std::vector<double>& a, const std::vector<double>& b) {
  TestResult r;
  if (a.size() < 2 || b.size() < 2) return r;
  auto mean_var = [](const std::vector<double>& v, double* m, double* s2) {
    *m = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    double ss = 0;
    for (double x : v) ss += (x - *m) * (x - *m);
    *s2 = ss / static_cast<double>(v.size() - 1);
  };
  double ma, va, mb, vb;
  mean_var(a, &ma, &va);
  mean_var(b, &mb, &vb);
  const double sa = va / static_cast<double>(a.size()), sb = vb / static_cast<double>(b.size());
  if (sa + sb <= 0) {
    r.statistic = mb == ma ? 0 : (mb > ma ? INFINITY : -INFINITY);
    r.p_value = mb == ma ? 1 : 0;
    return r;
  }
  const double t = (mb - ma) / std::sqrt(sa + sb);
  const double dof = (sa + sb) * (sa + sb) /
                     (sa * sa / static_cast<double>(a.size() - 1) + sb * sb / static_cast<double>(b.size() - 1));
  r.statistic = t;
  r.p_value = std::min(1.0, 2 * student_t_cdf(-std::fabs(t), dof));
  return r;
}

Interval clopper_pearson(int64_t k, int64_t n, double alpha) {
  Interval r{0, 1};
  if (n <= 0) return r;
  k = std::clamp<int64_t>(k, 0, n);
  // Lower: the p with P(X >= k) = alpha/2, the Beta(k, n-k+1) quantile; upper: Beta(k+1, n-k).
  r.lo = k == 0 ? 0 : incomplete_beta_inverse(alpha / 2, static_cast<double>(k), static_cast<double>(n - k + 1));
  r.hi = k == n ? 1 : incomplete_beta_inverse(1 - alpha / 2, static_cast<double>(k + 1), static_cast<double>(n - k));
  return r;
}

double fisher_exact_p(int64_t k1, int64_t n1, int64_t k2, int64_t n2) {
  const int64_t total = k1 + k2, n = n1 + n2;
  if (n1 <= 0 || n2 <= 0) return 1;
  auto log_hyper = [&](int64_t x) {  // P(first row has x of the `total` successes)
    auto lc = [](int64_t nn, int64_t kk) { return std::lgamma(nn + 1.0) - std::lgamma(kk + 1.0) - std::lgamma(nn - kk + 1.0); };
    return lc(n1, x) + lc(n2, total - x) - lc(n, total);
  };
  const int64_t lo = std::max<int64_t>(0, total - n2), hi = std::min(total, n1);
  const double observed = log_hyper(k1);
  double p = 0;
  for (int64_t x = lo; x <= hi; ++x) {
    const double l = log_hyper(x);
    if (l <= observed + 1e-7) p += std::exp(l);
  }
  return std::min(1.0, p);
}

}  // namespace kiln::history
