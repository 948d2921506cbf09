// Change points in a benchmark series by E-divisive means (Matteson & James 2014, univariate,
// exponent 1) with a Student's t-test deciding significance instead of a permutation test, as
// Apache Otava does: the best split of a segment (the largest divergence statistic, each side at
// least `min_segment` points) is kept when Welch's t-test between the two sides gives p < alpha,
// and both sides are searched again.
#pragma once

#include <cstddef>
#include <vector>

namespace kiln::history {

struct ChangePoint {
  size_t index = 0;          // the first point of the new segment
  double p_value = 1;
  double median_before = 0;  // of the segment that ends at index (between change points)
  double median_after = 0;   // of the segment that starts at index
  size_t before_begin = 0;   // [before_begin, index) and [index, after_end): the runs on each side
  size_t after_end = 0;
};

std::vector<ChangePoint> e_divisive_change_points(const std::vector<double>& series, size_t min_segment = 3,
                                                  double alpha = 0.001);

// The divergence statistic of splitting series[begin, end) at tau, for tests.
double e_divisive_statistic(const std::vector<double>& series, size_t begin, size_t tau, size_t end);

}  // namespace kiln::history
