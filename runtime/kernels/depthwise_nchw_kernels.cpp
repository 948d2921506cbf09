// FusedConv impl "depthwise_nchw": depthwise convolutions (group = C = output channels) of planar
// NCHW data, one channel per plane, with the whole epilogue in registers.
//
// ShuffleNet-V2's channel shuffles and splits keep its 58- and 116-channel branches NCHW (no
// whole blocks of 8 channels), so its depthwise convolutions see plain planes of 7 to 56 pixels a
// side. The vector here is 8 neighbouring output columns of one plane. One work item is (plane,
// band of output rows): the band's input rows go once each into a zero-padded copy in per-thread
// scratch, split by column phase at stride > 1 (phase q holds padded columns q, q + s, ...), so
// every tap of 8 outputs is one contiguous load at any stride and no output needs a bounds check.
// The output rows run kRows at a time over each column vector: an input row loaded once feeds
// every output row of the block that reads it (3x3, stride 1: 18 loads for 36 FMAs instead of
// 36), kRows accumulators hide the FMA latency, and the 3x3 weights stay in registers. Bias is
// the accumulators' start, residual and activation are applied per register before the one
// store. Column vectors run right to left, so a row's last, partial vector may store 8 lanes:
// the lanes past the row land on the next row's first columns, which are stored later; only
// where that would cross the item's last row (or a residual is read) is the store masked.
//
// The zero padding of a row is written once per chunk of items (the pad columns are the same for
// every plane of the geometry), the data columns per item, rows above or below the image per item.
//
// Anything else (other layouts, which "depthwise_direct" covers; a depthwise multiplier;
// dilation; 1-D; non-float32) runs the reference and reports "reference", so tactic selection
// sees the impl as unavailable there. It ranks below "onednn": tactic selection picks it where it
// times faster.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "runtime/kernels/conv_activation_avx2.h"
#include "runtime/kernels/conv_pixel_io.h"
#include "runtime/kernels/fused_conv_common.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/simd/vec_avx2.h"
#include "runtime/thread_pool.h"
#include "runtime/thread_scratch.h"

