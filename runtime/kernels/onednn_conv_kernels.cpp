// float32 1-D/2-D Conv on oneDNN's convolution primitive. Activations stay plain NCHW (1-D runs as
// NCHW with H=1). oneDNN picks the weight layout; when it differs from the plain one, the weights
// are reordered into a buffer sized in prepare(). The reorder runs on every run(): the kernel
// interface does not say whether the weights are constant, and a reorder is a small fraction of the
// convolution's work. impl "onednn_bf16" (engines built with precision: bf16) converts the input to
// bfloat16 and the weights to a bfloat16 blocked layout on every run; the output stays float32.
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/onednn_common.h"

namespace kiln {

namespace {

using dnnl::memory;
using tag = memory::format_tag;

class OnednnConvKernel final : public OnednnKernel {
 public:
  OnednnConvKernel(std::unique_ptr<Kernel> ref, WindowAttrs w, int64_t group, bool bf16)
      : OnednnKernel(std::move(ref)), w_(std::move(w)), group_(group), bf16_(bf16) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : bf16_ ? "onednn_bf16" : "onednn"; }

 protected:
  StatusOr<bool> build(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const Shape& xs = in[0].shape;
    const Shape& ws = in[1].shape;
    const int n = xs.rank() - 2;
    if (in[0].dtype != DType::kFloat32 || (n != 1 && n != 2) || xs.numel() == 0 || out[0].numel() == 0 ||
        ws.numel() == 0)
      return false;
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
    const memory::dims wei_d = group_ == 1 ? memory::dims{M, C, kh, kw}
                                           : memory::dims{group_, M / group_, C / group_, kh, kw};
    const auto f32 = memory::data_type::f32;
    const auto cdt = bf16_ ? memory::data_type::bf16 : f32;
    const memory::desc src_md(src_d, f32, tag::nchw), src_cmd(src_d, cdt, tag::nchw), dst_md(dst_d, f32, tag::nchw);
    const memory::desc wei_plain(wei_d, f32, group_ == 1 ? tag::oihw : tag::goihw);
    const memory::desc wei_any(wei_d, cdt, tag::any);
    has_bias_ = in.size() > 2 && in[2].present();
    const memory::desc bias_md = has_bias_ ? memory::desc({M}, f32, tag::x) : memory::desc();

    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                               src_cmd, wei_any, bias_md, dst_md, strides, dil, pad_l, pad_r);
    const dnnl::convolution_forward::primitive_desc pd(desc, attr, onednn_engine());
    const memory::desc wei_md = pd.weights_desc();

    conv_.reset();
    reorder_.reset();
    reordered_.reset();
    if (wei_md != wei_plain) {
      const dnnl::reorder::primitive_desc rpd(onednn_engine(), wei_plain, onednn_engine(), wei_md, attr);
      reorder_.init(rpd, dnnl::reorder(rpd));
      reorder_src_slot_ = reorder_.add_arg(DNNL_ARG_FROM, wei_plain);
      const int dst_slot = reorder_.add_arg(DNNL_ARG_TO, wei_md);
      reordered_ = aligned_alloc_shared(wei_md.get_size());
      reorder_.bind(dst_slot, reordered_.get());
    }
    conv_.init(pd, dnnl::convolution_forward(pd));
    src_slot_ = conv_.add_arg(DNNL_ARG_SRC, src_cmd);
    KILN_RETURN_IF_ERROR(src_convert_.build(src_md, src_cmd));
    wei_slot_ = conv_.add_arg(DNNL_ARG_WEIGHTS, wei_md);
    dst_slot_ = conv_.add_arg(DNNL_ARG_DST, dst_md);
    if (has_bias_) bias_slot_ = conv_.add_arg(DNNL_ARG_BIAS, bias_md);
    return true;
  }

  Status execute(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (reorder_.ready()) {
      reorder_.bind(reorder_src_slot_, in[1].data);
      KILN_RETURN_IF_ERROR(reorder_.execute(stream_));
      conv_.bind(wei_slot_, reordered_.get());
    } else {
      conv_.bind(wei_slot_, in[1].data);
    }
    KILN_ASSIGN_OR_RETURN(const void* src, src_convert_.run(in[0].data, stream_));
    conv_.bind(src_slot_, src);
    conv_.bind(dst_slot_, out[0].data);
    if (has_bias_) conv_.bind(bias_slot_, in[2].data);
    return conv_.execute(stream_);
  }

 private:
  WindowAttrs w_;
  int64_t group_;
  bool bf16_;
  bool has_bias_ = false;
  OnednnConvert src_convert_;
  OnednnExec conv_, reorder_;
  std::shared_ptr<void> reordered_;
  int src_slot_ = 0, wei_slot_ = 0, dst_slot_ = 0, bias_slot_ = 0, reorder_src_slot_ = 0;
};

}  // namespace

void register_onednn_conv_kernels(KernelRegistry& r) {
  // "onednn_bf16" ranks below "onednn": bf16 runs only where an engine's precision asked for it.
  for (bool bf16 : {false, true})
    r.add({"Conv", bf16 ? "onednn_bf16" : "onednn", bf16 ? 5 : 10,
           [bf16](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
             KILN_ASSIGN_OR_RETURN(auto ref, make_reference_conv(args, attrs));
             WindowAttrs w;
             KILN_RETURN_IF_ERROR(read_window_attrs(attrs, w, true));
             KILN_ASSIGN_OR_RETURN(int64_t group, attrs.get_int("group", 1));
             return std::unique_ptr<Kernel>(std::make_unique<OnednnConvKernel>(std::move(ref), std::move(w), group, bf16));
           }});
}

}  // namespace kiln
