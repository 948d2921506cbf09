// The pools over channels-innermost data (runtime/kernels/nn_pool_blocked.h): MaxPool, AveragePool and
// GlobalAveragePool for the layouts builder/passes/conv_channels_last.cpp keeps between FusedConvs,
// NHWC and nChw8c (NHWC over N*C/8 images of 8 channels, so one AVX2 vector a pixel). The build
// targets x86-64-v3, so AVX2 is the baseline here; AVX-512 machines use NHWC, whose C-vectors these
// loops walk 8 lanes at a time.
#include "runtime/kernels/nn_pool_blocked.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <limits>

#include "runtime/thread_pool.h"
#include "runtime/thread_scratch.h"

namespace kiln {

namespace {

constexpr float kLowest = std::numeric_limits<float>::lowest();

// The elementwise steps of the vertical pass, and `seed` for a window's first row. Max keeps the
// accumulator where x is NaN; its seed turns a NaN into -inf, so a column's partial maximum is the
// maximum of its taps that are not NaN (a NaN at the top of a column must not hide the column when
// the columns are combined). The window's NaN, the reference's, is its first tap's: the horizontal
// pass puts it back.
struct MaxOp {
  static __m256 v(__m256 acc, __m256 x) { return _mm256_max_ps(x, acc); }
  static float s(float acc, float x) { return std::max(acc, x); }
  static __m256 seed(__m256 x) { return _mm256_max_ps(x, _mm256_set1_ps(-std::numeric_limits<float>::infinity())); }
  static float seed(float x) { return x != x ? -std::numeric_limits<float>::infinity() : x; }
};
struct AddOp {
  static __m256 v(__m256 acc, __m256 x) { return _mm256_add_ps(acc, x); }
  static float s(float acc, float x) { return acc + x; }
  static __m256 seed(__m256 x) { return x; }
  static float seed(float x) { return x; }
};

// out[i] = Op(acc[i], x[i]), acc seeded first where kSeed (the window's first row); `out` may be `acc`.
template <class Op, bool kSeed = false>
inline void combine_into(const float* acc, const float* x, float* out, int64_t n) {
  auto a = [&](int64_t i) { return kSeed ? Op::seed(_mm256_loadu_ps(acc + i)) : _mm256_loadu_ps(acc + i); };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    // Four independent vectors: the loads, not the op's latency, bound the loop.
    const __m256 m0 = Op::v(a(i), _mm256_loadu_ps(x + i));
    const __m256 m1 = Op::v(a(i + 8), _mm256_loadu_ps(x + i + 8));
    const __m256 m2 = Op::v(a(i + 16), _mm256_loadu_ps(x + i + 16));
    const __m256 m3 = Op::v(a(i + 24), _mm256_loadu_ps(x + i + 24));
    _mm256_storeu_ps(out + i, m0);
    _mm256_storeu_ps(out + i + 8, m1);
    _mm256_storeu_ps(out + i + 16, m2);
    _mm256_storeu_ps(out + i + 24, m3);
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Op::v(a(i), _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) out[i] = Op::s(kSeed ? Op::seed(acc[i]) : acc[i], x[i]);
}

// out[i] = Op(Op(seed(a[i]), b[i]), c[i]): a 3-row window (the stem's 3x3 MaxPool) in one pass, the
// same order as two combine_into calls without writing and re-reading the intermediate row.
template <class Op>
inline void combine3_into(const float* a, const float* b, const float* c, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 m0 = Op::v(Op::v(Op::seed(_mm256_loadu_ps(a + i)), _mm256_loadu_ps(b + i)), _mm256_loadu_ps(c + i));
    const __m256 m1 = Op::v(Op::v(Op::seed(_mm256_loadu_ps(a + i + 8)), _mm256_loadu_ps(b + i + 8)), _mm256_loadu_ps(c + i + 8));
    _mm256_storeu_ps(out + i, m0);
    _mm256_storeu_ps(out + i + 8, m1);
  }
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, Op::v(Op::v(Op::seed(_mm256_loadu_ps(a + i)), _mm256_loadu_ps(b + i)), _mm256_loadu_ps(c + i)));
  for (; i < n; ++i) out[i] = Op::s(Op::s(Op::seed(a[i]), b[i]), c[i]);
}

