// Reference Conv and ConvTranspose for 1-3 spatial dims. Lower ranks run as 3-D with trailing unit
// dims, which leaves the C-order layout unchanged.
#include <algorithm>

#include "runtime/kernels/nn_common.h"
#include "runtime/thread_pool.h"

namespace kiln {

namespace {

Status check_conv_inputs(std::span<const TensorView> in, int64_t group, bool transpose) {
  KILN_RETURN_IF_ERROR(check_input_count(in, 2, 3));
  const DType dt = in[0].dtype;
  if (dt != DType::kFloat32 && dt != DType::kFloat64)
    return Unimplemented("input 0 dtype " + dtype_name(dt) + " is not supported (float32/float64 only)");
  for (size_t i = 1; i < in.size(); ++i)
    if (in[i].present() && in[i].dtype != dt)
      return InvalidArgument("input " + std::to_string(i) + " dtype " + dtype_name(in[i].dtype) +
                             " differs from input 0 dtype " + dtype_name(dt));
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  if (x.rank() < 3) return InvalidArgument("input 0 must have rank >= 3, got shape " + x.str());
  if (w.rank() != x.rank())
    return InvalidArgument("input 1 rank " + std::to_string(w.rank()) + " differs from input 0 rank " +
                           std::to_string(x.rank()));
  if (group < 1) return InvalidArgument("group must be >= 1, got " + std::to_string(group));
  const int64_t C = x[1];
  if (C % group != 0)
    return InvalidArgument("input 0 dim 1 (" + std::to_string(C) + ") is not divisible by group " + std::to_string(group));
  if (!transpose) {
    if (w[1] * group != C)
      return InvalidArgument("input 1 dim 1 (" + std::to_string(w[1]) + ") times group " + std::to_string(group) +
                             " does not match input 0 channels " + std::to_string(C));
    if (w[0] % group != 0)
      return InvalidArgument("input 1 dim 0 (" + std::to_string(w[0]) + ") is not divisible by group " +
                             std::to_string(group));
  } else if (w[0] != C) {
    return InvalidArgument("input 1 dim 0 (" + std::to_string(w[0]) + ") does not match input 0 channels " +
                           std::to_string(C));
  }
  const int64_t M = transpose ? w[1] * group : w[0];
  if (in.size() > 2 && in[2].present() && (in[2].shape.rank() != 1 || in[2].shape[0] != M))
    return InvalidArgument("input 2 (bias) must have shape [" + std::to_string(M) + "], got " + in[2].shape.str());
  return Status::Ok();
}

Status check_kernel_shape(const WindowAttrs& w, const Shape& weights) {
  if (w.kernel_shape.empty()) return Status::Ok();
  const int n = weights.rank() - 2;
  if (static_cast<int>(w.kernel_shape.size()) != n)
    return InvalidArgument("kernel_shape has " + std::to_string(w.kernel_shape.size()) + " values, expected " +
                           std::to_string(n));
  for (int i = 0; i < n; ++i)
    if (w.kernel_shape[i] != weights[i + 2])
      return InvalidArgument("kernel_shape[" + std::to_string(i) + "]=" + std::to_string(w.kernel_shape[i]) +
                             " does not match input 1 dim " + std::to_string(i + 2) + " (" +
                             std::to_string(weights[i + 2]) + ")");
  return Status::Ok();
}

class ConvKernel final : public Kernel {
 public:
  ConvKernel(WindowAttrs w, int64_t group) : w_(std::move(w)), group_(group) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_conv_inputs(in, group_, false));
    KILN_RETURN_IF_ERROR(check_kernel_shape(w_, in[1].shape));
    const Shape& x = in[0].shape;
    KILN_ASSIGN_OR_RETURN(g_, forward_window_geometry(w_, x.data() + 2, in[1].shape.data() + 2, x.rank() - 2, false));
    Shape os{x[0], in[1].shape[0]};
    for (int i = 0; i < g_.n; ++i) os.push_back(g_.out[i]);
    out[0] = {in[0].dtype, os};
    return Status::Ok();
  }
  Status prepare(std::span<const TensorView> in, std::span<const TensorView>) override {
    KILN_ASSIGN_OR_RETURN(g_, forward_window_geometry(w_, in[0].shape.data() + 2, in[1].shape.data() + 2,
                                                      in[0].shape.rank() - 2, false));
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return dispatch_float(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      const WindowGeom& g = g_;
      const int64_t N = in[0].shape[0], C = in[0].shape[1], M = in[1].shape[0];
      const int64_t Cg = C / group_, Mg = M / group_;
      const int64_t in_plane = g.in[0] * g.in[1] * g.in[2], out_plane = g.out[0] * g.out[1] * g.out[2];
      const int64_t kvol = g.k[0] * g.k[1] * g.k[2];
      const T* x = in[0].as<T>();
      const T* w = in[1].as<T>();
      const T* bias = in.size() > 2 && in[2].present() ? in[2].as<T>() : nullptr;
      T* y = out[0].as<T>();
      // Per output plane (n, m): Cg * kvol multiply-adds per output element.
      const double macs = static_cast<double>(out_plane) * static_cast<double>(Cg * kvol);
      parallel_for_each(N * M, LoopCost{sizeof(T) * (macs + static_cast<double>(out_plane)), 2.0 * macs}, [&](int64_t nm) {
        const int64_t n = nm / M, m = nm % M;
        const int64_t grp = m / Mg;
        T* yp = y + (n * M + m) * out_plane;
        const T b0 = bias ? bias[m] : T(0);
        for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
          for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
            for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
              T acc = b0;
              for (int64_t ic = 0; ic < Cg; ++ic) {
                const T* xp = x + (n * C + grp * Cg + ic) * in_plane;
                const T* wp = w + (m * Cg + ic) * kvol;
                for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
                  const int64_t i0 = o0 * g.stride[0] - g.pad_begin[0] + k0 * g.dil[0];
                  if (i0 < 0 || i0 >= g.in[0]) continue;
                  for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
                    const int64_t i1 = o1 * g.stride[1] - g.pad_begin[1] + k1 * g.dil[1];
                    if (i1 < 0 || i1 >= g.in[1]) continue;
                    for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
                      const int64_t i2 = o2 * g.stride[2] - g.pad_begin[2] + k2 * g.dil[2];
                      if (i2 < 0 || i2 >= g.in[2]) continue;
                      acc += xp[(i0 * g.in[1] + i1) * g.in[2] + i2] * wp[(k0 * g.k[1] + k1) * g.k[2] + k2];
                    }
                  }
                }
              }
              yp[(o0 * g.out[1] + o1) * g.out[2] + o2] = acc;
            }
      });
      return Status::Ok();
    });
  }

 private:
  WindowAttrs w_;
  int64_t group_;
  WindowGeom g_;
};

