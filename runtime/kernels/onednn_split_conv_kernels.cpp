// FusedConv impl "onednn_split": one oneDNN convolution cut into parts by output channels, each
// part a primitive made for ONE thread, the parts run as chunks of kiln's pool.
//
// Why: at batch 1 the small convolutions of depthwise networks (MobileNet, EfficientNet, ShuffleNet:
// 20-100 us each) gain little from oneDNN's own OpenMP split. Its static partition of a few work
// items often gives one thread twice the other's share (perf: the calling thread ran 2x the JIT
// code of the OpenMP worker on mobilenet_v3_small), and every region waits at its barrier for a
// worker that the machine may have descheduled. Cut by whole blocks of output channels, the parts
// are equal, each runs oneDNN's fastest one-thread kernel, and kiln's pool hands a late worker's
// part to the caller instead of waiting (runtime/thread_pool.h).
//
// Covers batch 1 with X, Y and the residual in nChw8c or nChw16c, where a range of channel blocks
// is one contiguous run of memory, so each part reads and writes plain sub-tensors: group 1 (every
// part reads all of X) and depthwise (group = input = output channels: each part reads its own
// channels). Everything else, and a machine running one thread, runs the reference (impl_name()
// then says so, and tactic selection never records the impl for that case). Tactic selection
// times it against "onednn" per step.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "runtime/kernels/conv_pixel_io.h"
#include "runtime/kernels/fused_conv_common.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/onednn_common.h"
#include "runtime/thread_pool.h"

namespace kiln {

namespace {

using dnnl::memory;
using tag = memory::format_tag;

class OnednnSplitConvKernel final : public OnednnKernel {
 public:
  OnednnSplitConvKernel(std::unique_ptr<Kernel> ref, WindowAttrs w, int64_t group, FusedSpec spec)
      : OnednnKernel(std::move(ref)), w_(std::move(w)), group_(group), spec_(spec) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : "onednn_split"; }
  // Each part's sum post-op accumulates onto its slice of the output, where its slice of the
  // residual is copied first (or already is).
  bool writes_over_input(size_t i) const override { return i == 3 && !use_ref_ && has_res_; }

