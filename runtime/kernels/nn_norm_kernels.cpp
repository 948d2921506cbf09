// Reference normalization kernels: BatchNormalization (inference), InstanceNormalization,
// LayerNormalization (with a fast float32 path), LRN and MeanVarianceNormalization.
#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/vec_kernels.h"
#include "runtime/thread_pool.h"

namespace kiln {

namespace {

Status check_same_float_dtype(std::span<const TensorView> in, size_t first, size_t last) {
  for (size_t i = first; i < last && i < in.size(); ++i)
    if (in[i].present() && in[i].dtype != DType::kFloat32 && in[i].dtype != DType::kFloat64)
      return Unimplemented("input " + std::to_string(i) + " dtype " + dtype_name(in[i].dtype) +
                           " is not supported (float32/float64 only)");
  return Status::Ok();
}

Status check_channel_vector(const TensorView& v, int index, int64_t C) {
  if (v.shape.rank() != 1 || v.shape[0] != C)
    return InvalidArgument("input " + std::to_string(index) + " must have shape [" + std::to_string(C) + "], got " +
                           v.shape.str());
  return Status::Ok();
}

// ---- BatchNormalization (inference) -------------------------------------------------------------

// y = x * a[c] + b[c] with a = scale / sqrt(var + eps), b = bias - mean * a: the division and the
// square root are per channel (computed each run, C of them, since the four vectors may be runtime
// inputs), the per-element work is one fused multiply-add. float32 runs through the vector loops of
// runtime/kernels/vec_kernels.h on kiln's pool, split into blocks of channel planes; float64 keeps the
// scalar loop, which is also the reference the float32 path is tested against.
class BatchNormKernel final : public Kernel {
 public:
  explicit BatchNormKernel(float epsilon) : epsilon_(epsilon) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 5, 5));
    KILN_RETURN_IF_ERROR(check_same_float_dtype(in, 0, 5));
    if (out.size() > 1) return Unimplemented("outputs running_mean/running_var need training_mode=1, which is not supported");
    const Shape& x = in[0].shape;
    if (x.rank() < 2) return InvalidArgument("input 0 must have rank >= 2, got shape " + x.str());
    for (int i = 1; i < 5; ++i) KILN_RETURN_IF_ERROR(check_channel_vector(in[i], i, x[1]));
    out[0] = {in[0].dtype, x};
    return Status::Ok();
  }
  Status prepare(std::span<const TensorView> in, std::span<const TensorView>) override {
    const Shape& xs = in[0].shape;
    const int64_t C = xs[1], inner = xs.numel(2, xs.rank());
    // Small planes (BatchNorm1d's [N, C] has one element a channel) spread the scale and shift
    // over a whole [C, inner] row, so the vector loop runs along the row instead of per plane.
    const int64_t row = inner < kSpreadBelow ? C * inner : C;
    scale_.assign(static_cast<size_t>(row), 0.0f);
    shift_.assign(static_cast<size_t>(row), 0.0f);
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (in[0].dtype == DType::kFloat32) return run_f32(in, out[0]);
    return dispatch_float(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      const Shape& xs = in[0].shape;
      const int64_t C = xs[1], planes = xs[0] * C, inner = xs.numel(2, xs.rank());
      const T* x = in[0].as<T>();
      T* y = out[0].as<T>();
      const double bytes = 2.0 * sizeof(T) * static_cast<double>(inner);
      parallel_for_each(planes, LoopCost{bytes, 2.0 * static_cast<double>(inner)}, [&](int64_t p) {
        const int64_t c = p % C;
        const double a = read_double(in[1], c) / std::sqrt(read_double(in[4], c) + epsilon_);
        const double b = read_double(in[2], c) - read_double(in[3], c) * a;
        const T fa = static_cast<T>(a), fb = static_cast<T>(b);
        for (int64_t i = 0; i < inner; ++i) y[p * inner + i] = x[p * inner + i] * fa + fb;
      });
      return Status::Ok();
    });
  }

 private:
  static constexpr int64_t kSpreadBelow = 32;  // planes smaller than this are spread over the row
  static constexpr int64_t kBlock = 16384;     // elements per parallel item (64 KiB of input)

  Status run_f32(std::span<const TensorView> in, const TensorView& out) {
    const Shape& xs = in[0].shape;
    const int64_t N = xs[0], C = xs[1], inner = xs.numel(2, xs.rank());
    const bool spread = inner < kSpreadBelow;
    const size_t row = static_cast<size_t>(spread ? C * inner : C);
    if (scale_.size() != row) {  // run without prepare for this shape: size once
      scale_.assign(row, 0.0f);
      shift_.assign(row, 0.0f);
    }
    for (int64_t c = 0; c < C; ++c) {
      const double a = read_double(in[1], c) / std::sqrt(read_double(in[4], c) + epsilon_);
      const float fa = static_cast<float>(a), fb = static_cast<float>(read_double(in[2], c) - read_double(in[3], c) * a);
      const int64_t w = spread ? inner : 1;
      for (int64_t i = 0; i < w; ++i) {
        scale_[static_cast<size_t>(c * w + i)] = fa;
        shift_[static_cast<size_t>(c * w + i)] = fb;
      }
    }
    const float* x = in[0].as<const float>();
    float* y = out.as<float>();
    const vec::Table& t = vec::table();
    const float* a = scale_.data();
    const float* b = shift_.data();
    // Items: blocks of at most kBlock elements of one plane (or of one [C, inner] row when spread).
    const int64_t len = spread ? C * inner : inner, rows = spread ? N : N * C;
    const int64_t per = std::max<int64_t>(1, (len + kBlock - 1) / kBlock), chunk = std::min(len, kBlock);
    if (len == 0 || rows == 0) return Status::Ok();
    const LoopCost cost{8.0 * static_cast<double>(chunk), 2.0 * static_cast<double>(chunk)};
    ThreadPool::global().parallel_for(rows * per, cost, [&](int64_t begin, int64_t end, int) {
      for (int64_t it = begin; it < end; ++it) {
        const int64_t r = it / per, s = (it % per) * kBlock, n = std::min(kBlock, len - s);
        const int64_t off = r * len + s;
        if (spread) t.affine(x + off, y + off, n, a + s, b + s);
        else t.scale_shift(x + off, y + off, n, a[r % C], b[r % C]);
      }
    });
    return Status::Ok();
  }

  float epsilon_;
  std::vector<float> scale_, shift_;  // per channel, or per [C, inner] row element when spread
};

