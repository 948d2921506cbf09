// FusedConv impl "im2col_panel": the convolution as one GEMM on kiln's panel kernel
// (runtime/kernels/panel_gemm.h). Each output pixel's receptive field is copied into a row of A
// [N*OH*OW, KH*KW*C] (im2col, channels innermost, so a pixel's channels are one contiguous copy in
// NHWC and one per channel block in nChw8c/nChw16c), W is packed once as [KH*KW*C, OC] panels
// (shared by every context of the engine), and the epilogue (residual, activation, Y's layout) runs
// over the GEMM's [pixels, OC] rows.
//
// It exists for the convolutions oneDNN's direct AVX2 kernels run far below peak: few output pixels
// against many weights (ResNet's last stage: 7x7 pixels, 512x512x3x3 weights, 9.4 MB read from
// memory every run), which is the panel kernel's weight-streaming shape. Where the pixels are many,
// the im2col copy (KH*KW times the input) costs more than it saves and oneDNN wins. It ranks below
// "onednn", so tactic selection runs it only where it times faster. Groups other than 1, non-float32
// data and 3-D convolutions run the reference (which tactic selection reports as unavailable).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/kernels/conv_pixel_io.h"
#include "runtime/kernels/fused_conv_common.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/onednn_common.h"
#include "runtime/kernels/packed_weights.h"
#include "runtime/kernels/panel_gemm.h"
#include "runtime/kernels/vec_kernels.h"
#include "runtime/thread_pool.h"

namespace kiln {

namespace {

// The most A and GEMM-output rows of one chunk take: L3-sized, well above a batch-1 ResNet
// layer's own A (1-7 MB), so only batches and large images are cut.
constexpr int64_t kMaxChunkBytes = int64_t{8} << 20;

class Im2colConvKernel final : public Kernel {
 public:
  Im2colConvKernel(std::unique_ptr<Kernel> ref, WindowAttrs w, int64_t group, FusedSpec spec)
      : ref_(std::move(ref)), w_(std::move(w)), group_(group), spec_(spec) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : "im2col_panel"; }
  // The GEMM adds a residual in Y's layout as it stores each value (panel_gemm reads a residual
  // that is Y itself first); otherwise the epilogue reads a pixel's residual before writing its Y
  // from scratch. Only a GEMM writing Y before the epilogue reads the residual cannot share.
  bool writes_over_input(size_t i) const override { return i == 3 && !use_ref_ && has_res_ && (res_in_gemm_ || !y_direct_); }
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override { return ref_->infer(in, out); }

  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_ASSIGN_OR_RETURN(const Shape xs, conv_nchw_shape(spec_.x, in[0].shape, "input 0"));
    const Shape& ws = in[1].shape;
    const int n = xs.rank() - 2;
    use_ref_ = !panel_gemm::supported() || group_ != 1 || (n != 1 && n != 2) || in[0].dtype != DType::kFloat32 ||
               in[1].dtype != DType::kFloat32 || xs.numel() == 0 || ws.numel() == 0 || out[0].numel() == 0;
    if (use_ref_) return ref_->prepare(in, out);
    KILN_ASSIGN_OR_RETURN(const WindowGeom wg, forward_window_geometry(w_, xs.data() + 2, ws.data() + 2, n, false));
    g_ = Geom2d::of(wg);
    channels_ = xs[1];
    out_channels_ = ws[0];
    rows_ = xs[0] * g_.out[0] * g_.out[1];  // output pixels of the whole batch
    depth_ = g_.k[0] * g_.k[1] * channels_;
    has_bias_ = in.size() > 2 && in[2].present();
    has_res_ = in.size() > 3 && in[3].present();
    // A 1x1, stride-1, unpadded convolution of NHWC input reads X itself as A.
    // (Output size = input size there, so no end padding either.)
    direct_a_ = spec_.x == ConvLayout::kNhwc && g_.k[0] == 1 && g_.k[1] == 1 && g_.stride[0] == 1 && g_.stride[1] == 1 &&
                g_.pad_begin[0] == 0 && g_.pad_begin[1] == 0 && g_.out[0] == g_.in[0] && g_.out[1] == g_.in[1];
    // The GEMM writes Y itself when Y is NHWC; the residual joins it there when it is NHWC too.
    y_direct_ = spec_.y == ConvLayout::kNhwc;
    res_in_gemm_ = has_res_ && y_direct_ && spec_.res == ConvLayout::kNhwc;
    has_act_ = vec_activation(spec_.act, &act_op_);

