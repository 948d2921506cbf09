// Private header of the nn kernel family: per-file registration functions, the sliding-window
// geometry shared by Conv, ConvTranspose and the pools, and the reference factories that the
// oneDNN kernels fall back to.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/kernels/kernel_util.h"

namespace kiln {

void register_nn_matmul_kernels(KernelRegistry& r);
void register_nn_conv_kernels(KernelRegistry& r);
void register_nn_pool_kernels(KernelRegistry& r);
void register_nn_norm_kernels(KernelRegistry& r);
void register_nn_resize_kernels(KernelRegistry& r);
void register_nn_rotary_kernels(KernelRegistry& r);
void register_panel_matmul_kernels(KernelRegistry& r);
void register_strided_matmul_kernels(KernelRegistry& r);  // strided_matmul_kernels.cpp: kiln's StridedMatMul
void register_nchw_conv_kernels(KernelRegistry& r);  // nchw_conv_kernels.cpp: FusedConv "nchw_direct"
void register_depthwise_conv_kernels(KernelRegistry& r);  // depthwise_conv_kernels.cpp: FusedConv "depthwise_direct"
void register_depthwise_nchw_kernels(KernelRegistry& r);  // depthwise_nchw_kernels.cpp: FusedConv "depthwise_nchw"

// Reference kernels, created directly so optimized kernels can delegate the cases they do not cover.
StatusOr<std::unique_ptr<Kernel>> make_reference_matmul(const KernelArgs& args, AttrReader& attrs);
StatusOr<std::unique_ptr<Kernel>> make_reference_gemm(const KernelArgs& args, AttrReader& attrs);
StatusOr<std::unique_ptr<Kernel>> make_reference_conv(const KernelArgs& args, AttrReader& attrs);

// Reference kernels handle up to this many spatial dims; lower ranks are padded with unit dims.
constexpr int kMaxSpatial = 3;

enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };

// Window attributes as written in the node. Empty vectors mean "default" and are filled per shape.
struct WindowAttrs {
  AutoPad auto_pad = AutoPad::kNotSet;
  std::vector<int64_t> kernel_shape, strides, dilations, pads;
};

// Reads auto_pad/kernel_shape/strides/pads and (when `with_dilations`) dilations.
Status read_window_attrs(AttrReader& attrs, WindowAttrs& w, bool with_dilations);

// Geometry of one forward window op (Conv or a pool) for concrete input spatial dims. Arrays are
// indexed by spatial dim; `n` is the number of spatial dims.
struct WindowGeom {
  int n = 0;
  int64_t in[kMaxSpatial] = {1, 1, 1}, out[kMaxSpatial] = {1, 1, 1}, k[kMaxSpatial] = {1, 1, 1};
  int64_t stride[kMaxSpatial] = {1, 1, 1}, dil[kMaxSpatial] = {1, 1, 1};
  int64_t pad_begin[kMaxSpatial] = {0, 0, 0}, pad_end[kMaxSpatial] = {0, 0, 0};
};

// Computes output sizes and effective pads of a forward window op. `kernel` holds n kernel sizes
// (from the attribute or the weight shape). ceil_mode only applies to pools.
StatusOr<WindowGeom> forward_window_geometry(const WindowAttrs& w, const int64_t* in_spatial, const int64_t* kernel,
                                             int n, bool ceil_mode);

}  // namespace kiln
