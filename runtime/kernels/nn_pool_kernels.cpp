// Reference pools: MaxPool (with Indices), AveragePool, LpPool and their Global* forms, for 1-3
// spatial dims (run as 3-D with trailing unit dims), and the "vectorized" MaxPool / AveragePool
// (float32 1-D and 2-D without Indices or dilation, everything else on the reference) and
// GlobalAveragePool (float32).
// MaxPool, AveragePool and GlobalAveragePool also take kiln's attribute layout "nhwc" or "nchw8c" (float32 2-D, no Indices; set by
// builder/passes/conv_channels_last.cpp between FusedConvs): input and output are [N, H, W, C] or
// [N, C/8, H, W, 8], FusedConv's layouts of the same names (fused_conv_common.h).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/kernels/fused_conv_common.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/nn_pool_blocked.h"
#include "runtime/thread_pool.h"
#include "runtime/thread_scratch.h"

namespace kiln {

namespace {

enum class PoolKind { kMax, kAverage, kLp };

template <typename F>
Status dispatch_pool(PoolKind kind, DType dt, F&& f) {
  switch (dt) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kInt8:
      if (kind == PoolKind::kMax) return f(int8_t{});
      break;
    case DType::kUInt8:
      if (kind == PoolKind::kMax) return f(uint8_t{});
      break;
    default: break;
  }
  return Unimplemented("input 0 dtype " + dtype_name(dt) + " is not supported");
}

class PoolKernel final : public Kernel {
 public:
  PoolKernel(PoolKind kind, bool global, WindowAttrs w, bool ceil_mode, bool count_include_pad, int64_t storage_order,
             int64_t p)
      : kind_(kind), global_(global), w_(std::move(w)), ceil_mode_(ceil_mode),
        count_include_pad_(count_include_pad), storage_order_(storage_order), p_(p) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
    KILN_RETURN_IF_ERROR(dispatch_pool(kind_, in[0].dtype, [](auto) { return Status::Ok(); }));
    const Shape& x = in[0].shape;
    if (x.rank() < 3) return InvalidArgument("input 0 must have rank >= 3, got shape " + x.str());
    KILN_RETURN_IF_ERROR(compute_geometry(x));
    Shape os{x[0], x[1]};
    for (int i = 0; i < g_.n; ++i) os.push_back(g_.out[i]);
    out[0] = {in[0].dtype, os};
    if (out.size() > 1) out[1] = {DType::kInt64, os};
    return Status::Ok();
  }
  Status prepare(std::span<const TensorView> in, std::span<const TensorView>) override {
    return compute_geometry(in[0].shape);
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return dispatch_pool(kind_, in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      const WindowGeom& g = g_;
      const int64_t planes = in[0].shape[0] * in[0].shape[1];
      const int64_t in_plane = g.in[0] * g.in[1] * g.in[2], out_plane = g.out[0] * g.out[1] * g.out[2];
      const T* x = in[0].as<T>();
      T* y = out[0].as<T>();
      int64_t* indices = out.size() > 1 && out[1].present() ? out[1].as<int64_t>() : nullptr;
      // Per plane: every output reads its window (taps of T, a few flops each; pow for Lp).
      const double taps = static_cast<double>(out_plane) * static_cast<double>(g.k[0] * g.k[1] * g.k[2]);
      const LoopCost cost{taps * sizeof(T) + 12.0 * static_cast<double>(out_plane), taps * (kind_ == PoolKind::kLp ? 40.0 : 2.0)};
      parallel_for_each(planes, cost, [&](int64_t pl) {
        const T* xp = x + pl * in_plane;
        for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
          for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
            for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
              const int64_t o[3] = {o0, o1, o2};
              int64_t lo[3], hi[3];  // valid kernel taps [lo, hi) per dim
              int64_t padded_count = 1;
              for (int d = 0; d < 3; ++d) {
                const int64_t start = o[d] * g.stride[d] - g.pad_begin[d];
                lo[d] = 0;
                hi[d] = g.k[d];
                int64_t plo = 0, phi = g.k[d];
                for (; lo[d] < hi[d] && start + lo[d] * g.dil[d] < 0; ++lo[d]) {}
                for (; hi[d] > lo[d] && start + (hi[d] - 1) * g.dil[d] >= g.in[d]; --hi[d]) {}
                for (; phi > plo && start + (phi - 1) * g.dil[d] >= g.in[d] + g.pad_end[d]; --phi) {}
                padded_count *= phi - plo;
              }
              double acc = 0;
              int64_t count = 0, best_idx = -1;
              T best = std::numeric_limits<T>::lowest();
              for (int64_t k0 = lo[0]; k0 < hi[0]; ++k0) {
                const int64_t i0 = o0 * g.stride[0] - g.pad_begin[0] + k0 * g.dil[0];
                for (int64_t k1 = lo[1]; k1 < hi[1]; ++k1) {
                  const int64_t i1 = o1 * g.stride[1] - g.pad_begin[1] + k1 * g.dil[1];
                  for (int64_t k2 = lo[2]; k2 < hi[2]; ++k2) {
                    const int64_t i2 = o2 * g.stride[2] - g.pad_begin[2] + k2 * g.dil[2];
                    const int64_t idx = (i0 * g.in[1] + i1) * g.in[2] + i2;
                    const T v = xp[idx];
                    ++count;
                    if (kind_ == PoolKind::kMax) {
                      if (best_idx < 0 || v > best) {
                        best = v;
                        best_idx = storage_order_ ? i0 + i1 * g.in[0] + i2 * g.in[0] * g.in[1] : idx;
                      }
                    } else if (kind_ == PoolKind::kAverage) {
                      acc += static_cast<double>(v);
                    } else {
                      acc += std::pow(std::abs(static_cast<double>(v)), static_cast<double>(p_));
                    }
                  }
                }
              }
              const int64_t oi = pl * out_plane + (o0 * g.out[1] + o1) * g.out[2] + o2;
              if (kind_ == PoolKind::kMax) {
                y[oi] = best;
                if (indices) indices[oi] = best_idx < 0 ? -1 : pl * in_plane + best_idx;
              } else if (kind_ == PoolKind::kAverage) {
                const int64_t div = count_include_pad_ ? padded_count : count;
                y[oi] = static_cast<T>(div > 0 ? acc / static_cast<double>(div) : 0.0);
              } else {
                y[oi] = static_cast<T>(std::pow(acc, 1.0 / static_cast<double>(p_)));
              }
            }
      });
      return Status::Ok();
    });
  }

 private:
  Status compute_geometry(const Shape& x) {
    const int n = x.rank() - 2;
    if (global_) {
      if (n > kMaxSpatial) return Unimplemented(std::to_string(n) + " spatial dims are not supported");
      WindowGeom g;
      g.n = n;
      for (int i = 0; i < n; ++i) {
        g.in[i] = g.k[i] = x[i + 2];
        g.out[i] = 1;
      }
      g_ = g;
      return Status::Ok();
    }
    if (static_cast<int>(w_.kernel_shape.size()) != n)
      return InvalidArgument("kernel_shape has " + std::to_string(w_.kernel_shape.size()) +
                             " values, expected one per spatial dim of input 0 (" + std::to_string(n) + ")");
    KILN_ASSIGN_OR_RETURN(g_, forward_window_geometry(w_, x.data() + 2, w_.kernel_shape.data(), n, ceil_mode_));
    return Status::Ok();
  }

  PoolKind kind_;
  bool global_;
  WindowAttrs w_;
  bool ceil_mode_, count_include_pad_;
  int64_t storage_order_, p_;
  WindowGeom g_;
};

