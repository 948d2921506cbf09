// FusedConv in int8 (impl "onednn_int8"; attributes a_scale, and a_unsigned where the input cannot be
// negative, come from calibration and builder/plan/int8_lowering.cpp):
//   Y = act(dequant(q(X) * q(W)) + bias + residual)
// X is quantized per run, per tensor and symmetrically, by a oneDNN reorder into the layout the
// primitive computes in: s8, q(X) = saturate(round(X / a_scale)) with a_scale = threshold / 127; or,
// for an input a ReLU (or a pool of one) produced, u8 with the same threshold over 255 levels,
// x_step = a_scale * 127 / 255. W once, per output channel m: w_scale[m] = max |W[m, ...]| / L,
// q(W) = round(W / w_scale[m]), with L = int8_weight_levels() (127 with VNNI, 63 without). oneDNN's
// x8 x s8 -> s32 convolution applies x_step * w_scale[m] as per-channel output scales, then the
// residual (a sum post-op onto the output), the bias (a per-channel binary add: oneDNN 2.x would
// add its bias argument to the s32 accumulator before the scales) and the activation, writing f32.
// q(W) is packed once into oneDNN's layout and shared by every context, like the f32 weights.
//
// Why u8 where it can: without VNNI (AVX2; AVX-512 before Cascade Lake) oneDNN multiplies u8 x s8
// pairs with vpmaddubsw, whose 16-bit pair sums saturate beyond 2 * 255 * 63. For an s8 input it
// shifts X by +128 into u8, subtracts a compensation per output channel, and halves the weights
// (scale_adjust 0.5) to stay clear of saturation. A non-negative input as u8 has twice the levels
// of s8 (0..255, not 0..127) and skips the shift and the compensation. For s8 inputs the kernel
// hands oneDNN 2 q(W) where it halves them, so both paths compute with the same 7-bit q(W).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "runtime/kernels/fused_conv_common.h"
#include "runtime/kernels/fused_matmul_int8.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/onednn_common.h"
#include "runtime/kernels/packed_weights.h"

namespace kiln {

namespace {

using dnnl::memory;
using tag = memory::format_tag;

tag layout_tag(ConvLayout l) { return onednn_conv_tag(l); }

// Per-output-channel symmetric scales of W [M, R] (R = C/group * kernel size): the largest
// |W[m, :]| maps to `levels`; an all-zero channel gets scale 1 (zeros either way).
std::vector<float> channel_scales(const float* w, int64_t M, int64_t R, int levels) {
  std::vector<float> s(static_cast<size_t>(M), 0.0f);
  for (int64_t m = 0; m < M; ++m) {
    float amax = 0;
    for (int64_t r = 0; r < R; ++r) amax = std::max(amax, std::fabs(w[m * R + r]));
    s[m] = amax > 0 ? amax / static_cast<float>(levels) : 1.0f;
  }
  return s;
}

class OnednnInt8FusedConv final : public OnednnKernel {
 public:
  OnednnInt8FusedConv(std::unique_ptr<Kernel> ref, WindowAttrs w, int64_t group, FusedSpec spec, float a_scale, bool a_unsigned)
      : OnednnKernel(std::move(ref)), w_(std::move(w)), group_(group), spec_(spec), a_scale_(a_scale), unsigned_(a_unsigned) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : "onednn_int8"; }
  // As the float32 kernel: the residual is in the output, or reordered into the blocked buffer,
  // before the output is written.
  bool writes_over_input(size_t i) const override { return i == 3 && !use_ref_ && has_res_ && (copy_res_ || blocked_dst_); }

