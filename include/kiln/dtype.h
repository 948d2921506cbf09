// Element types. The numeric codes are ONNX's TensorProto.DataType values so that files, engine
// metadata and the importer can use them unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "kiln/export.h"

namespace kiln {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

// Size in bytes of one element; 0 for kUndefined and kString (strings are not supported as tensors).
KILN_API size_t dtype_size(DType t);
// "float32", "int64", ... ; "dtype(N)" for codes kiln does not know.
KILN_API std::string dtype_name(DType t);
// True for codes kiln can store and move (everything above except kUndefined and kString).
KILN_API bool dtype_is_known(DType t);
KILN_API bool dtype_is_float(DType t);    // float16, bfloat16, float32, float64
KILN_API bool dtype_is_integer(DType t);  // signed and unsigned integers (not bool)
KILN_API bool dtype_is_signed(DType t);

// 16-bit float storage types. Arithmetic happens in float; these only convert.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
KILN_API float half_to_float(uint16_t h);
KILN_API uint16_t float_to_half(float f);
inline float bf16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {  // round to nearest even, NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

template <typename T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::kInt16; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::kUInt16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::kUInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<uint64_t> { static constexpr DType value = DType::kUInt64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::kFloat16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBFloat16; };

}  // namespace kiln
