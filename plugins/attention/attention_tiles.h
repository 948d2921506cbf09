// The per-tile compute of the kiln::Attention kernel, one implementation per instruction set:
// AVX2 f32 (the baseline), AVX-512 f32 and AMX bf16 (products in bf16, f32 accumulation and
// softmax). The driver (attention_kernel.cpp) walks query tiles against key tiles, applies masks
// and picks the implementation at run time.
//
// Scores are computed transposed, S^T = K_tile * (scale * Q_tile)^T, so the query axis is the
// vector axis: K and V rows are read straight from the inputs (f32) and the online softmax (max,
// exp, sum per query) runs on whole vectors of queries.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::attention {

// Query rows and keys per tile: a tile's scores, packed Q and accumulator stay in L1/L2 for Dh up
// to ~128.
constexpr int64_t kTq = 64;
constexpr int64_t kTk = 64;  // the largest key tile of any implementation
constexpr size_t kAlign = 64;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
// The accumulator's row length: Dh padded to whole 32-float register blocks.
inline int64_t padded_dh(int64_t Dh) { return round_up(Dh < 1 ? 1 : Dh, 32); }

// One thread's scratch, carved from its workspace slot.
struct Scratch {
  void* q;       // packed (scale * Q_tile): f32 [Dh, kTq] or bf16 pairs [round_up(Dh, 32) / 2, kTq, 2]
  float* s;      // [kTk, kTq]  S^T, then P^T (rows past the tile's keys are not written)
  float* o;      // [kTq, Dhp]  unnormalized output accumulator
  float* m;      // [kTq]       running max per query
  float* l;      // [kTq]       running sum per query
  float* alpha;  // [kTq]       rescale factor of the current key tile
  float* zero;   // [Dhp]       zeros: the K/V row of padding keys
  void* ppack;   // bf16 only: P as key pairs, [kTq, kTk / 2, 2]
  void* ktile;   // bf16 only: one key tile's K and V packed as pack_head packs a head
  void* vtile;   //   (bf16_head_bytes(kTk, Dh) each), where heads are not packed whole
};
size_t scratch_bytes(int64_t Dh);
Scratch carve_scratch(void* base, int64_t Dh);

// The K or V rows of one (batch, head): row j < split at base[0] + j * row[0] (the cache), the
// others at base[1] + (j - split) * row[1] (the new rows).
struct HeadRows {
  const float* base[2];
  int64_t row[2];
  int64_t split;
  const float* operator()(int64_t j) const { return j < split ? base[0] + j * row[0] : base[1] + (j - split) * row[1]; }
};

// One key tile: krow[j] / vrow[j] for j < nk point at K and V rows (Dh floats each); kpacked and
// vpacked are the (batch, head)'s K and V from TileOps::pack_head (or null), k0 the tile's first key.
struct KeyTile {
  const float* const* krow;
  const float* const* vrow;
  int64_t nk;
  const void* kpacked;
  const void* vpacked;
  int64_t k0;
};

// Bytes of one (batch, head)'s K, and of its V, packed for AMX: Sk rounded up to 32 keys, K as
// bf16 rows of Dhp, V as bf16 key pairs of Dhp.
inline size_t bf16_head_bytes(int64_t Sk, int64_t Dh) {
  return static_cast<size_t>(round_up(Sk, 32) * padded_dh(Dh) * 2);
}

