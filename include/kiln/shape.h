// A concrete tensor shape with a fixed maximum rank, so shapes never touch the heap during a run.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "kiln/export.h"

namespace kiln {

constexpr int kMaxRank = 8;

class KILN_API Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(std::span<const int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }

  // Rank above kMaxRank is a programming error at this level; callers validate with fits_rank().
  static bool fits_rank(size_t rank) { return rank <= static_cast<size_t>(kMaxRank); }

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  // Negative axes count from the end, as in ONNX.
  int64_t dim(int axis) const { return dims_[axis < 0 ? axis + rank_ : axis]; }
  const int64_t* begin() const { return dims_; }
  const int64_t* end() const { return dims_ + rank_; }
  int64_t* data() { return dims_; }
  const int64_t* data() const { return dims_; }

  void resize(int rank, int64_t fill = 1) {
    for (int i = rank_; i < rank && i < kMaxRank; ++i) dims_[i] = fill;
    rank_ = rank > kMaxRank ? kMaxRank : rank;
  }
  void push_back(int64_t d) {
    if (rank_ < kMaxRank) dims_[rank_++] = d;
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  // numel() that detects overflow and negative dims: false when the product does not fit int64.
  bool checked_numel(int64_t* out) const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) {
      if (dims_[i] < 0 || __builtin_mul_overflow(n, dims_[i], &n)) return false;
    }
    *out = n;
    return true;
  }
  // Product of dims in [from, to).
  int64_t numel(int from, int to) const {
    int64_t n = 1;
    for (int i = from; i < to; ++i) n *= dims_[i];
    return n;
  }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }
  std::string str() const;  // "[1, 274, 384]"

  bool operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  template <typename It>
  void assign(It b, It e) {
    rank_ = 0;
    for (; b != e && rank_ < kMaxRank; ++b) dims_[rank_++] = *b;
  }
  int64_t dims_[kMaxRank] = {};
  int rank_ = 0;
};

// C-order strides (in elements) of `s`.
KILN_API Shape contiguous_strides(const Shape& s);

}  // namespace kiln