namespace kiln {

namespace {

namespace sv = simd::avx2;
using V = sv::V;
constexpr int64_t kLanes = 8;
// Output rows per block: 4 accumulators, the 9 weights of a 3x3 kernel and an input vector fit
// the 16 ymm registers.
constexpr int kRows = 4;
// Taps kept in a per-plane weight array; larger kernels run the reference.
constexpr int64_t kMaxTaps = 64;


// The window and the padded band buffer: a buffer row is `sw` phases of `m` floats (phase q's
// column k is padded column q + sw k, i.e. input column q + sw k - pw); phase q holds input in
// columns [lo[q], hi[q]), zeros elsewhere. `owr`: OW rounded up to whole vectors.
struct NchwDwGeom {
  int64_t H = 0, W = 0, OH = 0, OW = 0, KH = 0, KW = 0, sh = 1, sw = 1, ph = 0, pw = 0;
  int64_t owr = 0, m = 0, row_floats = 0;
  std::vector<int64_t> lo, hi, tap_off;  // tap_off[j]: column j's offset in a buffer row
  float alpha = 0.0f, beta = 0.0f;       // Clip's bounds
};

// One item: the plane's X, Y and residual (null: none), its weights [KH][KW] and bias, the output
// rows [oh0, oh1) and the padded buffer whose row 0 is padded input row oh0 sh.
struct NchwDwJob {
  const float* x;
  float* y;
  const float* r;
  const float* w;
  float bias;
  int64_t oh0, oh1;
  const float* buf;
};

// Output rows [oh, oh + R) at columns [ow, ow + 8 NV) of one plane. kS, kK: the stride and the
// square kernel's side when the geometry is (1 or 2, 3 or 5) or (1, 7) in both directions (the tap
// loops then unroll), else 0 and R = NV = 1. `n`: the valid lanes of the last vector (8 but for the row's last).
template <int kS, int kK, int R, int NV, ConvAct A, bool kRes>
inline void output_block(const NchwDwGeom& g, const NchwDwJob& j, const V* wv, int64_t oh, int64_t ow, int64_t n) {
  V acc[R][NV];
  const V b = sv::set1(j.bias);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = b;
  const int64_t RF = g.row_floats;
  const float* rows = j.buf + (oh - j.oh0) * (kS ? kS : g.sh) * RF + ow;
  if constexpr (kS != 0) {
    constexpr int kIn = (R - 1) * kS + kK;  // input rows of the block
#pragma GCC unroll 16
    for (int i = 0; i < kIn; ++i) {
      const float* row = rows + i * RF;
#pragma GCC unroll 8
      for (int t = 0; t < kK; ++t) {
        V x[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) x[v] = sv::loadu(row + (t % kS) * g.m + t / kS + v * kLanes);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const int ki = i - r * kS;
          if (ki >= 0 && ki < kK) {
            const V wt = wv[ki * kK + t];
#pragma GCC unroll 2
            for (int v = 0; v < NV; ++v) acc[r][v] = sv::fmadd(wt, x[v], acc[r][v]);
          }
        }
      }
    }
  } else {
    static_assert(R == 1 && NV == 1);
    const int64_t* off = g.tap_off.data();
    for (int64_t ki = 0; ki < g.KH; ++ki) {
      const float* row = rows + ki * RF;
      for (int64_t t = 0; t < g.KW; ++t) acc[0][0] = sv::fmadd(wv[ki * g.KW + t], sv::loadu(row + off[t]), acc[0][0]);
    }
  }
  const int64_t end = j.oh1 * g.OW;  // the item's last output + 1 (plane offsets)
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      const int64_t at = (oh + r) * g.OW + ow + v * kLanes, lanes = v == NV - 1 ? n : kLanes;
      // A full store of a partial vector runs into the next row (stored later, see the file's
      // comment) unless that is past the item or the residual is read there.
      const bool full = lanes == kLanes || (!kRes && at + kLanes <= end);
      V y = acc[r][v];
      if (full) {
        if constexpr (kRes) y = sv::add(y, sv::loadu(j.r + at));
        sv::storeu(j.y + at, conv_activate<A>(y, g.alpha, g.beta));
      } else {
        if constexpr (kRes) y = sv::add(y, sv::load_partial(j.r + at, lanes));
        sv::store_partial(j.y + at, lanes, conv_activate<A>(y, g.alpha, g.beta));
      }
    }
}

// Output rows [oh, oh + R) of the item: its column vectors right to left, two at a time.
template <int kS, int kK, int R, ConvAct A, bool kRes>
inline void row_block(const NchwDwGeom& g, const NchwDwJob& j, const V* wv, int64_t oh) {
  const int64_t last = g.owr - kLanes, tail = g.OW - last;
  int64_t ow = last, n = tail;
  if constexpr (kS != 0) {
    for (; ow >= kLanes; ow -= 2 * kLanes, n = kLanes) output_block<kS, kK, R, 2, A, kRes>(g, j, wv, oh, ow - kLanes, n);
  }
  for (; ow >= 0; ow -= kLanes, n = kLanes) output_block<kS, kK, R, 1, A, kRes>(g, j, wv, oh, ow, n);
}

// The item's output rows: blocks of kRows rows, then one of 2 and one of 1 as needed.
template <int kS, int kK, ConvAct A, bool kRes>
void plane_rows(const NchwDwGeom& g, const NchwDwJob& j) {
  V wv[kMaxTaps];
  if constexpr (kK != 0) {
#pragma GCC unroll 64
    for (int t = 0; t < kK * kK; ++t) wv[t] = sv::set1(j.w[t]);
  } else {
    for (int64_t t = 0; t < g.KH * g.KW; ++t) wv[t] = sv::set1(j.w[t]);
  }
  int64_t oh = j.oh0;
  if constexpr (kS != 0) {
    for (; oh + kRows <= j.oh1; oh += kRows) row_block<kS, kK, kRows, A, kRes>(g, j, wv, oh);
    if (oh + 2 <= j.oh1) {
      row_block<kS, kK, 2, A, kRes>(g, j, wv, oh);
      oh += 2;
    }
  }
  for (; oh < j.oh1; ++oh) row_block<kS, kK, 1, A, kRes>(g, j, wv, oh);
}

