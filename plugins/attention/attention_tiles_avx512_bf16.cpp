// The bf16 tile compute for AVX-512 CPUs with AVX512_BF16 but no AMX (AMD Zen 4/5, Intel Cooper
// Lake): Q·Kᵀ and P·V as vdpbf16ps dot products of bf16 pairs, accumulated in f32; the softmax is
// the f32 one of attention_tiles_avx512.cpp. One vdpbf16ps does the work of two f32 FMAs (16 lanes,
// each a pair of products), and K/V converted to bf16 once per (batch, head) halve what the key
// tiles read. The operands are laid out as for AMX (attention_tiles_avx512.cpp), so the packing is
// shared: Q and V as bf16 pairs along the reduction axis, P transposed into query rows of key pairs.
//   S^T[key j, 16 queries] += bcast(K_j pair dp) · (Q pairs dp of the 16 queries)
//   O[query i, 16 d]      += bcast(P_i pair jp) · (V pairs jp of the 16 columns)
// Chosen at run time, so this file is compiled for it through a target pragma and must not
// instantiate any template with external linkage: helpers are internal, no std templates.
#include <immintrin.h>

#include <cstdint>

#include "plugins/attention/attention_tiles.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")
// Clang ignores GCC's target pragma; its own attribute pragma does the same.
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16"))), apply_to = function)
#endif

