// FusedConv impl "depthwise_direct": depthwise convolutions (group = C = output channels) of
// channels-inner data (nChw8c, nChw16c, NHWC) with the whole epilogue in registers.
//
// On an AVX2 machine conv_channels_last keeps EfficientNet's and MobileNet's activations in
// nChw8c, and oneDNN's jit_dw runs their depthwise convolutions there. Its SiLU post-op costs an
// exponential per value, so kiln applies its own SiLU in a second pass over the output
// (onednn_conv_kernels.cpp): one more read and write of a tensor that no longer sits in L1. Here
// each output value gets its bias, residual and activation before it is stored once.
//
// The vector is 8 channels: one nChw8c block, half an nChw16c block, or 8 adjacent NHWC channels
// (the last vector of an NHWC tensor masked to C % 8). One work item is (image, channel vector,
// band of output rows). Its input rows go once each into a ring of KH rows in per-thread scratch,
// 8 floats a pixel and zero-padded left and right, so every output column reads every tap of the
// kernel without a bounds check (taps above and below the image are skipped per row): 7 output
// columns at a time in 7 accumulators, the weight of a tap one vector load for all 7 (blocks
// clear of the padding read an nChw8c X in place, so there only the edge pixels are copied).
// oneDNN's jit_dw splits its rows into edges and an interior instead; with 7- and 14-pixel rows
// and 5x5 kernels nearly every column is an edge, and the copy (one load and store per pixel, in
// L1) costs less than edge code. Weights are repacked once per plan as [C/8][KH][KW][8] (zero
// lanes past C).
//
// Anything else (NCHW, which "nchw_direct" covers; a depthwise multiplier; dilation; 1-D;
// kernels over 16 rows; non-float32) runs the reference and reports "reference", so tactic selection sees the impl as
// unavailable there. It ranks below "onednn": tactic selection picks it where it times faster.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <string>

#include "runtime/kernels/conv_activation_avx2.h"
#include "runtime/kernels/conv_pixel_io.h"
#include "runtime/kernels/fused_conv_common.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/packed_weights.h"
#include "runtime/simd/vec_avx2.h"
#include "runtime/thread_pool.h"
#include "runtime/thread_scratch.h"

