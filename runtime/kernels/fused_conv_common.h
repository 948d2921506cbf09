// Private header of the FusedConv kernels (fused_conv_reference.cpp, onednn_conv_kernels.cpp): the
// op's epilogue and tensor layouts, and the reference kernel the oneDNN ones fall back to.
//
// FusedConv is a kiln-internal op written by builder/passes/conv_epilogue_fusion.cpp:
//   Y = act(Conv(X, W, B) + residual)
// with Conv's attributes, W a constant of the plan, B and residual optional inputs (residual of the
// output's exact shape) and attribute activation "none" | "relu". Attributes x_layout,
// residual_layout and y_layout give the layout of X, the residual and Y:
//   "nchw"     (default) ONNX's [N, C, H, W] (or [N, C, W] for 1-D);
//   "nhwc"     2-D only: shape and data [N, H, W, C]. Set by builder/passes/conv_channels_last.cpp
//              on the values that flow from FusedConv to FusedConv;
//   "nchw16c"  2-D only, C a multiple of 16: shape and data [N, C/16, H, W, 16], oneDNN's
//              nChw16c, the layout its Winograd convolution computes in. Set after tactic selection
//              (builder/plan/plan_winograd_layout.cpp) on values that flow between Winograd FusedConvs.
#pragma once

#include <memory>
#include <string>

#include "runtime/kernel.h"
#include "runtime/kernels/nn_common.h"

namespace kiln {

enum class ConvAct { kNone, kRelu };
enum class ConvLayout { kNchw, kNhwc, kNchw16c };

constexpr int64_t kConvChannelBlock = 16;  // the "16c" of nchw16c

struct FusedSpec {
  ConvAct act = ConvAct::kNone;
  ConvLayout x = ConvLayout::kNchw, res = ConvLayout::kNchw, y = ConvLayout::kNchw;
};

// Reads activation, x_layout, residual_layout and y_layout.
Status read_fused_spec(AttrReader& attrs, FusedSpec* spec);

// The NCHW shape of a tensor of shape `s` in `layout`, or InvalidArgument naming `what` when `s`
// cannot be one (wrong rank, a block that is not 16).
StatusOr<Shape> conv_nchw_shape(ConvLayout layout, const Shape& s, const std::string& what);
// The shape in `layout` of the NCHW shape `s`; InvalidArgument when C does not divide into blocks.
StatusOr<Shape> conv_layout_shape(ConvLayout layout, const Shape& s, const std::string& what);

// Copies float32 data between `layout` and NCHW; `nchw` is the NCHW shape.
void conv_to_nchw(ConvLayout layout, const float* src, float* dst, const Shape& nchw);
void conv_from_nchw(ConvLayout layout, const float* src, float* dst, const Shape& nchw);

// The reference FusedConv: inputs converted to NCHW, the reference Conv, the epilogue element by
// element, the output converted to Y's layout. Fills *spec from the attributes.
StatusOr<std::unique_ptr<Kernel>> make_reference_fused_conv(const KernelArgs& args, AttrReader& attrs, FusedSpec* spec);

}  // namespace kiln
