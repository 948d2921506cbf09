// ONNX's quantization ops, reference kernels: QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv. Quantized values
// are int8 or uint8 with a scale and a zero point (per tensor, or per slice of one axis), rounding
// half to even and saturating as the ONNX spec says. The integer products subtract the zero points
// and run on the reference MatMul (int32) and Conv (float64, exact for these sums) kernels; the
// requantizing ops scale the exact integer result in double.
//
// The int8 fast path of QDQ models is not here: builder/passes/qdq_matmul_fusion.cpp turns their
// quantized matmuls into FusedMatMul steps on the int8 kernel (fused_matmul_int8.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/kernels/families.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/nn_common.h"

namespace kiln {
namespace {

bool is_q8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

double load(const TensorView& v, int64_t i) {
  switch (v.dtype) {
    case DType::kInt8: return v.as<const int8_t>()[i];
    case DType::kUInt8: return v.as<const uint8_t>()[i];
    case DType::kInt32: return v.as<const int32_t>()[i];
    case DType::kFloat32: return v.as<const float>()[i];
    case DType::kFloat64: return v.as<const double>()[i];
    default: return 0;
  }
}

// round half to even, then saturate to the quantized type's range.
double saturate_round(double v, DType to) {
  v = std::nearbyint(v);
  const double lo = to == DType::kUInt8 ? 0 : -128, hi = to == DType::kUInt8 ? 255 : 127;
  return std::clamp(v, lo, hi);
}

void store_q(const TensorView& v, int64_t i, double q) {
  if (v.dtype == DType::kUInt8) v.as<uint8_t>()[i] = static_cast<uint8_t>(q);
  else v.as<int8_t>()[i] = static_cast<int8_t>(q);
}

// A scale or zero point: one value for the tensor, or one per index of `axis` of `x` (1-D).
// Returns for element i of x (shape `xs`) the index into the parameter.
struct PerAxis {
  int64_t count = 1, inner = 1;  // parameter length, elements per step of the axis
  int64_t index(int64_t i) const { return count == 1 ? 0 : (i / inner) % count; }
};
StatusOr<PerAxis> per_axis(const TensorView& p, const Shape& xs, int64_t axis, const char* what) {
  PerAxis pa;
  if (p.shape.numel() == 1 && p.shape.rank() <= 1) return pa;
  if (p.shape.rank() != 1) return InvalidArgument(std::string(what) + " must be a scalar or 1-D, got shape " + p.shape.str());
  const int r = xs.rank();
  if (axis < -r || axis >= r) return InvalidArgument("attribute 'axis' " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
  if (axis < 0) axis += r;
  if (p.shape[0] != xs[static_cast<int>(axis)])
    return InvalidArgument(std::string(what) + " has " + std::to_string(p.shape[0]) + " values, input 0 dim " + std::to_string(axis) +
                           " is " + std::to_string(xs[static_cast<int>(axis)]));
  pa.count = p.shape[0];
  pa.inner = xs.numel(static_cast<int>(axis) + 1, r);
  return pa;
}

class QuantizeLinearKernel final : public Kernel {
 public:
  explicit QuantizeLinearKernel(int64_t axis) : axis_(axis) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 2, 3));
    if (in[0].dtype != DType::kFloat32 && in[0].dtype != DType::kInt32)
      return Unimplemented("input 0 dtype " + dtype_name(in[0].dtype) + " is not supported (float32, int32)");
    if (in[1].dtype != DType::kFloat32) return InvalidArgument("input 1 (y_scale) must be float32, got " + dtype_name(in[1].dtype));
    const DType to = in.size() > 2 && in[2].present() ? in[2].dtype : DType::kUInt8;
    if (!is_q8(to)) return Unimplemented("input 2 (y_zero_point) dtype " + dtype_name(to) + " is not supported (int8, uint8)");
    out[0] = TensorDesc{to, in[0].shape};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const bool has_zp = in.size() > 2 && in[2].present();
    KILN_ASSIGN_OR_RETURN(PerAxis ps, per_axis(in[1], in[0].shape, axis_, "input 1 (y_scale)"));
    PerAxis pz;
    if (has_zp) {
      KILN_ASSIGN_OR_RETURN(pz, per_axis(in[2], in[0].shape, axis_, "input 2 (y_zero_point)"));
    }
    for (int64_t i = 0; i < in[0].numel(); ++i) {
      const double scale = in[1].as<const float>()[ps.index(i)];
      const double zp = has_zp ? load(in[2], pz.index(i)) : 0;
      // As the spec: x / scale rounded half to even, in float (the test data's arithmetic).
      const float q = static_cast<float>(load(in[0], i)) / static_cast<float>(scale);
      store_q(out[0], i, saturate_round(std::nearbyint(q) + zp, out[0].dtype));
    }
    return Status::Ok();
  }