// ---- InstanceNormalization ----------------------------------------------------------------------

class InstanceNormKernel final : public Kernel {
 public:
  explicit InstanceNormKernel(float epsilon) : epsilon_(epsilon) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 3, 3));
    KILN_RETURN_IF_ERROR(check_same_float_dtype(in, 0, 3));
    const Shape& x = in[0].shape;
    if (x.rank() < 3) return InvalidArgument("input 0 must have rank >= 3, got shape " + x.str());
    for (int i = 1; i < 3; ++i) KILN_RETURN_IF_ERROR(check_channel_vector(in[i], i, x[1]));
    out[0] = {in[0].dtype, x};
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return dispatch_float(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      const Shape& xs = in[0].shape;
      const int64_t C = xs[1], planes = xs[0] * C, inner = xs.numel(2, xs.rank());
      const T* x = in[0].as<T>();
      T* y = out[0].as<T>();
      const double bytes = 3.0 * sizeof(T) * static_cast<double>(inner);
      parallel_for_each(planes, LoopCost{bytes, 6.0 * static_cast<double>(inner)}, [&](int64_t p) {
        const T* xp = x + p * inner;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < inner; ++i) mean += xp[i];
        mean = inner ? mean / inner : 0.0;
        for (int64_t i = 0; i < inner; ++i) var += (xp[i] - mean) * (xp[i] - mean);
        var = inner ? var / inner : 0.0;
        const double a = read_double(in[1], p % C) / std::sqrt(var + epsilon_);
        const double b = read_double(in[2], p % C) - mean * a;
        for (int64_t i = 0; i < inner; ++i) y[p * inner + i] = static_cast<T>(xp[i] * a + b);
      });
      return Status::Ok();
    });
  }

 private:
  float epsilon_;
};

// ---- LayerNormalization -------------------------------------------------------------------------

class LayerNormKernel final : public Kernel {
 public:
  LayerNormKernel(int64_t axis, float epsilon) : axis_attr_(axis), epsilon_(epsilon) {}