 protected:
  StatusOr<bool> build(std::span<const TensorView> in, std::span<const TensorView> out) override {
    parts_.clear();
    KILN_ASSIGN_OR_RETURN(const Shape xs, conv_nchw_shape(spec_.x, in[0].shape, "input 0"));
    const Shape& ws = in[1].shape;
    has_bias_ = in.size() > 2 && in[2].present();
    has_res_ = in.size() > 3 && in[3].present();
    const int64_t block = conv_channel_block(spec_.x);
    const int omp_threads = omp_get_max_threads(), threads = std::min(ThreadPool::global().max_threads(), omp_threads);
    if (in[0].dtype != DType::kFloat32 || in[1].dtype != DType::kFloat32 || xs.rank() != 4 || ws.rank() != 4 || xs[0] != 1 ||
        block == 0 || spec_.y != spec_.x || (has_res_ && spec_.res != spec_.x) || threads <= 1 || xs.numel() == 0 ||
        out[0].numel() == 0)
      return false;
    const int64_t C = xs[1], M = ws[0], kh = ws[2], kw = ws[3];
    const bool depthwise = group_ > 1 && group_ == C && group_ == M && ws[1] == 1;
    if ((group_ != 1 && !depthwise) || M % block != 0 || M / block < 2) return false;
    KILN_ASSIGN_OR_RETURN(WindowGeom g, forward_window_geometry(w_, xs.data() + 2, ws.data() + 2, 2, false));
    const int64_t H = xs[2], W = xs[3], OH = g.out[0], OW = g.out[1];
    in_plane_ = H * W;
    out_plane_ = OH * OW;
    kiln_silu_ = spec_.act == ConvAct::kSilu;

    const auto f32 = memory::data_type::f32;
    const tag layout = onednn_conv_tag(spec_.x);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_post_ops(fused_conv_post_ops(spec_, has_res_));
    // Whole channel blocks per part, as even as they divide.
    const int64_t blocks = M / block, n_parts = std::min<int64_t>(threads, blocks);
    for (int64_t p = 0; p < n_parts; ++p) {
      Part part;
      const int64_t b0 = blocks * p / n_parts, b1 = blocks * (p + 1) / n_parts;
      part.o0 = b0 * block;
      part.channels = (b1 - b0) * block;
      const int64_t Mp = part.channels, Cp = depthwise ? Mp : C;
      part.c0 = depthwise ? part.o0 : 0;
      const memory::dims wei_d = depthwise ? memory::dims{Mp, 1, 1, kh, kw} : memory::dims{Mp, C, kh, kw};
      const memory::desc src_md({1, Cp, H, W}, f32, layout), dst_md({1, Mp, OH, OW}, f32, layout);
      const memory::desc bias_md = has_bias_ ? memory::desc({Mp}, f32, tag::x) : memory::desc();
      const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md,
                                                 memory::desc(wei_d, f32, tag::any), bias_md, dst_md, {g.stride[0], g.stride[1]},
                                                 {g.dil[0] - 1, g.dil[1] - 1}, {g.pad_begin[0], g.pad_begin[1]},
                                                 {g.pad_end[0], g.pad_end[1]});
      // Made while the team is one thread, so that oneDNN picks (and blocks for) its one-thread kernel.
      omp_set_num_threads(1);
      StatusOr<dnnl::convolution_forward::primitive_desc> pd = Internal("");
      try {
        pd = dnnl::convolution_forward::primitive_desc(desc, attr, onednn_engine());
      } catch (const dnnl::error&) {
        pd = Unimplemented("no oneDNN convolution for this part");
      }
      omp_set_num_threads(omp_threads);
      if (!pd.ok()) return false;
      const float* w = in[1].as<const float>() + part.o0 * (depthwise ? 1 : C) * kh * kw;
      KILN_ASSIGN_OR_RETURN(part.packed, onednn_packed_weights(w, memory::desc(wei_d, f32, depthwise ? tag::goihw : tag::oihw),
                                                               pd->weights_desc()));
      if (!part.exec.init_one_thread(*pd).ok()) return false;
      part.src = part.exec.add_arg(DNNL_ARG_SRC, src_md);
      part.exec.bind(part.exec.add_arg(DNNL_ARG_WEIGHTS, pd->weights_desc()), part.packed.get());
      part.dst = part.exec.add_arg(DNNL_ARG_DST, dst_md);
      if (has_bias_) part.bias = part.exec.add_arg(DNNL_ARG_BIAS, bias_md);
      part.stream = dnnl::stream(onednn_engine());
      parts_.push_back(std::move(part));
    }
    return true;
  }

  Status execute(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const float* x = in[0].as<const float>();
    const float* bias = has_bias_ ? in[2].as<const float>() : nullptr;
    const float* res = has_res_ ? in[3].as<const float>() : nullptr;
    float* y = out[0].as<float>();
    std::atomic<bool> failed{false};
    ThreadPool::global().parallel_for(static_cast<int64_t>(parts_.size()), int64_t{1}, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        Part& p = parts_[static_cast<size_t>(i)];
        float* dst = y + p.o0 * out_plane_;
        const int64_t n = p.channels * out_plane_;
        // The sum post-op accumulates onto what the destination holds: the residual.
        if (res && res + p.o0 * out_plane_ != dst) std::memcpy(dst, res + p.o0 * out_plane_, sizeof(float) * static_cast<size_t>(n));
        p.exec.bind(p.src, x + p.c0 * in_plane_);
        p.exec.bind(p.dst, dst);
        if (bias) p.exec.bind(p.bias, bias + p.o0);
        if (!p.exec.execute(p.stream).ok()) failed.store(true, std::memory_order_relaxed);
        if (kiln_silu_) silu_in_place(dst, n);
      }
    });
    if (failed.load()) return Internal("a oneDNN convolution part failed to execute");
    return Status::Ok();
  }

 private:
  struct Part {
    int64_t o0 = 0, c0 = 0, channels = 0;  // first output channel, first input channel, output channels
    OnednnExec exec;
    std::shared_ptr<void> packed;
    dnnl::stream stream;
    int src = 0, dst = 0, bias = 0;
  };

  WindowAttrs w_;
  int64_t group_;
  FusedSpec spec_;
  bool has_bias_ = false, has_res_ = false, kiln_silu_ = false;
  int64_t in_plane_ = 0, out_plane_ = 0;
  std::vector<Part> parts_;
};

}  // namespace

void register_onednn_split_conv_kernels(KernelRegistry& r) {
  r.add_kiln_op({"FusedConv", "onednn_split", 6, make_kiln_fused_conv<OnednnSplitConvKernel>});
}

}  // namespace kiln
