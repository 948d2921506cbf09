// After tactic selection: the values that flow only between Winograd FusedConvs are kept in
// oneDNN's blocked nChw16c layout, the one its Winograd convolution computes in.
//
// conv_channels_last keeps the activations between FusedConvs in NHWC, the layout oneDNN's direct
// AVX-512 convolutions compute in, before any kernel is chosen (nChw8c on an AVX2 build machine,
// where oneDNN has no Winograd convolution, so this rewrite only ever sees NHWC values). A FusedConv that tactic selection
// puts on "onednn_winograd" computes in nChw16c instead, so between two of them an NHWC value costs
// two reorders (out of the producer, into the reader; a third where it is also a residual), a
// copy of every such activation on every run. This rewrite runs once the kernels are
// known: a value written by a Winograd FusedConv in NHWC whose readers are all Winograd FusedConvs
// reading it (as X or residual) in NHWC, with channels divisible by 16, becomes "nchw16c" on both
// sides (shape [N, C/16, H, W, 16]). Values with any other reader stay NHWC, so graph outputs,
// direct convolutions and pools see what they saw before. The choice follows from the steps'
// impls alone, so a rebuild from the timing cache rewrites identically.
#pragma once

#include "runtime/plan.h"

namespace kiln {

// Rewrites the layout attributes of `plan`'s FusedConv steps as above; returns how many values
// switched to nChw16c.
int keep_nchw16c_between_winograd_convs(Plan& plan);

}  // namespace kiln
