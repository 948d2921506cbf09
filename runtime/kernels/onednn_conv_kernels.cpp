// float32 1-D/2-D Conv and FusedConv on oneDNN's convolution primitive.
//
// FusedConv (fused_conv_common.h: act(Conv(X, W, B) + residual), X/residual/Y in NCHW, NHWC,
// nChw8c or nChw16c) runs as ONE convolution: the residual is a sum post-op and Relu an eltwise post-op.
// SiLU is the exception: oneDNN's swish post-op evaluates an exponential per value and, on the
// thin layers of depthwise networks (16 input channels per output), costs several times the
// convolution itself. kiln applies its own SiLU (runtime/simd/vec_math.inc, a rational sigmoid)
// over the primitive's output right after it, while that output is still in cache.
//
// oneDNN's convolutions are several times faster on NHWC or blocked layouts than on NCHW (AVX-512:
// NHWC; AVX2: nChw8c), so the primitive picks its own src/dst layouts and the kernel reorders around it where the
// tensors' layouts differ: X into the primitive's layout, the residual into the primitive's output
// (which the sum post-op then accumulates onto) and the result into Y's layout. Between
// FusedConvs kept in the layout the primitive computes in, no reorder runs at all.
// FusedConv's W is reordered once into oneDNN's layout (onednn_packed_weights, shared by every
// context running the plan): W being a plan constant is the op's contract. Plain Conv does not know
// whether its W is constant, so it reorders W on every run (conv_epilogue_fusion turns every Conv
// with a constant W into a FusedConv, leaving this path to computed weights).
//
// impl "onednn_bf16" (engines built with precision: bf16) converts X and W to bfloat16 in the same
// reorders; accumulation and the output stay float32.
//
// impl "onednn_winograd" (FusedConv only) is the same kernel on oneDNN's Winograd convolution
// (F(2x2,3x3) or F(4x4,3x3) on AVX-512): 2.25x to 4x fewer multiplies than the direct one for 3x3
// stride-1 convolutions, at a larger rounding error (the input/output transforms add and subtract
// products of values of different sizes). It computes in the blocked nChw16c layout: NHWC tensors
// are reordered around it, nchw16c ones (builder/plan/plan_winograd_layout.cpp keeps the values between
// Winograd FusedConvs so) are not. It ranks below "onednn": tactic selection runs it only where it
// times faster. Where oneDNN has no Winograd
// implementation (not 3x3, stride or dilation != 1, groups, pads > 1, no AVX-512, not float32)
// prepare() fails with Unimplemented rather than quietly running something else, so a tactic never
// records a Winograd choice that did not run as one. Whether oneDNN has it depends on the weights,
// the attributes and the CPU only, never on the batch or spatial size, so an engine that chose it
// at opt can run it at every shape of the profile.
#include <cstring>
#include <tuple>

#include "runtime/engine_format.h"
#include "runtime/kernels/fused_conv_common.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/onednn_common.h"
#include "runtime/kernels/elementwise_common.h"

namespace kiln {

namespace {

using dnnl::memory;
using tag = memory::format_tag;

bool has_residual(std::span<const TensorView> in) { return in.size() > 3 && in[3].present(); }

tag layout_tag(ConvLayout l) { return onednn_conv_tag(l); }

enum class ConvAlgo { kDirect, kDirectBf16, kWinograd };

class OnednnConvKernel final : public OnednnKernel {
 public:
  // `fused`: a FusedConv (constant W, epilogue `act` and an optional residual).
  OnednnConvKernel(std::unique_ptr<Kernel> ref, WindowAttrs w, int64_t group, ConvAlgo algo, bool fused, FusedSpec spec)
      : OnednnKernel(std::move(ref)), w_(std::move(w)), group_(group), algo_(algo), bf16_(algo == ConvAlgo::kDirectBf16),
        fused_(fused), spec_(spec) {}
  const char* impl_name() const override {
    if (use_ref_) return "reference";
    return algo_ == ConvAlgo::kWinograd ? "onednn_winograd" : bf16_ ? "onednn_bf16" : "onednn";
  }
  // The sum post-op accumulates onto the residual where the output is: in the output itself (then
  // the residual is already there when they share a buffer), or in the blocked buffer the residual
  // is reordered into before the output is written. A residual reordered straight into the output
  // (its layout differs) cannot share.
  bool writes_over_input(size_t i) const override { return i == 3 && !use_ref_ && has_res_ && (copy_res_ || blocked_dst_); }