 private:
  int64_t axis_;
};

class DequantizeLinearKernel final : public Kernel {
 public:
  explicit DequantizeLinearKernel(int64_t axis) : axis_(axis) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 2, 3));
    if (!is_q8(in[0].dtype) && in[0].dtype != DType::kInt32)
      return Unimplemented("input 0 dtype " + dtype_name(in[0].dtype) + " is not supported (int8, uint8, int32)");
    if (in[1].dtype != DType::kFloat32) return InvalidArgument("input 1 (x_scale) must be float32, got " + dtype_name(in[1].dtype));
    if (in.size() > 2 && in[2].present() && in[2].dtype != in[0].dtype)
      return InvalidArgument("input 2 (x_zero_point) dtype " + dtype_name(in[2].dtype) + " differs from input 0's " + dtype_name(in[0].dtype));
    out[0] = TensorDesc{DType::kFloat32, in[0].shape};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const bool has_zp = in.size() > 2 && in[2].present();
    KILN_ASSIGN_OR_RETURN(PerAxis ps, per_axis(in[1], in[0].shape, axis_, "input 1 (x_scale)"));
    PerAxis pz;
    if (has_zp) {
      KILN_ASSIGN_OR_RETURN(pz, per_axis(in[2], in[0].shape, axis_, "input 2 (x_zero_point)"));
    }
    for (int64_t i = 0; i < in[0].numel(); ++i) {
      const float zp = has_zp ? static_cast<float>(load(in[2], pz.index(i))) : 0.0f;
      out[0].as<float>()[i] = (static_cast<float>(load(in[0], i)) - zp) * in[1].as<const float>()[ps.index(i)];
    }
    return Status::Ok();
  }

 private:
  int64_t axis_;
};

class DynamicQuantizeLinearKernel final : public Kernel {
 public:
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
    if (in[0].dtype != DType::kFloat32) return Unimplemented("input 0 dtype " + dtype_name(in[0].dtype) + " is not supported (float32)");
    if (out.size() != 3) return InvalidArgument("DynamicQuantizeLinear has 3 outputs, got " + std::to_string(out.size()));
    out[0] = TensorDesc{DType::kUInt8, in[0].shape};
    out[1] = TensorDesc{DType::kFloat32, Shape{}};
    out[2] = TensorDesc{DType::kUInt8, Shape{}};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const float* x = in[0].as<const float>();
    const int64_t n = in[0].numel();
    float lo = 0, hi = 0;  // the range always includes 0
    for (int64_t i = 0; i < n; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    const float scale = (hi - lo) / 255.0f;
    const double zp = scale > 0 ? saturate_round(0.0 - lo / scale, DType::kUInt8) : 0.0;
    out[1].as<float>()[0] = scale;
    out[2].as<uint8_t>()[0] = static_cast<uint8_t>(zp);
    for (int64_t i = 0; i < n; ++i)
      out[0].as<uint8_t>()[i] = static_cast<uint8_t>(scale > 0 ? saturate_round(std::nearbyint(x[i] / scale) + zp, DType::kUInt8) : zp);
    return Status::Ok();
  }
};

