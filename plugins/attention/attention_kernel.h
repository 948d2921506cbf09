// The fused kiln::Attention kernel (float32 in and out; products in f32 or, with precision bf16,
// in bf16 with f32 accumulation): flash-attention style, one query tile at a time against key
// tiles, with a running max and sum per row, so no more than one tile of scores exists at a time.
#pragma once

#include <cstddef>
#include <span>

#include "plugins/attention/attention_common.h"

namespace kiln::attention {

// Scratch one thread needs for head size Dh (grows with Dh, so the value at the largest Dh
// covers every smaller one).
size_t workspace_bytes_per_thread(int64_t Dh);

// Writes out (and k_all / v_all with a cache). `workspace` holds `slots` areas of
// workspace_bytes_per_thread(Dh') for some Dh' >= g.Dh; at most `slots` threads run.
Status run_attention(const Params& p, const Geometry& g, std::span<const TensorView> inputs,
                     std::span<const TensorView> outputs, void* workspace, int slots);

// Lets tests exercise the AVX2 tile code on an AVX-512 machine. Returns whether AVX-512 is now used.
bool allow_avx512(bool allowed);
// Whether precision bf16 runs in bf16 here (AMX-BF16); otherwise it runs the f32 path.
bool bf16_supported();

}  // namespace kiln::attention