  // Scale is required by the spec, but torch 1.13 exports LayerNorm without affine parameters as
  // LayerNormalization(X, "", ""): an absent Scale means ones, an absent B zeros.
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 1, 3));
    KILN_RETURN_IF_ERROR(check_same_float_dtype(in, 0, 3));
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i].present() && in[i].dtype != in[0].dtype)
        return InvalidArgument("input " + std::to_string(i) + " dtype " + dtype_name(in[i].dtype) +
                               " differs from input 0 dtype " + dtype_name(in[0].dtype));
    const Shape& x = in[0].shape;
    KILN_RETURN_IF_ERROR(layout(in));
    out[0] = {in[0].dtype, x};
    Shape stat = x;
    for (int i = axis_; i < x.rank(); ++i) stat[i] = 1;
    for (size_t i = 1; i < out.size(); ++i) out[i] = {DType::kFloat32, stat};
    return Status::Ok();
  }
  Status prepare(std::span<const TensorView> in, std::span<const TensorView>) override { return layout(in); }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    float* mean_out = out.size() > 1 && out[1].present() ? out[1].as<float>() : nullptr;
    float* inv_out = out.size() > 2 && out[2].present() ? out[2].as<float>() : nullptr;
    const bool has_bias = in.size() > 2 && in[2].present();
    const bool has_scale = in.size() > 1 && in[1].present();
    if (in[0].dtype == DType::kFloat32 && dense_params_) {
      run_fast(in[0].as<float>(), has_scale ? in[1].as<float>() : nullptr, has_bias ? in[2].as<float>() : nullptr,
               out[0].as<float>(), mean_out, inv_out);
      return Status::Ok();
    }
    return dispatch_float(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* x = in[0].as<T>();
      const T* scale = has_scale ? in[1].as<T>() : nullptr;
      const T* bias = has_bias ? in[2].as<T>() : nullptr;
      T* y = out[0].as<T>();
      const double bytes = 5.0 * sizeof(T) * static_cast<double>(cols_);
      parallel_for_each(rows_, LoopCost{bytes, 12.0 * static_cast<double>(cols_)}, [&](int64_t r) {
        const T* xr = x + r * cols_;
        T* yr = y + r * cols_;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < cols_; ++i) mean += xr[i];
        mean = cols_ ? mean / cols_ : 0.0;
        for (int64_t i = 0; i < cols_; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        var = cols_ ? var / cols_ : 0.0;
        const double inv = 1.0 / std::sqrt(var + epsilon_);
        for (int64_t i = 0; i < cols_; ++i) {
          const double v = (xr[i] - mean) * inv * (scale ? static_cast<double>(scale[param_offset(i, scale_strides_)]) : 1.0) +
                           (bias ? static_cast<double>(bias[param_offset(i, bias_strides_)]) : 0.0);
          yr[i] = static_cast<T>(v);
        }
        if (mean_out) mean_out[r] = static_cast<float>(mean);
        if (inv_out) inv_out[r] = static_cast<float>(inv);
      });
      return Status::Ok();
    });
  }

 private:
  // Rows of the normalized region through the vector row kernel (runtime/kernels/vec_kernels.inc:
  // sums shifted by the row's first element in one pass, a second pass around the mean only when
  // that element is an outlier, then the write), on kiln's pool: rows are split over the threads
  // when the step is big enough to pay for it.
  void run_fast(const float* x, const float* scale, const float* bias, float* y, float* mean_out,
                float* inv_out) const {
    const int64_t cols = cols_;
    const float eps = epsilon_;
    const vec::LayerNormRowFn row = vec::table().layer_norm;
    parallel_for_each(rows_, LoopCost{8.0 * static_cast<double>(cols), 6.0 * static_cast<double>(cols)}, [&](int64_t r) {
      row(x + r * cols, scale, bias, y + r * cols, cols, eps, mean_out ? mean_out + r : nullptr, inv_out ? inv_out + r : nullptr);
    });
  }

  int64_t param_offset(int64_t i, const Shape& strides) const {
    int64_t off = 0;
    for (int d = norm_shape_.rank() - 1; d >= 0; --d) {
      off += (i % norm_shape_[d]) * strides[d];
      i /= norm_shape_[d];
    }
    return off;
  }

  Status layout(std::span<const TensorView> in) {
    const Shape& x = in[0].shape;
    KILN_ASSIGN_OR_RETURN(axis_, normalize_axis(axis_attr_, x.rank()));
    if (x.rank() == 0) return InvalidArgument("input 0 must have rank >= 1");
    rows_ = x.numel(0, axis_);
    cols_ = x.numel(axis_, x.rank());
    norm_shape_ = Shape{};
    for (int i = axis_; i < x.rank(); ++i) norm_shape_.push_back(x[i]);
    dense_params_ = true;
    for (size_t i = 1; i < in.size(); ++i) {
      if (!in[i].present()) continue;
      auto b = broadcast_shapes(in[i].shape, norm_shape_);
      if (!b.ok() || *b != norm_shape_)
        return InvalidArgument("input " + std::to_string(i) + " shape " + in[i].shape.str() +
                               " does not broadcast to the normalized shape " + norm_shape_.str());
      (i == 1 ? scale_strides_ : bias_strides_) = broadcast_strides(in[i].shape, norm_shape_);
      if (in[i].numel() != cols_) dense_params_ = false;
    }
    return Status::Ok();
  }

  int64_t axis_attr_;
  float epsilon_;
  int axis_ = 0;
  int64_t rows_ = 0, cols_ = 0;
  Shape norm_shape_, scale_strides_, bias_strides_;
  bool dense_params_ = true;
};