// Integer products: input 0 / 1 minus their zero points, as `ct` tensors, through `inner` (the
// reference MatMul in int32 or Conv in float64); then `finish` turns the exact product into the
// output. `zp_axis` says how a 1-D zero point lies along the operand: MatMulInteger's per row of A
// (its second-to-last dim) and per column of B (its last), ConvInteger's per output channel of W.
class IntegerProductKernel : public Kernel {
 public:
  struct Operand {
    int data, zero_point;  // input indices (-1: none)
    int zp_axis;           // dim of the operand a 1-D zero point runs along; < 0 from the end
  };
  IntegerProductKernel(std::unique_ptr<Kernel> inner, DType ct, Operand a, Operand b)
      : inner_(std::move(inner)), ct_(ct), a_(a), b_(b) {}

  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    (void)out;
    operands_[0] = Tensor::zeros(ct_, in[a_.data].shape);
    operands_[1] = Tensor::zeros(ct_, in[b_.data].shape);
    TensorDesc d;
    const TensorView ops[2] = {operands_[0].view(), operands_[1].view()};
    KILN_RETURN_IF_ERROR(inner_->infer(ops, std::span<TensorDesc>(&d, 1)));
    product_ = Tensor::zeros(d.dtype, d.shape);
    const TensorView pv = product_.view();
    return inner_->prepare(ops, std::span<const TensorView>(&pv, 1));
  }

 protected:
  Status infer_product(std::span<const TensorView> in, TensorDesc* product) {
    for (const Operand& o : {a_, b_}) {
      if (!is_q8(in[o.data].dtype)) return Unimplemented("input " + std::to_string(o.data) + " dtype " + dtype_name(in[o.data].dtype) + " is not supported (int8, uint8)");
      if (o.zero_point >= 0 && static_cast<int>(in.size()) > o.zero_point && in[o.zero_point].present() &&
          in[o.zero_point].dtype != in[o.data].dtype)
        return InvalidArgument("input " + std::to_string(o.zero_point) + " (zero point) dtype " + dtype_name(in[o.zero_point].dtype) +
                               " differs from input " + std::to_string(o.data) + "'s " + dtype_name(in[o.data].dtype));
    }
    std::vector<TensorView> ops{TensorView{nullptr, ct_, in[a_.data].shape}, TensorView{nullptr, ct_, in[b_.data].shape}};
    return inner_->infer(ops, std::span<TensorDesc>(product, 1));
  }

  // Fills the operands, runs the inner kernel; product_ then holds the exact integer product.
  Status compute(std::span<const TensorView> in) {
    for (int k = 0; k < 2; ++k) {
      const Operand& o = k ? b_ : a_;
      const TensorView& x = in[o.data];
      const bool has_zp = o.zero_point >= 0 && static_cast<int>(in.size()) > o.zero_point && in[o.zero_point].present();
      PerAxis pz;
      if (has_zp) {
        const int axis = o.zp_axis < 0 ? x.shape.rank() + o.zp_axis : o.zp_axis;
        KILN_ASSIGN_OR_RETURN(pz, per_axis(in[o.zero_point], x.shape, axis, "zero point"));
      }
      const TensorView& dst = operands_[k].view();
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double v = load(x, i) - (has_zp ? load(in[o.zero_point], pz.index(i)) : 0.0);
        if (ct_ == DType::kInt32) dst.as<int32_t>()[i] = static_cast<int32_t>(v);
        else dst.as<double>()[i] = v;
      }
    }
    const TensorView ops[2] = {operands_[0].view(), operands_[1].view()};
    const TensorView pv = product_.view();
    return inner_->run(ops, std::span<const TensorView>(&pv, 1));
  }

  std::unique_ptr<Kernel> inner_;
  DType ct_;
  Operand a_, b_;
  Tensor operands_[2], product_;
};

// MatMulInteger / ConvInteger: the int32 product itself.
class IntegerOutputKernel final : public IntegerProductKernel {
 public:
  using IntegerProductKernel::IntegerProductKernel;
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 2, 4));
    TensorDesc p;
    KILN_RETURN_IF_ERROR(infer_product(in, &p));
    out[0] = TensorDesc{DType::kInt32, p.shape};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_RETURN_IF_ERROR(compute(in));
    for (int64_t i = 0; i < out[0].numel(); ++i) out[0].as<int32_t>()[i] = static_cast<int32_t>(load(product_.view(), i));
    return Status::Ok();
  }
};

