// Unary elementwise ops: math functions, activations, and the predicates IsNaN / IsInf / Not.
// Each op is a small functor with its ONNX type constraint (kTypes), whether it outputs bool, and a
// make() that reads its attributes; UnaryKernel<Op> does the rest.
#include <cmath>
#include <limits>
#include <utility>

#include "runtime/kernels/elementwise_common.h"

namespace kiln {
namespace {

using ew::kBoolType;
using ew::kFloatTypes;
using ew::kNumericTypes;
using ew::kSignedIntTypes;

// Attribute-less ops share this make().
template <typename Op>
struct NoAttrs {
  static StatusOr<Op> make(const KernelArgs&, AttrReader&) { return Op{}; }
};

template <typename Op>
class UnaryKernel final : public Kernel {
 public:
  explicit UnaryKernel(Op op) : op_(op) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
    KILN_RETURN_IF_ERROR(ew::check_output_count(out, 1));
    KILN_RETURN_IF_ERROR(ew::check_dtype(Op::kTypes, in[0].dtype, 0));
    out[0] = TensorDesc{Op::kBoolOut ? DType::kBool : in[0].dtype, in[0].shape};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if constexpr (requires(const Op& o) { o.vec(); }) {
      if (in[0].dtype == DType::kFloat32) {
        const auto [fn, params] = op_.vec();
        ew::vec_apply(vec::unary(fn), in[0].as<const float>(), out[0].as<float>(), in[0].numel(), params);
        return Status::Ok();
      }
    }
    return ew::dispatch_types<Op::kTypes>(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      using O = std::conditional_t<Op::kBoolOut, bool, T>;
      ew::unary_apply(in[0].as<const T>(), out[0].as<O>(), in[0].numel(), op_);
      return Status::Ok();
    });
  }
  // y[i] = f(x[i]), element by element (each loop loads a vector before it stores it there), so y
  // may be x's buffer; not for a bool result, whose elements are narrower than x's.
  bool writes_over_input(size_t i) const override { return i == 0 && !Op::kBoolOut; }

 private:
  Op op_;
};

template <typename Op>
void add_unary(KernelRegistry& r, const char* name) {
  r.add({name, "reference", 0, [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(Op op, Op::make(args, attrs));
           return std::unique_ptr<Kernel>(std::make_unique<UnaryKernel<Op>>(op));
         }});
}

// Float-only ops without attributes: one line each. The scalar expression serves float64 and the
// 16-bit floats, and is the reference the vector loops are tested against; float32 runs through
// the vector loop of runtime/kernels/vec_kernels.h where an op names one (VEC).
#define KILN_FLOAT_UNARY(NAME, EXPR)                 \
  struct NAME : NoAttrs<NAME> {                      \
    static constexpr uint32_t kTypes = kFloatTypes;  \
    static constexpr bool kBoolOut = false;          \
    template <typename C>                            \
    C operator()(C x) const {                        \
      return EXPR;                                   \
    }                                                \
  };
#define KILN_FLOAT_UNARY_VEC(NAME, EXPR, VEC)                                         \
  struct NAME : NoAttrs<NAME> {                                                       \
    static constexpr uint32_t kTypes = kFloatTypes;                                   \
    static constexpr bool kBoolOut = false;                                           \
    template <typename C>                                                             \
    C operator()(C x) const {                                                         \
      return EXPR;                                                                    \
    }                                                                                 \
    std::pair<vec::Unary, vec::Params> vec() const { return {vec::Unary::VEC, {}}; } \
  };

KILN_FLOAT_UNARY_VEC(ExpOp, std::exp(x), kExp)
KILN_FLOAT_UNARY_VEC(LogOp, std::log(x), kLog)
KILN_FLOAT_UNARY_VEC(SqrtOp, std::sqrt(x), kSqrt)
KILN_FLOAT_UNARY_VEC(ReciprocalOp, C(1) / x, kReciprocal)
KILN_FLOAT_UNARY(SinOp, std::sin(x))
KILN_FLOAT_UNARY(CosOp, std::cos(x))
KILN_FLOAT_UNARY(TanOp, std::tan(x))
KILN_FLOAT_UNARY(AsinOp, std::asin(x))
KILN_FLOAT_UNARY(AcosOp, std::acos(x))
KILN_FLOAT_UNARY(AtanOp, std::atan(x))
KILN_FLOAT_UNARY(SinhOp, std::sinh(x))
KILN_FLOAT_UNARY(CoshOp, std::cosh(x))
KILN_FLOAT_UNARY(AsinhOp, std::asinh(x))
KILN_FLOAT_UNARY(AcoshOp, std::acosh(x))
KILN_FLOAT_UNARY(AtanhOp, std::atanh(x))
KILN_FLOAT_UNARY(CeilOp, std::ceil(x))
KILN_FLOAT_UNARY(FloorOp, std::floor(x))
// nearbyint in the default rounding mode rounds halves to even, as ONNX Round requires.
KILN_FLOAT_UNARY(RoundOp, std::nearbyint(x))
KILN_FLOAT_UNARY_VEC(ErfOp, std::erf(x), kErf)
KILN_FLOAT_UNARY_VEC(TanhOp, std::tanh(x), kTanh)
// Split by sign so that exp never overflows: large |x| saturates to exactly 0 or 1.
KILN_FLOAT_UNARY_VEC(SigmoidOp, x >= C(0) ? C(1) / (C(1) + std::exp(-x)) : std::exp(x) / (C(1) + std::exp(x)), kSigmoid)
// log(1 + e^x) without overflow for large x.
KILN_FLOAT_UNARY_VEC(SoftplusOp, x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)), kSoftplus)
KILN_FLOAT_UNARY(SoftsignOp, x / (C(1) + std::abs(x)))
KILN_FLOAT_UNARY_VEC(HardSwishOp, x * std::max(C(0), std::min(C(1), x / C(6) + C(0.5))), kHardSwish)
#undef KILN_FLOAT_UNARY
#undef KILN_FLOAT_UNARY_VEC