StatusOr<std::unique_ptr<Kernel>> make_pool(PoolKind kind, AttrReader& attrs) {
  WindowAttrs w;
  KILN_RETURN_IF_ERROR(read_window_attrs(attrs, w, kind == PoolKind::kMax));
  if (w.kernel_shape.empty()) return InvalidArgument("attribute 'kernel_shape' is required");
  int64_t ceil_mode = 0, count_include_pad = 0, storage_order = 0, p = 2;
  if (kind != PoolKind::kLp) {
    KILN_ASSIGN_OR_RETURN(ceil_mode, attrs.get_int("ceil_mode", 0));
  }
  if (kind == PoolKind::kAverage) {
    KILN_ASSIGN_OR_RETURN(count_include_pad, attrs.get_int("count_include_pad", 0));
  }
  if (kind == PoolKind::kMax) {
    KILN_ASSIGN_OR_RETURN(storage_order, attrs.get_int("storage_order", 0));
  }
  if (kind == PoolKind::kLp) {
    KILN_ASSIGN_OR_RETURN(p, attrs.get_int("p", 2));
  }
  if (storage_order != 0 && storage_order != 1)
    return InvalidArgument("storage_order must be 0 or 1, got " + std::to_string(storage_order));
  if (p < 1) return InvalidArgument("p must be >= 1, got " + std::to_string(p));
  return std::unique_ptr<Kernel>(std::make_unique<PoolKernel>(kind, false, std::move(w), ceil_mode != 0,
                                                              count_include_pad != 0, storage_order, p));
}

