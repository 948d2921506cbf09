// FusedConv's attributes, its tensor layouts (NCHW, NHWC, nChw8c, nChw16c: see fused_conv_common.h) and its
// reference kernel, which every oneDNN FusedConv delegates validation, shapes and uncovered cases to.
#include <algorithm>
#include <cmath>
#include <utility>
#include <span>
#include <vector>

#include "runtime/kernels/fused_conv_common.h"

namespace kiln {

namespace {

StatusOr<ConvAct> parse_conv_activation(const std::string& s) {
  static const std::pair<const char*, ConvAct> kNames[] = {
      {"none", ConvAct::kNone},           {"relu", ConvAct::kRelu}, {"silu", ConvAct::kSilu},
      {"sigmoid", ConvAct::kSigmoid},     {"hardswish", ConvAct::kHardSwish}, {"clip", ConvAct::kClip},
      {"gelu_erf", ConvAct::kGeluErf},    {"gelu_tanh", ConvAct::kGeluTanh}};
  for (const auto& [name, act] : kNames)
    if (s == name) return act;
  return InvalidArgument("attribute 'activation' must be none, relu, silu, sigmoid, hardswish, clip, gelu_erf or gelu_tanh, got '" +
                         s + "'");
}

// The epilogue activation on one value, in double for the reference: the formulas of the ONNX ops
// the pass fused.
double conv_activation(ConvAct act, double v, double alpha, double beta) {
  switch (act) {
    case ConvAct::kNone: return v;
    case ConvAct::kRelu: return v < 0 ? 0 : v;
    case ConvAct::kSilu: return v / (1 + std::exp(-v));
    case ConvAct::kSigmoid: return 1 / (1 + std::exp(-v));
    case ConvAct::kHardSwish: return v * std::max(0.0, std::min(1.0, v / 6 + 0.5));
    case ConvAct::kClip: return std::min(beta, std::max(alpha, v));
    case ConvAct::kGeluErf: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    case ConvAct::kGeluTanh: return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  return v;
}

StatusOr<ConvLayout> read_layout(AttrReader& attrs, const char* name) {
  // Declared first: GCC 12 reports the string as maybe-uninitialized when the macro declares it.
  std::string v;
  KILN_ASSIGN_OR_RETURN(v, attrs.get_string(name, "nchw"));
  return parse_conv_layout(v, name);
}

// The span of the inner Conv's inputs (X, W and B when given) of a FusedConv.
std::span<const TensorView> conv_inputs(std::span<const TensorView> in) { return in.subspan(0, std::min<size_t>(in.size(), 3)); }

bool has_residual(std::span<const TensorView> in) { return in.size() > 3 && in[3].present(); }

class FusedConvReference final : public Kernel {
 public:
  FusedConvReference(std::unique_ptr<Kernel> conv, FusedSpec spec) : conv_(std::move(conv)), spec_(spec) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 2, 4));
    KILN_ASSIGN_OR_RETURN(auto views, nchw_views(in));
    KILN_RETURN_IF_ERROR(conv_->infer(conv_inputs(views), out));
    if (has_residual(in) && (views[3].dtype != out[0].dtype || views[3].shape != out[0].shape)) {
      auto want = conv_layout_shape(spec_.res, out[0].shape, "input 3 (residual)");
      return InvalidArgument("input 3 (residual) must be " + dtype_name(out[0].dtype) + " " + (want.ok() ? want->str() : out[0].shape.str()) +
                             " like the convolution's output, got " + dtype_name(in[3].dtype) + " " + in[3].shape.str());
    }
    KILN_ASSIGN_OR_RETURN(out[0].shape, conv_layout_shape(spec_.y, out[0].shape, "output"));
    return Status::Ok();
  }
  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_ASSIGN_OR_RETURN(auto views, nchw_views(in));
    for (Tensor* t : {&x_tmp_, &res_tmp_, &y_tmp_}) *t = Tensor();
    if (spec_.x != ConvLayout::kNchw) {
      KILN_ASSIGN_OR_RETURN(x_tmp_, Tensor::try_zeros(DType::kFloat32, views[0].shape, "FusedConv input"));
    }
    if (spec_.res != ConvLayout::kNchw && has_residual(in)) {
      KILN_ASSIGN_OR_RETURN(res_tmp_, Tensor::try_zeros(DType::kFloat32, views[3].shape, "FusedConv residual"));
    }
    if (spec_.y != ConvLayout::kNchw) {
      KILN_ASSIGN_OR_RETURN(Shape ys, conv_nchw_shape(spec_.y, out[0].shape, "output"));
      KILN_ASSIGN_OR_RETURN(y_tmp_, Tensor::try_zeros(DType::kFloat32, ys, "FusedConv output"));
    }
    const TensorView y = y_tmp_.empty() ? out[0] : y_tmp_.view();
    return conv_->prepare(conv_inputs(with_temps(views)), std::span<const TensorView>(&y, 1));
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_ASSIGN_OR_RETURN(auto views, nchw_views(in));
    if (spec_.x != ConvLayout::kNchw) conv_to_nchw(spec_.x, in[0].as<float>(), x_tmp_.as<float>(), views[0].shape);
    const bool res = has_residual(in);
    if (res && spec_.res != ConvLayout::kNchw) conv_to_nchw(spec_.res, in[3].as<float>(), res_tmp_.as<float>(), views[3].shape);
    views = with_temps(views);
    const TensorView y = y_tmp_.empty() ? out[0] : y_tmp_.view();
    KILN_RETURN_IF_ERROR(conv_->run(conv_inputs(views), std::span<const TensorView>(&y, 1)));
    const int64_t n = y.numel();
    const TensorView* r = res ? &views[3] : nullptr;
    if (y.dtype == DType::kFloat64) epilogue<double>(r, y, n, spec_);
    else epilogue<float>(r, y, n, spec_);
    if (spec_.y != ConvLayout::kNchw) conv_from_nchw(spec_.y, y.as<float>(), out[0].as<float>(), y.shape);
    return Status::Ok();
  }

 private:
  // `in` with X and the residual described as NCHW (shapes only: the data keeps its layout).
  StatusOr<std::vector<TensorView>> nchw_views(std::span<const TensorView> in) const {
    std::vector<TensorView> v(in.begin(), in.end());
    for (int i : {0, 3}) {
      if (i >= static_cast<int>(v.size()) || !v[i].present()) continue;
      const ConvLayout l = i == 0 ? spec_.x : spec_.res;
      if (l == ConvLayout::kNchw) continue;
      if (v[i].dtype != DType::kFloat32)
        return InvalidArgument("input " + std::to_string(i) + " is " + conv_layout_name(l) + ", which needs float32, got " + dtype_name(v[i].dtype));
      KILN_ASSIGN_OR_RETURN(v[i].shape, conv_nchw_shape(l, v[i].shape, "input " + std::to_string(i)));
    }
    return v;
  }
  // NCHW-described views pointing at the NCHW copies.
  std::vector<TensorView> with_temps(std::vector<TensorView> v) const {
    if (!x_tmp_.empty()) v[0] = x_tmp_.view();
    if (!res_tmp_.empty() && v.size() > 3) v[3] = res_tmp_.view();
    return v;
  }
  template <typename T>
  static void epilogue(const TensorView* res, const TensorView& out, int64_t n, const FusedSpec& spec) {
    T* y = out.as<T>();
    const T* r = res ? res->as<T>() : nullptr;
    for (int64_t i = 0; i < n; ++i) {
      T v = y[i];
      if (r) v += r[i];
      y[i] = static_cast<T>(conv_activation(spec.act, v, spec.alpha, spec.beta));
    }
  }

  std::unique_ptr<Kernel> conv_;
  FusedSpec spec_;
  Tensor x_tmp_, res_tmp_, y_tmp_;
};

}  // namespace