 protected:
  StatusOr<bool> build(std::span<const TensorView> in, std::span<const TensorView> out) override {
    // infer() (the reference's) has validated the layouts' shapes already.
    KILN_ASSIGN_OR_RETURN(const Shape xs, conv_nchw_shape(spec_.x, in[0].shape, "input 0"));
    const Shape& ws = in[1].shape;
    const int n = xs.rank() - 2;
    // Empty tensors are no work for any algorithm: the reference handles them.
    if (xs.numel() == 0 || out[0].numel() == 0 || ws.numel() == 0) return false;
    const bool winograd = algo_ == ConvAlgo::kWinograd;
    if (in[0].dtype != DType::kFloat32 || (n != 1 && n != 2)) {
      if (winograd)
        return Unimplemented("oneDNN's Winograd convolution needs float32 2-D input, got " + dtype_name(in[0].dtype) + " " + in[0].shape.str());
      return false;
    }
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
    const auto f32 = memory::data_type::f32;
    const auto cdt = bf16_ ? memory::data_type::bf16 : f32;
    const memory::desc src_plain(src_d, f32, layout_tag(spec_.x)), dst_plain(dst_d, f32, layout_tag(spec_.y));
    const memory::desc res_plain(dst_d, f32, layout_tag(spec_.res));
    has_bias_ = in.size() > 2 && in[2].present();
    has_res_ = fused_ && has_residual(in);
    const memory::desc bias_md = has_bias_ ? memory::desc({M}, f32, tag::x) : memory::desc();

    kiln_silu_ = fused_ && spec_.act == ConvAct::kSilu;
    const dnnl::post_ops po = fused_conv_post_ops(spec_, has_res_);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_post_ops(po);
    auto primitive = [&](int64_t group) -> StatusOr<dnnl::convolution_forward::primitive_desc> {
      const memory::dims wei_d = weight_dims(group, M, C, kh, kw);
      const dnnl::convolution_forward::desc desc(
          dnnl::prop_kind::forward_inference, winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct,
          memory::desc(src_d, cdt, tag::any), memory::desc(wei_d, cdt, tag::any), bias_md, memory::desc(dst_d, f32, tag::any),
          strides, dil, pad_l, pad_r);
      if (winograd) return winograd_primitive_desc(desc, attr, xs, ws);
      return dnnl::convolution_forward::primitive_desc(desc, attr, onednn_engine());  // throws: the reference runs it
    };
    KILN_ASSIGN_OR_RETURN(dnnl::convolution_forward::primitive_desc pd, primitive(group_));
    // Groups of fewer than 8 channels (ResNeXt's first stage: 32 groups of 4) have no direct AVX2
    // kernel in oneDNN, which runs them as one small GEMM per group, far below the direct kernels'
    // speed. Pairs (quadruples) of such groups become groups of 8 with block-diagonal weights, zero
    // between the original groups: twice the multiplies on the direct kernel, and the same sums
    // (adding exact zeros), except that an infinite or NaN input channel then also makes the outputs
    // of the group paired with its own NaN. Constant weights only (FusedConv): widened once.
    const int64_t per_group = C / group_, widened = widened_group(per_group, M / group_, group_);
    widen_ = fused_ && !winograd && widened != group_ && std::string(pd.impl_info_str()).find("gemm") != std::string::npos;
    if (widen_) {
      try {
        auto wide = primitive(widened);
        if (wide.ok() && std::string(wide->impl_info_str()).find("gemm") == std::string::npos) pd = *wide;
        else widen_ = false;
      } catch (const dnnl::error&) {
        widen_ = false;
      }
    }
    const int64_t group = widen_ ? widened : group_;
    const memory::desc wei_plain(weight_dims(group, M, C, kh, kw), f32, group == 1 ? tag::oihw : tag::goihw);
    const memory::desc wei_md = pd.weights_desc(), src_md = pd.src_desc(), dst_md = pd.dst_desc();

    conv_.reset();
    wei_convert_ = OnednnConvert();
    packed_.reset();
    if (fused_ && widen_) {
      const float* w = in[1].as<const float>();
      const int64_t taps = kh * kw, wide = C / widened;
      KILN_ASSIGN_OR_RETURN(packed_, onednn_packed_weights(in[1].data, in[1].nbytes(), "widened_groups", wei_plain, wei_md, [&](void* plain) {
                              // W [M, C/g, taps] -> [M, C/g', taps]: output channel o keeps its weights at its
                              // own group's inputs within the wider group, zeros elsewhere.
                              float* dst = static_cast<float*>(plain);
                              std::memset(dst, 0, sizeof(float) * static_cast<size_t>(M * wide * taps));
                              for (int64_t o = 0; o < M; ++o) {
                                const int64_t at = (o / (M / group_)) * per_group % wide;  // its inputs' offset in the wide group
                                std::memcpy(dst + (o * wide + at) * taps, w + o * per_group * taps,
                                            sizeof(float) * static_cast<size_t>(per_group * taps));
                              }
                            }));
    } else if (fused_) {
      KILN_ASSIGN_OR_RETURN(packed_, onednn_packed_weights(in[1].data, wei_plain, wei_md));
    } else {
      KILN_RETURN_IF_ERROR(wei_convert_.build(wei_plain, wei_md));
    }
    KILN_RETURN_IF_ERROR(src_convert_.build(src_plain, src_md));
    blocked_dst_.reset();
    dst_out_.reset();
    res_in_.reset();
    if (dst_md != dst_plain) {
      blocked_dst_ = aligned_alloc_shared(dst_md.get_size());
      blocked_floats_ = static_cast<int64_t>(dst_md.get_size() / sizeof(float));
      dst_out_slot_ = init_reorder(dst_out_, dst_md, dst_plain, blocked_dst_.get(), nullptr).second;
    }
    // A residual already in the output's layout is copied on this thread: a reorder primitive would
    // wake the OpenMP workers for a copy that memory bandwidth bounds anyway.
    copy_res_ = has_res_ && res_plain == dst_md && !blocked_dst_;
    if (has_res_ && !copy_res_) {
      std::tie(res_slot_, res_dst_slot_) = init_reorder(res_in_, res_plain, dst_md, nullptr, blocked_dst_.get());
    }

    conv_.init(pd, dnnl::convolution_forward(pd));
    src_slot_ = conv_.add_arg(DNNL_ARG_SRC, src_md);
    wei_slot_ = conv_.add_arg(DNNL_ARG_WEIGHTS, wei_md);
    if (packed_) conv_.bind(wei_slot_, packed_.get());
    dst_slot_ = conv_.add_arg(DNNL_ARG_DST, dst_md);
    if (blocked_dst_) conv_.bind(dst_slot_, blocked_dst_.get());
    if (has_bias_) bias_slot_ = conv_.add_arg(DNNL_ARG_BIAS, bias_md);
    return true;
  }