// The NHWC / nChw8c pools' reference: the NCHW reference between two layout conversions.
class LayoutPoolReference final : public Kernel {
 public:
  LayoutPoolReference(std::unique_ptr<Kernel> ref, ConvLayout layout) : ref_(std::move(ref)), layout_(layout) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
    const std::string name = conv_layout_name(layout_);
    if (out.size() > 1) return InvalidArgument("layout " + name + " has no Indices output");
    if (in[0].dtype != DType::kFloat32)
      return InvalidArgument("layout " + name + " needs a float32 input 0, got " + dtype_name(in[0].dtype) + " " + in[0].shape.str());
    TensorView v = in[0];
    KILN_ASSIGN_OR_RETURN(v.shape, conv_nchw_shape(layout_, in[0].shape, "input 0"));
    KILN_RETURN_IF_ERROR(ref_->infer(std::span<const TensorView>(&v, 1), out));
    KILN_ASSIGN_OR_RETURN(out[0].shape, conv_layout_shape(layout_, out[0].shape, "output"));
    return Status::Ok();
  }
  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_ASSIGN_OR_RETURN(xs_, conv_nchw_shape(layout_, in[0].shape, "input 0"));
    KILN_ASSIGN_OR_RETURN(ys_, conv_nchw_shape(layout_, out[0].shape, "output"));
    KILN_ASSIGN_OR_RETURN(x_tmp_, Tensor::try_zeros(DType::kFloat32, xs_, "MaxPool input"));
    KILN_ASSIGN_OR_RETURN(y_tmp_, Tensor::try_zeros(DType::kFloat32, ys_, "MaxPool output"));
    const TensorView xv = x_tmp_.view(), yv = y_tmp_.view();
    return ref_->prepare(std::span<const TensorView>(&xv, 1), std::span<const TensorView>(&yv, 1));
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    conv_to_nchw(layout_, in[0].as<float>(), x_tmp_.as<float>(), xs_);
    const TensorView xv = x_tmp_.view(), yv = y_tmp_.view();
    KILN_RETURN_IF_ERROR(ref_->run(std::span<const TensorView>(&xv, 1), std::span<const TensorView>(&yv, 1)));
    conv_from_nchw(layout_, y_tmp_.as<float>(), out[0].as<float>(), ys_);
    return Status::Ok();
  }

 private:
  std::unique_ptr<Kernel> ref_;
  ConvLayout layout_;
  Shape xs_, ys_;
  Tensor x_tmp_, y_tmp_;
};

