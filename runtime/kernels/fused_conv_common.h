// Private header of the FusedConv kernels (fused_conv_reference.cpp, onednn_conv_kernels.cpp): the
// op's epilogue and tensor layouts, and the reference kernel the oneDNN ones fall back to.
//
// FusedConv is a kiln-internal op written by builder/passes/conv_epilogue_fusion.cpp:
//   Y = act(Conv(X, W, B) + residual)
// with Conv's attributes, W a constant of the plan, B and residual optional inputs (residual of the
// output's exact shape) and attribute activation "none" | "relu" | "silu" (x sigmoid(x)) |
// "sigmoid" | "hardswish" | "clip" (min(max(x, activation_alpha), activation_beta), ReLU6's
// export) | "gelu_erf" | "gelu_tanh". Attributes x_layout,
// residual_layout and y_layout give the layout of X, the residual and Y:
//   "nchw"     (default) ONNX's [N, C, H, W] (or [N, C, W] for 1-D);
//   "nhwc"     2-D only: shape and data [N, H, W, C]. Set by builder/passes/conv_channels_last.cpp
//              on the values that flow from FusedConv to FusedConv;
//   "nchw8c"   2-D only, C a multiple of 8: shape and data [N, C/8, H, W, 8], oneDNN's nChw8c, the
//              layout its AVX2 convolutions (direct and depthwise) compute in. Set by
//              conv_channels_last instead of "nhwc" when the build machine has no AVX-512;
//   "nchw16c"  2-D only, C a multiple of 16: shape and data [N, C/16, H, W, 16], oneDNN's
//              nChw16c, the layout its Winograd convolution computes in. Set after tactic selection
//              (builder/plan/plan_winograd_layout.cpp) on values that flow between Winograd FusedConvs.
// The blocked layouts never pad: a channel count that is not a multiple of the block keeps another
// layout (the pass's choice), so a tensor's shape always says its channel count.
#pragma once

#include <memory>
#include <string>

#include "runtime/kernel.h"
#include "runtime/kernels/nn_common.h"

namespace kiln {

enum class ConvAct { kNone, kRelu, kSilu, kSigmoid, kHardSwish, kClip, kGeluErf, kGeluTanh };
enum class ConvLayout { kNchw, kNhwc, kNchw8c, kNchw16c };

// The channel block of a blocked layout (the "8c" of nchw8c), 0 for NCHW and NHWC.
constexpr int64_t conv_channel_block(ConvLayout l) { return l == ConvLayout::kNchw8c ? 8 : l == ConvLayout::kNchw16c ? 16 : 0; }

// Parses "nchw", "nhwc", "nchw8c" or "nchw16c"; InvalidArgument naming the attribute `name` otherwise.
StatusOr<ConvLayout> parse_conv_layout(const std::string& v, const std::string& name);
const char* conv_layout_name(ConvLayout l);

struct FusedSpec {
  ConvAct act = ConvAct::kNone;
  float alpha = 0.0f, beta = 0.0f;  // Clip's bounds
  ConvLayout x = ConvLayout::kNchw, res = ConvLayout::kNchw, y = ConvLayout::kNchw;
};

// Reads activation, x_layout, residual_layout and y_layout.
Status read_fused_spec(AttrReader& attrs, FusedSpec* spec);

// The NCHW shape of a tensor of shape `s` in `layout`, or InvalidArgument naming `what` when `s`
// cannot be one (wrong rank, a block that is not the layout's).
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