struct TileOps {
  // Queries are padded to a multiple of this (padding rows are zero and their outputs unused);
  // keys to a multiple of key_pad, with krow/vrow of padding keys pointing at Scratch::zero.
  int64_t query_pad;
  int64_t key_pad;
  int64_t key_tile;  // keys per tile, <= kTk
  // Packs scale * Q rows q + i * q_row (i < nq) into sc.q, zero-filling queries [nq, nqp).
  void (*pack_q)(const float* q, int64_t q_row, int64_t nq, int64_t nqp, int64_t Dh, float scale, const Scratch& sc);
  // sc.s[j, i] = <K_j, packed Q_i> for j < round_up(nk, key_pad), i < nqp.
  void (*score)(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh);
  // Online softmax over the (masked) tile sc.s, then o = alpha * o + P * V_tile.
  void (*update)(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh);
  // Called after each query tile when not null (AMX: releases the tile registers).
  void (*finish)();
  // When not null: converts a (batch, head)'s Sk K and V rows once, before its query tiles, into
  // bf16_head_bytes(Sk, Dh) bytes each at kdst and vdst (KeyTile::kpacked and vpacked).
  void (*pack_head)(const HeadRows& k, const HeadRows& v, int64_t Sk, int64_t Dh, void* kdst, void* vdst);
  // Whether pack_head may also pack a single key tile (its rows from key k0 on, KeyTile::k0 = 0
  // then): a head with few query tiles converts each key tile once, as it reaches it, into
  // Scratch::ktile / vtile instead of the whole head up front.
  bool packs_key_tiles;
  // When not null: up to kFewRows query rows with the keys on the vector lanes instead, for a
  // tile's last nq % query_pad rows (and decoding's single row), which the lanes would pad to a
  // whole vector: an incremental step's 274 queries are 17 vectors and 2 rows.
  //   pack_few:   sc.q = scale * Q rows as [nr, Dhp], zero past Dh.
  //   few_score:  sc.s[r * kTk + j] = <Q_r, K_j> for j < kt.nk.
  //   few_update: online softmax of those rows (masked scores are -inf), then
  //               o[r] = alpha[r] * o[r] + sum_j P[r, j] * V_j (sc.o rows of Dhp).
  void (*pack_few)(const float* q, int64_t q_row, int64_t nr, int64_t Dh, float scale, const Scratch& sc);
  void (*few_score)(const KeyTile& kt, const Scratch& sc, int64_t nr, int64_t Dh);
  void (*few_update)(const KeyTile& kt, const Scratch& sc, int64_t nr, int64_t Dh);
};
constexpr int64_t kFewRows = 4;

TileOps avx2_tile_ops();
TileOps avx512_tile_ops();    // needs AVX-512 F, BW, DQ, VL
TileOps amx_bf16_tile_ops();  // also needs AVX512_BF16, AMX-TILE, AMX-BF16 and the kernel's permission
TileOps avx512_bf16_tile_ops();  // AVX-512 with AVX512_BF16 (vdpbf16ps), no AMX

// Shared by the two bf16 paths (AVX-512 code: call only where avx512_tile_ops() runs).
// Row stride (in 32-bit pairs) of the packed P: a key tile's keys in pairs.
constexpr int64_t kPairStride = kTk / 2;
// sc.q = scale * Q as bf16 pairs [padded_dh(Dh) / 2, kTq] (queries along a row; zero past Dh, nq).
void pack_q_bf16_pairs(const float* q, int64_t q_row, int64_t nq, int64_t nqp, int64_t Dh, float scale, const Scratch& sc);
// TileOps::pack_head of both bf16 paths: K as bf16 rows [Skp, Dhp], V as bf16 key pairs [Skp / 2, Dhp].
void pack_head_bf16(const HeadRows& k, const HeadRows& v, int64_t Sk, int64_t Dh, void* kdst, void* vdst);
// sc.ppack[i, jp] = (P[i, 2jp], P[i, 2jp+1]) in bf16 from the tile's P^T in sc.s (zero past nk),
// for round_up(nk, 32) / 2 pairs of each of nqp queries.
void pack_p_bf16_pairs(const Scratch& sc, int64_t nk, int64_t nqp);
// The online softmax of a tile of S^T (nk keys, nqp queries): P^T in sc.s, sc.alpha, sc.m, sc.l.
void softmax_tile_avx512(const Scratch& sc, int64_t nk, int64_t nqp);

}  // namespace kiln::attention
