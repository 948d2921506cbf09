// Panel GEMM: Y = act(A x W + bias) + residual for A [M, K] float32 row-major and a constant W
// [K, N], in f32 FMA on AVX-512 or AVX2. It exists for the weight-streaming shapes: a few hundred
// rows or fewer against weights read from memory on every run (an incremental step's 274 tokens,
// decoding's one).
//
// W is packed once into column panels of kPanelCols: panel p is W's columns [64p, 64p + 64) as a
// [K, 64] row-major block (zero past N), and the panels follow one another, so each thread reads
// its share of the weights as one sequential stream. The threads split the panels (and the rows too
// when the panels do not divide evenly); a thread runs a panel's K in blocks of up to kDepth rows,
// each block against every 6-row block of A (a 6 x 64 register block of 24 zmm accumulators on
// AVX-512, four 6 x 16 blocks of 12 ymm on AVX2), and while it does, prefetches its next block of
// W into L2, spread over the row blocks: the block is in cache when the rows reach it (a thread's
// very first block is kept short, as nothing hides its fetch). oneDNN's matmul reads the same
// bytes but lets the first row block of each panel wait for them. With the weights in cache the
// two run alike, and at thousands of rows oneDNN is the faster: tactic selection picks per profile.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::panel_gemm {

constexpr int64_t kPanelCols = 64;
// Rows of W per block of a panel: 384 rows x 64 columns of f32 is 96 KB, which stays in L2 while
// it meets every row block of A (the best of 128-1536 timed at K 384 and 1536).
constexpr int64_t kDepth = 384;

enum class Act { kNone, kGeluErf, kGeluTanh };

// Floats of W packed as panels.
int64_t packed_floats(int64_t K, int64_t N);
void pack(const float* w, int64_t K, int64_t N, float* packed);
// pack() of a W read through strides, W[k][n] at w[k * sk + n * sn] (a transposed or permuted view
// packs without being copied out first), each value times `scale` (a product's alpha, so the
// register blocks need none).
void pack_strided(const float* w, int64_t K, int64_t N, int64_t sk, int64_t sn, float scale, float* packed);

struct Args {
  const float* a = nullptr;  // [M, K], rows lda apart
  int64_t M = 0, K = 0, N = 0;
  const float* packed = nullptr;    // pack(W)
  const float* bias = nullptr;      // [N] or null
  const float* residual = nullptr;  // [M, N], rows ldy apart, or null; may be y itself
  float* y = nullptr;               // [M, N], rows ldy apart
  Act act = Act::kNone;
  // Row strides in floats; 0 means dense (K for A, N for Y). A row stride lets a product read the
  // rows of a transposed view (attention's heads interleaved in [S, H, D]) and write them there.
  int64_t lda = 0, ldy = 0;
};

// Whether this CPU runs the kernel (AVX2 + FMA, kiln's baseline).
bool supported();
// Runs on up to `threads` threads of kiln's pool, with AVX-512 where cpu_info() has it (capped by
// KILN_MAX_CPU_ISA: "avx2" forces the AVX2 blocks), else AVX2. Needs supported().
void run(const Args& args, int threads);

}  // namespace kiln::panel_gemm