 protected:
  StatusOr<bool> build(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_ASSIGN_OR_RETURN(const Shape xs, conv_nchw_shape(spec_.x, in[0].shape, "input 0"));
    const Shape& ws = in[1].shape;
    const int n = xs.rank() - 2;
    if (xs.numel() == 0 || out[0].numel() == 0 || ws.numel() == 0) return false;
    if (in[0].dtype != DType::kFloat32 || in[1].dtype != DType::kFloat32 || (n != 1 && n != 2)) return false;
    KILN_ASSIGN_OR_RETURN(WindowGeom g, forward_window_geometry(w_, xs.data() + 2, ws.data() + 2, n, false));
    // 1-D becomes 2-D with a leading unit spatial dim.
    const int h = n == 2 ? 0 : -1, wd = n - 1;
    auto sp = [&](const int64_t* v, int i, int64_t unit) { return i < 0 ? unit : v[i]; };
    const int64_t N = xs[0], C = xs[1], M = ws[0];
    const memory::dims src_d{N, C, sp(g.in, h, 1), g.in[wd]};
    const memory::dims dst_d{N, M, sp(g.out, h, 1), g.out[wd]};
    const memory::dims strides{sp(g.stride, h, 1), g.stride[wd]};
    const memory::dims dil{sp(g.dil, h, 1) - 1, g.dil[wd] - 1};
    const memory::dims pad_l{sp(g.pad_begin, h, 0), g.pad_begin[wd]};
    const memory::dims pad_r{sp(g.pad_end, h, 0), g.pad_end[wd]};
    const int64_t kh = sp(g.k, h, 1), kw = g.k[wd];
    const memory::dims wei_d = group_ == 1 ? memory::dims{M, C, kh, kw} : memory::dims{group_, M / group_, C / group_, kh, kw};
    const auto f32 = memory::data_type::f32, s8 = memory::data_type::s8;
    const auto xdt = unsigned_ ? memory::data_type::u8 : s8;
    const memory::desc src_plain(src_d, f32, layout_tag(spec_.x)), dst_plain(dst_d, f32, layout_tag(spec_.y));
    const memory::desc res_plain(dst_d, f32, layout_tag(spec_.res));
    const memory::desc wei_q_plain(wei_d, s8, group_ == 1 ? tag::oihw : tag::goihw);
    has_bias_ = in.size() > 2 && in[2].present();
    has_res_ = in.size() > 3 && in[3].present();
    const memory::desc bias_md({1, M, 1, 1}, f32, tag::nchw);

    const float* w = in[1].as<const float>();
    const int64_t R = ws.numel() / M;
    const int levels = int8_weight_levels();
    const std::vector<float> w_scale = channel_scales(w, M, R, levels);
    const float x_step = unsigned_ ? a_scale_ * 127.0f / 255.0f : a_scale_;

    // The residual first, as a sum onto the output (some int8 kernels accept the sum only as the
    // first post-op); the addition order differs from the reference's only by float rounding.
    dnnl::post_ops po;
    if (has_res_) po.append_sum(1.0f);
    if (has_bias_) po.append_binary(dnnl::algorithm::binary_add, bias_md);
    switch (spec_.act) {
      case ConvAct::kNone: break;
      case ConvAct::kRelu: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f); break;
      case ConvAct::kSilu: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f); break;
      case ConvAct::kSigmoid: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_logistic, 0.0f, 0.0f); break;
      case ConvAct::kHardSwish: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_hardswish, 0.0f, 0.0f); break;
      case ConvAct::kClip: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, spec_.alpha, spec_.beta); break;
      case ConvAct::kGeluErf: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f); break;
      case ConvAct::kGeluTanh: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f); break;
    }
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_post_ops(po);
    // The scales as if oneDNN kept the weights as given; corrected below where it halves them.
    std::vector<float> out_scale(static_cast<size_t>(M));
    for (int64_t m = 0; m < M; ++m) out_scale[m] = x_step * w_scale[m];
    attr.set_output_scales(1 << 1, out_scale);
    const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                               memory::desc(src_d, xdt, tag::any), memory::desc(wei_d, s8, tag::any), memory::desc(),
                                               memory::desc(dst_d, f32, tag::any), strides, dil, pad_l, pad_r);
    dnnl::convolution_forward::primitive_desc pd(desc, attr, onednn_engine());  // throws: the reference runs it
    const memory::desc wei_md = pd.weights_desc(), src_md = pd.src_desc(), dst_md = pd.dst_desc();
    // oneDNN keeps round(q * adjust) of the weights it is given and scales the result by 1 / adjust:
    // given q / adjust (2 q, within s8 for 7-bit q), it computes with q itself.
    float adjust = 1.0f;
    if (wei_md.data.extra.flags & dnnl_memory_extra_flag_scale_adjust) adjust = wei_md.data.extra.scale_adjust;
    const float wmul = 1.0f / adjust;
    if (adjust != 1.0f) {
      // Halving 8-bit q(W) would lose a bit: such a CPU (none known: oneDNN halves only without
      // VNNI, where the levels are 7-bit) runs the reference instead of a different quantization.
      if (wmul != std::nearbyint(wmul) || levels * wmul > 127.0f) return false;
      for (int64_t m = 0; m < M; ++m) out_scale[m] *= adjust;
      attr.set_output_scales(1 << 1, out_scale);
      pd = dnnl::convolution_forward::primitive_desc(desc, attr, onednn_engine());
      if (pd.weights_desc() != wei_md) return false;
    }

    std::string layout("int8_conv:");
    layout.append(reinterpret_cast<const char*>(w_scale.data()), w_scale.size() * sizeof(float));
    layout.append(reinterpret_cast<const char*>(&wmul), sizeof(wmul));
    layout.append(reinterpret_cast<const char*>(&wei_md.data), sizeof(wei_md.data));
    packed_.reset();
    KILN_ASSIGN_OR_RETURN(packed_, shared_packed_weights(w, in[1].nbytes(), layout, wei_md.get_size(), [&](void* dst) -> Status {
                            std::vector<int8_t> q(static_cast<size_t>(M * R));
                            for (int64_t m = 0; m < M; ++m)
                              for (int64_t r = 0; r < R; ++r)
                                q[m * R + r] = static_cast<int8_t>(
                                    std::clamp(std::lrintf(w[m * R + r] / w_scale[m]) * static_cast<long>(wmul), -128L, 127L));
                            try {
                              dnnl::stream s(onednn_engine());
                              dnnl::memory from(wei_q_plain, onednn_engine(), q.data());
                              dnnl::memory to(wei_md, onednn_engine(), dst);
                              dnnl::reorder(from, to).execute(s, from, to);
                              s.wait();
                            } catch (const dnnl::error& e) {
                              return Internal(std::string("oneDNN int8 conv weight reorder failed: ") + e.what());
                            }
                            return Status::Ok();
                          }));

    // X -> q(X) in the primitive's layout: a reorder with the output scale 1 / x_step (round to
    // nearest, saturating to the s8 or u8 range).
    dnnl::primitive_attr qattr;
    qattr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    qattr.set_output_scales(0, {1.0f / x_step});
    const dnnl::reorder::primitive_desc qpd(onednn_engine(), src_plain, onednn_engine(), src_md, qattr);
    quantize_.reset();
    quantize_.init(qpd, dnnl::reorder(qpd));
    q_src_slot_ = quantize_.add_arg(DNNL_ARG_FROM, src_plain);
    x_buffer_ = aligned_alloc_shared(src_md.get_size());
    if (!x_buffer_) return ResourceExhausted("FusedConv int8: cannot allocate the quantized input");
    quantize_.bind(quantize_.add_arg(DNNL_ARG_TO, src_md), x_buffer_.get());

    blocked_dst_.reset();
    dst_out_.reset();
    res_in_.reset();
    if (dst_md != dst_plain) {
      blocked_dst_ = aligned_alloc_shared(dst_md.get_size());
      if (!blocked_dst_) return ResourceExhausted("FusedConv int8: cannot allocate the output buffer");
      dst_out_slot_ = init_reorder(dst_out_, dst_md, dst_plain, blocked_dst_.get(), nullptr).second;
    }
    // A residual already in the output's layout is copied on this thread (as the fp32 kernel does).
    copy_res_ = has_res_ && res_plain == dst_md && !blocked_dst_;
    if (has_res_ && !copy_res_) std::tie(res_slot_, res_dst_slot_) = init_reorder(res_in_, res_plain, dst_md, nullptr, blocked_dst_.get());

    conv_.reset();
    conv_.init(pd, dnnl::convolution_forward(pd));
    conv_.bind(conv_.add_arg(DNNL_ARG_SRC, src_md), x_buffer_.get());
    conv_.bind(conv_.add_arg(DNNL_ARG_WEIGHTS, wei_md), packed_.get());
    dst_slot_ = conv_.add_arg(DNNL_ARG_DST, dst_md);
    if (blocked_dst_) conv_.bind(dst_slot_, blocked_dst_.get());
    if (has_bias_) bias_slot_ = conv_.add_arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(has_res_ ? 1 : 0) | DNNL_ARG_SRC_1, bias_md);
    return true;
  }

  Status execute(std::span<const TensorView> in, std::span<const TensorView> out) override {
    quantize_.bind(q_src_slot_, in[0].data);
    KILN_RETURN_IF_ERROR(quantize_.execute(stream_));
    if (!blocked_dst_) conv_.bind(dst_slot_, out[0].data);
    // The sum post-op accumulates onto what the destination holds: the residual.
    if (copy_res_) {
      if (out[0].data != in[3].data) std::memcpy(out[0].data, in[3].data, in[3].nbytes());
    } else if (has_res_) {
      res_in_.bind(res_slot_, in[3].data);
      if (!blocked_dst_) res_in_.bind(res_dst_slot_, out[0].data);
      KILN_RETURN_IF_ERROR(res_in_.execute(stream_));
    }
    if (has_bias_) conv_.bind(bias_slot_, in[2].data);
    KILN_RETURN_IF_ERROR(conv_.execute(stream_));
    if (!blocked_dst_) return Status::Ok();
    dst_out_.bind(dst_out_slot_, out[0].data);
    return dst_out_.execute(stream_);
  }

 private:
  static std::pair<int, int> init_reorder(OnednnExec& r, const memory::desc& from, const memory::desc& to, void* from_data, void* to_data) {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::reorder::primitive_desc rpd(onednn_engine(), from, onednn_engine(), to, attr);
    r.init(rpd, dnnl::reorder(rpd));
    const int from_slot = r.add_arg(DNNL_ARG_FROM, from), to_slot = r.add_arg(DNNL_ARG_TO, to);
    if (from_data) r.bind(from_slot, from_data);
    if (to_data) r.bind(to_slot, to_data);
    return {from_slot, to_slot};
  }

  WindowAttrs w_;
  int64_t group_;
  FusedSpec spec_;
  float a_scale_;
  bool unsigned_;
  bool has_bias_ = false, has_res_ = false, copy_res_ = false;
  std::shared_ptr<void> packed_, x_buffer_, blocked_dst_;
  OnednnExec quantize_, conv_, dst_out_, res_in_;
  int q_src_slot_ = 0, dst_slot_ = 0, bias_slot_ = 0, dst_out_slot_ = 0, res_slot_ = 0, res_dst_slot_ = 0;
};

}  // namespace

