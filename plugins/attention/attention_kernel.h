// The fused kiln::Attention kernel (float32 in and out; products in f32 or, with precision bf16,
// in bf16 with f32 accumulation): flash-attention style, one query tile at a time against key
// tiles, with a running max and sum per row, so no more than one tile of scores exists at a time.
#pragma once

#include <cstddef>
#include <span>

#include "plugins/attention/attention_common.h"
#include "runtime/cpu_features.h"

namespace kiln::attention {

// Workspace of a run with up to `slots` threads: per-thread scratch, and with precision bf16 every
// (batch, head)'s K and V in bf16. It grows with every dim, so the value at the largest shapes
// covers every smaller run.
size_t workspace_bytes(const Params& p, const Geometry& g, int slots);

// Writes out (and k_all / v_all with a cache). `workspace` holds workspace_bytes(p, g', slots) for
// a geometry g' at least as large as g in every dim; at most `slots` threads run.
Status run_attention(const Params& p, const Geometry& g, std::span<const TensorView> inputs,
                     std::span<const TensorView> outputs, void* workspace, int slots);

// Lets tests exercise the AVX2 tile code on an AVX-512 machine. Returns whether AVX-512 is now used.
bool allow_avx512(bool allowed);
// For tests: caps the instruction sets this kernel uses below what KILN_MAX_CPU_ISA allows (an AMX
// machine then runs the AVX512_BF16 path); returns the previous cap, to restore it.
CpuIsa cap_isa_for_testing(CpuIsa isa);
// Whether precision bf16 runs in bf16 here (AMX-BF16 or AVX512_BF16, under KILN_MAX_CPU_ISA);
// otherwise it runs the f32 path. bf16_path() names the path: "amx", "avx512_bf16" or "none".
bool bf16_supported();
const char* bf16_path();
// Lets tests compare the head-by-head order (all of a head's query tiles per key tile) with the
// tile-parallel one, which runs where the former does not apply.
void allow_stationary_heads(bool allowed);

}  // namespace kiln::attention
