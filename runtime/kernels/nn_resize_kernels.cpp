// Reference resampling: Resize (opset 11-17 semantics), Upsample (opset 9) and GridSample (opset 16).
// Resize interpolation is separable: every output coordinate of every dim gets a short list of
// (input index, weight) taps, computed in prepare(), and an output element is the weighted sum over
// the tensor product of its dims' taps.
#include <algorithm>
#include <cmath>

#include "runtime/kernels/nn_common.h"
#include "runtime/thread_pool.h"

namespace kiln {

namespace {

enum class Mode { kNearest, kLinear, kCubic };
enum class Coord { kHalfPixel, kPytorchHalfPixel, kAlignCorners, kAsymmetric, kTfCropAndResize, kTfHalfPixelForNn };
enum class NearestMode { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };

struct ResizeAttrs {
  Mode mode = Mode::kNearest;
  Coord coord = Coord::kHalfPixel;
  NearestMode nearest = NearestMode::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
  bool upsample = false;  // Upsample's inputs are (X, scales)
  std::vector<float> attr_scales;  // Upsample-7 takes the scales as an attribute
};

constexpr int kMaxTaps = 4;

struct Taps {
  int count = 0;
  bool outside = false;  // tf_crop_and_resize sampled outside the input: output the extrapolation value
  int64_t idx[kMaxTaps];
  double w[kMaxTaps];
};

class ResizeKernel final : public Kernel {
 public:
  explicit ResizeKernel(ResizeAttrs a) : a_(a) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    const int upsample_inputs = a_.attr_scales.empty() ? 2 : 1;
    KILN_RETURN_IF_ERROR(check_input_count(in, a_.upsample ? upsample_inputs : 1, a_.upsample ? upsample_inputs : 4));
    KILN_RETURN_IF_ERROR(dispatch_numeric(in[0].dtype, [](auto) { return Status::Ok(); }, "input 0"));
    KILN_RETURN_IF_ERROR(compute_sizes(in));
    out[0] = {in[0].dtype, out_shape_};
    return Status::Ok();
  }

  Status prepare(std::span<const TensorView> in, std::span<const TensorView>) override {
    KILN_RETURN_IF_ERROR(compute_sizes(in));
    const Shape& xs = in[0].shape;
    const int rank = xs.rank();
    taps_.clear();
    for (int d = 0; d < rank; ++d) {
      tap_begin_[d] = static_cast<int64_t>(taps_.size());
      for (int64_t o = 0; o < out_shape_[d]; ++o) taps_.push_back(make_taps(d, o, xs[d]));
    }
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return dispatch_numeric(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      const Shape& xs = in[0].shape;
      const int rank = xs.rank();
      const Shape in_strides = contiguous_strides(xs);
      const T* x = in[0].as<T>();
      T* y = out[0].as<T>();
      const int64_t total = out_shape_.numel();
      // Per output element: its taps (up to 4^rank for cubic) and a division per dim to find them.
      double taps = 1;
      for (int d = 0; d < rank; ++d) taps *= a_.mode == Mode::kCubic ? 4.0 : a_.mode == Mode::kNearest ? 1.0 : 2.0;
      const LoopCost cost{sizeof(T) * (taps + 1.0), 4.0 * rank * taps + 20.0 * rank};
      ThreadPool::global().parallel_for(total, cost, [&](int64_t flat_begin, int64_t flat_end, int) {
        for (int64_t flat = flat_begin; flat < flat_end; ++flat) {
          const Taps* t[kMaxRank];
          bool outside = false;
          int64_t rem = flat;
          for (int d = rank - 1; d >= 0; --d) {
            t[d] = &taps_[tap_begin_[d] + rem % out_shape_[d]];
            rem /= out_shape_[d];
            outside |= t[d]->outside;
          }
          if (outside) {
            y[flat] = static_cast<T>(a_.extrapolation);
            continue;
          }
          // Walk the tensor product of the per-dim taps like an odometer.
          int pos[kMaxRank] = {};
          double acc = 0;
          for (;;) {
            double w = 1;
            int64_t off = 0;
            for (int d = 0; d < rank; ++d) {
              w *= t[d]->w[pos[d]];
              off += t[d]->idx[pos[d]] * in_strides[d];
            }
            acc += w * static_cast<double>(x[off]);
            int d = rank - 1;
            for (; d >= 0; --d) {
              if (++pos[d] < t[d]->count) break;
              pos[d] = 0;
            }
            if (d < 0) break;
          }
          if constexpr (std::is_integral_v<T>) {
            y[flat] = a_.mode == Mode::kNearest ? static_cast<T>(acc) : static_cast<T>(std::nearbyint(acc));
          } else {
            y[flat] = static_cast<T>(acc);
          }
        }
      });
      return Status::Ok();
    });
  }