class ConvTransposeKernel final : public Kernel {
 public:
  ConvTransposeKernel(WindowAttrs w, int64_t group, std::vector<int64_t> output_padding,
                      std::vector<int64_t> output_shape)
      : w_(std::move(w)), group_(group), output_padding_(std::move(output_padding)),
        output_shape_(std::move(output_shape)) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_conv_inputs(in, group_, true));
    KILN_RETURN_IF_ERROR(check_kernel_shape(w_, in[1].shape));
    KILN_RETURN_IF_ERROR(compute_geometry(in[0].shape, in[1].shape));
    Shape os{in[0].shape[0], in[1].shape[1] * group_};
    for (int i = 0; i < g_.n; ++i) os.push_back(g_.out[i]);
    out[0] = {in[0].dtype, os};
    return Status::Ok();
  }
  Status prepare(std::span<const TensorView> in, std::span<const TensorView>) override {
    return compute_geometry(in[0].shape, in[1].shape);
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return dispatch_float(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      const WindowGeom& g = g_;
      const int64_t N = in[0].shape[0], C = in[0].shape[1], Mg = in[1].shape[1], M = Mg * group_;
      const int64_t Cg = C / group_;
      const int64_t in_plane = g.in[0] * g.in[1] * g.in[2], out_plane = g.out[0] * g.out[1] * g.out[2];
      const int64_t kvol = g.k[0] * g.k[1] * g.k[2];
      const T* x = in[0].as<T>();
      const T* w = in[1].as<T>();
      const T* bias = in.size() > 2 && in[2].present() ? in[2].as<T>() : nullptr;
      T* y = out[0].as<T>();
      // Scatter form: each (n, m) owns its output plane, so planes are computed independently.
      // Per output plane (n, m): Cg * kvol multiply-adds per input element.
      const double macs = static_cast<double>(in_plane) * static_cast<double>(Cg * kvol);
      parallel_for_each(N * M, LoopCost{sizeof(T) * (macs + static_cast<double>(out_plane)), 2.0 * macs}, [&](int64_t nm) {
        const int64_t n = nm / M, m = nm % M;
        const int64_t grp = m / Mg, mm = m % Mg;
        T* yp = y + (n * M + m) * out_plane;
        std::fill(yp, yp + out_plane, bias ? bias[m] : T(0));
        for (int64_t ic = 0; ic < Cg; ++ic) {
          const int64_t c = grp * Cg + ic;
          const T* xp = x + (n * C + c) * in_plane;
          const T* wp = w + (c * Mg + mm) * kvol;
          for (int64_t i0 = 0; i0 < g.in[0]; ++i0)
            for (int64_t i1 = 0; i1 < g.in[1]; ++i1)
              for (int64_t i2 = 0; i2 < g.in[2]; ++i2) {
                const T xv = xp[(i0 * g.in[1] + i1) * g.in[2] + i2];
                for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
                  const int64_t o0 = i0 * g.stride[0] - g.pad_begin[0] + k0 * g.dil[0];
                  if (o0 < 0 || o0 >= g.out[0]) continue;
                  for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
                    const int64_t o1 = i1 * g.stride[1] - g.pad_begin[1] + k1 * g.dil[1];
                    if (o1 < 0 || o1 >= g.out[1]) continue;
                    for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
                      const int64_t o2 = i2 * g.stride[2] - g.pad_begin[2] + k2 * g.dil[2];
                      if (o2 < 0 || o2 >= g.out[2]) continue;
                      yp[(o0 * g.out[1] + o1) * g.out[2] + o2] += xv * wp[(k0 * g.k[1] + k1) * g.k[2] + k2];
                    }
                  }
                }
              }
        }
      });
      return Status::Ok();
    });
  }

 private:
  Status compute_geometry(const Shape& x, const Shape& w) {
    const int n = x.rank() - 2;
    if (n > kMaxSpatial) return Unimplemented(std::to_string(n) + " spatial dims are not supported");
    auto check_len = [&](const std::vector<int64_t>& v, size_t want, const char* name) -> Status {
      if (!v.empty() && v.size() != want)
        return InvalidArgument(std::string(name) + " has " + std::to_string(v.size()) + " values, expected " +
                               std::to_string(want));
      return Status::Ok();
    };
    KILN_RETURN_IF_ERROR(check_len(w_.strides, n, "strides"));
    KILN_RETURN_IF_ERROR(check_len(w_.dilations, n, "dilations"));
    KILN_RETURN_IF_ERROR(check_len(w_.pads, 2 * n, "pads"));
    KILN_RETURN_IF_ERROR(check_len(output_padding_, n, "output_padding"));
    // output_shape may list only the spatial dims or, as some exporters write it, all dims.
    std::vector<int64_t> oshape = output_shape_;
    if (oshape.size() == static_cast<size_t>(n + 2)) oshape.erase(oshape.begin(), oshape.begin() + 2);
    KILN_RETURN_IF_ERROR(check_len(oshape, n, "output_shape"));
    WindowGeom g;
    g.n = n;
    for (int i = 0; i < n; ++i) {
      g.in[i] = x[i + 2];
      g.k[i] = w[i + 2];
      g.stride[i] = w_.strides.empty() ? 1 : w_.strides[i];
      g.dil[i] = w_.dilations.empty() ? 1 : w_.dilations[i];
      const int64_t op = output_padding_.empty() ? 0 : output_padding_[i];
      const int64_t full = g.stride[i] * (g.in[i] - 1) + op + (g.k[i] - 1) * g.dil[i] + 1;
      if (!oshape.empty() || w_.auto_pad == AutoPad::kSameUpper || w_.auto_pad == AutoPad::kSameLower) {
        g.out[i] = !oshape.empty() ? oshape[i] : g.in[i] * g.stride[i];
        // output_shape larger than the natural size gives negative padding; floor division keeps
        // the extra rows at the end, as the ONNX reference does.
        const int64_t total = full - g.out[i];
        const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
        const bool upper = w_.auto_pad == AutoPad::kSameUpper;
        g.pad_begin[i] = upper ? half : total - half;
        g.pad_end[i] = total - g.pad_begin[i];
      } else {
        if (w_.auto_pad == AutoPad::kNotSet && !w_.pads.empty()) {
          g.pad_begin[i] = w_.pads[i];
          g.pad_end[i] = w_.pads[i + n];
        }
        g.out[i] = full - g.pad_begin[i] - g.pad_end[i];
      }
      if (g.out[i] < 0)
        return InvalidArgument("spatial dim " + std::to_string(i) + ": output size " + std::to_string(g.out[i]) +
                               " is negative");
    }
    g_ = g;
    return Status::Ok();
  }

  WindowAttrs w_;
  int64_t group_;
  std::vector<int64_t> output_padding_, output_shape_;
  WindowGeom g_;
};

}  // namespace

