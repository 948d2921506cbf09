// Binary elementwise ops with numpy broadcasting (arithmetic, comparison, logic, bit shifts, Mod,
// PRelu), Pow with independent base and exponent dtypes, and the variadic Max / Min / Sum / Mean.
#include <cmath>

#include "runtime/kernels/elementwise_common.h"

namespace kiln {
namespace {

using ew::bit;
using ew::kAllTypes;
using ew::kBoolType;
using ew::kFloatTypes;
using ew::kNumericTypes;
using ew::kUnsignedIntTypes;

template <typename Op>
struct NoAttrs {
  static StatusOr<Op> make(const KernelArgs&, AttrReader&) { return Op{}; }
  static constexpr bool kUnidirectional = false;
};

Status check_same_dtype(std::span<const TensorView> in) {
  for (size_t i = 1; i < in.size(); ++i)
    if (in[i].dtype != in[0].dtype)
      return InvalidArgument("input " + std::to_string(i) + " has dtype " + dtype_name(in[i].dtype) + " but input 0 has " +
                             dtype_name(in[0].dtype) + "; they must match");
  return Status::Ok();
}

template <typename Op>
class BinaryKernel final : public Kernel {
 public:
  explicit BinaryKernel(Op op) : op_(op) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
    KILN_RETURN_IF_ERROR(ew::check_output_count(out, 1));
    KILN_RETURN_IF_ERROR(ew::check_dtype(Op::kTypes, in[0].dtype, 0));
    KILN_RETURN_IF_ERROR(check_same_dtype(in));
    KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_shapes(in[0].shape, in[1].shape));
    if (Op::kUnidirectional && shape != in[0].shape)
      return InvalidArgument("input 1 of shape " + in[1].shape.str() + " cannot be broadcast to input 0 of shape " +
                             in[0].shape.str());
    out[0] = TensorDesc{Op::kBoolOut ? DType::kBool : in[0].dtype, shape};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return ew::dispatch_types<Op::kTypes>(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      using O = std::conditional_t<Op::kBoolOut, bool, T>;
      ew::binary_broadcast<T, T, O>(in[0], in[1], out[0], op_);
      return Status::Ok();
    });
  }
  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    for (size_t i = 0; i < 2; ++i) over_[i] = in[i].dtype == out[0].dtype && in[i].shape == out[0].shape;
    return Status::Ok();
  }
  // An input of the output's shape and dtype is read at the output's own index, in runs that load
  // an element before they store it (ew::binary_run), so the output may be its buffer: a residual
  // Add's sum, a squeeze-excitation gate's product.
  bool writes_over_input(size_t i) const override { return i < 2 && over_[i]; }

 private:
  Op op_;
  bool over_[2] = {false, false};
};

template <typename Op, template <typename> class KernelT = BinaryKernel>
void add_kernel(KernelRegistry& r, const char* name) {
  r.add({name, "reference", 0, [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(Op op, Op::make(args, attrs));
           return std::unique_ptr<Kernel>(std::make_unique<KernelT<Op>>(op));
         }});
}

// ---- arithmetic ------------------------------------------------------------------------------

struct AddOp : NoAttrs<AddOp> {
  static constexpr uint32_t kTypes = kNumericTypes;
  static constexpr bool kBoolOut = false;
  template <typename C>
  C operator()(C a, C b) const { return ew::wrap_add(a, b); }
};
struct SubOp : NoAttrs<SubOp> {
  static constexpr uint32_t kTypes = kNumericTypes;
  static constexpr bool kBoolOut = false;
  template <typename C>
  C operator()(C a, C b) const { return ew::wrap_sub(a, b); }
};
struct MulOp : NoAttrs<MulOp> {
  static constexpr uint32_t kTypes = kNumericTypes;
  static constexpr bool kBoolOut = false;
  template <typename C>
  C operator()(C a, C b) const { return ew::wrap_mul(a, b); }
};

