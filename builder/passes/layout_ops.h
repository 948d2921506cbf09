// What the activation-layout passes (conv_channels_last, nhwc_transpose_folding) may put in a layout
// other than NCHW: 2-D FusedConvs (x_layout / residual_layout / y_layout) and the ops whose kernels
// compute the same in any layout when all their inputs are in it.
#pragma once

#include <cstdint>
#include <functional>
#include <set>

#include "builder/graph.h"

namespace kiln {

// A FusedConv with constant 4-D weights (a 2-D convolution).
bool is_2d_fused_conv(const Graph& g, const Node& n);

// True when a 2-D FusedConv already has a layout other than NCHW on X, the residual or Y: an
// earlier layout pass has claimed its values.
bool fused_conv_has_layout(const Node& n);

// An elementwise op whose kernel is blind to the layout when every input is in it: the inputs then
// broadcast against each other in the layout's shapes exactly as in NCHW (a kept value's channels
// are never a broadcast 1 in nChw8c, being a multiple of 8; NHWC moves C and keeps the others'
// order). Squeeze-excitation's rescaling x * s, s of shape [N, C, 1, 1], is the case that matters.
bool is_layout_blind_elementwise(const Graph& g, const Node& n);

// GlobalAveragePool of a 4-D value; its kernel takes attribute layout.
bool is_2d_global_average_pool(const Graph& g, const Node& n);

// A constant operand of a layout-blind elementwise op that varies at most along the channels of its
// 4-D output: one value, or C values of shape [C, 1, 1] / [1, C, 1, 1] (BatchNormalization's scale
// and shift, turned into a Mul and an Add by batchnorm_folding; ConvNeXt's layer scale). It needs no
// layout of its own: the passes rewrite it into the layout's broadcast shape (per_channel_in_layout).
bool is_per_channel_constant(const Graph& g, int v, int64_t C);

// A per-channel constant's data in the shape that broadcasts the same way against the layout's
// value: [C/block, 1, 1, block] against [N, C/block, H, W, block] (nChw8c keeps channel c at block
// c / 8, lane c % 8: the same order) when block > 0, [C] against [N, H, W, C] otherwise.
Tensor per_channel_in_layout(const Tensor& t, int64_t block);

// Makes `kept` (values to hold in a layout) whole at its followers: every node `follows` accepts
// that has some but not all of its inputs and output kept loses them all, repeated until none is
// left so (dropping one node's values can split another's). A follower computes in the layout only
// when all its values are in it; `ignored(n, v)` operands (per-channel constants, rewritten to the
// layout's broadcast shape) do not count.
void keep_followers_whole(const Graph& g, std::set<int>& kept, const std::function<bool(const Node&)>& follows,
                          const std::function<bool(const Node&, int)>& ignored);

}  // namespace kiln
