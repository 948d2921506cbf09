// FusedConv impl "nchw_direct": 1x1 convolutions of values that stay NCHW, without leaving NCHW.
//
// conv_channels_last keeps a value in oneDNN's blocked layout only when its channels are whole
// blocks of 8; ShuffleNet-V2's 58- and 116-channel branches (and the tensors its channel shuffle
// and split move) stay NCHW, and oneDNN then reorders each convolution's input into padded
// nChw8c and its output back: three copies around a 1x1 convolution of a few dozen microseconds.
// Here a 1x1, stride-1, unpadded, ungrouped convolution is per image one row-major SGEMM,
// Y [OC, HW] = W [OC, C] X [C, HW] (oneDNN's dnnl_sgemm, on OpenMP like a primitive), then bias,
// residual and activation per output row (kiln's pool).
//
// Anything else (other layouts, kernels, strides, pads, groups, 1-D/3-D, non-float32) runs the
// reference and reports "reference", so tactic selection sees the impl as unavailable there. It
// ranks below "onednn" and "im2col_panel": tactic selection picks it where it times faster.
// (A depthwise path here, plane by plane from a zero-padded copy, timed 1.5-3x slower than
// oneDNN's jit_dw with its reorders at ShuffleNet's shapes, so it is not one.)
#include <oneapi/dnnl/dnnl.h>

#include <mutex>
#include <string>

#include "runtime/kernels/fused_conv_common.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/vec_kernels.h"
#include "runtime/openmp_team.h"
#include "runtime/thread_pool.h"

namespace kiln {

namespace {

bool activation_op(ConvAct act, vec::Unary* op) {
  switch (act) {
    case ConvAct::kNone: return false;
    case ConvAct::kRelu: *op = vec::Unary::kRelu; return true;
    case ConvAct::kSilu: *op = vec::Unary::kSilu; return true;
    case ConvAct::kSigmoid: *op = vec::Unary::kSigmoid; return true;
    case ConvAct::kHardSwish: *op = vec::Unary::kHardSwish; return true;
    case ConvAct::kClip: *op = vec::Unary::kClip; return true;
    case ConvAct::kGeluErf: *op = vec::Unary::kGeluErf; return true;
    case ConvAct::kGeluTanh: *op = vec::Unary::kGeluTanh; return true;
  }
  return false;
}

// oneDNN generates its SGEMM kernels on the process's first call (~14 ms here): done at prepare
// time, once, so no run pays it and tactic selection does not take it for the impl's speed.
void warm_up_sgemm() {
  static std::once_flag once;
  std::call_once(once, [] {
    float a[64] = {}, b[64] = {}, c[64] = {};
    const OpenmpRegionScope team;
    dnnl_sgemm('N', 'N', 8, 8, 8, 1.0f, a, 8, b, 8, 0.0f, c, 8);
  });
}

class NchwConvKernel final : public Kernel {
 public:
  NchwConvKernel(std::unique_ptr<Kernel> ref, WindowAttrs w, int64_t group, FusedSpec spec)
      : ref_(std::move(ref)), w_(std::move(w)), group_(group), spec_(spec) {}
  // "reference" once prepare() handed the current shapes to the reference kernel.
  const char* impl_name() const override { return prepared_ && mode_ == Mode::kReference ? "reference" : "nchw_direct"; }
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override { return ref_->infer(in, out); }

  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    mode_ = Mode::kReference;
    prepared_ = true;
    const Shape& xs = in[0].shape;
    const Shape& ws = in[1].shape;
    has_bias_ = in.size() > 2 && in[2].present();
    has_res_ = in.size() > 3 && in[3].present();
    const bool nchw = spec_.x == ConvLayout::kNchw && spec_.y == ConvLayout::kNchw && (!has_res_ || spec_.res == ConvLayout::kNchw);
    const bool f32 = in[0].dtype == DType::kFloat32 && in[1].dtype == DType::kFloat32 && (!has_bias_ || in[2].dtype == DType::kFloat32) &&
                     (!has_res_ || in[3].dtype == DType::kFloat32);
    if (!nchw || !f32 || xs.rank() != 4 || ws.rank() != 4 || xs.numel() == 0 || out[0].numel() == 0) return ref_->prepare(in, out);
    KILN_ASSIGN_OR_RETURN(g_, forward_window_geometry(w_, xs.data() + 2, ws.data() + 2, 2, false));
    if (g_.dil[0] != 1 || g_.dil[1] != 1) return ref_->prepare(in, out);
    batch_ = xs[0];
    channels_ = xs[1];
    out_channels_ = ws[0];
    const bool pointwise = group_ == 1 && ws[1] == channels_ && ws[2] == 1 && ws[3] == 1 && g_.stride[0] == 1 && g_.stride[1] == 1 &&
                           g_.pad_begin[0] == 0 && g_.pad_begin[1] == 0 && g_.out[0] == g_.in[0] && g_.out[1] == g_.in[1];
    if (!pointwise) return ref_->prepare(in, out);
    mode_ = Mode::kPointwise;
    has_act_ = activation_op(spec_.act, &act_op_);
    warm_up_sgemm();
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (mode_ == Mode::kReference) return ref_->run(in, out);
    const float* bias = has_bias_ ? in[2].as<const float>() : nullptr;
    const float* res = has_res_ ? in[3].as<const float>() : nullptr;
    return run_pointwise(in[0].as<const float>(), in[1].as<const float>(), bias, res, out[0].as<float>());
  }