// QLinearMatMul / QLinearConv: the product (plus QLinearConv's int32 bias) requantized:
// saturate(round(product * a_scale * b_scale[n] / y_scale) + y_zero_point). Inputs: a, a_scale,
// a_zp, b, b_scale, b_zp, y_scale, y_zp[, bias]. b_scale (and b_zp) may run along `b_axis`:
// QLinearConv's output channels (dim 0 of W, dim 1 of Y), QLinearMatMul's columns.
class QLinearKernel final : public IntegerProductKernel {
 public:
  QLinearKernel(std::unique_ptr<Kernel> inner, DType ct, Operand a, Operand b, int y_axis)
      : IntegerProductKernel(std::move(inner), ct, a, b), y_axis_(y_axis) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 8, 9));
    for (int i : {1, 4, 6})
      if (in[i].dtype != DType::kFloat32) return InvalidArgument("input " + std::to_string(i) + " (scale) must be float32, got " + dtype_name(in[i].dtype));
    if (!is_q8(in[7].dtype)) return Unimplemented("input 7 (y_zero_point) dtype " + dtype_name(in[7].dtype) + " is not supported (int8, uint8)");
    if (in.size() > 8 && in[8].present() && in[8].dtype != DType::kInt32)
      return InvalidArgument("input 8 (bias) must be int32, got " + dtype_name(in[8].dtype));
    TensorDesc p;
    KILN_RETURN_IF_ERROR(infer_product(in, &p));
    out[0] = TensorDesc{in[7].dtype, p.shape};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_RETURN_IF_ERROR(compute(in));
    const Shape& ys = out[0].shape;
    const int axis = y_axis_ < 0 ? ys.rank() + y_axis_ : y_axis_;
    KILN_ASSIGN_OR_RETURN(PerAxis pb, per_axis(in[4], ys, axis, "input 4 (b_scale)"));
    const bool has_bias = in.size() > 8 && in[8].present();
    PerAxis pbias;
    if (has_bias) {
      KILN_ASSIGN_OR_RETURN(pbias, per_axis(in[8], ys, axis, "input 8 (bias)"));
    }
    const double a_scale = in[1].as<const float>()[0], y_scale = in[6].as<const float>()[0], y_zp = load(in[7], 0);
    for (int64_t i = 0; i < out[0].numel(); ++i) {
      double acc = load(product_.view(), i);
      if (has_bias) acc += load(in[8], pbias.index(i));
      // The multiplier in float, as the spec computes it; the rounding of the product in double.
      const float m = static_cast<float>(a_scale) * in[4].as<const float>()[pb.index(i)] / static_cast<float>(y_scale);
      store_q(out[0], i, saturate_round(std::nearbyint(acc * m) + y_zp, out[0].dtype));
    }
    return Status::Ok();
  }

 private:
  int y_axis_;
};

StatusOr<int64_t> read_axis(const KernelArgs& args, AttrReader& attrs) {
  (void)args;
  return attrs.get_int("axis", 1);
}

// The reference Conv on the node's attributes (auto_pad, dilations, group, kernel_shape, pads, strides).
StatusOr<std::unique_ptr<Kernel>> inner_conv(const KernelArgs& args, AttrReader& attrs) {
  KernelArgs c = args;
  c.op_type = "Conv";
  c.num_inputs = 2;
  return make_reference_conv(c, attrs);
}

StatusOr<std::unique_ptr<Kernel>> inner_matmul(const KernelArgs& args) {
  KernelArgs m = args;
  m.op_type = "MatMul";
  m.num_inputs = 2;
  AttrMap none;
  AttrReader r(none);
  return make_reference_matmul(m, r);
}

}  // namespace

void register_quantize_kernels(KernelRegistry& r) {
  using Operand = IntegerProductKernel::Operand;
  r.add({"QuantizeLinear", "reference", 0, [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(int64_t axis, read_axis(args, attrs));
           if (args.opset >= 19) attrs.ignore("saturate");  // float8 only
           return std::unique_ptr<Kernel>(std::make_unique<QuantizeLinearKernel>(axis));
         }});
  r.add({"DequantizeLinear", "reference", 0, [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(int64_t axis, read_axis(args, attrs));
           return std::unique_ptr<Kernel>(std::make_unique<DequantizeLinearKernel>(axis));
         }});
  r.add({"DynamicQuantizeLinear", "reference", 0, [](const KernelArgs&, AttrReader&) -> StatusOr<std::unique_ptr<Kernel>> {
           return std::unique_ptr<Kernel>(std::make_unique<DynamicQuantizeLinearKernel>());
         }});
  r.add({"MatMulInteger", "reference", 0, [](const KernelArgs& args, AttrReader&) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(auto mm, inner_matmul(args));
           return std::unique_ptr<Kernel>(
               std::make_unique<IntegerOutputKernel>(std::move(mm), DType::kInt32, Operand{0, 2, -2}, Operand{1, 3, -1}));
         }});
  r.add({"ConvInteger", "reference", 0, [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(auto conv, inner_conv(args, attrs));
           return std::unique_ptr<Kernel>(
               std::make_unique<IntegerOutputKernel>(std::move(conv), DType::kFloat64, Operand{0, 2, 1}, Operand{1, 3, 0}));
         }});
  r.add({"QLinearMatMul", "reference", 0, [](const KernelArgs& args, AttrReader&) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(auto mm, inner_matmul(args));
           return std::unique_ptr<Kernel>(
               std::make_unique<QLinearKernel>(std::move(mm), DType::kInt32, Operand{0, 2, -2}, Operand{3, 5, -1}, -1));
         }});
  r.add({"QLinearConv", "reference", 0, [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(auto conv, inner_conv(args, attrs));
           return std::unique_ptr<Kernel>(
               std::make_unique<QLinearKernel>(std::move(conv), DType::kFloat64, Operand{0, 2, 1}, Operand{3, 5, 0}, 1));
         }});
}

}  // namespace kiln