// ---- LRN ----------------------------------------------------------------------------------------

class LrnKernel final : public Kernel {
 public:
  LrnKernel(float alpha, float beta, float bias, int64_t size) : alpha_(alpha), beta_(beta), bias_(bias), size_(size) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
    KILN_RETURN_IF_ERROR(check_same_float_dtype(in, 0, 1));
    if (in[0].shape.rank() < 3) return InvalidArgument("input 0 must have rank >= 3, got shape " + in[0].shape.str());
    out[0] = in[0].desc();
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return dispatch_float(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      const Shape& xs = in[0].shape;
      const int64_t N = xs[0], C = xs[1], inner = xs.numel(2, xs.rank());
      const int64_t before = (size_ - 1) / 2, after = size_ - 1 - before;
      const T* x = in[0].as<T>();
      T* y = out[0].as<T>();
      // Per plane: size_ reads of each element and a pow per element (~40 flops).
      const LoopCost cost{static_cast<double>(sizeof(T) * (size_ + 1) * inner), static_cast<double>((2 * size_ + 40) * inner)};
      parallel_for_each(N * C, cost, [&](int64_t nc) {
        const int64_t n = nc / C, c = nc % C;
        const int64_t c0 = std::max<int64_t>(0, c - before), c1 = std::min<int64_t>(C - 1, c + after);
        for (int64_t i = 0; i < inner; ++i) {
          double sq = 0;
          for (int64_t cc = c0; cc <= c1; ++cc) {
            const double v = x[(n * C + cc) * inner + i];
            sq += v * v;
          }
          const int64_t o = (n * C + c) * inner + i;
          y[o] = static_cast<T>(x[o] / std::pow(bias_ + alpha_ / size_ * sq, static_cast<double>(beta_)));
        }
      });
      return Status::Ok();
    });
  }

 private:
  double alpha_, beta_, bias_;
  int64_t size_;
};

// ---- MeanVarianceNormalization ------------------------------------------------------------------

