// The nn family: registration and the sliding-window geometry shared by Conv, ConvTranspose and
// the pools. The kernels themselves live in nn_<theme>_kernels.cpp.
#include "runtime/kernels/families.h"
#include "runtime/kernels/nn_common.h"

namespace kiln {

Status read_window_attrs(AttrReader& attrs, WindowAttrs& w, bool with_dilations) {
  KILN_ASSIGN_OR_RETURN(std::string auto_pad, attrs.get_string("auto_pad", "NOTSET"));
  if (auto_pad == "NOTSET") w.auto_pad = AutoPad::kNotSet;
  else if (auto_pad == "SAME_UPPER") w.auto_pad = AutoPad::kSameUpper;
  else if (auto_pad == "SAME_LOWER") w.auto_pad = AutoPad::kSameLower;
  else if (auto_pad == "VALID") w.auto_pad = AutoPad::kValid;
  else return Unimplemented("attribute 'auto_pad'='" + auto_pad + "' is not supported");
  KILN_ASSIGN_OR_RETURN(w.kernel_shape, attrs.get_ints("kernel_shape"));
  KILN_ASSIGN_OR_RETURN(w.strides, attrs.get_ints("strides"));
  KILN_ASSIGN_OR_RETURN(w.pads, attrs.get_ints("pads"));
  if (with_dilations) {
    KILN_ASSIGN_OR_RETURN(w.dilations, attrs.get_ints("dilations"));
  }
  for (int64_t v : w.kernel_shape) KILN_CHECK_ARG(v > 0, "kernel_shape values must be positive, got " + std::to_string(v));
  for (int64_t v : w.strides) KILN_CHECK_ARG(v > 0, "strides values must be positive, got " + std::to_string(v));
  for (int64_t v : w.dilations) KILN_CHECK_ARG(v > 0, "dilations values must be positive, got " + std::to_string(v));
  for (int64_t v : w.pads) KILN_CHECK_ARG(v >= 0, "pads values must be non-negative, got " + std::to_string(v));
  return Status::Ok();
}

StatusOr<WindowGeom> forward_window_geometry(const WindowAttrs& w, const int64_t* in_spatial, const int64_t* kernel,
                                             int n, bool ceil_mode) {
  if (n < 1 || n > kMaxSpatial)
    return Unimplemented(std::to_string(n) + " spatial dims are not supported (1.." + std::to_string(kMaxSpatial) + ")");
  auto check_len = [&](const std::vector<int64_t>& v, size_t want, const char* name) -> Status {
    if (!v.empty() && v.size() != want)
      return InvalidArgument(std::string(name) + " has " + std::to_string(v.size()) + " values, expected " +
                             std::to_string(want));
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(check_len(w.strides, n, "strides"));
  KILN_RETURN_IF_ERROR(check_len(w.dilations, n, "dilations"));
  KILN_RETURN_IF_ERROR(check_len(w.pads, 2 * n, "pads"));
  WindowGeom g;
  g.n = n;
  for (int i = 0; i < n; ++i) {
    g.in[i] = in_spatial[i];
    g.k[i] = kernel[i];
    g.stride[i] = w.strides.empty() ? 1 : w.strides[i];
    g.dil[i] = w.dilations.empty() ? 1 : w.dilations[i];
    const int64_t ek = (g.k[i] - 1) * g.dil[i] + 1, s = g.stride[i];
    switch (w.auto_pad) {
      case AutoPad::kNotSet:
      case AutoPad::kValid: {
        if (w.auto_pad == AutoPad::kNotSet && !w.pads.empty()) {
          g.pad_begin[i] = w.pads[i];
          g.pad_end[i] = w.pads[i + n];
        }
        const int64_t len = g.in[i] + g.pad_begin[i] + g.pad_end[i] - ek;
        if (len < 0)
          return InvalidArgument("spatial dim " + std::to_string(i) + ": padded input size " +
                                 std::to_string(g.in[i] + g.pad_begin[i] + g.pad_end[i]) +
                                 " is smaller than the dilated kernel " + std::to_string(ek));
        g.out[i] = (ceil_mode ? (len + s - 1) / s : len / s) + 1;
        // A window may not start in the end padding (PyTorch and ONNX Runtime agree on this).
        if (ceil_mode && (g.out[i] - 1) * s >= g.in[i] + g.pad_begin[i]) --g.out[i];
        break;
      }
      case AutoPad::kSameUpper:
      case AutoPad::kSameLower: {
        g.out[i] = (g.in[i] + s - 1) / s;
        const int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * s + ek - g.in[i]);
        const int64_t small = total / 2, big = total - small;
        g.pad_begin[i] = w.auto_pad == AutoPad::kSameUpper ? small : big;
        g.pad_end[i] = total - g.pad_begin[i];
        break;
      }
    }
  }
  return g;
}

void register_nn_kernels(KernelRegistry& r) {
  register_nn_matmul_kernels(r);
  register_panel_matmul_kernels(r);
  register_strided_matmul_kernels(r);
  register_nn_conv_kernels(r);
  register_nchw_conv_kernels(r);
  register_depthwise_conv_kernels(r);
  register_depthwise_nchw_kernels(r);
  register_nn_pool_kernels(r);
  register_nn_norm_kernels(r);
  register_nn_resize_kernels(r);
  register_nn_rotary_kernels(r);
}

}  // namespace kiln