// Reads attribute layout ("nchw", "nhwc" or "nchw8c") and wraps the NCHW reference `ref` in the
// layout conversions where it is not NCHW.
StatusOr<std::unique_ptr<Kernel>> with_layout(std::unique_ptr<Kernel> ref, AttrReader& attrs, ConvLayout* layout) {
  // Declared first: GCC 12 reports the string as maybe-uninitialized when the macro declares it.
  std::string name;
  KILN_ASSIGN_OR_RETURN(name, attrs.get_string("layout", "nchw"));
  if (name != "nchw" && name != "nhwc" && name != "nchw8c")
    return InvalidArgument("attribute 'layout' must be nchw, nhwc or nchw8c, got '" + name + "'");
  KILN_ASSIGN_OR_RETURN(*layout, parse_conv_layout(name, "layout"));
  if (*layout == ConvLayout::kNchw) return ref;
  return std::unique_ptr<Kernel>(std::make_unique<LayoutPoolReference>(std::move(ref), *layout));
}

// The reference MaxPool or AveragePool in attribute layout's layout (written to *layout).
StatusOr<std::unique_ptr<Kernel>> make_layout_pool(PoolKind kind, AttrReader& attrs, ConvLayout* layout) {
  KILN_ASSIGN_OR_RETURN(auto ref, make_pool(kind, attrs));
  return with_layout(std::move(ref), attrs, layout);
}

// MaxPool and AveragePool over NCHW float32 planes, 1-D and 2-D without dilation (a CNN stem's pool,
// DenseNet's transitions), in two separable passes per output row: the window's input rows combined
// elementwise into a row buffer (contiguous, so it vectorizes), then the strided horizontal
// combination over that row. Planes run in parallel. The reference's generic 3-D loop (bounds
// checks per tap, a double per tap for the average) was a tenth of ResNet-18's run time.
// AveragePool's divisor is the reference's: the taps inside the input, or with count_include_pad
// those inside the padded input. MaxPool and AveragePool with attribute layout nhwc / nchw8c run the
// channels-innermost loops of runtime/kernels/nn_pool_blocked_kernels.cpp.
template <PoolKind kKind>
class VectorizedPool final : public Kernel {
  static_assert(kKind == PoolKind::kMax || kKind == PoolKind::kAverage);
  static constexpr bool kMax = kKind == PoolKind::kMax;

