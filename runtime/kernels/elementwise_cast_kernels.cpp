// Cast and CastLike between every numeric dtype kiln stores (including float16, bfloat16 and bool).
// String tensors do not exist in kiln, so casts from or to string are Unimplemented.
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/kernels/elementwise_common.h"
#include "runtime/kernels/vec_kernels.h"
#include "runtime/thread_pool.h"

namespace kiln {
namespace {

// float -> bfloat16 truncates the low mantissa bits: that is what the ONNX reference (and hence the
// backend test data) of opsets 13-17 does; only opset 19 specified rounding. NaN stays a quiet NaN.
inline uint16_t float_to_bf16_truncate(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>(u >> 16);
}

// double -> float16 through float would round twice. Rounding to float with round-to-odd first
// (keep the odd neighbour when inexact) makes the second, round-to-nearest-even step exact.
inline uint16_t double_to_half(double d) {
  float f = static_cast<float>(d);
  if (std::isfinite(f) && static_cast<double>(f) != d) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 1u) == 0) f = std::nextafter(f, static_cast<float>(d > static_cast<double>(f) ? INFINITY : -INFINITY));
  }
  return float_to_half(f);
}

// Float to integer conversion saturates and maps NaN to 0, where a plain C++ cast is undefined.
template <typename D, typename F>
inline D float_to_int(F v) {
  if (std::isnan(v)) return D(0);
  if (v <= static_cast<F>(std::numeric_limits<D>::lowest())) return std::numeric_limits<D>::lowest();
  if (v >= static_cast<F>(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
  return static_cast<D>(v);
}

template <typename S, typename D>
inline D convert(S s) {
  const auto c = ew::Elem<S>::load(s);
  using C = std::remove_const_t<decltype(c)>;
  if constexpr (std::is_same_v<D, bool>) return c != C(0);
  else if constexpr (std::is_same_v<D, Half> && std::is_same_v<C, double>) return Half{double_to_half(c)};
  else if constexpr (std::is_same_v<D, Half>) return Half{float_to_half(static_cast<float>(c))};
  else if constexpr (std::is_same_v<D, BFloat16>) return BFloat16{float_to_bf16_truncate(static_cast<float>(c))};
  else if constexpr (std::is_floating_point_v<C> && std::is_integral_v<D>) return float_to_int<D>(c);
  else return static_cast<D>(c);
}

// The scalar conversion of every pair: the reference the vector paths are tested against.
template <typename S, typename D>
void convert_all(const S* src, D* dst, int64_t n) {
  const LoopCost cost{static_cast<double>(sizeof(S) + sizeof(D)), 1.0};
  ThreadPool::global().parallel_for(n, cost, [&](int64_t b, int64_t e, int) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) dst[i] = convert<S, D>(src[i]);
  });
}

// float32 <-> float16 / bfloat16 through the vector loops of runtime/kernels/vec_kernels.h
// (vcvtps2ph / vcvtph2ps, shifts for bfloat16): bit-identical to convert_all except for NaN
// payloads (the hardware keeps the top payload bits, the scalar path makes the canonical quiet NaN).
template <typename Fn, typename S, typename D>
void convert_vec(Fn fn, const S* src, D* dst, int64_t n) {
  ThreadPool::global().parallel_for(n, LoopCost{6.0, 1.0}, [&](int64_t b, int64_t e, int) { fn(src + b, dst + b, e - b); });
}

// True when the pair has a vector path and it ran.
bool cast_fast(const TensorView& in, const TensorView& out) {
  const vec::Table& t = vec::table();
  const int64_t n = in.numel();
  const DType s = in.dtype, d = out.dtype;
  if (s == DType::kFloat32 && d == DType::kFloat16) convert_vec(t.f32_to_f16, in.as<const float>(), out.as<uint16_t>(), n);
  else if (s == DType::kFloat32 && d == DType::kBFloat16) convert_vec(t.f32_to_bf16, in.as<const float>(), out.as<uint16_t>(), n);
  else if (s == DType::kFloat16 && d == DType::kFloat32) convert_vec(t.f16_to_f32, in.as<const uint16_t>(), out.as<float>(), n);
  else if (s == DType::kBFloat16 && d == DType::kFloat32) convert_vec(t.bf16_to_f32, in.as<const uint16_t>(), out.as<float>(), n);
  else return false;
  return true;
}

Status check_target(DType to, const char* what) {
  if (to == DType::kString) return Unimplemented(std::string(what) + ": casting to string is not supported");
  if (!dtype_is_known(to))
    return InvalidArgument(std::string(what) + ": target dtype " + dtype_name(to) + " is not a known tensor type");
  return Status::Ok();
}

Status cast_view(const TensorView& in, const TensorView& out) {
  if (in.dtype == out.dtype) {
    if (in.nbytes()) std::memmove(out.data, in.data, in.nbytes());
    return Status::Ok();
  }
  if (cast_fast(in, out)) return Status::Ok();
  return ew::dispatch_types<ew::kAllTypes>(in.dtype, [&](auto src_tag) {
    using S = decltype(src_tag);
    return ew::dispatch_types<ew::kAllTypes>(out.dtype, [&](auto dst_tag) {
      using D = decltype(dst_tag);
      convert_all(in.as<const S>(), out.as<D>(), in.numel());
      return Status::Ok();
    });
  });
}

class CastKernel final : public Kernel {
 public:
  explicit CastKernel(DType to) : to_(to) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
    KILN_RETURN_IF_ERROR(ew::check_output_count(out, 1));
    KILN_RETURN_IF_ERROR(ew::check_dtype(ew::kAllTypes, in[0].dtype, 0));
    out[0] = TensorDesc{to_, in[0].shape};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return cast_view(in[0], out[0]);
  }

 private:
  DType to_;
};

class CastLikeKernel final : public Kernel {
 public:
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
    KILN_RETURN_IF_ERROR(ew::check_output_count(out, 1));
    KILN_RETURN_IF_ERROR(ew::check_dtype(ew::kAllTypes, in[0].dtype, 0));
    KILN_RETURN_IF_ERROR(check_target(in[1].dtype, "input 1 (target_type)"));
    out[0] = TensorDesc{in[1].dtype, in[0].shape};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return cast_view(in[0], out[0]);
  }
};

// 'saturate' (opset 19) only changes float8 casts, and kiln has no float8 types.
void read_saturate(const KernelArgs& args, AttrReader& attrs) {
  if (args.opset >= 19) attrs.ignore("saturate");
}

}  // namespace

void register_elementwise_cast_kernels(KernelRegistry& r) {
  r.add({"Cast", "reference", 0, [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(int64_t to, attrs.require_int("to"));
           read_saturate(args, attrs);
           const DType dt = static_cast<DType>(to);
           KILN_RETURN_IF_ERROR(check_target(dt, "attribute 'to'"));
           return std::unique_ptr<Kernel>(std::make_unique<CastKernel>(dt));
         }});
  r.add({"CastLike", "reference", 0, [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
           read_saturate(args, attrs);
           return std::unique_ptr<Kernel>(std::make_unique<CastLikeKernel>());
         }});
}

}  // namespace kiln