// One output row from `src`, the vertical maximum of its window's input rows ([W, C], seeded: no
// NaN unless read in place from a one-row window): each output pixel the maximum of its window's
// columns, NaN where its first tap (in `first_row`, the window's first input row) is NaN, as the
// reference keeps it. kC8: C == 8, one vector a pixel.
template <bool kC8>
void max_pool_row_horizontal(const float* src, const float* first_row, float* dst, int64_t C, const WindowGeom& g) {
  const int64_t W = g.in[1], OW = g.out[1], kw = g.k[1], sw = g.stride[1], pw = g.pad_begin[1];
  for (int64_t ow = 0; ow < OW; ++ow) {
    const int64_t w0 = ow * sw - pw;
    const int64_t wlo = std::max<int64_t>(w0, 0), whi = std::min(w0 + kw, W);
    float* yp = dst + ow * C;
    if (wlo >= whi) {
      std::fill(yp, yp + C, kLowest);
      continue;
    }
    // Per 8 channels: the columns' maxima in a register, then the first tap's NaN blended back.
    auto block = [&](int64_t c) {
      __m256 acc = MaxOp::seed(_mm256_loadu_ps(src + wlo * C + c));
      for (int64_t w = wlo + 1; w < whi; ++w) acc = MaxOp::v(acc, _mm256_loadu_ps(src + w * C + c));
      const __m256 first = _mm256_loadu_ps(first_row + wlo * C + c);
      _mm256_storeu_ps(yp + c, _mm256_blendv_ps(acc, first, _mm256_cmp_ps(first, first, _CMP_UNORD_Q)));
    };
    if constexpr (kC8) {
      block(0);
    } else {
      int64_t c = 0;
      for (; c + 8 <= C; c += 8) block(c);
      for (; c < C; ++c) {
        float acc = MaxOp::seed(src[wlo * C + c]);
        for (int64_t w = wlo + 1; w < whi; ++w) acc = MaxOp::s(acc, src[w * C + c]);
        const float first = first_row[wlo * C + c];
        yp[c] = first != first ? first : acc;
      }
    }
  }
}

// One output row of AveragePool from `src`, the vertical sum of its window's `rows` input rows
// ([W, C]; `hpad` rows counting the padding): per output pixel the sum of its window's columns
// over the divisor, added left to right as the NCHW path does.
void average_pool_row_horizontal(const float* src, float* dst, int64_t C, const WindowGeom& g, int64_t rows, int64_t hpad,
                                 bool count_include_pad) {
  const int64_t W = g.in[1], OW = g.out[1], kw = g.k[1], sw = g.stride[1], pw = g.pad_begin[1];
  for (int64_t ow = 0; ow < OW; ++ow) {
    const int64_t w0 = ow * sw - pw;
    const int64_t wlo = std::max<int64_t>(w0, 0), whi = std::min(w0 + kw, W);
    const int64_t wpad = std::min(w0 + kw, W + g.pad_end[1]) - w0;
    const int64_t div = count_include_pad ? hpad * wpad : rows * std::max<int64_t>(whi - wlo, 0);
    float* yp = dst + ow * C;
    if (wlo >= whi || div <= 0) {
      std::fill(yp, yp + C, 0.0f);
      continue;
    }
    const float d = static_cast<float>(div);
    int64_t c = 0;
    for (; c + 8 <= C; c += 8) {
      __m256 acc = _mm256_loadu_ps(src + wlo * C + c);
      for (int64_t w = wlo + 1; w < whi; ++w) acc = _mm256_add_ps(acc, _mm256_loadu_ps(src + w * C + c));
      _mm256_storeu_ps(yp + c, _mm256_div_ps(acc, _mm256_set1_ps(d)));
    }
    for (; c < C; ++c) {
      float acc = src[wlo * C + c];
      for (int64_t w = wlo + 1; w < whi; ++w) acc += src[w * C + c];
      yp[c] = acc / d;
    }
  }
}

// GlobalAveragePool's nChw8c chunks: pixels per work item, and per float partial sum before it is
// added into the double total (the rounding of the NCHW path's 16 float lanes).
constexpr int64_t kChunkPixels = 1024, kRunPixels = 64;

int64_t blocked8_chunks(int64_t pixels) { return std::max<int64_t>(1, (pixels + kChunkPixels - 1) / kChunkPixels); }

}  // namespace

