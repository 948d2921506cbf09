// FusedConv impl "stem_direct": a network's first convolution, on the image itself (NCHW, 1 to 4
// channels), into the layout the next convolutions keep (NHWC, or nChw8c / nChw16c when that block
// is the vector width).
//
// Why: with three input channels, oneDNN's convolutions on AVX-512 first reorder the image to
// NHWC and then run a kernel built for many channels, and every zoo model's stem ran at about half
// ONNX Runtime's speed in the model (its NCHW-input NCHWc kernel). Here each output pixel's
// channels are the vector: per tap one broadcast of an input value feeds R pixels x NV channel
// vectors of FMAs (runtime/kernels/stem_conv_rows.inc), the weights [C][KH][KW][OC] stay in L1, and
// the bias and activation are applied in registers before the one store.
//
// Anything else (more input channels, groups, dilation, a residual, other layouts, non-float32)
// runs the reference and reports "reference", so tactic selection sees the impl as unavailable
// there. It ranks below "onednn": tactic selection picks it where it times faster.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/cpu_features.h"
#include "runtime/kernels/conv_pixel_io.h"
#include "runtime/kernels/fused_conv_common.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/onednn_common.h"
#include "runtime/kernels/packed_weights.h"
#include "runtime/kernels/stem_conv.h"
#include "runtime/simd/vec_avx2.h"
#include "runtime/thread_pool.h"

namespace kiln {

namespace stem {
namespace {
namespace sv = simd::avx2;
#include "runtime/kernels/stem_conv_rows.inc"
}  // namespace

RowsFn rows_avx2(ConvAct a) { return pick_rows(a); }
}  // namespace stem

namespace {

constexpr int64_t kMaxInputChannels = 4;

class StemConvKernel final : public Kernel {
 public:
  StemConvKernel(std::unique_ptr<Kernel> ref, WindowAttrs w, int64_t group, FusedSpec spec)
      : ref_(std::move(ref)), w_(std::move(w)), group_(group), spec_(spec) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : "stem_direct"; }
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override { return ref_->infer(in, out); }

  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const Shape& xs = in[0].shape;
    const Shape& ws = in[1].shape;
    const bool avx512 = cpu_info().avx512;
    const int64_t lanes = avx512 ? 16 : 8;
    has_bias_ = in.size() > 2 && in[2].present();
    const bool has_res = in.size() > 3 && in[3].present();
    const int64_t block = conv_channel_block(spec_.y);
    use_ref_ = !cpu_info().avx2 || spec_.x != ConvLayout::kNchw || (spec_.y != ConvLayout::kNhwc && block != lanes) || has_res ||
               group_ != 1 || xs.rank() != 4 || ws.rank() != 4 || xs[1] > kMaxInputChannels || in[0].dtype != DType::kFloat32 ||
               in[1].dtype != DType::kFloat32 || (has_bias_ && in[2].dtype != DType::kFloat32) || xs.numel() == 0 ||
               ws.numel() == 0 || out[0].numel() == 0;
    if (!use_ref_) {
      KILN_ASSIGN_OR_RETURN(const WindowGeom wg, forward_window_geometry(w_, xs.data() + 2, ws.data() + 2, 2, false));
      use_ref_ = wg.dil[0] != 1 || wg.dil[1] != 1;
      g_ = stem::Geom{};
      g_.C = xs[1], g_.H = xs[2], g_.W = xs[3];
      g_.OC = ws[0], g_.OCp = (ws[0] + stem::kPack - 1) / stem::kPack * stem::kPack;
      g_.OH = wg.out[0], g_.OW = wg.out[1], g_.KH = wg.k[0], g_.KW = wg.k[1];
      g_.sh = wg.stride[0], g_.sw = wg.stride[1], g_.ph = wg.pad_begin[0], g_.pw = wg.pad_begin[1];
      const bool nhwc = spec_.y == ConvLayout::kNhwc;
      g_.pixel_stride = nhwc ? g_.OC : lanes;
      g_.vector_stride = nhwc ? lanes : g_.OH * g_.OW * lanes;
      g_.image_stride = g_.OC * g_.OH * g_.OW;
      g_.alpha = spec_.alpha, g_.beta = spec_.beta;
    }
    if (use_ref_) return ref_->prepare(in, out);
    rows_ = avx512 ? stem::rows_avx512(spec_.act) : stem::rows_avx2(spec_.act);
    batch_ = xs[0];
    if (!packed_ || packed_src_ != in[1].data) {
      const int64_t C = g_.C, KH = g_.KH, KW = g_.KW, OC = g_.OC, OCp = g_.OCp;
      const size_t bytes = sizeof(float) * static_cast<size_t>(C * KH * KW * OCp);
      const float* w = in[1].as<const float>();
      KILN_ASSIGN_OR_RETURN(packed_, shared_packed_weights(w, in[1].nbytes(), "stem_direct:" + ws.str(), bytes, [&](void* dst) {
                              // W [OC, C, KH, KW] as [C][KH][KW][OCp], zero past OC.
                              float* p = static_cast<float*>(dst);
                              std::memset(p, 0, bytes);
                              for (int64_t oc = 0; oc < OC; ++oc)
                                for (int64_t t = 0; t < C * KH * KW; ++t) p[t * OCp + oc] = w[oc * C * KH * KW + t];
                              return Status::Ok();
                            }));
      packed_src_ = in[1].data;
    }
    bias_.assign(static_cast<size_t>(g_.OCp), 0.0f);
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (use_ref_) return ref_->run(in, out);
    if (has_bias_) std::copy_n(in[2].as<const float>(), g_.OC, bias_.begin());
    const float* x = in[0].as<const float>();
    const float* w = static_cast<const float*>(packed_.get());
    float* y = out[0].as<float>();
    const double taps = static_cast<double>(g_.C * g_.KH * g_.KW);
    const LoopCost cost{4.0 * static_cast<double>(g_.OW * (g_.OC + g_.sh * g_.C * g_.KW)),
                        2.0 * taps * static_cast<double>(g_.OW * g_.OC)};
    ThreadPool::global().parallel_for(batch_ * g_.OH, cost, [&](int64_t r0, int64_t r1, int) { rows_(g_, x, w, bias_.data(), y, r0, r1); });
    return Status::Ok();
  }

 private:
  std::unique_ptr<Kernel> ref_;
  WindowAttrs w_;
  int64_t group_;
  FusedSpec spec_;
  bool use_ref_ = false, has_bias_ = false;
  stem::Geom g_{};
  stem::RowsFn rows_ = nullptr;
  int64_t batch_ = 0;
  std::vector<float> bias_;
  std::shared_ptr<void> packed_;
  const void* packed_src_ = nullptr;
};

}  // namespace

void register_stem_conv_kernels(KernelRegistry& r) {
  // Below "onednn" (10): tactic selection picks it where it times faster. AVX2 + FMA, the engine
  // baseline; the AVX-512 blocks are picked where the loading CPU has them.
  r.add_kiln_op({"FusedConv", "stem_direct", 6, make_kiln_fused_conv<StemConvKernel>, 0});
}

}  // namespace kiln