namespace kiln {

namespace {

namespace sv = simd::avx2;
using V = sv::V;
constexpr int64_t kLanes = 8;
// Output columns per block, one accumulator each: 7 leaves registers for the 7 input vectors a
// stride-1 row keeps between taps (the compiler slides them instead of reloading) and the weight;
// 8 spills an accumulator. The models' widths (7, 14, 28, 56, 112) are multiples of 7.
constexpr int kCols = 7;

// Kernels up to this tall (a ring slot per row); taller ones run the reference.
constexpr int64_t kMaxKh = 16;

// The window, and the ring's padded row: `row_pixels` pixels of 8 floats, input column c at
// pixel c + pw, zeros around it, wide enough for every tap of the last block of output columns.
// Blocks [inner_begin, inner_end) of kCols output columns read no padding: where X's pixels are 8
// floats (nChw8c) they read X itself, and the ring holds only the pixels [0, left_pixels) and
// [right_pixels, row_pixels) that the other blocks read.
struct DwGeom {
  int64_t H = 0, W = 0, OH = 0, OW = 0, KH = 0, KW = 0, sh = 1, sw = 1, ph = 0, pw = 0;
  int64_t row_pixels = 0, inner_begin = 0, inner_end = 0, left_pixels = 0, right_pixels = 0;
  float alpha = 0.0f, beta = 0.0f;  // Clip's bounds
};

// One channel vector of one image: where its pixel (0, 0) sits in X, Y and the residual, their row
// and pixel strides, its packed weights [KH][KW][8] and bias (null: none), and its live lanes.
struct DwJob {
  const float* x;
  int64_t xh, xw;
  float* y;
  int64_t yh, yw;
  const float* r;
  int64_t rh, rw;
  const float* w;
  const float* b;
  int64_t lanes;
};

template <bool kMasked>
inline V load(const float* p, __m256i mask) {
  if constexpr (kMasked) return _mm256_maskload_ps(p, mask);
  else return sv::loadu(p);
}
template <bool kMasked>
inline void store(float* p, __m256i mask, V v) {
  if constexpr (kMasked) _mm256_maskstore_ps(p, mask, v);
  else sv::storeu(p, v);
}

// Output columns [ow, ow + n) of row `oh` (n <= kCols) from the ring rows rows[i0 .. i1): kCols
// accumulators over every tap (columns past n read the ring's zero padding and are dropped), then
// residual and activation, one store each. kS, kK: the column stride and kernel width when 1 or 2
// and 3 or 5 (the tap loop then unrolls), else 0.
template <int kS, int kK, ConvAct A, bool kMasked, bool kRes>
inline void output_block(const DwGeom& g, const DwJob& j, const float* const* rows, int64_t i0, int64_t i1, int64_t oh, int64_t ow,
                         int64_t n, V bias, __m256i mask) {
  const int64_t sw = kS ? kS : g.sw, step = sw * kLanes, KW = kK ? kK : g.KW;
  V acc[kCols];
#pragma GCC unroll 8
  for (int u = 0; u < kCols; ++u) acc[u] = bias;
  for (int64_t i = i0; i < i1; ++i) {
    const float* xr = rows[i] + ow * step;
    const float* wr = j.w + i * KW * kLanes;
#pragma GCC unroll 5
    for (int64_t t = 0; t < KW; ++t) {
      const V wv = sv::loadu(wr + t * kLanes);
      const float* xp = xr + t * kLanes;
#pragma GCC unroll 8
      for (int u = 0; u < kCols; ++u) acc[u] = sv::fmadd(wv, sv::loadu(xp + u * step), acc[u]);
    }
  }
  float* yp = j.y + oh * j.yh + ow * j.yw;
#pragma GCC unroll 8
  for (int u = 0; u < kCols; ++u) {
    if (u >= n) break;
    V v = acc[u];
    if constexpr (kRes) v = sv::add(v, load<kMasked>(j.r + oh * j.rh + (ow + u) * j.rw, mask));
    store<kMasked>(yp + u * j.yw, mask, conv_activate<A>(v, g.alpha, g.beta));
  }
}

// Output rows [oh0, oh1) of one channel vector. `ring` holds KH padded rows; input row r sits in
// slot r % KH, so each input row is copied once for all the output rows that read it.
template <int kS, int kK, ConvAct A, bool kMasked, bool kRes>
void depthwise_rows(const DwGeom& g, const DwJob& j, int64_t oh0, int64_t oh1, float* ring) {
  const __m256i mask = sv::first_lanes(j.lanes);
  const V bias = j.b ? load<kMasked>(j.b, mask) : sv::zero();
  const int64_t RF = g.row_pixels * kLanes, pad_end = (g.pw + g.W) * kLanes;
  const bool direct = !kMasked && j.xw == kLanes && g.inner_begin < g.inner_end;
  // The input columns the ring needs: all of them, or those of the edge blocks.
  const int64_t copy0_end = direct ? std::clamp<int64_t>(g.left_pixels - g.pw, 0, g.W) : g.W;
  const int64_t copy1_begin = direct ? std::clamp<int64_t>(g.right_pixels - g.pw, copy0_end, g.W) : g.W;
  for (int64_t s = 0; s < g.KH; ++s) {
    float* slot = ring + s * RF;
    std::fill(slot, slot + g.pw * kLanes, 0.0f);
    std::fill(slot + pad_end, slot + RF, 0.0f);
  }
  const float* rows[kMaxKh];
  const float* xrows[kMaxKh];
  int64_t loaded = INT64_MIN;  // rows below this one are in the ring (the last KH of them)
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const int64_t top = oh * g.sh - g.ph;
    const int64_t i0 = std::max<int64_t>(0, -top), i1 = std::min(g.KH, g.H - top);
    const int64_t xw = j.xw;
    for (int64_t r = std::max(loaded, top + i0); r < top + i1; ++r) {
      float* d = ring + (r % g.KH) * RF + g.pw * kLanes;
      const float* src = j.x + r * j.xh;
      for (int64_t c = 0; c < copy0_end; ++c) sv::storeu(d + c * kLanes, load<kMasked>(src + c * xw, mask));
      for (int64_t c = copy1_begin; c < g.W; ++c) sv::storeu(d + c * kLanes, load<kMasked>(src + c * xw, mask));
    }
    loaded = std::max(loaded, top + i1);
    for (int64_t i = i0; i < i1; ++i) {
      rows[i] = ring + ((top + i) % g.KH) * RF;
      // X's row as a ring row: pixel p at column p - pw (only the inner blocks' pixels are read).
      if (direct) xrows[i] = j.x + (top + i) * j.xh - g.pw * kLanes;
    }
    for (int64_t ow = 0, b = 0; ow < g.OW; ow += kCols, ++b) {
      const bool inner = direct && b >= g.inner_begin && b < g.inner_end;
      output_block<kS, kK, A, kMasked, kRes>(g, j, inner ? xrows : rows, i0, i1, oh, ow, std::min<int64_t>(kCols, g.OW - ow), bias, mask);
    }
  }
}

using RowsFn = void (*)(const DwGeom&, const DwJob&, int64_t, int64_t, float*);

template <int kS, ConvAct A, bool kMasked, bool kRes>
RowsFn rows_fn_kw(int64_t kw) {
  if constexpr (kS == 0) return &depthwise_rows<0, 0, A, kMasked, kRes>;
  else return kw == 3 ? &depthwise_rows<kS, 3, A, kMasked, kRes> : kw == 5 ? &depthwise_rows<kS, 5, A, kMasked, kRes> : &depthwise_rows<kS, 0, A, kMasked, kRes>;
}

template <ConvAct A, bool kMasked, bool kRes>
RowsFn rows_fn_of(int64_t sw, int64_t kw) {
  return sw == 1 ? rows_fn_kw<1, A, kMasked, kRes>(kw) : sw == 2 ? rows_fn_kw<2, A, kMasked, kRes>(kw) : rows_fn_kw<0, A, kMasked, kRes>(kw);
}

template <ConvAct A>
RowsFn rows_fn(bool masked, bool res, int64_t sw, int64_t kw) {
  if (masked) return res ? rows_fn_of<A, true, true>(sw, kw) : rows_fn_of<A, true, false>(sw, kw);
  return res ? rows_fn_of<A, false, true>(sw, kw) : rows_fn_of<A, false, false>(sw, kw);
}

RowsFn pick_rows(ConvAct a, bool masked, bool res, int64_t sw, int64_t kw) {
  return dispatch_conv_act(a, [&]<ConvAct A>() { return rows_fn<A>(masked, res, sw, kw); });
}

bool channels_inner(ConvLayout l) { return l != ConvLayout::kNchw; }

class DepthwiseConvKernel final : public Kernel {
 public:
  DepthwiseConvKernel(std::unique_ptr<Kernel> ref, WindowAttrs w, int64_t group, FusedSpec spec)
      : ref_(std::move(ref)), w_(std::move(w)), group_(group), spec_(spec) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : "depthwise_direct"; }
  // Each output vector adds its residual vector in registers before its one store.
  bool writes_over_input(size_t i) const override { return i == 3 && !use_ref_ && has_res_; }
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override { return ref_->infer(in, out); }

  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_ASSIGN_OR_RETURN(const Shape xs, conv_nchw_shape(spec_.x, in[0].shape, "input 0"));
    const Shape& ws = in[1].shape;
    has_bias_ = in.size() > 2 && in[2].present();
    has_res_ = in.size() > 3 && in[3].present();
    use_ref_ = !channels_inner(spec_.x) || !channels_inner(spec_.y) || (has_res_ && !channels_inner(spec_.res)) || xs.rank() != 4 ||
               ws.rank() != 4 || in[0].dtype != DType::kFloat32 || in[1].dtype != DType::kFloat32 ||
               (has_bias_ && in[2].dtype != DType::kFloat32) || (has_res_ && in[3].dtype != DType::kFloat32) || xs.numel() == 0 ||
               out[0].numel() == 0 || group_ != xs[1] || ws[0] != xs[1] || ws[1] != 1;
    if (!use_ref_) {
      KILN_ASSIGN_OR_RETURN(const WindowGeom wg, forward_window_geometry(w_, xs.data() + 2, ws.data() + 2, 2, false));
      const Geom2d g = Geom2d::of(wg);
      use_ref_ = g.dil[0] != 1 || g.dil[1] != 1 || g.k[0] > kMaxKh;
      g_ = DwGeom{g.in[0], g.in[1], g.out[0], g.out[1], g.k[0], g.k[1], g.stride[0], g.stride[1], g.pad_begin[0], g.pad_begin[1]};
    }
    if (use_ref_) return ref_->prepare(in, out);

