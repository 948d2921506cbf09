// FusedConv impl "nchw_direct": 1x1 and depthwise convolutions of values that stay NCHW, without
// leaving NCHW.
//
// conv_channels_last keeps a value in oneDNN's blocked layout only when its channels are whole
// blocks of 8; ShuffleNet-V2's 58- and 116-channel branches (and the tensors its channel shuffle
// and split move) stay NCHW, and oneDNN then reorders each convolution's input into padded
// nChw8c and its output back: three copies (three OpenMP regions) around a convolution of a few
// dozen microseconds. Here:
//
// - a 1x1, stride-1, unpadded, ungrouped convolution is per image one row-major SGEMM,
//   Y [OC, HW] = W [OC, C] X [C, HW] (oneDNN's dnnl_sgemm, on OpenMP like a primitive), then bias,
//   residual and activation per output row (kiln's pool);
// - a depthwise convolution (group = C = OC, no dilation) runs plane by plane on kiln's pool: each
//   plane copied into a zero-padded buffer split by column phase, so every tap of 8 neighbouring
//   outputs is one contiguous load at any stride (run_depthwise). Alone on an idle core oneDNN's
//   jit_dw with its two reorders is the faster, and tactic selection keeps it there; beside a
//   co-tenant each of its three OpenMP regions waits for a descheduled worker, and this one wins.
//
// Anything else (other layouts, kernels, groups, dilation, 1-D/3-D, non-float32) runs the
// reference and reports "reference", so tactic selection sees the impl as unavailable there. It
// ranks below "onednn" and "im2col_panel": tactic selection picks it where it times faster.
#include <immintrin.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/kernels/conv_pixel_io.h"
#include "runtime/kernels/fused_conv_common.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/vec_kernels.h"
#include "runtime/openmp_team.h"
#include "runtime/simd/vec_avx2.h"
#include "runtime/thread_pool.h"
#include "runtime/thread_scratch.h"

namespace kiln {

namespace {

// oneDNN generates its SGEMM kernels on the process's first call (milliseconds): done at prepare
// time, once, so no run pays it and tactic selection does not take it for the impl's speed.
void warm_up_sgemm() {
  static std::once_flag once;
  std::call_once(once, [] {
    float a[64] = {}, b[64] = {}, c[64] = {};
    const OpenmpRegionScope team;
    dnnl_sgemm('N', 'N', 8, 8, 8, 1.0f, a, 8, b, 8, 0.0f, c, 8);
  });
}

// n floats from src to dst, 8 at a time: a plane's rows are a few dozen floats, where a memcpy
// call costs more than the copy.
inline void copy_floats(const float* src, float* dst, int64_t n) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) _mm256_storeu_ps(dst + k, _mm256_loadu_ps(src + k));
  for (; k < n; ++k) dst[k] = src[k];
}

// One output row of a 3x3 depthwise convolution at column stride S (1 or 2) from the phase-split
// plane rows r0, r0 + RF, r0 + 2 RF (phase 1 at + M): the weights in registers, every tap a
// load at a fixed offset. Writes OWr columns (a multiple of 8) to out.
template <int S>
inline void depthwise3x3_row(const float* r0, int64_t RF, int64_t M, const __m256* wv, __m256 b, int64_t OWr, float* out) {
  for (int64_t ow = 0; ow < OWr; ow += 8) {
    __m256 acc0 = b, acc1 = _mm256_setzero_ps();
    for (int i = 0; i < 3; ++i) {
      const float* r = r0 + i * RF + ow;
      if constexpr (S == 1) {
        acc0 = _mm256_fmadd_ps(wv[3 * i], _mm256_loadu_ps(r), acc0);
        acc1 = _mm256_fmadd_ps(wv[3 * i + 1], _mm256_loadu_ps(r + 1), acc1);
        acc0 = _mm256_fmadd_ps(wv[3 * i + 2], _mm256_loadu_ps(r + 2), acc0);
      } else {
        acc0 = _mm256_fmadd_ps(wv[3 * i], _mm256_loadu_ps(r), acc0);
        acc1 = _mm256_fmadd_ps(wv[3 * i + 1], _mm256_loadu_ps(r + M), acc1);
        acc0 = _mm256_fmadd_ps(wv[3 * i + 2], _mm256_loadu_ps(r + 1), acc0);
      }
    }
    _mm256_storeu_ps(out + ow, _mm256_add_ps(acc0, acc1));
  }
}