// Integer division truncates toward zero (C semantics, as ONNX Runtime does). Division by zero
// gives 0 and INT_MIN / -1 wraps, where C would trap.
struct DivOp : NoAttrs<DivOp> {
  static constexpr uint32_t kTypes = kNumericTypes;
  static constexpr bool kBoolOut = false;
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return a / b;
    } else {
      if (b == C(0)) return C(0);
      if constexpr (std::is_signed_v<C>)
        if (b == C(-1)) return ew::wrap_sub(C(0), a);
      return static_cast<C>(a / b);
    }
  }
};

// fmod=1: the result takes the sign of the dividend (C fmod / %). fmod=0: the sign of the divisor
// (Python / numpy mod). Integer modulo by zero gives 0 instead of trapping.
struct ModOp {
  static constexpr uint32_t kTypes = kNumericTypes;
  static constexpr bool kBoolOut = false;
  static constexpr bool kUnidirectional = false;
  bool fmod = false;
  static StatusOr<ModOp> make(const KernelArgs&, AttrReader& a) {
    KILN_ASSIGN_OR_RETURN(int64_t f, a.get_int("fmod", 0));
    if (f != 0 && f != 1) return InvalidArgument("attribute 'fmod' must be 0 or 1, got " + std::to_string(f));
    ModOp op;
    op.fmod = f == 1;
    return op;
  }
  template <typename C>
  C operator()(C a, C b) const {
    C r;
    if constexpr (std::is_floating_point_v<C>) {
      r = std::fmod(a, b);
    } else {
      if (b == C(0)) return C(0);
      if constexpr (std::is_signed_v<C>)
        if (b == C(-1)) return C(0);
      r = static_cast<C>(a % b);
    }
    if constexpr (std::is_signed_v<C>)
      if (!fmod && r != C(0) && ((r < C(0)) != (b < C(0)))) r = static_cast<C>(r + b);
    return r;
  }
};

struct BitShiftOp {
  static constexpr uint32_t kTypes = kUnsignedIntTypes;
  static constexpr bool kBoolOut = false;
  static constexpr bool kUnidirectional = false;
  bool left = true;
  static StatusOr<BitShiftOp> make(const KernelArgs&, AttrReader& a) {
    KILN_ASSIGN_OR_RETURN(std::string dir, a.get_string("direction", ""));
    if (dir != "LEFT" && dir != "RIGHT")
      return InvalidArgument("attribute 'direction' must be \"LEFT\" or \"RIGHT\", got \"" + dir + "\"");
    BitShiftOp op;
    op.left = dir == "LEFT";
    return op;
  }
  // Shifting by the bit width or more gives 0 (undefined behaviour in C).
  template <typename C>
  C operator()(C a, C b) const {
    if (b >= C(sizeof(C) * 8)) return C(0);
    return static_cast<C>(left ? a << b : a >> b);
  }
};

struct PReluOp : NoAttrs<PReluOp> {
  static constexpr uint32_t kTypes =
      kFloatTypes | bit(DType::kInt32) | bit(DType::kInt64) | bit(DType::kUInt32) | bit(DType::kUInt64);
  static constexpr bool kBoolOut = false;
  static constexpr bool kUnidirectional = true;  // slope broadcasts to X, never the reverse
  template <typename C>
  C operator()(C x, C slope) const {
    return x < C(0) ? ew::wrap_mul(slope, x) : x;
  }
};

// ---- comparison and logic ----------------------------------------------------------------------

#define KILN_BOOL_BINARY(NAME, TYPES, EXPR)          \
  struct NAME : NoAttrs<NAME> {                      \
    static constexpr uint32_t kTypes = TYPES;        \
    static constexpr bool kBoolOut = true;           \
    template <typename C>                            \
    bool operator()(C a, C b) const {                \
      return EXPR;                                   \
    }                                                \
  };
