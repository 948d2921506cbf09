// Cast and CastLike between every numeric dtype kiln stores (including float16, bfloat16 and bool).
// String tensors do not exist in kiln, so casts from or to string are Unimplemented.
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/kernels/elementwise_common.h"

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

template <typename S, typename D>
void convert_all(const S* src, D* dst, int64_t n) {
  if (n > ew::kParallelThreshold) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = convert<S, D>(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = convert<S, D>(src[i]);
  }
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