 public:
  VectorizedPool(std::unique_ptr<Kernel> ref, WindowAttrs w, bool ceil_mode, bool count_include_pad, ConvLayout layout)
      : ref_(std::move(ref)), w_(std::move(w)), ceil_mode_(ceil_mode), count_include_pad_(count_include_pad), layout_(layout) {}
  // "reference" once prepare() handed the current shapes to the reference kernel.
  const char* impl_name() const override { return use_ref_ ? "reference" : "vectorized"; }

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override { return ref_->infer(in, out); }
  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const Shape& x = in[0].shape;
    const bool nchw = layout_ == ConvLayout::kNchw;
    // The layouts other than NCHW are 2-D only (their shapes were checked by infer()).
    const int n = nchw ? x.rank() - 2 : 2;
    fast_ = in[0].dtype == DType::kFloat32 && (n == 1 || n == 2) && (out.size() < 2 || !out[1].present()) &&
            static_cast<int>(w_.kernel_shape.size()) == n;
    if (fast_) {
      const int64_t* spatial = x.data() + (layout_ == ConvLayout::kNhwc ? 1 : 2);
      KILN_ASSIGN_OR_RETURN(g_, forward_window_geometry(w_, spatial, w_.kernel_shape.data(), n, ceil_mode_));
      for (int d = 0; d < n; ++d) fast_ = fast_ && g_.dil[d] == 1;
      if (n == 1) {  // as 2-D with a leading unit dim
        std::swap(g_.in[0], g_.in[1]);
        std::swap(g_.out[0], g_.out[1]);
        std::swap(g_.k[0], g_.k[1]);
        std::swap(g_.stride[0], g_.stride[1]);
        std::swap(g_.pad_begin[0], g_.pad_begin[1]);
        std::swap(g_.pad_end[0], g_.pad_end[1]);
      }
    }
    use_ref_ = !fast_;
    return fast_ ? Status::Ok() : ref_->prepare(in, out);
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (!fast_) return ref_->run(in, out);
    if (layout_ != ConvLayout::kNchw) {
      const Shape& x = in[0].shape;
      const bool nhwc = layout_ == ConvLayout::kNhwc;
      // nChw8c is NHWC with N*C/8 images of 8 channels.
      const int64_t images = nhwc ? x[0] : x[0] * x[1], C = nhwc ? x[3] : x[4];
      const bool ok = kMax ? max_pool_channels_inner(in[0].as<float>(), out[0].as<float>(), images, C, g_)
                           : average_pool_channels_inner(in[0].as<float>(), out[0].as<float>(), images, C, g_, count_include_pad_);
      if (!ok) return row_buffer_error();
      return Status::Ok();
    }
    const WindowGeom& g = g_;
    const int64_t planes = in[0].shape[0] * in[0].shape[1];
    const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1];
    const float* x = in[0].as<float>();
    float* y = out[0].as<float>();
    // An output row whose window lies in the padding: the reference's empty maximum or zero average.
    constexpr float kEmpty = kMax ? std::numeric_limits<float>::lowest() : 0.0f;
    // Per plane: the window's rows read once per output row, an op per tap.
    const double taps = static_cast<double>(OH) * static_cast<double>(g.k[0] * W + g.k[1] * OW);
    const LoopCost cost{4.0 * taps + 4.0 * static_cast<double>(OH * OW), taps};
    ThreadPool::global().parallel_for(planes, cost, [&](int64_t pl_begin, int64_t pl_end, int) {
      // This thread's running row, kept across steps (no allocation in steady state).
      float* row = static_cast<float*>(thread_scratch(ScratchSlot::kKernelRow, sizeof(float) * static_cast<size_t>(std::max<int64_t>(W, 1))));
      if (!row) {
        row_failed_.store(true, std::memory_order_relaxed);
        return;
      }
      for (int64_t pl = pl_begin; pl < pl_end; ++pl) {
        const float* xp = x + pl * H * W;
        float* yp = y + pl * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh) {
          const int64_t h0 = oh * g.stride[0] - g.pad_begin[0];
          const int64_t hlo = std::max<int64_t>(h0, 0), hhi = std::min(h0 + g.k[0], H);
          float* yr = yp + oh * OW;
          if (hlo >= hhi) {
            std::fill(yr, yr + OW, kEmpty);
            continue;
          }
          std::copy(xp + hlo * W, xp + hlo * W + W, row);
          for (int64_t h = hlo + 1; h < hhi; ++h) {
            const float* xr = xp + h * W;
            float* r = row;
            // omp simd: -O2's cheap vectorizer model skips loops that need a runtime alias check.
            if constexpr (kMax) {
              // The maximum of the taps that are not NaN: a NaN at the top of a column must not hide
              // the column (the window's first tap's NaN, the one the reference keeps, is put back below).
#pragma omp simd
              for (int64_t w = 0; w < W; ++w) r[w] = r[w] != r[w] ? xr[w] : std::max(r[w], xr[w]);
            } else {
#pragma omp simd
              for (int64_t w = 0; w < W; ++w) r[w] += xr[w];
            }
          }
          const int64_t hpad = std::min(h0 + g.k[0], H + g.pad_end[0]) - h0;
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t w0 = ow * g.stride[1] - g.pad_begin[1];
            const int64_t wlo = std::max<int64_t>(w0, 0), whi = std::min(w0 + g.k[1], W);
            if constexpr (kMax) {
              if (wlo >= whi) {
                yr[ow] = kEmpty;
                continue;
              }
              // From the first column, not from kEmpty: a window of -inf is -inf, as in the reference.
              float best = row[wlo];
              for (int64_t w = wlo + 1; w < whi; ++w) best = best != best ? row[w] : std::max(best, row[w]);
              const float first = xp[hlo * W + wlo];
              yr[ow] = first != first ? first : best;
            } else {
              const int64_t wpad = std::min(w0 + g.k[1], W + g.pad_end[1]) - w0;
              float sum = 0.0f;
              for (int64_t w = wlo; w < whi; ++w) sum += row[w];
              const int64_t div = count_include_pad_ ? hpad * wpad : (hhi - hlo) * std::max<int64_t>(whi - wlo, 0);
              yr[ow] = div > 0 ? sum / static_cast<float>(div) : 0.0f;
            }
          }
        }
      }
    });
    if (row_failed_.exchange(false, std::memory_order_relaxed)) return row_buffer_error();
    return Status::Ok();
  }

 private:
  static Status row_buffer_error() {
    return ResourceExhausted(std::string(kMax ? "max" : "average") + " pool: out of memory for a row buffer");
  }

  std::unique_ptr<Kernel> ref_;
  std::atomic<bool> row_failed_{false};
  WindowAttrs w_;
  bool ceil_mode_, count_include_pad_;
  ConvLayout layout_;
  bool fast_ = false, use_ref_ = false;
  WindowGeom g_;
};