KILN_BOOL_BINARY(EqualOp, kAllTypes, a == b)
KILN_BOOL_BINARY(GreaterOp, kNumericTypes, a > b)
KILN_BOOL_BINARY(LessOp, kNumericTypes, a < b)
KILN_BOOL_BINARY(GreaterOrEqualOp, kNumericTypes, a >= b)
KILN_BOOL_BINARY(LessOrEqualOp, kNumericTypes, a <= b)
KILN_BOOL_BINARY(AndOp, kBoolType, a && b)
KILN_BOOL_BINARY(OrOp, kBoolType, a || b)
KILN_BOOL_BINARY(XorOp, kBoolType, a != b)
#undef KILN_BOOL_BINARY

// ---- Pow ---------------------------------------------------------------------------------------

constexpr uint32_t kPowBaseTypes = kFloatTypes | bit(DType::kInt32) | bit(DType::kInt64);

// Integer power by squaring with wrap-around. Negative exponents truncate 1/x^n toward zero.
template <typename X, typename Y>
X int_pow(X x, Y y) {
  if constexpr (std::is_signed_v<Y>) {
    if (y < 0) {
      if (x == 1) return 1;
      if (x == -1) return (y % 2 == 0) ? 1 : -1;
      return 0;
    }
  }
  using U = std::make_unsigned_t<X>;
  U result = 1, base = static_cast<U>(x);
  for (auto e = static_cast<std::make_unsigned_t<Y>>(y); e; e >>= 1) {
    if (e & 1) result *= base;
    base *= base;
  }
  return static_cast<X>(result);
}

struct PowOp {
  template <typename X, typename Y>
  auto operator()(X x, Y y) const {
    if constexpr (std::is_integral_v<X> && std::is_integral_v<Y>) return int_pow(x, y);
    else if constexpr (std::is_same_v<X, Y>) return std::pow(x, y);
    // Mixed dtypes compute in double and convert to the base dtype, as numpy's astype does.
    else return std::pow(static_cast<double>(x), static_cast<double>(y));
  }
};

class PowKernel final : public Kernel {
 public:
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
    KILN_RETURN_IF_ERROR(ew::check_output_count(out, 1));
    KILN_RETURN_IF_ERROR(ew::check_dtype(kPowBaseTypes, in[0].dtype, 0));
    KILN_RETURN_IF_ERROR(ew::check_dtype(kNumericTypes, in[1].dtype, 1));
    KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_shapes(in[0].shape, in[1].shape));
    out[0] = TensorDesc{in[0].dtype, shape};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    // A constant small integral or half exponent (x^2 in decomposed LayerNorms, x^3 in written-out
    // GELUs, x^0.5) runs as products or a square root in vector lanes instead of pow().
    if (in[0].dtype == DType::kFloat32 && in[1].dtype == DType::kFloat32 && in[1].numel() == 1 &&
        out[0].numel() == in[0].numel()) {
      const float e = in[1].as<const float>()[0];
      const float* x = in[0].as<const float>();
      if (e == std::nearbyint(e) && std::fabs(e) <= 16.0f) {
        ew::vec_apply(vec::unary(vec::Unary::kPowInt), x, out[0].as<float>(), out[0].numel(), {e, 0.0f});
        return Status::Ok();
      }
      if (e == 0.5f || e == -0.5f) {
        ew::vec_apply(vec::unary(vec::Unary::kPowHalf), x, out[0].as<float>(), out[0].numel(), {e, e});
        return Status::Ok();
      }
    }
    return ew::dispatch_types<kPowBaseTypes>(in[0].dtype, [&](auto base_tag) {
      using X = decltype(base_tag);
      return ew::dispatch_types<kNumericTypes>(in[1].dtype, [&](auto exp_tag) {
        using Y = decltype(exp_tag);
        ew::binary_broadcast<X, Y, X>(in[0], in[1], out[0], PowOp{});
        return Status::Ok();
      });
    });
  }
};

// ---- variadic Max / Min / Sum / Mean -------------------------------------------------------------