StatusOr<std::unique_ptr<Kernel>> make_reference_conv(const KernelArgs&, AttrReader& attrs) {
  WindowAttrs w;
  KILN_RETURN_IF_ERROR(read_window_attrs(attrs, w, true));
  KILN_ASSIGN_OR_RETURN(int64_t group, attrs.get_int("group", 1));
  return std::unique_ptr<Kernel>(std::make_unique<ConvKernel>(std::move(w), group));
}

namespace {
StatusOr<std::unique_ptr<Kernel>> make_conv_transpose(const KernelArgs&, AttrReader& attrs) {
  WindowAttrs w;
  KILN_RETURN_IF_ERROR(read_window_attrs(attrs, w, true));
  KILN_ASSIGN_OR_RETURN(int64_t group, attrs.get_int("group", 1));
  KILN_ASSIGN_OR_RETURN(auto output_padding, attrs.get_ints("output_padding"));
  KILN_ASSIGN_OR_RETURN(auto output_shape, attrs.get_ints("output_shape"));
  for (int64_t v : output_padding)
    KILN_CHECK_ARG(v >= 0, "output_padding values must be non-negative, got " + std::to_string(v));
  return std::unique_ptr<Kernel>(
      std::make_unique<ConvTransposeKernel>(std::move(w), group, std::move(output_padding), std::move(output_shape)));
}
}  // namespace

void register_nn_conv_kernels(KernelRegistry& r) {
  r.add({"Conv", "reference", 0, make_reference_conv});
  r.add({"ConvTranspose", "reference", 0, make_conv_transpose});
}

}  // namespace kiln