    batch_ = xs[0];
    channels_ = xs[1];
    vectors_ = (channels_ + kLanes - 1) / kLanes;
    DwGeom& g = g_;
    const int64_t owr = (g.OW + kCols - 1) / kCols * kCols;
    g.row_pixels = std::max(g.pw + g.W, (owr - 1) * g.sw + g.KW);
    // Block b reads the padded pixels [b kCols sw, ((b + 1) kCols - 1) sw + KW); inner when they
    // all lie in [pw, pw + W).
    const int64_t blocks = owr / kCols;
    auto first_pixel = [&](int64_t b) { return b * kCols * g.sw; };
    auto end_pixel = [&](int64_t b) { return ((b + 1) * kCols - 1) * g.sw + g.KW; };
    g.inner_begin = 0;
    while (g.inner_begin < blocks && first_pixel(g.inner_begin) < g.pw) ++g.inner_begin;
    g.inner_end = g.inner_begin;
    while (g.inner_end < blocks && end_pixel(g.inner_end) <= g.pw + g.W) ++g.inner_end;
    g.left_pixels = g.inner_begin > 0 ? end_pixel(g.inner_begin - 1) : 0;
    g.right_pixels = g.inner_end < blocks ? first_pixel(g.inner_end) : g.row_pixels;
    g.alpha = spec_.alpha;
    g.beta = spec_.beta;
    rows_[0] = pick_rows(spec_.act, false, has_res_, g.sw, g.KW);
    rows_[1] = pick_rows(spec_.act, true, has_res_, g.sw, g.KW);