    if (!packed_ || packed_src_ != in[1].data) {
      const int64_t K = depth_, N = out_channels_, C = channels_, KH = g_.k[0], KW = g_.k[1];
      const std::string layout = "im2col_panel" + std::to_string(panel_gemm::kPanelCols) + ":" + ws.str();
      const size_t bytes = sizeof(float) * static_cast<size_t>(panel_gemm::packed_floats(K, N));
      const float* w = in[1].as<const float>();
      KILN_ASSIGN_OR_RETURN(packed_, shared_packed_weights(w, in[1].nbytes(), layout, bytes, [&](void* dst) {
                              // W [OC, C, KH, KW] as [KH*KW*C, OC]: row (i * KW + j) * C + c.
                              std::vector<float> wk(static_cast<size_t>(K * N));
                              for (int64_t oc = 0; oc < N; ++oc)
                                for (int64_t c = 0; c < C; ++c)
                                  for (int64_t i = 0; i < KH; ++i)
                                    for (int64_t j = 0; j < KW; ++j)
                                      wk[static_cast<size_t>(((i * KW + j) * C + c) * N + oc)] = w[((oc * C + c) * KH + i) * KW + j];
                              panel_gemm::pack(wk.data(), K, N, static_cast<float*>(dst));
                              return Status::Ok();
                            }));
      packed_src_ = in[1].data;
    }
    // The GEMM runs over chunks of rows, so A (KH*KW copies of the input) and the GEMM's output
    // stay within kMaxChunkBytes whatever the batch: a stem convolution at batch 8 would otherwise
    // copy ~60 MB per run.
    chunk_rows_ = direct_a_ ? rows_ : std::min(rows_, std::max<int64_t>(6, kMaxChunkBytes / (4 * (depth_ + out_channels_))));
    const size_t a_floats = direct_a_ ? 0 : static_cast<size_t>(chunk_rows_ * depth_);
    const size_t z_floats = y_direct_ ? 0 : static_cast<size_t>(chunk_rows_ * out_channels_);
    // One residual row per thread slot, for residuals gathered out of a non-NHWC layout.
    const size_t r_floats = has_res_ && !res_in_gemm_ ? static_cast<size_t>(out_channels_ * ThreadPool::global().max_threads()) : 0;
    KILN_RETURN_IF_ERROR(grow_scratch(a_buf_, a_capacity_, sizeof(float) * a_floats, "im2col_panel"));
    KILN_RETURN_IF_ERROR(grow_scratch(z_buf_, z_capacity_, sizeof(float) * z_floats, "im2col_panel"));
    KILN_RETURN_IF_ERROR(grow_scratch(r_buf_, r_capacity_, sizeof(float) * r_floats, "im2col_panel"));
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (use_ref_) return ref_->run(in, out);
    const float* x = in[0].as<const float>();
    float* y = out[0].as<float>();
    const float* res = has_res_ ? in[3].as<const float>() : nullptr;
    const bool epilogue_needed = !y_direct_ || has_act_ || (has_res_ && !res_in_gemm_);
    for (int64_t r0 = 0; r0 < rows_; r0 += chunk_rows_) {
      const int64_t r1 = std::min(rows_, r0 + chunk_rows_);
      if (!direct_a_) im2col(x, r0, r1, static_cast<float*>(a_buf_.get()));
      // Chunk-relative A and GEMM output: an NHWC Y (and its NHWC residual) take the rows in place.
      float* z = y_direct_ ? y + r0 * out_channels_ : static_cast<float*>(z_buf_.get());
      panel_gemm::Args g;
      g.a = direct_a_ ? x + r0 * depth_ : static_cast<const float*>(a_buf_.get());
      g.M = r1 - r0;
      g.K = depth_;
      g.N = out_channels_;
      g.packed = static_cast<const float*>(packed_.get());
      g.bias = has_bias_ ? in[2].as<const float>() : nullptr;
      g.residual = res_in_gemm_ ? res + r0 * out_channels_ : nullptr;
      g.y = z;
      panel_gemm::run(g, omp_get_max_threads());
      if (epilogue_needed) epilogue(z, r0, r1, has_res_ && !res_in_gemm_ ? res : nullptr, y);
    }
    return Status::Ok();
  }

