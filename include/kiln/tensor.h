// TensorView: a non-owning (data, dtype, shape) triple, the currency of kernels.
// Tensor: an owning, 64-byte aligned, reference-counted buffer used for weights, constants and I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/dtype.h"
#include "kiln/export.h"
#include "kiln/shape.h"
#include "kiln/status.h"

namespace kiln {

// Shape and dtype without data: what shape inference produces.
struct TensorDesc {
  DType dtype = DType::kUndefined;
  Shape shape;
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kUndefined;
  Shape shape;

  // An absent optional input is a view with dtype kUndefined.
  bool present() const { return dtype != DType::kUndefined; }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  TensorDesc desc() const { return TensorDesc{dtype, shape}; }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
};

class KILN_API Tensor {
 public:
  Tensor() = default;
  // Allocates zero-filled, 64-byte aligned storage.
  static Tensor zeros(DType dtype, const Shape& shape);
  // Like zeros(), but fails cleanly (naming `what`) when the size overflows, exceeds
  // kMaxTensorBytes, or the allocation fails, instead of returning a tensor without memory.
  static StatusOr<Tensor> try_zeros(DType dtype, const Shape& shape, const std::string& what);
  // Wraps memory owned elsewhere (an mmap'd weight blob); `keepalive` holds the owner.
  static Tensor borrow(void* data, DType dtype, const Shape& shape, std::shared_ptr<const void> keepalive);
  // Deep copy of a view.
  static Tensor copy_of(const TensorView& v);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
    Tensor t = zeros(DTypeOf<T>::value, shape);
    for (size_t i = 0; i < values.size(); ++i) t.as<T>()[i] = values[i];
    return t;
  }
  static Tensor scalar_i64(int64_t v) { return from_vector<int64_t>({v}, Shape{}); }

  bool empty() const { return view_.dtype == DType::kUndefined; }
  const TensorView& view() const { return view_; }
  DType dtype() const { return view_.dtype; }
  const Shape& shape() const { return view_.shape; }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return view_.nbytes(); }
  void* data() const { return view_.data; }
  template <typename T>
  T* as() const { return static_cast<T*>(view_.data); }
  // Same storage, new shape of equal element count.
  Tensor reshaped(const Shape& s) const {
    Tensor t = *this;
    t.view_.shape = s;
    return t;
  }

 private:
  std::shared_ptr<const void> storage_;
  TensorView view_;
};

// Reads element i of an integer-typed view (int32/int64/uint8/bool/...) as int64.
KILN_API int64_t read_int(const TensorView& v, int64_t i);
// Reads element i of any numeric view as double.
KILN_API double read_double(const TensorView& v, int64_t i);
// Copies an integer tensor (int32 or int64, any shape) into a vector.
KILN_API StatusOr<std::vector<int64_t>> read_int_vector(const TensorView& v, const std::string& what);

// Aligned allocation helpers shared by the tensor and the activation arena.
constexpr size_t kTensorAlignment = 64;
// No single tensor may exceed this (a corrupted or hostile shape must not exhaust memory).
constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 36;  // 64 GiB
// Byte size of a (dtype, shape), or an error naming `what` when it overflows or exceeds the limit.
KILN_API StatusOr<uint64_t> checked_nbytes(DType dtype, const Shape& shape, const std::string& what);
KILN_API std::shared_ptr<void> aligned_alloc_shared(size_t bytes);

}  // namespace kiln