using RowsFn = void (*)(const NchwDwGeom&, const NchwDwJob&);

template <ConvAct A, bool kRes>
RowsFn rows_of(int64_t s, int64_t k) {
  if (s == 1 && k == 3) return &plane_rows<1, 3, A, kRes>;
  if (s == 2 && k == 3) return &plane_rows<2, 3, A, kRes>;
  if (s == 1 && k == 5) return &plane_rows<1, 5, A, kRes>;
  if (s == 2 && k == 5) return &plane_rows<2, 5, A, kRes>;
  if (s == 1 && k == 7) return &plane_rows<1, 7, A, kRes>;  // ConvNeXt's
  return &plane_rows<0, 0, A, kRes>;
}

template <ConvAct A>
RowsFn rows_fn(bool res, int64_t s, int64_t k) {
  return res ? rows_of<A, true>(s, k) : rows_of<A, false>(s, k);
}

RowsFn pick_rows(ConvAct a, bool res, int64_t s, int64_t k) {
  return dispatch_conv_act(a, [&]<ConvAct A>() { return rows_fn<A>(res, s, k); });
}

// Input row `xr` (W floats) into buffer row `dst`. Strides 1 and 2 move 8 (16) input columns per
// step, the last step's loads masked to the row, so the zeros of the masked lanes land in the
// phase's right padding (the phases' slack, see prepare()). Other strides go column by column.
void copy_row(const NchwDwGeom& g, const float* xr, float* dst) {
  const int64_t W = g.W, pw = g.pw;
  if (g.sw == 1) {
    float* d = dst + pw;
    int64_t k = 0;
    for (; k + kLanes <= W; k += kLanes) sv::storeu(d + k, sv::loadu(xr + k));
    if (k < W) sv::storeu(d + k, sv::load_partial(xr + k, W - k));
  } else if (g.sw == 2) {
    // Input column c is padded column c + pw: phase (c + pw) % 2, index (c + pw) / 2.
    float* ev = dst + (pw % 2) * g.m + pw / 2;
    float* od = dst + ((pw + 1) % 2) * g.m + (pw + 1) / 2;
    for (int64_t k = 0; 2 * k < W; k += kLanes) {
      const int64_t c = 2 * k;
      const __m256 a = c + 8 <= W ? sv::loadu(xr + c) : sv::load_partial(xr + c, W - c);
      const __m256 b = c + 16 <= W ? sv::loadu(xr + c + 8) : c + 8 < W ? sv::load_partial(xr + c + 8, W - c - 8) : sv::zero();
      V e, o;
      sv::deinterleave2(a, b, &e, &o);
      sv::storeu(ev + k, e);
      sv::storeu(od + k, o);
    }
  } else {
    for (int64_t q = 0; q < g.sw; ++q) {
      const int64_t lo = g.lo[static_cast<size_t>(q)], n = g.hi[static_cast<size_t>(q)] - lo;
      const int64_t col = q + g.sw * lo - pw;  // the first input column of phase q
      for (int64_t k = 0; k < n; ++k) dst[q * g.m + lo + k] = xr[col + g.sw * k];
    }
  }
}

inline void zero_floats(float* p, int64_t n) {  // n a multiple of 8
  for (int64_t k = 0; k < n; k += kLanes) sv::storeu(p + k, sv::zero());
}

