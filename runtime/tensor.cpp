#include "runtime/tensor.h"

#include "runtime/memory_budget.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

namespace kiln {

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

Shape contiguous_strides(const Shape& s) {
  Shape st = s;
  int64_t acc = 1;
  for (int i = s.rank() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

std::shared_ptr<void> aligned_alloc_shared(size_t bytes) {
  size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  if (rounded == 0) rounded = kTensorAlignment;
  // Buffers of 2 MiB or more (weights, packed weights, KV caches, the activation arena) are
  // 2 MiB-aligned and asked to be backed by transparent huge pages: this machine's THP mode is
  // "madvise", so without the hint every buffer is 4 KiB pages, and a run that streams ~100 MB of
  // weights and cache misses the TLB on every page.
  constexpr size_t kHugePage = size_t{2} << 20;
  const bool huge = rounded >= kHugePage;
  if (huge) rounded = (rounded + kHugePage - 1) / kHugePage * kHugePage;
  // Counted against the memory cap (runtime/memory_budget.h); over it, no allocation is made.
  if (!try_charge_memory(rounded)) return nullptr;
  void* p = std::aligned_alloc(huge ? kHugePage : kTensorAlignment, rounded);
  if (!p) {
    release_memory(rounded);
    return nullptr;
  }
  if (huge) ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure leaves 4 KiB pages
  // Zeroing also faults every page in now, at load or planning time, not in a later run.
  std::memset(p, 0, rounded);
  return std::shared_ptr<void>(p, [rounded](void* q) {
    std::free(q);
    release_memory(rounded);
  });
}

Tensor Tensor::zeros(DType dtype, const Shape& shape) {
  Tensor t;
  auto mem = aligned_alloc_shared(static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  t.view_.data = mem.get();
  t.storage_ = std::move(mem);
  t.view_.dtype = dtype;
  t.view_.shape = shape;
  return t;
}

StatusOr<uint64_t> checked_nbytes(DType dtype, const Shape& shape, const std::string& what) {
  int64_t n = 0;
  uint64_t bytes = 0;
  if (!shape.checked_numel(&n) || __builtin_mul_overflow(static_cast<uint64_t>(n), dtype_size(dtype), &bytes) ||
      bytes > kMaxTensorBytes)
    return OutOfRange(what + ": shape " + shape.str() + " of " + dtype_name(dtype) + " is too large to allocate");
  return bytes;
}

StatusOr<Tensor> Tensor::try_zeros(DType dtype, const Shape& shape, const std::string& what) {
  KILN_ASSIGN_OR_RETURN(uint64_t bytes, checked_nbytes(dtype, shape, what));
  KILN_RETURN_IF_ERROR(check_memory(bytes, what + " (shape " + shape.str() + ")"));
  Tensor t;
  auto mem = aligned_alloc_shared(bytes);
  if (!mem) {
    KILN_RETURN_IF_ERROR(check_memory(bytes, what + " (shape " + shape.str() + ")"));
    return ResourceExhausted(what + ": cannot allocate " + std::to_string(bytes) + " bytes for shape " + shape.str());
  }
  t.view_.data = mem.get();
  t.storage_ = std::move(mem);
  t.view_.dtype = dtype;
  t.view_.shape = shape;
  return t;
}

Tensor Tensor::borrow(void* data, DType dtype, const Shape& shape, std::shared_ptr<const void> keepalive) {
  Tensor t;
  t.view_.data = data;
  t.view_.dtype = dtype;
  t.view_.shape = shape;
  t.storage_ = std::move(keepalive);
  return t;
}

Tensor Tensor::copy_of(const TensorView& v) {
  Tensor t = zeros(v.dtype, v.shape);
  if (v.nbytes()) std::memcpy(t.data(), v.data, v.nbytes());
  return t;
}

int64_t read_int(const TensorView& v, int64_t i) {
  switch (v.dtype) {
    case DType::kInt64: return v.as<int64_t>()[i];
    case DType::kInt32: return v.as<int32_t>()[i];
    case DType::kInt16: return v.as<int16_t>()[i];
    case DType::kInt8: return v.as<int8_t>()[i];
    case DType::kUInt8: return v.as<uint8_t>()[i];
    case DType::kUInt16: return v.as<uint16_t>()[i];
    case DType::kUInt32: return v.as<uint32_t>()[i];
    case DType::kUInt64: return static_cast<int64_t>(v.as<uint64_t>()[i]);
    case DType::kBool: return v.as<bool>()[i] ? 1 : 0;
    default: return static_cast<int64_t>(read_double(v, i));
  }
}

double read_double(const TensorView& v, int64_t i) {
  switch (v.dtype) {
    case DType::kFloat32: return v.as<float>()[i];
    case DType::kFloat64: return v.as<double>()[i];
    case DType::kFloat16: return half_to_float(v.as<uint16_t>()[i]);
    case DType::kBFloat16: return bf16_to_float(v.as<uint16_t>()[i]);
    default: return static_cast<double>(read_int(v, i));
  }
}

StatusOr<std::vector<int64_t>> read_int_vector(const TensorView& v, const std::string& what) {
  if (!dtype_is_integer(v.dtype))
    return InvalidArgument(what + " must be an integer tensor, got " + dtype_name(v.dtype));
  if (v.numel() > 0 && v.data == nullptr) return InvalidArgument(what + " has no data");
  std::vector<int64_t> out(static_cast<size_t>(v.numel()));
  for (int64_t i = 0; i < v.numel(); ++i) out[i] = read_int(v, i);
  return out;
}

}  // namespace kiln