class MvnKernel final : public Kernel {
 public:
  explicit MvnKernel(std::vector<int64_t> axes) : axes_(std::move(axes)) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
    KILN_RETURN_IF_ERROR(check_same_float_dtype(in, 0, 1));
    for (int64_t a : axes_) KILN_RETURN_IF_ERROR(normalize_axis(a, in[0].shape.rank(), "axes value").status());
    out[0] = in[0].desc();
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const Shape& xs = in[0].shape;
    const int rank = xs.rank();
    bool reduced[kMaxRank] = {};
    for (int64_t a : axes_) reduced[normalize_axis(a, rank).value()] = true;
    // Offsets of the kept (outer) and reduced (inner) index spaces; their sums address every element.
    const Shape strides = contiguous_strides(xs);
    auto offsets = [&](bool want_reduced) {
      std::vector<int64_t> offs{0};
      for (int d = 0; d < rank; ++d) {
        if (reduced[d] != want_reduced) continue;
        std::vector<int64_t> next;
        next.reserve(offs.size() * xs[d]);
        for (int64_t o : offs)
          for (int64_t i = 0; i < xs[d]; ++i) next.push_back(o + i * strides[d]);
        offs.swap(next);
      }
      return offs;
    };
    const std::vector<int64_t> outer = offsets(false), inner = offsets(true);
    return dispatch_float(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* x = in[0].as<T>();
      T* y = out[0].as<T>();
      const int64_t n_outer = static_cast<int64_t>(outer.size()), n_inner = static_cast<int64_t>(inner.size());
      // Gathered (strided) reads: bytes at 3 passes of the row, counted as 16 per element.
      const double d = static_cast<double>(n_inner);
      parallel_for_each(n_outer, LoopCost{16.0 * d, 6.0 * d}, [&](int64_t o) {
        double mean = 0, var = 0;
        for (int64_t off : inner) mean += x[outer[o] + off];
        mean = n_inner ? mean / n_inner : 0.0;
        for (int64_t off : inner) var += (x[outer[o] + off] - mean) * (x[outer[o] + off] - mean);
        var = n_inner ? var / n_inner : 0.0;
        const double denom = std::sqrt(var) + 1e-9;
        for (int64_t off : inner) y[outer[o] + off] = static_cast<T>((x[outer[o] + off] - mean) / denom);
      });
      return Status::Ok();
    });
  }

 private:
  std::vector<int64_t> axes_;
};

}  // namespace

void register_nn_norm_kernels(KernelRegistry& r) {
  r.add({"BatchNormalization", "reference", 0,
         [](const KernelArgs&, AttrReader& a) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(float eps, a.get_float("epsilon", 1e-5f));
           KILN_ASSIGN_OR_RETURN(float momentum, a.get_float("momentum", 0.9f));
           (void)momentum;  // only used by training mode
           KILN_ASSIGN_OR_RETURN(int64_t training, a.get_int("training_mode", 0));
           if (training != 0) return Unimplemented("attribute 'training_mode'=1 is not supported");
           if (a.has("spatial")) {  // opset 7-8; spatial=0 (per-element statistics) is not supported
             KILN_ASSIGN_OR_RETURN(int64_t spatial, a.get_int("spatial", 1));
             if (spatial != 1) return Unimplemented("attribute 'spatial'=" + std::to_string(spatial) + " is not supported");
           }
           return std::unique_ptr<Kernel>(std::make_unique<BatchNormKernel>(eps));
         }});
  r.add({"InstanceNormalization", "reference", 0,
         [](const KernelArgs&, AttrReader& a) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(float eps, a.get_float("epsilon", 1e-5f));
           return std::unique_ptr<Kernel>(std::make_unique<InstanceNormKernel>(eps));
         }});
  r.add({"LayerNormalization", "reference", 0,
         [](const KernelArgs&, AttrReader& a) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(int64_t axis, a.get_int("axis", -1));
           KILN_ASSIGN_OR_RETURN(float eps, a.get_float("epsilon", 1e-5f));
           KILN_ASSIGN_OR_RETURN(int64_t stash, a.get_int("stash_type", 1));
           if (stash != 1) return Unimplemented("attribute 'stash_type'=" + std::to_string(stash) + " is not supported");
           return std::unique_ptr<Kernel>(std::make_unique<LayerNormKernel>(axis, eps));
         }});
  r.add({"LRN", "reference", 0, [](const KernelArgs&, AttrReader& a) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(float alpha, a.get_float("alpha", 1e-4f));
           KILN_ASSIGN_OR_RETURN(float beta, a.get_float("beta", 0.75f));
           KILN_ASSIGN_OR_RETURN(float bias, a.get_float("bias", 1.0f));
           KILN_ASSIGN_OR_RETURN(int64_t size, a.require_int("size"));
           if (size < 1) return InvalidArgument("size must be >= 1, got " + std::to_string(size));
           return std::unique_ptr<Kernel>(std::make_unique<LrnKernel>(alpha, beta, bias, size));
         }});
  r.add({"MeanVarianceNormalization", "reference", 0,
         [](const KernelArgs&, AttrReader& a) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(auto axes, a.get_ints("axes", {0, 2, 3}));
           return std::unique_ptr<Kernel>(std::make_unique<MvnKernel>(std::move(axes)));
         }});
}

}  // namespace kiln