 private:
  enum class Mode { kReference, kPointwise };

  // One output row of `n` values: + bias, + residual, activation.
  void epilogue_row(float* y, const float* res, int64_t n, const float* bias) const {
    if (bias) vec::binary(vec::Binary::kAdd)(y, 1, bias, 0, y, n);
    if (res) vec::binary(vec::Binary::kAdd)(y, 1, res, 1, y, n);
    if (has_act_) vec::unary(act_op_)(y, y, n, vec::Params{spec_.alpha, spec_.beta});
  }

  Status run_pointwise(const float* x, const float* w, const float* bias, const float* res, float* y) const {
    const int64_t C = channels_, OC = out_channels_, HW = g_.in[0] * g_.in[1];
    for (int64_t n = 0; n < batch_; ++n) {
      const OpenmpRegionScope team;  // dnnl_sgemm runs on OpenMP: the team is sized as for a primitive
      const dnnl_status_t st = dnnl_sgemm('N', 'N', OC, HW, C, 1.0f, w, C, x + n * C * HW, HW, 0.0f, y + n * OC * HW, HW);
      if (st != dnnl_success) return Internal("nchw_direct: dnnl_sgemm failed with status " + std::to_string(static_cast<int>(st)));
    }
    if (!bias && !res && !has_act_) return Status::Ok();
    const LoopCost cost{12.0 * static_cast<double>(HW), 3.0 * static_cast<double>(HW)};
    ThreadPool::global().parallel_for(batch_ * OC, cost, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) epilogue_row(y + r * HW, res ? res + r * HW : nullptr, HW, bias ? bias + r % OC : nullptr);
    });
    return Status::Ok();
  }

  std::unique_ptr<Kernel> ref_;
  WindowAttrs w_;
  int64_t group_;
  FusedSpec spec_;
  Mode mode_ = Mode::kReference;
  bool prepared_ = false, has_bias_ = false, has_res_ = false, has_act_ = false;
  vec::Unary act_op_ = vec::Unary::kRelu;
  WindowGeom g_{};
  int64_t batch_ = 0, channels_ = 0, out_channels_ = 0;
};

}  // namespace

void register_nchw_conv_kernels(KernelRegistry& r) {
  // Below "onednn" (10), Winograd (8) and "im2col_panel" (7): tactic selection picks it where it
  // times faster.
  r.add_kiln_op({"FusedConv", "nchw_direct", 6,
                 [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
                   FusedSpec spec;
                   KILN_ASSIGN_OR_RETURN(auto ref, make_reference_fused_conv(args, attrs, &spec));
                   WindowAttrs w;
                   KILN_RETURN_IF_ERROR(read_window_attrs(attrs, w, true));
                   KILN_ASSIGN_OR_RETURN(int64_t group, attrs.get_int("group", 1));
                   return std::unique_ptr<Kernel>(std::make_unique<NchwConvKernel>(std::move(ref), std::move(w), group, spec));
                 },
                 0});
}

}  // namespace kiln