 private:
  Status compute_sizes(std::span<const TensorView> in) {
    const Shape& xs = in[0].shape;
    const int rank = xs.rank();
    auto given = [&](size_t i) { return in.size() > i && in[i].present() && in[i].numel() > 0; };
    const size_t scales_at = a_.upsample ? 1 : 2, sizes_at = 3;
    const bool has_scales = !a_.attr_scales.empty() || given(scales_at);
    const bool has_sizes = !a_.upsample && given(sizes_at);
    if (has_scales == has_sizes)
      return InvalidArgument("exactly one of scales (input 2) and sizes (input 3) must be given");
    out_shape_ = xs;
    if (has_scales) {
      const float* scales = a_.attr_scales.data();
      int64_t count = static_cast<int64_t>(a_.attr_scales.size());
      if (a_.attr_scales.empty()) {
        const TensorView& s = in[scales_at];
        if (s.dtype != DType::kFloat32)
          return InvalidArgument("input " + std::to_string(scales_at) + " (scales) must be float32, got " +
                                 dtype_name(s.dtype));
        scales = s.as<float>();
        count = s.numel();
      }
      if (count != rank)
        return InvalidArgument("scales has " + std::to_string(count) + " values, expected " + std::to_string(rank));
      for (int d = 0; d < rank; ++d) {
        scale_[d] = scales[d];
        if (!(scale_[d] > 0))
          return InvalidArgument("scales value " + std::to_string(scale_[d]) + " at dim " + std::to_string(d) +
                                 " must be positive");
        out_shape_[d] = static_cast<int64_t>(std::floor(static_cast<double>(xs[d]) * scale_[d]));
      }
    } else {
      KILN_ASSIGN_OR_RETURN(auto sizes, read_int_vector(in[sizes_at], "input 3 (sizes)"));
      if (static_cast<int>(sizes.size()) != rank)
        return InvalidArgument("input 3 (sizes) has " + std::to_string(sizes.size()) + " values, expected " +
                               std::to_string(rank));
      for (int d = 0; d < rank; ++d) {
        if (sizes[d] < 0) return InvalidArgument("sizes value " + std::to_string(sizes[d]) + " at dim " + std::to_string(d) + " is negative");
        out_shape_[d] = sizes[d];
        scale_[d] = xs[d] > 0 ? static_cast<double>(sizes[d]) / static_cast<double>(xs[d]) : 1.0;
      }
    }
    for (int d = 0; d < rank; ++d) roi_start_[d] = 0, roi_end_[d] = 1;
    if (a_.coord == Coord::kTfCropAndResize) {
      if (!given(1)) return InvalidArgument("tf_crop_and_resize needs input 1 (roi)");
      if (in[1].numel() != 2 * rank)
        return InvalidArgument("input 1 (roi) has " + std::to_string(in[1].numel()) + " values, expected " +
                               std::to_string(2 * rank));
      for (int d = 0; d < rank; ++d) {
        roi_start_[d] = read_double(in[1], d);
        roi_end_[d] = read_double(in[1], d + rank);
      }
    }
    return Status::Ok();
  }