Status read_fused_spec(AttrReader& attrs, FusedSpec* spec) {
  KILN_ASSIGN_OR_RETURN(std::string name, attrs.get_string("activation", "none"));
  KILN_ASSIGN_OR_RETURN(spec->act, parse_conv_activation(name));
  KILN_ASSIGN_OR_RETURN(spec->alpha, attrs.get_float("activation_alpha", 0.0f));
  KILN_ASSIGN_OR_RETURN(spec->beta, attrs.get_float("activation_beta", 0.0f));
  KILN_ASSIGN_OR_RETURN(spec->x, read_layout(attrs, "x_layout"));
  KILN_ASSIGN_OR_RETURN(spec->res, read_layout(attrs, "residual_layout"));
  KILN_ASSIGN_OR_RETURN(spec->y, read_layout(attrs, "y_layout"));
  return Status::Ok();
}

StatusOr<ConvLayout> parse_conv_layout(const std::string& v, const std::string& name) {
  if (v == "nchw") return ConvLayout::kNchw;
  if (v == "nhwc") return ConvLayout::kNhwc;
  if (v == "nchw8c") return ConvLayout::kNchw8c;
  if (v == "nchw16c") return ConvLayout::kNchw16c;
  return InvalidArgument("attribute '" + name + "' must be nchw, nhwc, nchw8c or nchw16c, got '" + v + "'");
}

