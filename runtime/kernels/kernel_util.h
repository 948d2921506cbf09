// Small helpers shared by kernel families: axis handling, numpy broadcasting, dtype dispatch and
// scratch buffers.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "runtime/kernel.h"

namespace kiln {

// Normalizes a possibly negative axis against `rank`; error names the axis and the valid range.
inline StatusOr<int> normalize_axis(int64_t axis, int rank, const char* what = "axis") {
  if (axis < -rank || axis >= (rank == 0 ? 1 : rank))
    return InvalidArgument(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " +
                           std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Numpy-style multidirectional broadcast of two shapes.
inline StatusOr<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const int rank = a.rank() > b.rank() ? a.rank() : b.rank();
  Shape out;
  out.resize(rank);
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank()), ib = i - (rank - b.rank());
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da == db || db == 1) out[i] = da;
    else if (da == 1) out[i] = db;
    else
      return InvalidArgument("shapes " + a.str() + " and " + b.str() + " cannot be broadcast (dim " +
                             std::to_string(i) + ": " + std::to_string(da) + " vs " + std::to_string(db) + ")");
  }
  return out;
}

// Strides (in elements) for reading a tensor of shape `in` as if broadcast to `out`: broadcast dims
// get stride 0. The result has out.rank() entries.
inline Shape broadcast_strides(const Shape& in, const Shape& out) {
  Shape st;
  st.resize(out.rank(), 0);
  int64_t acc = 1;
  for (int i = in.rank() - 1; i >= 0; --i) {
    const int o = i + (out.rank() - in.rank());
    st[o] = in[i] == 1 ? 0 : acc;
    acc *= in[i];
  }
  return st;
}

// Iterates a multi-index over `shape` in C order, keeping up to 3 strided offsets in step.
// Usage: for (BroadcastIter it(shape, sa, sb); !it.done(); it.next()) use(it.off[0], it.off[1]);
struct BroadcastIter {
  static constexpr int kMaxOperands = 4;
  BroadcastIter(const Shape& shape, const Shape* strides, int n) : shape_(shape), n_(n), total_(shape.numel()) {
    for (int k = 0; k < n; ++k) strides_[k] = strides[k];
    idx_.resize(shape.rank(), 0);
    for (int k = 0; k < n; ++k) off[k] = 0;
  }
  bool done() const { return count_ >= total_; }
  void next() {
    ++count_;
    for (int d = shape_.rank() - 1; d >= 0; --d) {
      if (++idx_[d] < shape_[d]) {
        for (int k = 0; k < n_; ++k) off[k] += strides_[k][d];
        return;
      }
      idx_[d] = 0;
      for (int k = 0; k < n_; ++k) off[k] -= strides_[k][d] * (shape_[d] - 1);
    }
  }
  int64_t off[kMaxOperands];

 private:
  Shape shape_;
  Shape strides_[kMaxOperands];
  Shape idx_;
  int n_;
  int64_t total_;
  int64_t count_ = 0;
};

// Calls f(T{}) with T the C++ type of `dt` among the numeric types kiln computes in
// (float, double, int8..int64, uint8..uint64, bool). Half types are not included: kernels that
// accept them convert explicitly. Returns an error naming the dtype otherwise.
template <typename F>
Status dispatch_numeric(DType dt, F&& f, const char* what = "input") {
  switch (dt) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kInt8: return f(int8_t{});
    case DType::kInt16: return f(int16_t{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
    case DType::kUInt8: return f(uint8_t{});
    case DType::kUInt16: return f(uint16_t{});
    case DType::kUInt32: return f(uint32_t{});
    case DType::kUInt64: return f(uint64_t{});
    case DType::kBool: return f(bool{});
    default: return Unimplemented(std::string(what) + " dtype " + dtype_name(dt) + " is not supported");
  }
}

// Like dispatch_numeric but only float and double.
template <typename F>
Status dispatch_float(DType dt, F&& f, const char* what = "input") {
  switch (dt) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    default: return Unimplemented(std::string(what) + " dtype " + dtype_name(dt) + " is not supported (float32/float64 only)");
  }
}

// Checks the number of present inputs against [min, max].
inline Status check_input_count(std::span<const TensorView> in, int min, int max) {
  if (static_cast<int>(in.size()) < min || static_cast<int>(in.size()) > max)
    return InvalidArgument("expects " + std::to_string(min) + (min == max ? "" : ".." + std::to_string(max)) +
                           " inputs, got " + std::to_string(in.size()));
  for (int i = 0; i < min; ++i)
    if (!in[i].present()) return InvalidArgument("required input " + std::to_string(i) + " is missing");
  return Status::Ok();
}

// Grows a kernel's scratch buffer to at least `bytes` (kept when it is large enough already). Over
// the memory cap (runtime/memory_budget.h) the allocation is refused: ResourceExhausted naming
// `what` and the bytes, instead of a null buffer.
inline Status grow_scratch(std::shared_ptr<void>& buf, size_t& capacity, size_t bytes, const char* what) {
  if (bytes <= capacity) return Status::Ok();
  std::shared_ptr<void> grown = aligned_alloc_shared(bytes);
  if (!grown) return ResourceExhausted(std::string(what) + ": cannot allocate " + std::to_string(bytes) + " bytes of scratch (memory cap)");
  buf = std::move(grown);
  capacity = bytes;
  return Status::Ok();
}

}  // namespace kiln