struct AbsOp : NoAttrs<AbsOp> {
  static constexpr uint32_t kTypes = kNumericTypes;
  static constexpr bool kBoolOut = false;
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) return x;
    else return x < C(0) ? ew::wrap_sub(C(0), x) : x;  // |INT_MIN| wraps to INT_MIN, as in numpy
  }
};

struct NegOp : NoAttrs<NegOp> {
  static constexpr uint32_t kTypes = kFloatTypes | kSignedIntTypes;
  static constexpr bool kBoolOut = false;
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_integral_v<C>) return ew::wrap_sub(C(0), x);
    else return -x;
  }
};

struct SignOp : NoAttrs<SignOp> {
  static constexpr uint32_t kTypes = kNumericTypes;
  static constexpr bool kBoolOut = false;
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      if (std::isnan(x)) return x;
    return static_cast<C>((C(0) < x) - (x < C(0)));
  }
};

struct ReluOp : NoAttrs<ReluOp> {
  // Integer types joined in opset 14; accepting them at 13 costs nothing.
  static constexpr uint32_t kTypes = kFloatTypes | kSignedIntTypes;
  static constexpr bool kBoolOut = false;
  template <typename C>
  C operator()(C x) const {
    return x < C(0) ? C(0) : x;  // NaN stays NaN, as max(0, x) in numpy
  }
  std::pair<vec::Unary, vec::Params> vec() const { return {vec::Unary::kRelu, {}}; }
};

struct LeakyReluOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  static constexpr bool kBoolOut = false;
  float alpha = 0.01f;
  static StatusOr<LeakyReluOp> make(const KernelArgs&, AttrReader& a) {
    LeakyReluOp op;
    KILN_ASSIGN_OR_RETURN(op.alpha, a.get_float("alpha", 0.01f));
    return op;
  }
  template <typename C>
  C operator()(C x) const {
    return x >= C(0) ? x : C(alpha) * x;
  }
  std::pair<vec::Unary, vec::Params> vec() const { return {vec::Unary::kLeakyRelu, {alpha, 0.0f}}; }
};

struct EluOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  static constexpr bool kBoolOut = false;
  float alpha = 1.0f;
  static StatusOr<EluOp> make(const KernelArgs&, AttrReader& a) {
    EluOp op;
    KILN_ASSIGN_OR_RETURN(op.alpha, a.get_float("alpha", 1.0f));
    return op;
  }
  template <typename C>
  C operator()(C x) const {
    return x >= C(0) ? x : C(alpha) * std::expm1(x);
  }
};

struct SeluOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  static constexpr bool kBoolOut = false;
  float alpha = 1.67326319217681884765625f, gamma = 1.05070102214813232421875f;
  static StatusOr<SeluOp> make(const KernelArgs&, AttrReader& a) {
    SeluOp op;
    KILN_ASSIGN_OR_RETURN(op.alpha, a.get_float("alpha", op.alpha));
    KILN_ASSIGN_OR_RETURN(op.gamma, a.get_float("gamma", op.gamma));
    return op;
  }
  template <typename C>
  C operator()(C x) const {
    return C(gamma) * (x > C(0) ? x : C(alpha) * std::expm1(x));
  }
};

struct CeluOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  static constexpr bool kBoolOut = false;
  float alpha = 1.0f;
  static StatusOr<CeluOp> make(const KernelArgs&, AttrReader& a) {
    CeluOp op;
    KILN_ASSIGN_OR_RETURN(op.alpha, a.get_float("alpha", 1.0f));
    if (op.alpha == 0.0f) return InvalidArgument("attribute 'alpha' must be non-zero");
    return op;
  }
  template <typename C>
  C operator()(C x) const {
    return x > C(0) ? x : C(alpha) * std::expm1(x / C(alpha));
  }
};

struct HardSigmoidOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  static constexpr bool kBoolOut = false;
  float alpha = 0.2f, beta = 0.5f;
  static StatusOr<HardSigmoidOp> make(const KernelArgs&, AttrReader& a) {
    HardSigmoidOp op;
    KILN_ASSIGN_OR_RETURN(op.alpha, a.get_float("alpha", 0.2f));
    KILN_ASSIGN_OR_RETURN(op.beta, a.get_float("beta", 0.5f));
    return op;
  }
  template <typename C>
  C operator()(C x) const {
    return std::max(C(0), std::min(C(1), C(alpha) * x + C(beta)));
  }
  std::pair<vec::Unary, vec::Params> vec() const { return {vec::Unary::kHardSigmoid, {alpha, beta}}; }
};