  Status execute(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (!packed_) {
      KILN_ASSIGN_OR_RETURN(const void* w, wei_convert_.run(in[1].data, stream_));
      conv_.bind(wei_slot_, w);
    }
    KILN_ASSIGN_OR_RETURN(const void* src, src_convert_.run(in[0].data, stream_));
    conv_.bind(src_slot_, src);
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
    if (kiln_silu_)
      silu_in_place(static_cast<float*>(blocked_dst_ ? blocked_dst_.get() : out[0].data),
                    blocked_dst_ ? blocked_floats_ : out[0].numel());
    if (!blocked_dst_) return Status::Ok();
    dst_out_.bind(dst_out_slot_, out[0].data);
    return dst_out_.execute(stream_);
  }

 private:
  static memory::dims weight_dims(int64_t group, int64_t M, int64_t C, int64_t kh, int64_t kw) {
    return group == 1 ? memory::dims{M, C, kh, kw} : memory::dims{group, M / group, C / group, kh, kw};
  }

  // The group count with groups widened to 8 channels, where groups of `in` input and `out` output
  // channels (equal, 2 or 4) pair up evenly; else `group` (depthwise has its own kernel).
  static int64_t widened_group(int64_t in, int64_t out, int64_t group) {
    if (group <= 1 || in != out || in < 2 || in >= 8 || 8 % in != 0 || group % (8 / in) != 0) return group;
    return group / (8 / in);
  }

  // A reorder `from` -> `to`; returns its (from, to) slots, of which the null pointers are bound
  // per run.
  static std::pair<int, int> init_reorder(OnednnExec& r, const memory::desc& from, const memory::desc& to,
                                          void* from_data, void* to_data) {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::reorder::primitive_desc rpd(onednn_engine(), from, onednn_engine(), to, attr);
    r.init(rpd, dnnl::reorder(rpd));
    const int from_slot = r.add_arg(DNNL_ARG_FROM, from), to_slot = r.add_arg(DNNL_ARG_TO, to);
    if (from_data) r.bind(from_slot, from_data);
    if (to_data) r.bind(to_slot, to_data);
    return {from_slot, to_slot};
  }

  // The Winograd primitive, or Unimplemented where oneDNN has none for this case.
  StatusOr<dnnl::convolution_forward::primitive_desc> winograd_primitive_desc(const dnnl::convolution_forward::desc& desc,
                                                                               const dnnl::primitive_attr& attr, const Shape& xs,
                                                                               const Shape& ws) const {
    const auto none = [&] {
      return Unimplemented("oneDNN has no Winograd convolution for " + xs.str() + " * " + ws.str() +
                           " with these strides/dilations/pads/group on this CPU (it needs AVX-512, a 3x3 kernel, stride 1, "
                           "no dilation, group 1 and pads <= 1)");
    };
    try {
      dnnl::convolution_forward::primitive_desc pd(desc, attr, onednn_engine());
      // Only Winograd implementations accept the algorithm today; checked so that a later oneDNN
      // serving it with a direct kernel cannot make the tactic time a direct convolution twice.
      if (std::string(pd.impl_info_str()).find("wino") == std::string::npos) return none();
      return pd;
    } catch (const dnnl::error&) {
      return none();
    }
  }

