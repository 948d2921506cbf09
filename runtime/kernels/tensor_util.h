// Private helpers of the tensor (shape and data movement) kernel family.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "runtime/kernels/kernel_util.h"

namespace kiln {

// Sub-registrations, all called from register_tensor_kernels (tensor_kernels.cpp).
void register_tensor_layout_kernels(KernelRegistry& r);  // Transpose, Concat, Split, Slice, Expand, Tile, Pad, ...
void register_tensor_index_kernels(KernelRegistry& r);   // Gather*, Scatter*, OneHot, ReverseSequence
void register_tensor_select_kernels(KernelRegistry& r);  // Compress, NonZero, Unique

// Views that split or interleave dims (Tile, DepthToSpace) need more dims than a Shape holds.
constexpr int kMaxViewRank = 2 * kMaxRank;

// Data movement never looks at values: elements are moved as unsigned integers of the dtype's size,
// so every dtype (bool, float16, int8, ...) goes through the same code.
template <typename F>
Status dispatch_bytes(DType dt, F&& f, const char* what = "input") {
  switch (dtype_size(dt)) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
    default: return Unimplemented(std::string(what) + " dtype " + dtype_name(dt) + " is not supported");
  }
}

// Like dispatch_numeric, plus float16 and bfloat16 as their storage types; for kernels that need
// the value of an element (ordering, arithmetic) and convert half types through float.
template <typename F>
Status dispatch_numeric_or_half(DType dt, F&& f, const char* what = "input") {
  if (dt == DType::kFloat16) return f(Half{});
  if (dt == DType::kBFloat16) return f(BFloat16{});
  return dispatch_numeric(dt, std::forward<F>(f), what);
}

// Value of an element as a type with ordinary arithmetic and ordering.
inline float as_value(Half h) { return half_to_float(h.bits); }
inline float as_value(BFloat16 h) { return bf16_to_float(h.bits); }
template <typename T>
inline T as_value(T v) { return v; }
template <typename T>
inline T from_value(T, T v) { return v; }
inline Half from_value(Half, float v) { return Half{float_to_half(v)}; }
inline BFloat16 from_value(BFloat16, float v) { return BFloat16{float_to_bf16(v)}; }

// The output of the view-like ops (Reshape, Identity, ...) is the input's bytes; the executor may
// alias the two buffers, in which case there is nothing to do.
inline void copy_bytes(const TensorView& dst, const TensorView& src) {
  if (dst.data != src.data && src.nbytes() != 0) std::memcpy(dst.data, src.data, src.nbytes());
}

// Copies the strided view (dims, src_strides in elements, possibly 0 or negative) of `src` into
// contiguous `dst`. rank <= kMaxViewRank. Used by Transpose, Slice, Expand, Tile, DepthToSpace...
void copy_strided(void* dst, const void* src, int rank, const int64_t* dims, const int64_t* src_strides,
                  size_t elem_size);

// Reads a 0-d or 1-d int32/int64 input of at most `max` elements into `out` without allocating.
Status read_small_ints(const TensorView& v, int64_t* out, int max, int* n, const char* what);
// Reads a single integer (a 0-d or 1-element tensor of any integer or float dtype).
Status read_scalar_int(const TensorView& v, int64_t* out, const char* what);

// Stores `v` converted to `dt` at `p` (for fill values given as float attributes).
Status store_double(DType dt, void* p, double v);

// Output count check shared by all kernels of the family.
inline Status check_output_count(std::span<TensorDesc> out, int min, int max) {
  if (static_cast<int>(out.size()) < min || static_cast<int>(out.size()) > max)
    return InvalidArgument("expects " + std::to_string(min) + (min == max ? "" : ".." + std::to_string(max)) +
                           " outputs, got " + std::to_string(out.size()));
  return Status::Ok();
}

inline Status check_known_dtype(const TensorView& v, int index) {
  if (!dtype_is_known(v.dtype))
    return Unimplemented("input " + std::to_string(index) + " dtype " + dtype_name(v.dtype) + " is not supported");
  return Status::Ok();
}

inline Status check_int_index_dtype(const TensorView& v, int index) {
  if (v.dtype != DType::kInt64 && v.dtype != DType::kInt32)
    return InvalidArgument("input " + std::to_string(index) + " must be int32 or int64, got " + dtype_name(v.dtype));
  return Status::Ok();
}

// Wraps an infer lambda and a run lambda as a kernel, in the factory's return type.
template <typename InferFn, typename RunFn>
StatusOr<std::unique_ptr<Kernel>> lambda_kernel(InferFn infer, RunFn run) {
  return std::unique_ptr<Kernel>(make_lambda_kernel(std::move(infer), std::move(run)));
}

}  // namespace kiln