const char* conv_layout_name(ConvLayout l) {
  switch (l) {
    case ConvLayout::kNchw: return "nchw";
    case ConvLayout::kNhwc: return "nhwc";
    case ConvLayout::kNchw8c: return "nchw8c";
    case ConvLayout::kNchw16c: return "nchw16c";
  }
  return "nchw";
}

StatusOr<Shape> conv_nchw_shape(ConvLayout layout, const Shape& s, const std::string& what) {
  const int64_t b = conv_channel_block(layout);
  switch (layout) {
    case ConvLayout::kNchw: return s;
    case ConvLayout::kNhwc:
      if (s.rank() != 4) return InvalidArgument(what + " is nhwc, which needs a 4-D tensor, got " + s.str());
      return Shape{s[0], s[3], s[1], s[2]};
    case ConvLayout::kNchw8c:
    case ConvLayout::kNchw16c:
      if (s.rank() != 5 || s[4] != b)
        return InvalidArgument(what + " is " + conv_layout_name(layout) + ", which needs a 5-D tensor [N, C/" + std::to_string(b) + ", H, W, " +
                               std::to_string(b) + "], got " + s.str());
      return Shape{s[0], s[1] * b, s[2], s[3]};
  }
  return Internal("unknown layout");
}

StatusOr<Shape> conv_layout_shape(ConvLayout layout, const Shape& s, const std::string& what) {
  const int64_t b = conv_channel_block(layout);
  switch (layout) {
    case ConvLayout::kNchw: return s;
    case ConvLayout::kNhwc:
      if (s.rank() != 4) return InvalidArgument(what + " is nhwc, which needs a 2-D convolution, got " + s.str());
      return Shape{s[0], s[2], s[3], s[1]};
    case ConvLayout::kNchw8c:
    case ConvLayout::kNchw16c:
      if (s.rank() != 4 || s[1] % b != 0)
        return InvalidArgument(what + " is " + conv_layout_name(layout) + ", which needs a 2-D convolution with channels divisible by " +
                               std::to_string(b) + ", got " + s.str());
      return Shape{s[0], s[1] / b, s[2], s[3], b};
  }
  return Internal("unknown layout");
}

namespace {

// The offset in `layout` of element (n, c, p) of an NCHW tensor with C channels and HW pixels.
int64_t layout_offset(ConvLayout layout, int64_t n, int64_t c, int64_t p, int64_t C, int64_t HW) {
  if (layout == ConvLayout::kNhwc) return (n * HW + p) * C + c;
  const int64_t b = conv_channel_block(layout);
  if (b == 0) return (n * C + c) * HW + p;
  return ((n * (C / b) + c / b) * HW + p) * b + c % b;
}

}  // namespace

void conv_to_nchw(ConvLayout layout, const float* src, float* dst, const Shape& nchw) {
  const int64_t N = nchw[0], C = nchw[1], HW = nchw[2] * nchw[3];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < HW; ++p) dst[(n * C + c) * HW + p] = src[layout_offset(layout, n, c, p, C, HW)];
}

void conv_from_nchw(ConvLayout layout, const float* src, float* dst, const Shape& nchw) {
  const int64_t N = nchw[0], C = nchw[1], HW = nchw[2] * nchw[3];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < HW; ++p) dst[layout_offset(layout, n, c, p, C, HW)] = src[(n * C + c) * HW + p];
}

StatusOr<std::unique_ptr<Kernel>> make_reference_fused_conv(const KernelArgs& args, AttrReader& attrs, FusedSpec* spec) {
  KILN_RETURN_IF_ERROR(read_fused_spec(attrs, spec));
  KernelArgs conv = args;
  conv.op_type = "Conv";
  conv.num_inputs = std::min(args.num_inputs, 3);
  KILN_ASSIGN_OR_RETURN(auto ref, make_reference_conv(conv, attrs));
  return std::unique_ptr<Kernel>(std::make_unique<FusedConvReference>(std::move(ref), *spec));
}

}  // namespace kiln