struct MaxOp : NoAttrs<MaxOp> {
  static constexpr uint32_t kTypes = kNumericTypes;
  static constexpr bool kMean = false;
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>)
      if (std::isnan(b)) return b;  // NaN propagates, as in numpy.maximum
    return a < b ? b : a;
  }
};
struct MinOp : NoAttrs<MinOp> {
  static constexpr uint32_t kTypes = kNumericTypes;
  static constexpr bool kMean = false;
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>)
      if (std::isnan(b)) return b;
    return b < a ? b : a;
  }
};
struct SumOp : NoAttrs<SumOp> {
  static constexpr uint32_t kTypes = kNumericTypes;
  static constexpr bool kMean = false;
  template <typename C>
  C operator()(C a, C b) const { return ew::wrap_add(a, b); }
};
struct MeanOp : NoAttrs<MeanOp> {
  static constexpr uint32_t kTypes = kFloatTypes;
  static constexpr bool kMean = true;
  template <typename C>
  C operator()(C a, C b) const { return a + b; }
};

struct FirstOp {
  template <typename C>
  C operator()(C a, C) const { return a; }
};

template <typename C>
struct ScaleOp {
  C s;
  C operator()(C x) const { return x * s; }
};

template <typename Op>
class VariadicKernel final : public Kernel {
 public:
  explicit VariadicKernel(Op op) : op_(op) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    if (in.empty()) return InvalidArgument("expects at least 1 input, got 0");
    KILN_RETURN_IF_ERROR(ew::check_output_count(out, 1));
    for (size_t i = 0; i < in.size(); ++i)
      if (!in[i].present()) return InvalidArgument("input " + std::to_string(i) + " is missing");
    KILN_RETURN_IF_ERROR(ew::check_dtype(Op::kTypes, in[0].dtype, 0));
    KILN_RETURN_IF_ERROR(check_same_dtype(in));
    KILN_ASSIGN_OR_RETURN(Shape shape, ew::broadcast_all(in));
    out[0] = TensorDesc{in[0].dtype, shape};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return ew::dispatch_types<Op::kTypes>(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      const TensorView& o = out[0];
      // The running result lives in the output, which then serves as the left operand.
      if (in.size() == 1) ew::binary_broadcast<T, T, T>(in[0], in[0], o, FirstOp{});
      else ew::binary_broadcast<T, T, T>(in[0], in[1], o, op_);
      for (size_t i = 2; i < in.size(); ++i) ew::binary_broadcast<T, T, T>(o, in[i], o, op_);
      if constexpr (Op::kMean) {
        using C = typename ew::Elem<T>::C;
        ew::unary_apply(o.as<const T>(), o.as<T>(), o.numel(), ScaleOp<C>{C(1) / static_cast<C>(in.size())});
      }
      return Status::Ok();
    });
  }

 private:
  Op op_;
};

}  // namespace

void register_elementwise_binary_kernels(KernelRegistry& r) {
  add_kernel<AddOp>(r, "Add");
  add_kernel<SubOp>(r, "Sub");
  add_kernel<MulOp>(r, "Mul");
  add_kernel<DivOp>(r, "Div");
  add_kernel<ModOp>(r, "Mod");
  add_kernel<BitShiftOp>(r, "BitShift");
  add_kernel<PReluOp>(r, "PRelu");
  add_kernel<EqualOp>(r, "Equal");
  add_kernel<GreaterOp>(r, "Greater");
  add_kernel<LessOp>(r, "Less");
  add_kernel<GreaterOrEqualOp>(r, "GreaterOrEqual");
  add_kernel<LessOrEqualOp>(r, "LessOrEqual");
  add_kernel<AndOp>(r, "And");
  add_kernel<OrOp>(r, "Or");
  add_kernel<XorOp>(r, "Xor");
  r.add({"Pow", "reference", 0, [](const KernelArgs&, AttrReader&) -> StatusOr<std::unique_ptr<Kernel>> {
           return std::unique_ptr<Kernel>(std::make_unique<PowKernel>());
         }});
  add_kernel<MaxOp, VariadicKernel>(r, "Max");
  add_kernel<MinOp, VariadicKernel>(r, "Min");
  add_kernel<SumOp, VariadicKernel>(r, "Sum");
  add_kernel<MeanOp, VariadicKernel>(r, "Mean");
}

}  // namespace kiln