  // Maps output coordinate `o` of dim `d` to the input, following the ONNX reference implementation
  // (which also decides the rounding of integer-valued coordinates).
  Taps make_taps(int d, int64_t o, int64_t in_len) const {
    Taps t;
    const double scale = scale_[d];
    const double out_len = scale * static_cast<double>(in_len);
    double x = 0;
    switch (a_.coord) {
      case Coord::kHalfPixel: x = (o + 0.5) / scale - 0.5; break;
      case Coord::kPytorchHalfPixel: x = out_len == 1 ? 0.0 : (o + 0.5) / scale - 0.5; break;
      case Coord::kAlignCorners: x = out_len == 1 ? 0.0 : o * (in_len - 1) / (out_len - 1); break;
      case Coord::kAsymmetric: x = o / scale; break;
      case Coord::kTfHalfPixelForNn: x = (o + 0.5) / scale; break;
      case Coord::kTfCropAndResize: {
        const double s = roi_start_[d], e = roi_end_[d];
        x = out_len == 1 ? (e - s) * (in_len - 1) / 2 : o * (e - s) * (in_len - 1) / (out_len - 1);
        x += s * (in_len - 1);
        if (x < 0 || x > in_len - 1) {
          t.outside = true;
          return t;
        }
        break;
      }
    }
    auto clamp = [&](int64_t i) { return i < 0 ? 0 : (i >= in_len ? in_len - 1 : i); };
    const bool integral = x == std::floor(x);
    // The left neighbour is strictly left of x, so the ratio lies in (0, 1].
    const int64_t i0 = integral ? static_cast<int64_t>(x) - 1 : static_cast<int64_t>(std::floor(x));
    const double r = x - static_cast<double>(i0);
    if (a_.mode == Mode::kNearest) {
      bool right = true;
      if (!integral) {
        switch (a_.nearest) {
          case NearestMode::kRoundPreferFloor: right = r > 0.5; break;
          case NearestMode::kRoundPreferCeil: right = r >= 0.5; break;
          case NearestMode::kFloor: right = false; break;
          case NearestMode::kCeil: right = true; break;
        }
      }
      t.count = 1;
      t.idx[0] = clamp(right ? i0 + 1 : i0);
      t.w[0] = 1;
      return t;
    }
    int64_t first;
    double w[kMaxTaps];
    int n;
    if (a_.mode == Mode::kLinear) {
      n = 2;
      first = i0;
      w[0] = 1 - r;
      w[1] = r;
    } else {
      n = 4;
      first = i0 - 1;
      const double A = a_.cubic_a, s = 1 - r;
      w[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
      w[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
      w[2] = ((A + 2) * s - (A + 3)) * s * s + 1;
      w[3] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
    }
    if (a_.exclude_outside) {
      double sum = 0;
      for (int i = 0; i < n; ++i) {
        if (first + i < 0 || first + i >= in_len) w[i] = 0;
        sum += w[i];
      }
      for (int i = 0; i < n; ++i) w[i] = sum != 0 ? w[i] / sum : 0;
    }
    for (int i = 0; i < n; ++i) {
      if (w[i] == 0) continue;
      t.idx[t.count] = clamp(first + i);
      t.w[t.count] = w[i];
      ++t.count;
    }
    if (t.count == 0) {  // every weight vanished (exclude_outside with no input in reach)
      t.count = 1;
      t.idx[0] = clamp(i0);
      t.w[0] = 0;
    }
    return t;
  }

  ResizeAttrs a_;
  Shape out_shape_;
  double scale_[kMaxRank] = {};
  double roi_start_[kMaxRank] = {}, roi_end_[kMaxRank] = {};
  int64_t tap_begin_[kMaxRank] = {};
  std::vector<Taps> taps_;
};

StatusOr<std::unique_ptr<Kernel>> make_resize(const KernelArgs&, AttrReader& attrs) {
  ResizeAttrs a;
  KILN_ASSIGN_OR_RETURN(std::string mode, attrs.get_string("mode", "nearest"));
  KILN_ASSIGN_OR_RETURN(std::string coord, attrs.get_string("coordinate_transformation_mode", "half_pixel"));
  KILN_ASSIGN_OR_RETURN(std::string nearest, attrs.get_string("nearest_mode", "round_prefer_floor"));
  KILN_ASSIGN_OR_RETURN(float cubic_a, attrs.get_float("cubic_coeff_a", -0.75f));
  KILN_ASSIGN_OR_RETURN(int64_t exclude, attrs.get_int("exclude_outside", 0));
  KILN_ASSIGN_OR_RETURN(float extrapolation, attrs.get_float("extrapolation_value", 0.0f));
  if (mode == "nearest") a.mode = Mode::kNearest;
  else if (mode == "linear") a.mode = Mode::kLinear;
  else if (mode == "cubic") a.mode = Mode::kCubic;
  else return Unimplemented("attribute 'mode'='" + mode + "' is not supported");
  if (coord == "half_pixel") a.coord = Coord::kHalfPixel;
  else if (coord == "pytorch_half_pixel") a.coord = Coord::kPytorchHalfPixel;
  else if (coord == "align_corners") a.coord = Coord::kAlignCorners;
  else if (coord == "asymmetric") a.coord = Coord::kAsymmetric;
  else if (coord == "tf_crop_and_resize") a.coord = Coord::kTfCropAndResize;
  else if (coord == "tf_half_pixel_for_nn") a.coord = Coord::kTfHalfPixelForNn;
  else return Unimplemented("attribute 'coordinate_transformation_mode'='" + coord + "' is not supported");
  if (nearest == "round_prefer_floor") a.nearest = NearestMode::kRoundPreferFloor;
  else if (nearest == "round_prefer_ceil") a.nearest = NearestMode::kRoundPreferCeil;
  else if (nearest == "floor") a.nearest = NearestMode::kFloor;
  else if (nearest == "ceil") a.nearest = NearestMode::kCeil;
  else return Unimplemented("attribute 'nearest_mode'='" + nearest + "' is not supported");
  a.cubic_a = cubic_a;
  a.exclude_outside = exclude != 0;
  a.extrapolation = extrapolation;
  return std::unique_ptr<Kernel>(std::make_unique<ResizeKernel>(a));
}

// Upsample-7/9 is Resize with asymmetric coordinates; nearest rounds down, as numpy's repeat does.
StatusOr<std::unique_ptr<Kernel>> make_upsample(const KernelArgs& args, AttrReader& attrs) {
  ResizeAttrs a;
  a.upsample = true;
  if (args.opset < 9) {
    KILN_ASSIGN_OR_RETURN(a.attr_scales, attrs.get_floats("scales"));
    if (a.attr_scales.empty()) return InvalidArgument("attribute 'scales' is required before opset 9");
  }
  a.coord = Coord::kAsymmetric;
  a.nearest = NearestMode::kFloor;
  KILN_ASSIGN_OR_RETURN(std::string mode, attrs.get_string("mode", "nearest"));
  if (mode == "nearest") a.mode = Mode::kNearest;
  else if (mode == "linear" || mode == "bilinear") a.mode = Mode::kLinear;
  else return Unimplemented("attribute 'mode'='" + mode + "' is not supported");
  return std::unique_ptr<Kernel>(std::make_unique<ResizeKernel>(a));
}

// ---- GridSample (opset 16, 4-D) ------------------------------------------------------------------
// Follows PyTorch's grid_sample, which generated the ONNX reference outputs.

enum class GridMode { kBilinear, kNearest, kBicubic };
enum class GridPad { kZeros, kBorder, kReflection };

double reflect_coordinate(double x, double twice_low, double twice_high) {
  if (twice_low == twice_high) return 0;
  const double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
  x = std::fabs(x - lo);
  const double extra = std::fmod(x, span);
  const int64_t flips = static_cast<int64_t>(std::floor(x / span));
  return flips % 2 == 0 ? extra + lo : span - extra + lo;
}

class GridSampleKernel final : public Kernel {
 public:
  GridSampleKernel(GridMode mode, GridPad pad, bool align_corners) : mode_(mode), pad_(pad), align_(align_corners) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
    KILN_RETURN_IF_ERROR(dispatch_float(in[0].dtype, [](auto) { return Status::Ok(); }, "input 0"));
    if (in[1].dtype != in[0].dtype)
      return InvalidArgument("input 1 dtype " + dtype_name(in[1].dtype) + " differs from input 0 dtype " +
                             dtype_name(in[0].dtype));
    const Shape& x = in[0].shape;
    const Shape& g = in[1].shape;
    if (x.rank() != 4) return Unimplemented("input 0 must be 4-D (N, C, H, W), got shape " + x.str());
    if (g.rank() != 4 || g[0] != x[0] || g[3] != 2)
      return InvalidArgument("input 1 (grid) must have shape [" + std::to_string(x[0]) + ", H_out, W_out, 2], got " +
                             g.str());
    out[0] = {in[0].dtype, Shape{x[0], x[1], g[1], g[2]}};
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return dispatch_float(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      const Shape& xs = in[0].shape;
      const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], Ho = in[1].shape[1], Wo = in[1].shape[2];
      const T* x = in[0].as<T>();
      const T* grid = in[1].as<T>();
      T* y = out[0].as<T>();
      // Per plane: a bilinear or bicubic sample per output pixel (16 taps at most).
      const double px = static_cast<double>(Ho * Wo);
      parallel_for_each(N * C, LoopCost{px * (16.0 * sizeof(T) + 8.0), 100.0 * px}, [&](int64_t nc) {
        const int64_t n = nc / C, c = nc % C;
        const T* plane = x + (n * C + c) * H * W;
        for (int64_t p = 0; p < Ho * Wo; ++p) {
          const T* gp = grid + (n * Ho * Wo + p) * 2;
          y[((n * C + c) * Ho * Wo) + p] = static_cast<T>(sample(plane, H, W, gp[0], gp[1]));
        }
      });
      return Status::Ok();
    });
  }

 private:
  double unnormalize(double g, int64_t size) const {
    return align_ ? (g + 1) / 2 * static_cast<double>(size - 1) : ((g + 1) * static_cast<double>(size) - 1) / 2;
  }
  double apply_padding(double v, int64_t size) const {
    if (pad_ == GridPad::kBorder) return std::clamp(v, 0.0, static_cast<double>(size - 1));
    if (pad_ == GridPad::kReflection) {
      v = align_ ? reflect_coordinate(v, 0, 2.0 * static_cast<double>(size - 1))
                 : reflect_coordinate(v, -1, 2.0 * static_cast<double>(size) - 1);
      return std::clamp(v, 0.0, static_cast<double>(size - 1));
    }
    return v;
  }
  template <typename T>
  static double at(const T* plane, int64_t H, int64_t W, int64_t iy, int64_t ix) {
    return iy >= 0 && iy < H && ix >= 0 && ix < W ? static_cast<double>(plane[iy * W + ix]) : 0.0;
  }

  template <typename T>
  double sample(const T* plane, int64_t H, int64_t W, double gx, double gy) const {
    double ix = unnormalize(gx, W), iy = unnormalize(gy, H);
    if (mode_ == GridMode::kBicubic) {
      const double fx = std::floor(ix), fy = std::floor(iy), tx = ix - fx, ty = iy - fy;
      double wx[4], wy[4];
      cubic_weights(tx, wx);
      cubic_weights(ty, wy);
      double acc = 0;
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 4; ++i) {
          // Each tap is padded on its own, as PyTorch's get_value_bounded does.
          const double px = apply_padding(fx - 1 + i, W), py = apply_padding(fy - 1 + j, H);
          acc += wx[i] * wy[j] * at(plane, H, W, static_cast<int64_t>(py), static_cast<int64_t>(px));
        }
      return acc;
    }
    ix = apply_padding(ix, W);
    iy = apply_padding(iy, H);
    if (mode_ == GridMode::kNearest)
      return at(plane, H, W, static_cast<int64_t>(std::nearbyint(iy)), static_cast<int64_t>(std::nearbyint(ix)));
    const int64_t x0 = static_cast<int64_t>(std::floor(ix)), y0 = static_cast<int64_t>(std::floor(iy));
    const double tx = ix - static_cast<double>(x0), ty = iy - static_cast<double>(y0);
    return at(plane, H, W, y0, x0) * (1 - tx) * (1 - ty) + at(plane, H, W, y0, x0 + 1) * tx * (1 - ty) +
           at(plane, H, W, y0 + 1, x0) * (1 - tx) * ty + at(plane, H, W, y0 + 1, x0 + 1) * tx * ty;
  }
  static void cubic_weights(double t, double* w) {
    const double A = -0.75;
    auto near = [&](double v) { return ((A + 2) * v - (A + 3)) * v * v + 1; };
    auto far = [&](double v) { return ((A * v - 5 * A) * v + 8 * A) * v - 4 * A; };
    w[0] = far(t + 1);
    w[1] = near(t);
    w[2] = near(1 - t);
    w[3] = far(2 - t);
  }

  GridMode mode_;
  GridPad pad_;
  bool align_;
};

