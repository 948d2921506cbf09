// The elementwise kernel family: registration of every sub-table, plus Where and Clip, whose extra
// inputs (a condition, optional bounds) fit neither the unary nor the binary mould.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/kernels/elementwise_common.h"
#include "runtime/kernels/families.h"

namespace kiln {
namespace {

// ---- Where ---------------------------------------------------------------------------------------

class WhereKernel final : public Kernel {
 public:
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 3, 3));
    KILN_RETURN_IF_ERROR(ew::check_output_count(out, 1));
    KILN_RETURN_IF_ERROR(ew::check_dtype(ew::kBoolType, in[0].dtype, 0));
    KILN_RETURN_IF_ERROR(ew::check_dtype(ew::kAllTypes, in[1].dtype, 1));
    if (in[2].dtype != in[1].dtype)
      return InvalidArgument("input 2 has dtype " + dtype_name(in[2].dtype) + " but input 1 has " +
                             dtype_name(in[1].dtype) + "; they must match");
    KILN_ASSIGN_OR_RETURN(Shape shape, ew::broadcast_all(in));
    out[0] = TensorDesc{in[1].dtype, shape};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    // Selection only moves bits, so the element size is all that matters.
    switch (dtype_size(in[1].dtype)) {
      case 1: select<uint8_t>(in, out[0]); break;
      case 2: select<uint16_t>(in, out[0]); break;
      case 4: select<uint32_t>(in, out[0]); break;
      case 8: select<uint64_t>(in, out[0]); break;
      default: return Internal("Where: unexpected element size for dtype " + dtype_name(in[1].dtype));
    }
    return Status::Ok();
  }

 private:
  template <typename E>
  static void select(std::span<const TensorView> in, const TensorView& out) {
    const ew::LoopPlan p = ew::make_plan(out.shape, {&in[0].shape, &in[1].shape, &in[2].shape});
    const bool* c = in[0].as<const bool>();
    const E* x = in[1].as<const E>();
    const E* y = in[2].as<const E>();
    E* o = out.as<E>();
    const int last = p.rank - 1;
    const int64_t sc = p.strides[0][last], sx = p.strides[1][last], sy = p.strides[2][last];
    ew::for_each_run(p, out.numel(), [&](int64_t oo, const int64_t* off, int64_t n) {
      const bool* cc = c + off[0];
      const E* xx = x + off[1];
      const E* yy = y + off[2];
      E* dst = o + oo;
      // Branch-free (a bit mask from the condition): a random condition would mispredict every
      // other element, and the mask form vectorizes.
      const auto pick = [](bool cond, E a, E b) {
        const E m = static_cast<E>(E(0) - static_cast<E>(cond != 0));
        return static_cast<E>((a & m) | (b & static_cast<E>(~m)));
      };
      if (sc && sx && sy) {
        int64_t i = 0;
        if constexpr (sizeof(E) == 4) {  // AVX2 (kiln's baseline): 8 condition bytes widened to a lane mask
          for (; i + 8 <= n; i += 8) {
            int64_t c8;
            std::memcpy(&c8, cc + i, 8);
            const __m256i m = _mm256_cmpgt_epi32(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(c8)), _mm256_setzero_si256());
            const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xx + i));
            const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yy + i));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_blendv_epi8(b, a, m));
          }
        }
        for (; i < n; ++i) dst[i] = pick(cc[i], xx[i], yy[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = pick(cc[i * sc], xx[i * sx], yy[i * sy]);
      }
    });
  }
};

// ---- Clip ----------------------------------------------------------------------------------------

template <typename C>
struct ClampOp {
  C lo, hi;
  // Written so that NaN passes through and min > max yields max, like numpy.minimum(numpy.maximum(x, lo), hi).
  C operator()(C x) const {
    const C v = x < lo ? lo : x;
    return v > hi ? hi : v;
  }
};

class ClipKernel final : public Kernel {
 public:
  // Opsets before 11 carry the bounds as float attributes instead of inputs.
  ClipKernel(bool attr_bounds, float min, float max) : attr_bounds_(attr_bounds), attr_min_(min), attr_max_(max) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 1, attr_bounds_ ? 1 : 3));
    KILN_RETURN_IF_ERROR(ew::check_output_count(out, 1));
    KILN_RETURN_IF_ERROR(ew::check_dtype(attr_bounds_ ? ew::kFloatTypes : ew::kNumericTypes, in[0].dtype, 0));
    for (size_t i = 1; i < in.size(); ++i) {
      if (!in[i].present()) continue;
      if (in[i].dtype != in[0].dtype)
        return InvalidArgument("input " + std::to_string(i) + " has dtype " + dtype_name(in[i].dtype) +
                               " but input 0 has " + dtype_name(in[0].dtype) + "; they must match");
      if (in[i].numel() != 1)
        return InvalidArgument("input " + std::to_string(i) + " (" + (i == 1 ? "min" : "max") +
                               ") must be a scalar, got shape " + in[i].shape.str());
    }
    out[0] = TensorDesc{in[0].dtype, in[0].shape};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return ew::dispatch_types<ew::kNumericTypes>(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      using C = typename ew::Elem<T>::C;
      ClampOp<C> op{std::numeric_limits<C>::lowest(), std::numeric_limits<C>::max()};
      if (attr_bounds_) {
        op.lo = static_cast<C>(attr_min_);
        op.hi = static_cast<C>(attr_max_);
      }
      if (in.size() > 1 && in[1].present()) op.lo = ew::Elem<T>::load(in[1].as<const T>()[0]);
      if (in.size() > 2 && in[2].present()) op.hi = ew::Elem<T>::load(in[2].as<const T>()[0]);
      ew::unary_apply(in[0].as<const T>(), out[0].as<T>(), in[0].numel(), op);
      return Status::Ok();
    });
  }

 private:
  bool attr_bounds_;
  float attr_min_, attr_max_;
};

StatusOr<std::unique_ptr<Kernel>> make_clip(const KernelArgs& args, AttrReader& attrs) {
  float lo = std::numeric_limits<float>::lowest(), hi = std::numeric_limits<float>::max();
  const bool attr_bounds = args.opset < 11;
  if (attr_bounds) {
    KILN_ASSIGN_OR_RETURN(lo, attrs.get_float("min", lo));
    KILN_ASSIGN_OR_RETURN(hi, attrs.get_float("max", hi));
  }
  return std::unique_ptr<Kernel>(std::make_unique<ClipKernel>(attr_bounds, lo, hi));
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& r) {
  register_elementwise_unary_kernels(r);
  register_elementwise_binary_kernels(r);
  register_elementwise_cast_kernels(r);
  register_fused_elementwise_kernels(r);
  r.add({"Where", "reference", 0, [](const KernelArgs&, AttrReader&) -> StatusOr<std::unique_ptr<Kernel>> {
           return std::unique_ptr<Kernel>(std::make_unique<WhereKernel>());
         }});
  r.add({"Clip", "reference", 0, make_clip});
}

}  // namespace kiln