namespace {

// Separable, as the NCHW path: per output row the window's input rows combined elementwise (Op)
// into a row buffer ([W, C], contiguous), then `horizontal(src, yr, rows, h0, first_row)` combines
// each output pixel's window columns of that buffer (`rows` input rows from row h0 on, which may be
// padding; `first_row` the first of them inside the input). A window of padding rows only gives
// `empty`. Items are (image, output row) pairs.
template <class Op, class Horizontal>
bool pool_channels_inner(const float* x, float* y, int64_t images, int64_t C, const WindowGeom& g, float empty,
                         const Horizontal& horizontal) {
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1];
  const int64_t kh = g.k[0], sh = g.stride[0], ph = g.pad_begin[0];
  const double taps = static_cast<double>(C) * static_cast<double>(kh * W + g.k[1] * OW);
  const LoopCost cost{4.0 * taps + 4.0 * static_cast<double>(OW * C), taps};
  std::atomic<bool> any_failed{false};
  ThreadPool::global().parallel_for(images * OH, cost, [&](int64_t begin, int64_t end, int) {
    // This thread's row buffer, kept across steps (no allocation in steady state).
    float* row = static_cast<float*>(thread_scratch(ScratchSlot::kKernelRow, sizeof(float) * static_cast<size_t>(std::max<int64_t>(W * C, 1))));
    if (!row) {
      any_failed.store(true, std::memory_order_relaxed);
      return;
    }
    for (int64_t item = begin; item < end; ++item) {
      const int64_t img = item / OH, oh = item % OH;
      const int64_t h0 = oh * sh - ph;
      const int64_t hlo = std::max<int64_t>(h0, 0), hhi = std::min(h0 + kh, H);
      float* yr = y + item * OW * C;
      if (hlo >= hhi) {
        std::fill(yr, yr + OW * C, empty);
        continue;
      }
      const float* xi = x + img * H * W * C;
      const float* src = xi + hlo * W * C;  // one row: read in place
      if (hhi - hlo > 1) {
        int64_t h = hlo + 2;
        if (hhi - hlo >= 3) {
          combine3_into<Op>(src, xi + (hlo + 1) * W * C, xi + (hlo + 2) * W * C, row, W * C);
          h = hlo + 3;
        } else {
          combine_into<Op, true>(src, xi + (hlo + 1) * W * C, row, W * C);
        }
        for (; h < hhi; ++h) combine_into<Op>(row, xi + h * W * C, row, W * C);
        src = row;
      }
      horizontal(src, yr, hhi - hlo, h0, xi + hlo * W * C);
    }
  });
  return !any_failed.load(std::memory_order_relaxed);
}

}  // namespace

bool max_pool_channels_inner(const float* x, float* y, int64_t images, int64_t C, const WindowGeom& g) {
  return pool_channels_inner<MaxOp>(x, y, images, C, g, kLowest, [&](const float* src, float* yr, int64_t, int64_t, const float* first_row) {
    if (C == 8) max_pool_row_horizontal<true>(src, first_row, yr, C, g);
    else max_pool_row_horizontal<false>(src, first_row, yr, C, g);
  });
}

bool average_pool_channels_inner(const float* x, float* y, int64_t images, int64_t C, const WindowGeom& g, bool count_include_pad) {
  const int64_t kh = g.k[0], H = g.in[0];
  return pool_channels_inner<AddOp>(x, y, images, C, g, 0.0f, [&](const float* src, float* yr, int64_t rows, int64_t h0, const float*) {
    const int64_t hpad = std::min(h0 + kh, H + g.pad_end[0]) - h0;
    average_pool_row_horizontal(src, yr, C, g, rows, hpad, count_include_pad);
  });
}

int64_t global_average_pool_blocked8_partials(int64_t images, int64_t pixels) { return images * blocked8_chunks(pixels) * 8; }

// Items are (image, chunk of pixels), so a few large images still spread over the threads. Four
// float accumulators per run of pixels (one add chain would be bound by the add latency), summed
// into the chunk's double total; the chunks' totals are added up in order afterwards.
void global_average_pool_blocked8(const float* x, float* y, int64_t images, int64_t pixels, double* partial) {
  const int64_t chunks = blocked8_chunks(pixels);
  const double per_item = 8.0 * static_cast<double>(std::min(pixels, kChunkPixels));
  parallel_for_each(images * chunks, LoopCost{4.0 * per_item, per_item}, [&](int64_t item) {
    const int64_t img = item / chunks, p0 = (item % chunks) * kChunkPixels, p1 = std::min(pixels, p0 + kChunkPixels);
    const float* xp = x + img * pixels * 8;
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (int64_t r0 = p0; r0 < p1; r0 += kRunPixels) {
      const int64_t r1 = std::min(p1, r0 + kRunPixels);
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      int64_t p = r0;
      for (; p + 4 <= r1; p += 4) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(xp + p * 8));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(xp + p * 8 + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(xp + p * 8 + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(xp + p * 8 + 24));
      }
      for (; p < r1; ++p) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(xp + p * 8));
      const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
      lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(s)));
      hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(s, 1)));
    }
    _mm256_storeu_pd(partial + item * 8, lo);
    _mm256_storeu_pd(partial + item * 8 + 4, hi);
  });
  for (int64_t img = 0; img < images; ++img)
    for (int64_t c = 0; c < 8; ++c) {
      double total = 0;
      for (int64_t k = 0; k < chunks; ++k) total += partial[(img * chunks + k) * 8 + c];
      y[img * 8 + c] = static_cast<float>(pixels > 0 ? total / static_cast<double>(pixels) : 0.0);
    }
}

