// The panel GEMM's shared part (runtime/kernels/panel_gemm.h): packing, the ISA dispatch, the cut
// over kiln's thread pool, K blocking and the L2 prefetch of the next block of W. The register
// blocks themselves are in panel_gemm_avx512.cpp and panel_gemm_avx2.cpp. Compiled for kiln's
// baseline (x86-64-v3); nothing here needs more.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "runtime/cpu_features.h"
#include "runtime/kernels/panel_gemm.h"
#include "runtime/kernels/panel_gemm_block.h"
#include "runtime/thread_pool.h"

namespace kiln::panel_gemm {

int64_t packed_floats(int64_t K, int64_t N) { return (N + kPanelCols - 1) / kPanelCols * K * kPanelCols; }

void pack(const float* w, int64_t K, int64_t N, float* packed) {
  const int64_t panels = (N + kPanelCols - 1) / kPanelCols;
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t n0 = p * kPanelCols, nr = N - n0 < kPanelCols ? N - n0 : kPanelCols;
    for (int64_t k = 0; k < K; ++k) {
      float* dst = packed + (p * K + k) * kPanelCols;
      std::memcpy(dst, w + k * N + n0, sizeof(float) * static_cast<size_t>(nr));
      std::memset(dst + nr, 0, sizeof(float) * static_cast<size_t>(kPanelCols - nr));
    }
  }
}

void pack_strided(const float* w, int64_t K, int64_t N, int64_t sk, int64_t sn, float scale, float* packed) {
  const int64_t panels = (N + kPanelCols - 1) / kPanelCols;
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t n0 = p * kPanelCols, nr = N - n0 < kPanelCols ? N - n0 : kPanelCols;
    float* panel = packed + p * K * kPanelCols;
    if (sn == 1) {
      for (int64_t k = 0; k < K; ++k) {
        const float* src = w + k * sk + n0;
        float* dst = panel + k * kPanelCols;
        for (int64_t j = 0; j < nr; ++j) dst[j] = src[j] * scale;
        for (int64_t j = nr; j < kPanelCols; ++j) dst[j] = 0.0f;
      }
      continue;
    }
    // Column by column: with sk == 1 (a transposed W, K^T of attention) each reads one contiguous
    // run of W; the panel being written ([K, 64]) stays in cache at attention's K of 64.
    for (int64_t j = 0; j < nr; ++j) {
      const float* src = w + (n0 + j) * sn;
      for (int64_t k = 0; k < K; ++k) panel[k * kPanelCols + j] = src[k * sk] * scale;
    }
    if (nr < kPanelCols)
      for (int64_t k = 0; k < K; ++k) std::memset(panel + k * kPanelCols + nr, 0, sizeof(float) * static_cast<size_t>(kPanelCols - nr));
  }
}

// cpu_info() is capped by KILN_MAX_CPU_ISA: "avx2" runs the AVX2 blocks on an AVX-512 machine.
bool supported() { return cpu_info().avx2; }