StatusOr<std::unique_ptr<Kernel>> make_grid_sample(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(std::string mode, attrs.get_string("mode", "bilinear"));
  KILN_ASSIGN_OR_RETURN(std::string pad, attrs.get_string("padding_mode", "zeros"));
  KILN_ASSIGN_OR_RETURN(int64_t align, attrs.get_int("align_corners", 0));
  GridMode m;
  if (mode == "bilinear") m = GridMode::kBilinear;
  else if (mode == "nearest") m = GridMode::kNearest;
  else if (mode == "bicubic") m = GridMode::kBicubic;
  else return Unimplemented("attribute 'mode'='" + mode + "' is not supported");
  GridPad p;
  if (pad == "zeros") p = GridPad::kZeros;
  else if (pad == "border") p = GridPad::kBorder;
  else if (pad == "reflection") p = GridPad::kReflection;
  else return Unimplemented("attribute 'padding_mode'='" + pad + "' is not supported");
  return std::unique_ptr<Kernel>(std::make_unique<GridSampleKernel>(m, p, align != 0));
}

}  // namespace

void register_nn_resize_kernels(KernelRegistry& r) {
  r.add({"Resize", "reference", 0, make_resize});
  r.add({"Upsample", "reference", 0, make_upsample});
  r.add({"GridSample", "reference", 0, make_grid_sample});
}

}  // namespace kiln