void register_fused_conv_int8_kernels(KernelRegistry& r) {
  // Below "onednn": int8 runs only where an engine's precision asked for it (with a_scale).
  r.add_kiln_op({"FusedConv", "onednn_int8", 4, [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(float a_scale, attrs.get_float("a_scale", 0.0f));
           if (!(a_scale > 0) || !std::isfinite(a_scale))
             return InvalidArgument("attribute 'a_scale' must be a positive finite float (the calibrated activation scale), got " +
                                    std::to_string(a_scale));
           KILN_ASSIGN_OR_RETURN(int64_t a_unsigned, attrs.get_int("a_unsigned", 0));
           if (a_unsigned != 0 && a_unsigned != 1) return InvalidArgument("attribute 'a_unsigned' must be 0 or 1, got " + std::to_string(a_unsigned));
           FusedSpec spec;
           KILN_ASSIGN_OR_RETURN(auto ref, make_reference_fused_conv(args, attrs, &spec));
           WindowAttrs w;
           KILN_RETURN_IF_ERROR(read_window_attrs(attrs, w, true));
           KILN_ASSIGN_OR_RETURN(int64_t group, attrs.get_int("group", 1));
           return std::unique_ptr<Kernel>(
               std::make_unique<OnednnInt8FusedConv>(std::move(ref), std::move(w), group, spec, a_scale, a_unsigned == 1));
         }});
}

}  // namespace kiln