struct ThresholdedReluOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  static constexpr bool kBoolOut = false;
  float alpha = 1.0f;
  static StatusOr<ThresholdedReluOp> make(const KernelArgs&, AttrReader& a) {
    ThresholdedReluOp op;
    KILN_ASSIGN_OR_RETURN(op.alpha, a.get_float("alpha", 1.0f));
    return op;
  }
  template <typename C>
  C operator()(C x) const {
    return x > C(alpha) ? x : C(0);
  }
};

struct ShrinkOp {
  static constexpr uint32_t kTypes = kNumericTypes;
  static constexpr bool kBoolOut = false;
  float bias = 0.0f, lambd = 0.5f;
  static StatusOr<ShrinkOp> make(const KernelArgs&, AttrReader& a) {
    ShrinkOp op;
    KILN_ASSIGN_OR_RETURN(op.bias, a.get_float("bias", 0.0f));
    KILN_ASSIGN_OR_RETURN(op.lambd, a.get_float("lambd", 0.5f));
    return op;
  }
  // Integer inputs compare and shift in double, then convert back (ONNX allows any numeric type).
  template <typename C>
  C operator()(C x) const {
    using W = std::conditional_t<std::is_floating_point_v<C>, C, double>;
    const W v = static_cast<W>(x);
    if (v < -W(lambd)) return static_cast<C>(v + W(bias));
    if (v > W(lambd)) return static_cast<C>(v - W(bias));
    return C(0);
  }
};

struct IsNaNOp : NoAttrs<IsNaNOp> {
  static constexpr uint32_t kTypes = kFloatTypes;
  static constexpr bool kBoolOut = true;
  template <typename C>
  bool operator()(C x) const {
    return std::isnan(x);
  }
};

struct IsInfOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  static constexpr bool kBoolOut = true;
  bool negative = true, positive = true;
  static StatusOr<IsInfOp> make(const KernelArgs&, AttrReader& a) {
    IsInfOp op;
    KILN_ASSIGN_OR_RETURN(int64_t neg, a.get_int("detect_negative", 1));
    KILN_ASSIGN_OR_RETURN(int64_t pos, a.get_int("detect_positive", 1));
    op.negative = neg != 0;
    op.positive = pos != 0;
    return op;
  }
  template <typename C>
  bool operator()(C x) const {
    return std::isinf(x) && (x > C(0) ? positive : negative);
  }
};

struct NotOp : NoAttrs<NotOp> {
  static constexpr uint32_t kTypes = kBoolType;
  static constexpr bool kBoolOut = true;
  bool operator()(bool x) const { return !x; }
};

}  // namespace

void register_elementwise_unary_kernels(KernelRegistry& r) {
  add_unary<AbsOp>(r, "Abs");
  add_unary<NegOp>(r, "Neg");
  add_unary<ExpOp>(r, "Exp");
  add_unary<LogOp>(r, "Log");
  add_unary<SqrtOp>(r, "Sqrt");
  add_unary<ReciprocalOp>(r, "Reciprocal");
  add_unary<SinOp>(r, "Sin");
  add_unary<CosOp>(r, "Cos");
  add_unary<TanOp>(r, "Tan");
  add_unary<AsinOp>(r, "Asin");
  add_unary<AcosOp>(r, "Acos");
  add_unary<AtanOp>(r, "Atan");
  add_unary<SinhOp>(r, "Sinh");
  add_unary<CoshOp>(r, "Cosh");
  add_unary<AsinhOp>(r, "Asinh");
  add_unary<AcoshOp>(r, "Acosh");
  add_unary<AtanhOp>(r, "Atanh");
  add_unary<CeilOp>(r, "Ceil");
  add_unary<FloorOp>(r, "Floor");
  add_unary<RoundOp>(r, "Round");
  add_unary<SignOp>(r, "Sign");
  add_unary<ErfOp>(r, "Erf");
  add_unary<IsNaNOp>(r, "IsNaN");
  add_unary<IsInfOp>(r, "IsInf");
  add_unary<NotOp>(r, "Not");
  add_unary<ReluOp>(r, "Relu");
  add_unary<LeakyReluOp>(r, "LeakyRelu");
  add_unary<EluOp>(r, "Elu");
  add_unary<SeluOp>(r, "Selu");
  add_unary<CeluOp>(r, "Celu");
  add_unary<SigmoidOp>(r, "Sigmoid");
  add_unary<HardSigmoidOp>(r, "HardSigmoid");
  add_unary<HardSwishOp>(r, "HardSwish");
  add_unary<SoftplusOp>(r, "Softplus");
  add_unary<SoftsignOp>(r, "Softsign");
  add_unary<TanhOp>(r, "Tanh");
  add_unary<ThresholdedReluOp>(r, "ThresholdedRelu");
  add_unary<ShrinkOp>(r, "Shrink");
}

}  // namespace kiln