  WindowAttrs w_;
  int64_t group_;
  ConvAlgo algo_;
  bool bf16_, fused_;
  FusedSpec spec_;
  bool has_bias_ = false, has_res_ = false, copy_res_ = false, widen_ = false, kiln_silu_ = false;
  int64_t blocked_floats_ = 0;
  std::shared_ptr<void> packed_, blocked_dst_;
  OnednnConvert src_convert_, wei_convert_;
  OnednnExec conv_, dst_out_, res_in_;
  int src_slot_ = 0, wei_slot_ = 0, dst_slot_ = 0, bias_slot_ = 0, dst_out_slot_ = 0, res_slot_ = 0, res_dst_slot_ = 0;
};

KernelFactory onednn_factory(ConvAlgo algo, bool fused) {
  return [algo, fused](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
    FusedSpec spec;
    std::unique_ptr<Kernel> ref;
    if (fused) {
      KILN_ASSIGN_OR_RETURN(ref, make_reference_fused_conv(args, attrs, &spec));
    } else {
      KILN_ASSIGN_OR_RETURN(ref, make_reference_conv(args, attrs));
    }
    WindowAttrs w;
    KILN_RETURN_IF_ERROR(read_window_attrs(attrs, w, true));
    KILN_ASSIGN_OR_RETURN(int64_t group, attrs.get_int("group", 1));
    return std::unique_ptr<Kernel>(std::make_unique<OnednnConvKernel>(std::move(ref), std::move(w), group, algo, fused, spec));
  };
}

}  // namespace

void register_onednn_conv_kernels(KernelRegistry& r) {
  r.add_kiln_op({"FusedConv", "reference", 0, [](const KernelArgs& args, AttrReader& attrs) {
           FusedSpec spec;
           return make_reference_fused_conv(args, attrs, &spec);
         }});
  // "onednn_bf16" ranks below "onednn": bf16 runs only where an engine's precision asked for it.
  for (bool fused : {false, true}) {
    const char* op = fused ? "FusedConv" : "Conv";
    auto add = [&](KernelEntry e) { fused ? r.add_kiln_op(std::move(e)) : r.add(std::move(e)); };
    add({op, "onednn", 10, onednn_factory(ConvAlgo::kDirect, fused)});
    add({op, "onednn_bf16", 5, onednn_factory(ConvAlgo::kDirectBf16, fused)});
  }
  // Winograd only for FusedConv, whose weights are constant: its weight transform (4x the data for
  // F(4x4,3x3)) is done once when packing, where plain Conv would redo it on every run. It ranks
  // below "onednn" (tactic selection picks it where it times faster) and needs AVX-512 (oneDNN's
  // avx512_core, i.e. F+BW+DQ+VL: kiln's avx512f bit stands for it, as every AVX-512 CPU outside the
  // discontinued Xeon Phi line has all four).
  r.add_kiln_op({"FusedConv", "onednn_winograd", 8, onednn_factory(ConvAlgo::kWinograd, true), kCpuAvx512f});
}

dnnl::post_ops fused_conv_post_ops(const FusedSpec& spec, bool residual) {
  dnnl::post_ops po;
  if (residual) po.append_sum(1.0f);
  // Each activation is one oneDNN eltwise post-op (hardswish in oneDNN 2.x is x relu6(x + 3) / 6,
  // ONNX's HardSwish), SiLU excepted.
  switch (spec.act) {
    case ConvAct::kNone: break;
    case ConvAct::kRelu: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f); break;
    case ConvAct::kSilu: break;  // kiln's, after the primitive
    case ConvAct::kSigmoid: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_logistic, 0.0f, 0.0f); break;
    case ConvAct::kHardSwish: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_hardswish, 0.0f, 0.0f); break;
    case ConvAct::kClip: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, spec.alpha, spec.beta); break;
    case ConvAct::kGeluErf: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f); break;
    case ConvAct::kGeluTanh: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f); break;
  }
  return po;
}

// SiLU maps 0 to 0, so a blocked layout's zero padding channels stay zero.
void silu_in_place(float* y, int64_t n) { ew::vec_apply(vec::unary(vec::Unary::kSilu), y, y, n, {}); }

dnnl::memory::format_tag onednn_conv_tag(ConvLayout l) {
  switch (l) {
    case ConvLayout::kNchw: return tag::nchw;
    case ConvLayout::kNhwc: return tag::nhwc;
    case ConvLayout::kNchw8c: return tag::nChw8c;
    case ConvLayout::kNchw16c: return tag::nChw16c;
  }
  return tag::nchw;
}

}  // namespace kiln