namespace {

using detail::Block;
using detail::BlockFn;
using detail::kRows;

constexpr int64_t kRampDepth = 96;  // rows of W in a thread's first block

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// How the work is cut: units of (panel, share of the row blocks), dealt to the threads in
// contiguous runs, so a thread walks its panels in memory order. The rows are split only when the
// panels alone would leave threads idle or uneven.
struct Split {
  int64_t panels, row_blocks, row_shares, units;
  int threads;
};

Split split_work(const Args& g, int threads) {
  Split s;
  s.panels = (g.N + kPanelCols - 1) / kPanelCols;
  s.row_blocks = (g.M + kRows - 1) / kRows;
  threads = static_cast<int>(imax(1, threads));
  s.row_shares = s.panels % threads == 0 ? 1 : imin(threads, s.row_blocks);
  s.units = s.panels * s.row_shares;
  s.threads = static_cast<int>(imin(threads, s.units));
  return s;
}

// Prefetches `lines` cache lines from `p` into L2.
inline void prefetch_l2(const char* p, int64_t lines) {
  for (int64_t i = 0; i < lines; ++i) _mm_prefetch(p + 64 * i, _MM_HINT_T1);
}

void run_thread(const Args& g, const Split& s, int t, BlockFn run_block) {
  const int64_t u0 = s.units * t / s.threads, u1 = s.units * (t + 1) / s.threads;
  // A residual that is the output itself must be read before any partial sum is stored: one K
  // block then.
  const int64_t lda = g.lda ? g.lda : g.K, ldy = g.ldy ? g.ldy : g.N;
  const bool aliased = g.residual && g.residual < g.y + g.M * ldy && g.y < g.residual + g.M * ldy;
  const int64_t depth = aliased ? imax(g.K, 1) : kDepth;
  const int64_t kblocks = (g.K + depth - 1) / depth, kc_even = (g.K + kblocks - 1) / kblocks;
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t p = u / s.row_shares, share = u % s.row_shares;
    const int64_t rb0 = s.row_blocks * share / s.row_shares, rb1 = s.row_blocks * (share + 1) / s.row_shares;
    const int64_t n0 = p * kPanelCols;
    Block k;
    k.cols = imin(kPanelCols, g.N - n0);
    k.lda = lda;
    k.ldy = ldy;
    k.bias = g.bias ? g.bias + n0 : nullptr;
    k.act = g.act;
    // The next unit's panel, when it is another one: its first K block is prefetched during this
    // unit's last.
    const bool next_panel = u + 1 < u1 && (u + 1) / s.row_shares != p;
    // The thread's first block of W has nothing to hide its fetch behind: it is kept short
    // (kRampDepth rows), so the prefetch of the next block starts early. The step's 384 x 384
    // projections give each thread 3 panels, a third of their weights in that first panel.
    for (int64_t k0 = 0; k0 < g.K; k0 += k.kc) {
      k.kc = imin(u == u0 && k0 == 0 && !aliased ? imin(kRampDepth, kc_even) : kc_even, g.K - k0);
      k.b = g.packed + (p * g.K + k0) * kPanelCols;
      k.first = k0 == 0;
      k.last = k0 + k.kc >= g.K;
      const char* ahead = nullptr;
      int64_t ahead_lines = 0;
      if (!k.last) {
        ahead = reinterpret_cast<const char*>(k.b + k.kc * kPanelCols);
        ahead_lines = imin(kc_even, g.K - k0 - k.kc) * kPanelCols * 4 / 64;
      } else if (next_panel) {
        ahead = reinterpret_cast<const char*>(g.packed + ((u + 1) / s.row_shares) * g.K * kPanelCols);
        ahead_lines = imin(kc_even, g.K) * kPanelCols * 4 / 64;
      }
      const int64_t per_block = (ahead_lines + (rb1 - rb0) - 1) / imax(rb1 - rb0, 1);
      for (int64_t rb = rb0; rb < rb1; ++rb) {
        const int64_t m0 = rb * kRows;
        if (ahead) {
          const int64_t done = (rb - rb0) * per_block;
          prefetch_l2(ahead + 64 * done, imax(0, imin(per_block, ahead_lines - done)));
        }
        k.a = g.a + m0 * lda + k0;
        k.y = g.y + m0 * ldy + n0;
        k.residual = g.residual ? g.residual + m0 * ldy + n0 : nullptr;
        run_block(static_cast<int>(imin(kRows, g.M - m0)), k);
      }
    }
  }
}

}  // namespace

void run(const Args& g, int threads) { detail::run_with(g, threads, cpu_info().avx512 ? detail::run_block_avx512 : detail::run_block_avx2); }

void detail::run_with(const Args& g, int threads, BlockFn run_block) {
  if (g.M <= 0 || g.N <= 0 || g.K <= 0) return;
  ThreadPool& pool = ThreadPool::global();
  // The cut is made for the threads the pool can offer now (a helper benched as late, or a
  // region already running, leaves the caller alone), then dealt in twice as many contiguous runs
  // as threads: a thread that falls behind (its core is shared) leaves runs to the others, and
  // each run still walks its panels in memory order with its next panel prefetched.
  const int team = ThreadPool::in_region() ? 1 : static_cast<int>(imin(threads, pool.available_threads()));
  Split s = split_work(g, team);
  // Weights streamed from memory and the multiply-adds: what one thread would spend.
  const double M = static_cast<double>(g.M), N = static_cast<double>(g.N), K = static_cast<double>(g.K);
  const LoopCost cost{4 * (K * N + M * K + M * N), 2 * M * N * K};
  if (s.threads <= 1 || !pool.worth_a_region(2, LoopCost{cost.bytes / 2, cost.flops / 2})) {
    run_thread(g, split_work(g, 1), 0, run_block);
    return;
  }
  s.threads = static_cast<int>(imin(s.units, 2 * static_cast<int64_t>(s.threads)));
  pool.parallel_for(s.threads, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) run_thread(g, s, static_cast<int>(t), run_block);
  });
}

}  // namespace kiln::panel_gemm