namespace {

// GlobalAveragePool's tiles over [images, pixels, C]: up to kTileChannels channels of up to
// tile_pixels() pixels, about kTileFloats floats, so an image of a few large channels and one of
// many small pixels both spread over the threads.
constexpr int64_t kTileChannels = 128, kTileFloats = 16384;

// out[0..8V) = the sums over n pixels (C floats apart) of 8V channels from x: V vectors of the even
// pixels and V of the odd ones, added at the end.
template <int V>
inline void sum_pixels(const float* x, int64_t C, int64_t n, float* out) {
  __m256 e[V], o[V];
  for (int v = 0; v < V; ++v) e[v] = o[v] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 2 <= n; p += 2) {
    const float* a = x + p * C;
    for (int v = 0; v < V; ++v) {
      e[v] = _mm256_add_ps(e[v], _mm256_loadu_ps(a + 8 * v));
      o[v] = _mm256_add_ps(o[v], _mm256_loadu_ps(a + C + 8 * v));
    }
  }
  if (p < n)
    for (int v = 0; v < V; ++v) e[v] = _mm256_add_ps(e[v], _mm256_loadu_ps(x + p * C + 8 * v));
  for (int v = 0; v < V; ++v) _mm256_storeu_ps(out + 8 * v, _mm256_add_ps(e[v], o[v]));
}

int64_t tile_pixels(int64_t C) {
  const int64_t width = std::min(C, kTileChannels);
  return std::max<int64_t>(kRunPixels, kTileFloats / std::max<int64_t>(width, 1) / kRunPixels * kRunPixels);
}
int64_t pixel_tiles(int64_t pixels, int64_t C) { return std::max<int64_t>(1, (pixels + tile_pixels(C) - 1) / tile_pixels(C)); }

}  // namespace

int64_t global_average_pool_channels_inner_partials(int64_t images, int64_t pixels, int64_t C) {
  return images * pixel_tiles(pixels, C) * C;
}

// Items are (image, pixel tile, channel tile). Float partial sums over runs of kRunPixels pixels
// (vectorized across the channels), added into the tile's doubles; the tiles' totals are added up
// in order afterwards, so the result does not depend on the thread count.
void global_average_pool_channels_inner(const float* x, float* y, int64_t images, int64_t pixels, int64_t C, double* partial) {
  const int64_t tp = tile_pixels(C), ptiles = pixel_tiles(pixels, C), ctiles = (C + kTileChannels - 1) / kTileChannels;
  const double per_item = static_cast<double>(std::min(pixels, tp)) * static_cast<double>(std::min(C, kTileChannels));
  parallel_for_each(images * ptiles * ctiles, LoopCost{4.0 * per_item, per_item}, [&](int64_t item) {
    const int64_t img = item / (ptiles * ctiles), pt = item / ctiles % ptiles, c0 = item % ctiles * kTileChannels;
    const int64_t width = std::min(C, c0 + kTileChannels) - c0;
    const int64_t p_begin = pt * tp, p_end = std::min(pixels, p_begin + tp);
    double total[kTileChannels] = {};
    for (int64_t p0 = p_begin; p0 < p_end; p0 += kRunPixels) {
      float part[kTileChannels] = {};
      const int64_t p1 = std::min(p_end, p0 + kRunPixels);
      const float* xr = x + (img * pixels + p0) * C + c0;
      int64_t c = 0;
      // 32 channels at a time in registers, even and odd pixels apart: a partial sum kept in
      // memory made every pixel wait for the last one's store.
      for (; c + 32 <= width; c += 32) sum_pixels<4>(xr + c, C, p1 - p0, part + c);
      for (; c + 8 <= width; c += 8) sum_pixels<1>(xr + c, C, p1 - p0, part + c);
      for (; c < width; ++c)
        for (int64_t p = 0; p < p1 - p0; ++p) part[c] += xr[p * C + c];
#pragma omp simd
      for (int64_t k = 0; k < width; ++k) total[k] += part[k];
    }
    std::copy(total, total + width, partial + (img * ptiles + pt) * C + c0);
  });
  for (int64_t img = 0; img < images; ++img)
    for (int64_t c = 0; c < C; ++c) {
      double sum = 0;
      for (int64_t k = 0; k < ptiles; ++k) sum += partial[(img * ptiles + k) * C + c];
      y[img * C + c] = static_cast<float>(pixels > 0 ? sum / static_cast<double>(pixels) : 0.0);
    }
}

}  // namespace kiln