 private:
  // Rows [r0, r1) of A (output pixels of the whole batch) into a[0, r1 - r0).
  void im2col(const float* x, int64_t r0, int64_t r1, float* a) const {
    const PixelIo reader{spec_.x, channels_, g_.in[0], g_.in[1]};
    const int64_t OH = g_.out[0], OW = g_.out[1], C = channels_;
    const LoopCost cost{8.0 * static_cast<double>(depth_), 0};
    ThreadPool::global().parallel_for(r1 - r0, cost, [&](int64_t b, int64_t e, int) {
      for (int64_t r = r0 + b; r < r0 + e; ++r) {
        const int64_t nb = r / (OH * OW), oh = r / OW % OH, ow = r % OW;
        float* row = a + (r - r0) * depth_;
        for (int64_t i = 0; i < g_.k[0]; ++i) {
          const int64_t ih = oh * g_.stride[0] - g_.pad_begin[0] + i * g_.dil[0];
          for (int64_t j = 0; j < g_.k[1]; ++j) {
            float* dst = row + (i * g_.k[1] + j) * C;
            const int64_t iw = ow * g_.stride[1] - g_.pad_begin[1] + j * g_.dil[1];
            if (ih < 0 || ih >= g_.in[0] || iw < 0 || iw >= g_.in[1]) {
              std::memset(dst, 0, sizeof(float) * static_cast<size_t>(C));
            } else {
              reader.read(x, nb, ih, iw, dst);
            }
          }
        }
      }
    });
  }

  // Rows [r0, r1) of the output pixels, held in z [r1 - r0, OC]: + the residual (read out of its
  // layout), the activation, into Y's layout.
  void epilogue(float* z, int64_t r0, int64_t r1, const float* res, float* y) const {
    const int64_t OH = g_.out[0], OW = g_.out[1], OC = out_channels_;
    const PixelIo res_reader{spec_.res, OC, OH, OW}, y_writer{spec_.y, OC, OH, OW};
    const vec::Params params{spec_.alpha, spec_.beta};
    const vec::UnaryFn act = has_act_ ? vec::unary(act_op_) : nullptr;
    const vec::BinaryFn add = vec::binary(vec::Binary::kAdd);
    const LoopCost cost{12.0 * static_cast<double>(OC), 4.0 * static_cast<double>(OC)};
    float* rbuf = static_cast<float*>(r_buf_.get());
    ThreadPool::global().parallel_for(r1 - r0, cost, [&](int64_t b, int64_t e, int slot) {
      float* rrow = rbuf ? rbuf + slot * OC : nullptr;
      for (int64_t r = r0 + b; r < r0 + e; ++r) {
        const int64_t nb = r / (OH * OW), oh = r / OW % OH, ow = r % OW;
        float* row = z + (r - r0) * OC;
        if (res) {
          res_reader.read(res, nb, oh, ow, rrow);
          add(row, 1, rrow, 1, row, OC);
        }
        if (act) act(row, row, OC, params);
        if (!y_direct_) y_writer.write(row, y, nb, oh, ow);
      }
    });
  }

  std::unique_ptr<Kernel> ref_;
  WindowAttrs w_;
  int64_t group_;
  FusedSpec spec_;
  bool use_ref_ = false, has_bias_ = false, has_res_ = false, direct_a_ = false, y_direct_ = false, res_in_gemm_ = false;
  bool has_act_ = false;
  vec::Unary act_op_ = vec::Unary::kRelu;
  Geom2d g_{};
  int64_t channels_ = 0, out_channels_ = 0, rows_ = 0, depth_ = 0, chunk_rows_ = 0;
  std::shared_ptr<void> packed_, a_buf_, z_buf_, r_buf_;
  const void* packed_src_ = nullptr;
  size_t a_capacity_ = 0, z_capacity_ = 0, r_capacity_ = 0;
};

}  // namespace

void register_im2col_conv_kernels(KernelRegistry& r) {
  // Below "onednn" (10) and oneDNN's Winograd (8), above winograd_f4x3 (6): tactic selection picks
  // it where it times faster.
  r.add_kiln_op({"FusedConv", "im2col_panel", 7,
                 make_kiln_fused_conv<Im2colConvKernel>,
                 // AVX2 + FMA, the engine baseline: panel_gemm::run picks AVX-512 where the loading CPU has it.
                 0});
}

}  // namespace kiln