StatusOr<std::unique_ptr<Kernel>> make_vectorized_pool(PoolKind kind, AttrReader& attrs) {
  ConvLayout layout = ConvLayout::kNchw;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> ref, make_layout_pool(kind, attrs, &layout));
  WindowAttrs w;
  KILN_RETURN_IF_ERROR(read_window_attrs(attrs, w, true));
  KILN_ASSIGN_OR_RETURN(int64_t ceil_mode, attrs.get_int("ceil_mode", 0));
  if (kind == PoolKind::kMax)
    return std::unique_ptr<Kernel>(std::make_unique<VectorizedPool<PoolKind::kMax>>(std::move(ref), std::move(w), ceil_mode != 0, false, layout));
  KILN_ASSIGN_OR_RETURN(int64_t count_include_pad, attrs.get_int("count_include_pad", 0));
  return std::unique_ptr<Kernel>(
      std::make_unique<VectorizedPool<PoolKind::kAverage>>(std::move(ref), std::move(w), ceil_mode != 0, count_include_pad != 0, layout));
}

// GlobalAveragePool over float32 planes: each plane's mean from 16 independent partial sums (a
// vector's lanes, so it vectorizes without reassociating one chain), combined in double. The
// reference's generic window loop does not vectorize over a plane. The layouts with channels
// innermost (NHWC; nChw8c is NHWC over N*C/8 images of 8 channels) run the loops of
// runtime/kernels/nn_pool_blocked_kernels.cpp.
class VectorizedGlobalAveragePool final : public Kernel {
 public:
  VectorizedGlobalAveragePool(std::unique_ptr<Kernel> ref, ConvLayout layout) : ref_(std::move(ref)), layout_(layout) {}
  // Before prepare() decided (engine-run --inspect asks a fresh context), the impl it was made as.
  const char* impl_name() const override { return prepared_ && !fast_ ? "reference" : "vectorized"; }

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override { return ref_->infer(in, out); }
  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    fast_ = in[0].dtype == DType::kFloat32 && in[0].shape.rank() >= 3;
    prepared_ = true;
    if (fast_ && layout_ != ConvLayout::kNchw) {
      channels_inner(in[0].shape, &images_, &pixels_, &channels_);
      // The blocked path's per-chunk sums: sized here, so run() does not allocate.
      partial_.assign(static_cast<size_t>(channels_ == 8 ? global_average_pool_blocked8_partials(images_, pixels_)
                                                         : global_average_pool_channels_inner_partials(images_, pixels_, channels_)),
                      0.0);
    }
    return fast_ ? Status::Ok() : ref_->prepare(in, out);
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (!fast_) return ref_->run(in, out);
    const Shape& x = in[0].shape;
    const float* src = in[0].as<float>();
    float* dst = out[0].as<float>();
    if (layout_ != ConvLayout::kNchw) {
      if (channels_ == 8) global_average_pool_blocked8(src, dst, images_, pixels_, partial_.data());
      else global_average_pool_channels_inner(src, dst, images_, pixels_, channels_, partial_.data());
      return Status::Ok();
    }
    const int64_t planes = x[0] * x[1], size = x.numel() / std::max<int64_t>(planes, 1);
    constexpr int64_t kLanes = 16;
    parallel_for_each(planes, LoopCost{4.0 * static_cast<double>(size), static_cast<double>(size)}, [&](int64_t pl) {
      const float* p = src + pl * size;
      float part[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= size; i += kLanes)
#pragma omp simd
        for (int64_t l = 0; l < kLanes; ++l) part[l] += p[i + l];
      double sum = 0;
      for (; i < size; ++i) sum += p[i];
      for (int64_t l = 0; l < kLanes; ++l) sum += part[l];
      dst[pl] = static_cast<float>(size > 0 ? sum / static_cast<double>(size) : 0.0);
    });
    return Status::Ok();
  }

 private:
  // [images, pixels, C] of an NHWC or nChw8c input (4-D / 5-D, checked by infer()).
  void channels_inner(const Shape& x, int64_t* images, int64_t* pixels, int64_t* C) const {
    const bool nhwc = layout_ == ConvLayout::kNhwc;
    *images = nhwc ? x[0] : x[0] * x[1];
    *pixels = nhwc ? x[1] * x[2] : x[2] * x[3];
    *C = nhwc ? x[3] : x[4];
  }

  std::unique_ptr<Kernel> ref_;
  ConvLayout layout_;
  bool fast_ = false, prepared_ = false;
  int64_t images_ = 0, pixels_ = 0, channels_ = 0;
  std::vector<double> partial_;
};