namespace kiln::attention {
namespace {

// Register blocks: kRows rows (keys of S^T, or queries of O) by up to 4 vectors of 16 lanes.
constexpr int kRows = 6;

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t idiv_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline __m512bh bcast_pair(const uint32_t* p) { return (__m512bh)_mm512_set1_epi32(static_cast<int>(*p)); }
inline __m512bh load_pairs(const uint32_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

// s[r, 16 z + lane] = sum_dp <K_r pair dp, Q pair dp of query 16 z + lane> for R keys (rows of
// `k`, `k_row` pairs apart) by 16 * NZ queries.
template <int R, int NZ>
inline void score_block(const uint32_t* k, int64_t k_row, const uint32_t* qb, float* s, int64_t pairs) {
  __m512 c[R][NZ];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_setzero_ps();
  for (int64_t dp = 0; dp < pairs; ++dp) {
    __m512bh b[NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) b[z] = load_pairs(qb + dp * kTq + 16 * z);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh a = bcast_pair(k + r * k_row + dp);
#pragma GCC unroll 4
      for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_dpbf16_ps(c[r][z], a, b[z]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) _mm512_storeu_ps(s + r * kTq + 16 * z, c[r][z]);
}

template <int NZ>
void score_keys(const uint32_t* k, int64_t k_row, int64_t nk, const uint32_t* qb, float* s, int64_t pairs) {
  int64_t j = 0;
  for (; j + kRows <= nk; j += kRows) score_block<kRows, NZ>(k + j * k_row, k_row, qb, s + j * kTq, pairs);
  k += j * k_row;
  s += j * kTq;
  switch (nk - j) {
    case 1: score_block<1, NZ>(k, k_row, qb, s, pairs); break;
    case 2: score_block<2, NZ>(k, k_row, qb, s, pairs); break;
    case 3: score_block<3, NZ>(k, k_row, qb, s, pairs); break;
    case 4: score_block<4, NZ>(k, k_row, qb, s, pairs); break;
    case 5: score_block<5, NZ>(k, k_row, qb, s, pairs); break;
    default: break;
  }
}

// K's rows come from the (batch, head)'s packed K (bf16 rows of padded_dh(Dh)); the pairs past Dh
// are zero in both operands, so the dot products run over whole pairs.
void score_dpbf16(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh) {
  const int64_t k_row = padded_dh(Dh) / 2, pairs = idiv_up(Dh, 2);
  const uint32_t* k = static_cast<const uint32_t*>(kt.kpacked) + kt.k0 * k_row;
  const uint32_t* qb = static_cast<const uint32_t*>(sc.q);
  for (int64_t i = 0; i < nqp; i += 64) {
    switch (imin(4, (nqp - i) / 16)) {
      case 4: score_keys<4>(k, k_row, kt.nk, qb + i, sc.s + i, pairs); break;
      case 3: score_keys<3>(k, k_row, kt.nk, qb + i, sc.s + i, pairs); break;
      case 2: score_keys<2>(k, k_row, kt.nk, qb + i, sc.s + i, pairs); break;
      default: score_keys<1>(k, k_row, kt.nk, qb + i, sc.s + i, pairs); break;
    }
  }
}

// o[r, 16 z + lane] = alpha[r] * o[r, ...] + sum_jp <P_r pair jp, V pair jp of column 16 z + lane>
// for R queries (rows of pa, kPairStride apart) by 16 * NZ columns of the padded head.
template <int R, int NZ>
inline void pv_block(const uint32_t* pa, const uint32_t* vb, int64_t v_row, int64_t np, float* o, int64_t Dhp,
                     const float* alpha) {
  __m512 c[R][NZ];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_mul_ps(a, _mm512_loadu_ps(o + r * Dhp + 16 * z));
  }
  for (int64_t jp = 0; jp < np; ++jp) {
    __m512bh b[NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) b[z] = load_pairs(vb + jp * v_row + 16 * z);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh a = bcast_pair(pa + r * kPairStride + jp);
#pragma GCC unroll 4
      for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_dpbf16_ps(c[r][z], a, b[z]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) _mm512_storeu_ps(o + r * Dhp + 16 * z, c[r][z]);
}

template <int NZ>
void pv_queries(const uint32_t* pa, const uint32_t* vb, int64_t np, const Scratch& sc, int64_t nqp, int64_t d0, int64_t Dhp) {
  int64_t i = 0;
  for (; i + kRows <= nqp; i += kRows)
    pv_block<kRows, NZ>(pa + i * kPairStride, vb, Dhp, np, sc.o + i * Dhp + d0, Dhp, sc.alpha + i);
  pa += i * kPairStride;
  float* o = sc.o + i * Dhp + d0;
  const float* a = sc.alpha + i;
  switch (nqp - i) {
    case 1: pv_block<1, NZ>(pa, vb, Dhp, np, o, Dhp, a); break;
    case 2: pv_block<2, NZ>(pa, vb, Dhp, np, o, Dhp, a); break;
    case 3: pv_block<3, NZ>(pa, vb, Dhp, np, o, Dhp, a); break;
    case 4: pv_block<4, NZ>(pa, vb, Dhp, np, o, Dhp, a); break;
    case 5: pv_block<5, NZ>(pa, vb, Dhp, np, o, Dhp, a); break;
    default: break;
  }
}

// V's key pairs come from the (batch, head)'s packed V ([Skp / 2, Dhp] pairs; the tile starts at an
// even key). P's last pair of an odd tile is (P, 0), so the key after the tile, whatever it is,
// carries no weight.
void update_dpbf16(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh) {
  softmax_tile_avx512(sc, kt.nk, nqp);
  pack_p_bf16_pairs(sc, kt.nk, nqp);
  const int64_t Dhp = padded_dh(Dh), np = idiv_up(kt.nk, 2);
  const uint32_t* pa = static_cast<const uint32_t*>(sc.ppack);
  for (int64_t d0 = 0; d0 < Dh; d0 += 64) {
    const uint32_t* vb = static_cast<const uint32_t*>(kt.vpacked) + kt.k0 / 2 * Dhp + d0;
    switch (imin(4, idiv_up(Dh - d0, 16))) {
      case 4: pv_queries<4>(pa, vb, np, sc, nqp, d0, Dhp); break;
      case 3: pv_queries<3>(pa, vb, np, sc, nqp, d0, Dhp); break;
      case 2: pv_queries<2>(pa, vb, np, sc, nqp, d0, Dhp); break;
      default: pv_queries<1>(pa, vb, np, sc, nqp, d0, Dhp); break;
    }
  }
}

}  // namespace

// The few-row path stays f32 (its keys sit on the lanes and it reads the f32 K/V rows, which one
// query does not make worth converting); the driver takes it only when all rows fit in it
// (decoding), so a query's result never depends on where the tiles cut.
TileOps avx512_bf16_tile_ops() {
  TileOps ops = avx512_tile_ops();
  ops.key_tile = kTk;
  ops.pack_q = pack_q_bf16_pairs;
  ops.score = score_dpbf16;
  ops.update = update_dpbf16;
  ops.finish = nullptr;
  ops.pack_head = pack_head_bf16;
  ops.packs_key_tiles = true;
  return ops;
}

}  // namespace kiln::attention

#ifdef __clang__
#pragma clang attribute pop
#endif
#pragma GCC pop_options