class DepthwiseNchwKernel final : public Kernel {
 public:
  DepthwiseNchwKernel(std::unique_ptr<Kernel> ref, WindowAttrs w, int64_t group, FusedSpec spec)
      : ref_(std::move(ref)), w_(std::move(w)), group_(group), spec_(spec) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : "depthwise_nchw"; }
  // Each output vector adds its residual vector in registers before its one store, and with a
  // residual no store runs past its row.
  bool writes_over_input(size_t i) const override { return i == 3 && !use_ref_ && has_res_; }
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override { return ref_->infer(in, out); }

  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const Shape& xs = in[0].shape;
    const Shape& ws = in[1].shape;
    has_bias_ = in.size() > 2 && in[2].present();
    has_res_ = in.size() > 3 && in[3].present();
    const bool nchw = spec_.x == ConvLayout::kNchw && spec_.y == ConvLayout::kNchw && (!has_res_ || spec_.res == ConvLayout::kNchw);
    use_ref_ = !nchw || xs.rank() != 4 || ws.rank() != 4 || in[0].dtype != DType::kFloat32 || in[1].dtype != DType::kFloat32 ||
               (has_bias_ && in[2].dtype != DType::kFloat32) || (has_res_ && in[3].dtype != DType::kFloat32) || xs.numel() == 0 ||
               out[0].numel() == 0 || group_ != xs[1] || ws[0] != xs[1] || ws[1] != 1 || ws[2] * ws[3] > kMaxTaps;
    if (!use_ref_) {
      KILN_ASSIGN_OR_RETURN(const WindowGeom wg, forward_window_geometry(w_, xs.data() + 2, ws.data() + 2, 2, false));
      const Geom2d g = Geom2d::of(wg);
      use_ref_ = g.dil[0] != 1 || g.dil[1] != 1;
      g_.H = g.in[0], g_.W = g.in[1], g_.OH = g.out[0], g_.OW = g.out[1], g_.KH = g.k[0], g_.KW = g.k[1];
      g_.sh = g.stride[0], g_.sw = g.stride[1], g_.ph = g.pad_begin[0], g_.pw = g.pad_begin[1];
    }
    if (use_ref_) return ref_->prepare(in, out);

    NchwDwGeom& g = g_;
    planes_ = xs[0] * xs[1];
    g.owr = (g.OW + kLanes - 1) / kLanes * kLanes;
    // Each phase's columns, with slack for the zeros a row's last (masked) step stores past the
    // row, a multiple of 8 floats.
    g.m = (g.owr + (g.KW - 1) / g.sw + 2 * kLanes + kLanes - 1) / kLanes * kLanes;
    g.row_floats = g.sw * g.m;
    g.tap_off.clear();
    for (int64_t t = 0; t < g.KW; ++t) g.tap_off.push_back((t % g.sw) * g.m + t / g.sw);
    g.lo.assign(static_cast<size_t>(g.sw), 0);
    g.hi.assign(static_cast<size_t>(g.sw), 0);
    for (int64_t q = 0; q < g.sw; ++q) {
      // Columns k with 0 <= q + sw k - pw < W.
      const int64_t lo = std::min(g.m, q >= g.pw ? 0 : (g.pw - q + g.sw - 1) / g.sw);
      const int64_t hi = g.W - 1 + g.pw - q < 0 ? lo : std::max(lo, std::min(g.m, (g.W - 1 + g.pw - q) / g.sw + 1));
      g.lo[static_cast<size_t>(q)] = lo;
      g.hi[static_cast<size_t>(q)] = hi;
    }
    g.alpha = spec_.alpha;
    g.beta = spec_.beta;
    const bool square = g.KH == g.KW && g.sh == g.sw && ((g.sw <= 2 && (g.KW == 3 || g.KW == 5)) || (g.sw == 1 && g.KW == 7));
    rows_ = pick_rows(spec_.act, has_res_, square ? g.sw : 0, square ? g.KW : 0);

    // Bands of output rows when there are few planes: enough items for every thread to get
    // several, so a late worker's share is small.
    const int64_t threads = ThreadPool::global().max_threads();
    bands_ = std::clamp<int64_t>((8 * threads + planes_ - 1) / planes_, 1, g.OH);
    band_rows_ = (g.OH + bands_ - 1) / bands_;
    bands_ = (g.OH + band_rows_ - 1) / band_rows_;
    buf_rows_ = (band_rows_ - 1) * g.sh + g.KH;
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (use_ref_) return ref_->run(in, out);
    const NchwDwGeom& g = g_;
    const int64_t C = in[0].shape[1], bands = bands_, band_rows = band_rows_;
    const float* x = in[0].as<const float>();
    const float* w = in[1].as<const float>();
    const float* bias = has_bias_ ? in[2].as<const float>() : nullptr;
    const float* res = has_res_ ? in[3].as<const float>() : nullptr;
    float* y = out[0].as<float>();
    const int64_t RF = g.row_floats, taps = g.KH * g.KW, buf_floats = buf_rows_ * RF;
    const double rows = static_cast<double>(band_rows);
    const LoopCost cost{4.0 * (rows * static_cast<double>(g.OW) * (has_res_ ? 2 : 1) + static_cast<double>(buf_rows_ * g.W)),
                        2.0 * static_cast<double>(taps) * rows * static_cast<double>(g.owr)};
    const size_t scratch_bytes = sizeof(float) * static_cast<size_t>(buf_floats);
    std::atomic<bool> failed{false};
    ThreadPool::global().parallel_for(planes_ * bands, cost, [&](int64_t i0, int64_t i1, int) {
      float* buf = static_cast<float*>(thread_scratch(ScratchSlot::kKernelRow, scratch_bytes));
      if (!buf) {
        failed.store(true, std::memory_order_relaxed);
        return;
      }
      zero_floats(buf, buf_floats);
      // Items walk the bands of a plane, then the planes (counters, not a division per item).
      int64_t p = i0 / bands, band = i0 % bands, c = p % C;
      for (int64_t item = i0; item < i1; ++item) {
        const int64_t oh0 = band * band_rows, oh1 = std::min(g.OH, oh0 + band_rows);
        const float* xp = x + p * g.H * g.W;
        // Buffer row b: input row oh0 sh - ph + b; rows outside the image are zeros.
        const int64_t r0 = oh0 * g.sh - g.ph, nrows = (oh1 - oh0 - 1) * g.sh + g.KH;
        for (int64_t b = 0; b < nrows; ++b) {
          const int64_t r = r0 + b;
          float* dst = buf + b * RF;
          if (r < 0 || r >= g.H) zero_floats(dst, RF);
          else copy_row(g, xp + r * g.W, dst);
        }
        const NchwDwJob j{xp, y + p * g.OH * g.OW, res ? res + p * g.OH * g.OW : nullptr, w + c * taps, bias ? bias[c] : 0.0f,
                          oh0, oh1, buf};
        rows_(g, j);
        if (++band == bands) {
          band = 0;
          ++p;
          if (++c == C) c = 0;
        }
      }
    });
    if (failed.load(std::memory_order_relaxed)) return ResourceExhausted("depthwise_nchw: out of memory for the padded rows");
    return Status::Ok();
  }

 private:
  std::unique_ptr<Kernel> ref_;
  WindowAttrs w_;
  int64_t group_;
  FusedSpec spec_;
  bool use_ref_ = false, has_bias_ = false, has_res_ = false;
  NchwDwGeom g_{};
  int64_t planes_ = 0, bands_ = 1, band_rows_ = 1, buf_rows_ = 0;
  RowsFn rows_ = nullptr;
};

}  // namespace

void register_depthwise_nchw_kernels(KernelRegistry& r) {
  // Below "onednn" (10): tactic selection picks it where it times faster.
  r.add_kiln_op({"FusedConv", "depthwise_nchw", 6,
                 make_kiln_fused_conv<DepthwiseNchwKernel>,
                 0});  // AVX2 + FMA, the engine baseline
}

}  // namespace kiln