StatusOr<std::unique_ptr<Kernel>> make_global_pool(PoolKind kind, AttrReader& attrs) {
  int64_t p = 2;
  if (kind == PoolKind::kLp) {
    KILN_ASSIGN_OR_RETURN(p, attrs.get_int("p", 2));
  }
  if (p < 1) return InvalidArgument("p must be >= 1, got " + std::to_string(p));
  return std::unique_ptr<Kernel>(std::make_unique<PoolKernel>(kind, true, WindowAttrs{}, false, false, 0, p));
}

}  // namespace

void register_nn_pool_kernels(KernelRegistry& r) {
  r.add({"MaxPool", "reference", 0, [](const KernelArgs&, AttrReader& a) {
           ConvLayout layout;
           return make_layout_pool(PoolKind::kMax, a, &layout);
         }});
  r.add({"MaxPool", "vectorized", 5, [](const KernelArgs&, AttrReader& a) { return make_vectorized_pool(PoolKind::kMax, a); }});
  r.add({"AveragePool", "reference", 0, [](const KernelArgs&, AttrReader& a) {
           ConvLayout layout;
           return make_layout_pool(PoolKind::kAverage, a, &layout);
         }});
  r.add({"AveragePool", "vectorized", 5, [](const KernelArgs&, AttrReader& a) { return make_vectorized_pool(PoolKind::kAverage, a); }});
  r.add({"LpPool", "reference", 0, [](const KernelArgs&, AttrReader& a) { return make_pool(PoolKind::kLp, a); }});
  r.add({"GlobalMaxPool", "reference", 0,
         [](const KernelArgs&, AttrReader& a) { return make_global_pool(PoolKind::kMax, a); }});
  // GlobalAveragePool takes attribute layout like MaxPool (squeeze-excitation between FusedConvs).
  r.add({"GlobalAveragePool", "reference", 0, [](const KernelArgs&, AttrReader& a) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(auto ref, make_global_pool(PoolKind::kAverage, a));
           ConvLayout layout;
           return with_layout(std::move(ref), a, &layout);
         }});
  r.add({"GlobalAveragePool", "vectorized", 5, [](const KernelArgs&, AttrReader& a) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(auto ref, make_global_pool(PoolKind::kAverage, a));
           ConvLayout layout = ConvLayout::kNchw;
           KILN_ASSIGN_OR_RETURN(ref, with_layout(std::move(ref), a, &layout));
           return std::unique_ptr<Kernel>(std::make_unique<VectorizedGlobalAveragePool>(std::move(ref), layout));
         }});
  r.add({"GlobalLpPool", "reference", 0,
         [](const KernelArgs&, AttrReader& a) { return make_global_pool(PoolKind::kLp, a); }});
}

}  // namespace kiln
