#include "builder/input_generator.h"

#include <cmath>

namespace kiln {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t seed_of(const std::string& name, const InputGenerator* gen) {
  if (gen && gen->seed) return gen->seed;
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h;
}

template <typename T>
void fill_with(const TensorView& t, T value) {
  for (int64_t i = 0; i < t.numel(); ++i) t.as<T>()[i] = value;
}

void store(const TensorView& t, int64_t i, double v) {
  switch (t.dtype) {
    case DType::kFloat32: t.as<float>()[i] = static_cast<float>(v); break;
    case DType::kFloat64: t.as<double>()[i] = v; break;
    case DType::kFloat16: t.as<uint16_t>()[i] = float_to_half(static_cast<float>(v)); break;
    case DType::kBFloat16: t.as<uint16_t>()[i] = float_to_bf16(static_cast<float>(v)); break;
    case DType::kInt64: t.as<int64_t>()[i] = static_cast<int64_t>(v); break;
    case DType::kInt32: t.as<int32_t>()[i] = static_cast<int32_t>(v); break;
    case DType::kInt16: t.as<int16_t>()[i] = static_cast<int16_t>(v); break;
    case DType::kInt8: t.as<int8_t>()[i] = static_cast<int8_t>(v); break;
    case DType::kUInt8: t.as<uint8_t>()[i] = static_cast<uint8_t>(v); break;
    case DType::kUInt16: t.as<uint16_t>()[i] = static_cast<uint16_t>(v); break;
    case DType::kUInt32: t.as<uint32_t>()[i] = static_cast<uint32_t>(v); break;
    case DType::kUInt64: t.as<uint64_t>()[i] = static_cast<uint64_t>(v); break;
    case DType::kBool: t.as<bool>()[i] = v != 0; break;
    default: break;
  }
}

}  // namespace

Status fill_block_causal_mask(const TensorView& mask, int64_t block) {
  if (mask.dtype != DType::kBool || mask.shape.rank() != 2)
    return InvalidArgument("a causal mask must be a rank-2 bool tensor [new, total], got " + dtype_name(mask.dtype) + " " + mask.shape.str());
  const int64_t n = mask.shape[0], total = mask.shape[1];
  if (n > total) return InvalidArgument("causal mask " + mask.shape.str() + " has more queries than keys");
  bool* m = mask.as<bool>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = total - n + i;
    const int64_t limit = block > 0 ? (pos / block + 1) * block : pos + 1;  // keys [0, limit) allowed
    for (int64_t j = 0; j < total; ++j) m[i * total + j] = j < limit;
  }
  return Status::Ok();
}

StatusOr<Tensor> generate_input(const std::string& name, DType dtype, const Shape& shape, const InputGenerator* gen) {
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::try_zeros(dtype, shape, "input '" + name + "'"));
  const TensorView& v = t.view();
  std::string kind = gen ? gen->kind : (dtype_is_float(dtype) ? "uniform" : dtype == DType::kBool ? "ones" : "zeros");
  const std::string where = "input '" + name + "' generator '" + kind + "'";
  if (kind == "zeros") return t;
  if (kind == "ones") {
    for (int64_t i = 0; i < v.numel(); ++i) store(v, i, 1);
    return t;
  }
  if (kind == "causal" || kind == "block_causal") {
    Status st = fill_block_causal_mask(v, kind == "causal" ? 0 : (gen ? gen->block : 0));
    if (!st.ok()) return st.with_context(where);
    return t;
  }
  uint64_t state = seed_of(name, gen);
  if (kind == "uniform") {
    const double lo = gen ? gen->low : 0.0, hi = gen ? gen->high : 1.0;
    for (int64_t i = 0; i < v.numel(); ++i) {
      const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
      store(v, i, lo + (hi - lo) * u);
    }
    return t;
  }
  if (kind == "randint") {
    const int64_t lo = static_cast<int64_t>(std::ceil(gen->low)), hi = static_cast<int64_t>(std::ceil(gen->high));
    if (hi <= lo) return InvalidArgument(where + ": needs low < high");
    const uint64_t span = static_cast<uint64_t>(hi - lo);
    for (int64_t i = 0; i < v.numel(); ++i) store(v, i, static_cast<double>(lo + static_cast<int64_t>(splitmix64(state) % span)));
    return t;
  }
  return InvalidArgument(where + " is unknown (uniform, randint, zeros, ones, causal, block_causal)");
}

}  // namespace kiln
