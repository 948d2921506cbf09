#include "profiles/history/change_points.h"

#include <algorithm>
#include <cmath>

#include "profiles/history/statistics.h"

namespace kiln::history {

namespace {

// Best split of [begin, end): O(n^2) through running sums of |x_i - x_j| within the left part,
// within the right part and across (the right part's sum is the total minus the others).
struct Split {
  size_t tau = 0;
  double q = -1;
};

Split best_split(const std::vector<double>& x, size_t begin, size_t end, size_t min_segment) {
  Split best;
  const size_t n = end - begin;
  if (n < 2 * min_segment) return best;
  // row[i] = sum_j |x_i - x_j| over the segment; within-left W(tau) grows by the new point's
  // distances to the left part; the within-right sum R(tau) is W of the reversed order.
  std::vector<double> left_w(n + 1, 0), right_w(n + 1, 0);
  for (size_t t = 1; t <= n; ++t) {
    double add = 0;
    for (size_t i = 0; i + 1 < t; ++i) add += std::fabs(x[begin + t - 1] - x[begin + i]);
    left_w[t] = left_w[t - 1] + add;
  }
  for (size_t t = n; t-- > 0;) {
    double add = 0;
    for (size_t i = t + 1; i < n; ++i) add += std::fabs(x[begin + t] - x[begin + i]);
    right_w[t] = right_w[t + 1] + add;
  }
  const double total = left_w[n];  // all pairs
  for (size_t t = min_segment; t + min_segment <= n; ++t) {
    const double m = static_cast<double>(t), k = static_cast<double>(n - t);
    const double cross = total - left_w[t] - right_w[t];
    const double within_left = m > 1 ? left_w[t] / (m * (m - 1) / 2) : 0;
    const double within_right = k > 1 ? right_w[t] / (k * (k - 1) / 2) : 0;
    const double q = m * k / (m + k) * (2 * cross / (m * k) - within_left - within_right);
    if (q > best.q) best = {begin + t, q};
  }
  return best;
}

void search(const std::vector<double>& x, size_t begin, size_t end, size_t min_segment, double alpha, std::vector<ChangePoint>* out) {
  const Split s = best_split(x, begin, end, min_segment);
  if (s.q < 0) return;
  const std::vector<double> left(x.begin() + static_cast<long>(begin), x.begin() + static_cast<long>(s.tau));
  const std::vector<double> right(x.begin() + static_cast<long>(s.tau), x.begin() + static_cast<long>(end));
  const TestResult t = welch_t_test(left, right);
  if (!(t.p_value < alpha)) return;
  ChangePoint cp;
  cp.index = s.tau;
  cp.p_value = t.p_value;
  out->push_back(cp);
  search(x, begin, s.tau, min_segment, alpha, out);
  search(x, s.tau, end, min_segment, alpha, out);
}

}  // namespace

double e_divisive_statistic(const std::vector<double>& series, size_t begin, size_t tau, size_t end) {
  double cross = 0, wl = 0, wr = 0;
  for (size_t i = begin; i < tau; ++i)
    for (size_t j = tau; j < end; ++j) cross += std::fabs(series[i] - series[j]);
  for (size_t i = begin; i < tau; ++i)
    for (size_t j = i + 1; j < tau; ++j) wl += std::fabs(series[i] - series[j]);
  for (size_t i = tau; i < end; ++i)
    for (size_t j = i + 1; j < end; ++j) wr += std::fabs(series[i] - series[j]);
  const double m = static_cast<double>(tau - begin), k = static_cast<double>(end - tau);
  return m * k / (m + k) * (2 * cross / (m * k) - (m > 1 ? wl / (m * (m - 1) / 2) : 0) - (k > 1 ? wr / (k * (k - 1) / 2) : 0));
}

std::vector<ChangePoint> e_divisive_change_points(const std::vector<double>& series, size_t min_segment, double alpha) {
  std::vector<ChangePoint> cps;
  min_segment = std::max<size_t>(min_segment, 2);
  search(series, 0, series.size(), min_segment, alpha, &cps);
  std::sort(cps.begin(), cps.end(), [](const ChangePoint& a, const ChangePoint& b) { return a.index < b.index; });
  // Medians and runs of the segments on each side, between neighbouring change points.
  for (size_t i = 0; i < cps.size(); ++i) {
    cps[i].before_begin = i == 0 ? 0 : cps[i - 1].index;
    cps[i].after_end = i + 1 < cps.size() ? cps[i + 1].index : series.size();
    cps[i].median_before = quantile({series.begin() + static_cast<long>(cps[i].before_begin), series.begin() + static_cast<long>(cps[i].index)}, 0.5);
    cps[i].median_after = quantile({series.begin() + static_cast<long>(cps[i].index), series.begin() + static_cast<long>(cps[i].after_end)}, 0.5);
  }
  return cps;
}

}  // namespace kiln::history