class NchwConvKernel final : public Kernel {
 public:
  NchwConvKernel(std::unique_ptr<Kernel> ref, WindowAttrs w, int64_t group, FusedSpec spec)
      : ref_(std::move(ref)), w_(std::move(w)), group_(group), spec_(spec) {}
  // "reference" once prepare() handed the current shapes to the reference kernel.
  const char* impl_name() const override { return prepared_ && mode_ == Mode::kReference ? "reference" : "nchw_direct"; }
  // Pointwise: a residual that is Y itself is the GEMM's accumulator (beta 1). The depthwise rows
  // store the convolution before their epilogue adds the residual, so they cannot share.
  bool writes_over_input(size_t i) const override { return i == 3 && prepared_ && mode_ == Mode::kPointwise && has_res_; }
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
    const bool depthwise = group_ == channels_ && out_channels_ == channels_ && ws[1] == 1;
    if (!pointwise && !depthwise) return ref_->prepare(in, out);
    mode_ = pointwise ? Mode::kPointwise : Mode::kDepthwise;
    has_act_ = vec_activation(spec_.act, &act_op_);
    if (pointwise) warm_up_sgemm();
    else plan_depthwise();
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (mode_ == Mode::kReference) return ref_->run(in, out);
    const float* bias = has_bias_ ? in[2].as<const float>() : nullptr;
    const float* res = has_res_ ? in[3].as<const float>() : nullptr;
    if (mode_ == Mode::kPointwise) return run_pointwise(in[0].as<const float>(), in[1].as<const float>(), bias, res, out[0].as<float>());
    return run_depthwise(in[0].as<const float>(), in[1].as<const float>(), bias, res, out[0].as<float>());
  }

 private:
  enum class Mode { kReference, kPointwise, kDepthwise };

  // The depthwise plane buffer (run_depthwise): the padded plane's rows, each split by column
  // phase q = column % stride into M columns (phase q's column m is padded column q + sw * m),
  // and each tap's offset in it; per phase, the columns [lo, hi) that hold input (the rest stay 0).
  void plan_depthwise() {
    const int64_t sw = g_.stride[1], pw = g_.pad_begin[1], W = g_.in[1], KW = g_.k[1];
    dw_.owr = (g_.out[1] + 7) / 8 * 8;
    dw_.rows = (g_.out[0] - 1) * g_.stride[0] + g_.k[0];
    dw_.m = dw_.owr + (KW - 1) / sw;
    dw_.row_floats = sw * dw_.m;
    dw_.taps.clear();
    for (int64_t i = 0; i < g_.k[0]; ++i)
      for (int64_t j = 0; j < KW; ++j) dw_.taps.push_back(i * dw_.row_floats + (j % sw) * dw_.m + j / sw);
    dw_.lo.assign(static_cast<size_t>(sw), 0);
    dw_.hi.assign(static_cast<size_t>(sw), 0);
    for (int64_t q = 0; q < sw; ++q) {
      // Columns m with 0 <= q + sw * m - pw < W.
      const int64_t lo = std::min(dw_.m, q >= pw ? 0 : (pw - q + sw - 1) / sw);
      const int64_t hi = W - 1 + pw - q < 0 ? lo : std::max(lo, std::min(dw_.m, (W - 1 + pw - q) / sw + 1));
      dw_.lo[static_cast<size_t>(q)] = lo;
      dw_.hi[static_cast<size_t>(q)] = hi;
    }
  }

  // One output row of `n` values: + bias, + residual, activation.
  void epilogue_row(float* y, const float* res, int64_t n, const float* bias) const {
    if (bias) vec::binary(vec::Binary::kAdd)(y, 1, bias, 0, y, n);
    if (res) vec::binary(vec::Binary::kAdd)(y, 1, res, 1, y, n);
    if (has_act_) vec::unary(act_op_)(y, y, n, vec::Params{spec_.alpha, spec_.beta});
  }

  Status run_pointwise(const float* x, const float* w, const float* bias, const float* res, float* y) const {
    const int64_t C = channels_, OC = out_channels_, HW = g_.in[0] * g_.in[1];
    // A residual sharing Y's buffer is already where the GEMM writes: it accumulates onto it.
    const float beta = res == y ? 1.0f : 0.0f;
    if (res == y) res = nullptr;
    for (int64_t n = 0; n < batch_; ++n) {
      const OpenmpRegionScope team;  // dnnl_sgemm runs on OpenMP: the team is sized as for a primitive
      const dnnl_status_t st = dnnl_sgemm('N', 'N', OC, HW, C, 1.0f, w, C, x + n * C * HW, HW, beta, y + n * OC * HW, HW);
      if (st != dnnl_success) return Internal("nchw_direct: dnnl_sgemm failed with status " + std::to_string(static_cast<int>(st)));
    }
    if (!bias && !res && !has_act_) return Status::Ok();
    const LoopCost cost{12.0 * static_cast<double>(HW), 3.0 * static_cast<double>(HW)};
    ThreadPool::global().parallel_for(batch_ * OC, cost, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) epilogue_row(y + r * HW, res ? res + r * HW : nullptr, HW, bias ? bias + r % OC : nullptr);
    });
    return Status::Ok();
  }

  // Per plane, on kiln's pool: the plane's rows copied into a zero-padded buffer split by column
  // phase (plan_depthwise; zeroed once per chunk of planes, as only the input's columns change),
  // then each output row 8 columns at a time, every tap one contiguous load (stride 2 reads its
  // phases contiguously too), the bias first; columns past the row's end go to a spare row.
  Status run_depthwise(const float* x, const float* w, const float* bias, const float* res, float* y) const {
    const int64_t C = channels_, H = g_.in[0], W = g_.in[1], OH = g_.out[0], OW = g_.out[1];
    const int64_t sh = g_.stride[0], sw = g_.stride[1], ph = g_.pad_begin[0], pw = g_.pad_begin[1];
    const int64_t M = dw_.m, RF = dw_.row_floats, OWr = dw_.owr, taps = static_cast<int64_t>(dw_.taps.size());
    const int64_t plane_floats = dw_.rows * RF;
    const int64_t* off = dw_.taps.data();
    const bool epilogue = res || has_act_;
    const bool k3x3 = g_.k[0] == 3 && g_.k[1] == 3;
    const LoopCost cost{4.0 * static_cast<double>(H * W + OH * OW), 2.0 * static_cast<double>(OH * OWr * taps)};
    std::atomic<bool> failed{false};
    ThreadPool::global().parallel_for(batch_ * C, cost, [&](int64_t p0, int64_t p1, int) {
      const size_t floats = static_cast<size_t>(plane_floats + OWr + 2 * ((W + 1) / 2 + 8));
      float* buf = static_cast<float*>(thread_scratch(ScratchSlot::kKernelRow, sizeof(float) * floats));
      if (!buf) {
        failed.store(true, std::memory_order_relaxed);
        return;
      }
      float* spare = buf + plane_floats;
      float* evens = spare + OWr;  // a row's even and odd columns (stride 2)
      float* odds = evens + (W + 1) / 2 + 8;
      std::fill(buf, buf + plane_floats, 0.0f);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t c = p % C;
        const float* xp = x + p * H * W;
        const float* wp = w + c * taps;
        for (int64_t r = std::max<int64_t>(0, ph); r < std::min(dw_.rows, H + ph); ++r) {
          const float* xr = xp + (r - ph) * W;
          float* dst = buf + r * RF;
          if (sw == 2) {
            int64_t k = 0;
            for (; 2 * k + 16 <= W; k += 8) {
              const __m256 a = _mm256_loadu_ps(xr + 2 * k), b = _mm256_loadu_ps(xr + 2 * k + 8);
              __m256 e, o;
              simd::avx2::deinterleave2(a, b, &e, &o);
              _mm256_storeu_ps(evens + k, e);
              _mm256_storeu_ps(odds + k, o);
            }
            for (; 2 * k < W; ++k) {
              evens[k] = xr[2 * k];
              if (2 * k + 1 < W) odds[k] = xr[2 * k + 1];
            }
          }
          for (int64_t q = 0; q < sw; ++q) {
            const int64_t lo = dw_.lo[static_cast<size_t>(q)], n = dw_.hi[static_cast<size_t>(q)] - lo;
            if (n <= 0) continue;
            const int64_t col = q + sw * lo - pw;  // the first input column of phase q
            float* d = dst + q * M + lo;
            if (sw == 1) copy_floats(xr + col, d, n);
            else if (sw == 2) copy_floats((col % 2 == 0 ? evens : odds) + col / 2, d, n);
            else
              for (int64_t m = 0; m < n; ++m) d[m] = xr[col + sw * m];
          }
        }
        const __m256 b = _mm256_set1_ps(bias ? bias[c] : 0.0f);
        if (k3x3 && sw <= 2) {
          __m256 wv[9];
          for (int t = 0; t < 9; ++t) wv[t] = _mm256_set1_ps(wp[t]);
          for (int64_t oh = 0; oh < OH; ++oh) {
            float* yr = y + (p * OH + oh) * OW;
            float* out = OWr == OW ? yr : spare;
            if (sw == 1) depthwise3x3_row<1>(buf + oh * sh * RF, RF, M, wv, b, OWr, out);
            else depthwise3x3_row<2>(buf + oh * sh * RF, RF, M, wv, b, OWr, out);
            if (out != yr) copy_floats(spare, yr, OW);
            if (epilogue) epilogue_row(yr, res ? res + (p * OH + oh) * OW : nullptr, OW, nullptr);
          }
          continue;
        }
        for (int64_t oh = 0; oh < OH; ++oh) {
          const float* src = buf + oh * sh * RF;
          float* yr = y + (p * OH + oh) * OW;
          for (int64_t ow = 0; ow < OWr; ow += 8) {
            __m256 acc0 = b, acc1 = _mm256_setzero_ps();  // two chains: the FMA latency
            int64_t t = 0;
            for (; t + 2 <= taps; t += 2) {
              acc0 = _mm256_fmadd_ps(_mm256_broadcast_ss(wp + t), _mm256_loadu_ps(src + off[t] + ow), acc0);
              acc1 = _mm256_fmadd_ps(_mm256_broadcast_ss(wp + t + 1), _mm256_loadu_ps(src + off[t + 1] + ow), acc1);
            }
            if (t < taps) acc0 = _mm256_fmadd_ps(_mm256_broadcast_ss(wp + t), _mm256_loadu_ps(src + off[t] + ow), acc0);
            const __m256 v = _mm256_add_ps(acc0, acc1);
            if (ow + 8 <= OW) {
              _mm256_storeu_ps(yr + ow, v);
            } else {
              _mm256_storeu_ps(spare, v);
              std::memcpy(yr + ow, spare, sizeof(float) * static_cast<size_t>(OW - ow));
            }
          }
          if (epilogue) epilogue_row(yr, res ? res + (p * OH + oh) * OW : nullptr, OW, nullptr);
        }
      }
    });
    if (failed.load(std::memory_order_relaxed)) return ResourceExhausted("nchw_direct: out of memory for a depthwise plane buffer");
    return Status::Ok();
  }

  struct DepthwisePlan {
    int64_t owr = 0, rows = 0, m = 0, row_floats = 0;
    std::vector<int64_t> taps, lo, hi;
  };

  std::unique_ptr<Kernel> ref_;
  WindowAttrs w_;
  int64_t group_;
  FusedSpec spec_;
  Mode mode_ = Mode::kReference;
  bool prepared_ = false, has_bias_ = false, has_res_ = false, has_act_ = false;
  vec::Unary act_op_ = vec::Unary::kRelu;
  WindowGeom g_{};
  int64_t batch_ = 0, channels_ = 0, out_channels_ = 0;
  DepthwisePlan dw_;
};

}  // namespace

void register_nchw_conv_kernels(KernelRegistry& r) {
  // Below "onednn" (10), Winograd (8) and "im2col_panel" (7): tactic selection picks it where it
  // times faster.
  r.add_kiln_op({"FusedConv", "nchw_direct", 6,
                 make_kiln_fused_conv<NchwConvKernel>,
                 0});
}

}  // namespace kiln
