// Private header of the pools over channels-innermost data (runtime/kernels/nn_pool_blocked_kernels.cpp):
// NHWC, and nChw8c read as NHWC over N*C/8 images of 8 channels. runtime/kernels/nn_pool_kernels.cpp's
// MaxPool and GlobalAveragePool call them for attribute layout "nhwc" / "nchw8c".
#pragma once

#include <cstdint>

#include "runtime/kernels/nn_common.h"

namespace kiln {

// MaxPool over x [images, H, W, C] into y [images, OH, OW, C], 2-D geometry `g` (no dilation).
// Empty windows give float's lowest, and a window's NaN is the NaN of its first tap, as in the
// reference. False when a thread could not get its row buffer (out of memory).
bool max_pool_channels_inner(const float* x, float* y, int64_t images, int64_t C, const WindowGeom& g);

// AveragePool over x [images, H, W, C] into y [images, OH, OW, C], 2-D geometry `g` (no dilation), with
// the NCHW path's divisor (taps inside the input, or with `count_include_pad` inside the padded
// input; an empty window gives 0) and its order of additions (the window's rows, then its columns).
bool average_pool_channels_inner(const float* x, float* y, int64_t images, int64_t C, const WindowGeom& g, bool count_include_pad);

// GlobalAveragePool over x [images, pixels, 8] into y [images, 8]. `partial` holds
// global_average_pool_blocked8_partials(images, pixels) doubles: the per-chunk sums, added up in a
// fixed order, so the result does not depend on the thread count.
int64_t global_average_pool_blocked8_partials(int64_t images, int64_t pixels);
void global_average_pool_blocked8(const float* x, float* y, int64_t images, int64_t pixels, double* partial);

// GlobalAveragePool over x [images, pixels, C] into y [images, C], any C. `partial` holds
// global_average_pool_channels_inner_partials(images, pixels, C) doubles (per-tile sums, added up
// in a fixed order as above).
int64_t global_average_pool_channels_inner_partials(int64_t images, int64_t pixels, int64_t C);
void global_average_pool_channels_inner(const float* x, float* y, int64_t images, int64_t pixels, int64_t C, double* partial);

}  // namespace kiln
