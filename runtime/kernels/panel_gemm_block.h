// The panel GEMM's micro-kernels (runtime/kernels/panel_gemm.h), one per ISA, and what the shared
// driver (panel_gemm.cpp: packing, the cut over threads, K blocking, prefetch) hands them: one
// register block of up to kRows rows of A against one K block of one 64-column panel. Internal to
// the panel_gemm*.cpp files.
#pragma once

#include <cstdint>

#include "runtime/kernels/panel_gemm.h"

namespace kiln::panel_gemm::detail {

constexpr int kRows = 6;  // rows of A per register block, on both ISAs

struct Block {
  const float* a;  // the block's first row of A at the K block's first column
  int64_t lda;
  const float* b;  // the panel's K block: [kc, 64]
  int64_t kc;
  float* y;  // the block's first row at the panel's first column
  int64_t ldy;
  int64_t cols;           // the panel's columns within N (1..64); the packed panel is zero past them
  bool first, last;       // the first K block starts from 0; the last applies the epilogue
  const float* bias;      // at the panel's first column, or null
  const float* residual;  // at the block's first row and the panel's first column, or null
  Act act;
};

// Runs one register block of `rows` (1..kRows) rows. Each lives in a file compiled for its ISA:
// call only where the CPU has it.
using BlockFn = void (*)(int rows, const Block& k);
void run_block_avx512(int rows, const Block& k);
void run_block_avx2(int rows, const Block& k);

// panel_gemm::run with the given register block instead of the CPU's best (tests run every ISA
// the CPU has).
void run_with(const Args& g, int threads, BlockFn block);

}  // namespace kiln::panel_gemm::detail