    if (!packed_ || packed_src_ != in[1].data) {
      const int64_t C = channels_, taps = g.KH * g.KW, CV = vectors_;
      const float* w = in[1].as<const float>();
      const size_t bytes = sizeof(float) * static_cast<size_t>(CV * taps * kLanes);
      KILN_ASSIGN_OR_RETURN(packed_, shared_packed_weights(w, in[1].nbytes(), "depthwise_direct_8:" + ws.str(), bytes, [&](void* dst) {
                              // [C/8][KH][KW][8]: a tap's 8 channels in one vector, zero past C.
                              float* p = static_cast<float*>(dst);
                              for (int64_t v = 0; v < CV; ++v)
                                for (int64_t t = 0; t < taps; ++t)
                                  for (int64_t l = 0; l < kLanes; ++l) {
                                    const int64_t c = v * kLanes + l;
                                    p[(v * taps + t) * kLanes + l] = c < C ? w[c * taps + t] : 0.0f;
                                  }
                              return Status::Ok();
                            }));
      packed_src_ = in[1].data;
    }

    // Bands of output rows: enough work items for every thread to get several, so a late
    // worker's share is small. NHWC walks the vectors innermost: neighbouring vectors share
    // cache lines.
    const int64_t threads = ThreadPool::global().max_threads();
    const int64_t planes = batch_ * vectors_;
    bands_ = std::clamp<int64_t>((8 * threads + planes - 1) / planes, 1, g.OH);
    band_rows_ = (g.OH + bands_ - 1) / bands_;
    bands_ = (g.OH + band_rows_ - 1) / band_rows_;
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (use_ref_) return ref_->run(in, out);
    const DwGeom& g = g_;
    const int64_t C = channels_, CV = vectors_, bands = bands_, band_rows = band_rows_;
    const ConvAddressing ax = ConvAddressing::of(spec_.x, C, g.H, g.W);
    const ConvAddressing ay = ConvAddressing::of(spec_.y, C, g.OH, g.OW);
    const ConvAddressing ar = ConvAddressing::of(spec_.res, C, g.OH, g.OW);
    const float* x = in[0].as<const float>();
    const float* bias = has_bias_ ? in[2].as<const float>() : nullptr;
    const float* res = has_res_ ? in[3].as<const float>() : nullptr;
    float* y = out[0].as<float>();
    const float* w = static_cast<const float*>(packed_.get());
    const bool vectors_inner = spec_.y == ConvLayout::kNhwc;
    const int64_t taps = g.KH * g.KW;
    const double rows = static_cast<double>(band_rows);
    const LoopCost cost{4.0 * kLanes * (rows * g.OW * (has_res_ ? 2 : 1) + (rows * g.sh + g.KH) * g.W),
                        2.0 * kLanes * static_cast<double>(taps) * rows * static_cast<double>(g.OW)};
    const size_t ring_bytes = sizeof(float) * static_cast<size_t>(g.KH * g.row_pixels * kLanes);
    std::atomic<bool> failed{false};
    ThreadPool::global().parallel_for(batch_ * CV * bands, cost, [&](int64_t b0, int64_t b1, int) {
      float* ring = static_cast<float*>(thread_scratch(ScratchSlot::kKernelRow, ring_bytes));
      if (!ring) {
        failed.store(true, std::memory_order_relaxed);
        return;
      }
      for (int64_t item = b0; item < b1; ++item) {
        const int64_t n = item / (CV * bands), rest = item % (CV * bands);
        const int64_t v = vectors_inner ? rest % CV : rest / bands, band = vectors_inner ? rest / CV : rest % bands;
        const int64_t c = v * kLanes;
        const DwJob j{x + ax.offset(n, c, 0, 0),
                      ax.h_stride,
                      ax.w_stride,
                      y + ay.offset(n, c, 0, 0),
                      ay.h_stride,
                      ay.w_stride,
                      res ? res + ar.offset(n, c, 0, 0) : nullptr,
                      ar.h_stride,
                      ar.w_stride,
                      w + v * taps * kLanes,
                      bias ? bias + c : nullptr,
                      std::min(kLanes, C - c)};
        const int64_t oh0 = band * band_rows;
        rows_[j.lanes < kLanes](g, j, oh0, std::min(g.OH, oh0 + band_rows), ring);
      }
    });
    if (failed.load(std::memory_order_relaxed)) return ResourceExhausted("depthwise_direct: out of memory for the row ring");
    return Status::Ok();
  }

 private:
  std::unique_ptr<Kernel> ref_;
  WindowAttrs w_;
  int64_t group_;
  FusedSpec spec_;
  bool use_ref_ = false, has_bias_ = false, has_res_ = false;
  DwGeom g_{};
  int64_t batch_ = 0, channels_ = 0, vectors_ = 0, bands_ = 1, band_rows_ = 1;
  RowsFn rows_[2] = {nullptr, nullptr};  // full vectors, the masked last one
  std::shared_ptr<void> packed_;
  const void* packed_src_ = nullptr;
};

}  // namespace

void register_depthwise_conv_kernels(KernelRegistry& r) {
  // Below "onednn" (10): tactic selection picks it where it times faster.
  r.add_kiln_op({"FusedConv", "depthwise_direct", 6,
                 make_kiln_fused_conv<DepthwiseConvKernel>,
                 0});  // AVX2 + FMA, the engine baseline
}

}  // namespace kiln
