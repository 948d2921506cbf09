#include "plugins/attention/attention_kernel.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>

#include "plugins/attention/attention_tiles.h"
#include "runtime/cpu_features.h"
// A built-in plugin shares kiln's thread pool (external libraries see only plugin_api.h).
#include "runtime/thread_pool.h"

// The driver: splits the work over (batch, head, query tile), walks key tiles, skips fully
// masked ones, applies masks and normalizes; the tile compute is attention_tiles_*.cpp, chosen
// by CPU and precision.
namespace kiln::attention {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

size_t aligned_bytes(int64_t n) { return static_cast<size_t>(round_up(n, static_cast<int64_t>(kAlign))); }

// What runs: the host's features under KILN_MAX_CPU_ISA (runtime/cpu_features.h), and under a
// further cap tests may set (a machine with AMX runs the AVX512_BF16 path that way).
std::atomic<int> g_test_cap{static_cast<int>(CpuIsa::kAll)};
bool test_allows(CpuIsa isa) { return static_cast<int>(isa) <= g_test_cap.load(std::memory_order_relaxed); }
bool cpu_has_avx512() { return cpu_info().avx512 && test_allows(CpuIsa::kAvx512Core); }
// AVX512_BF16's vdpbf16ps (bf16 pair dot products into f32 lanes).
bool cpu_has_avx512_bf16() { return cpu_info().avx512_bf16 && test_allows(CpuIsa::kAvx512CoreBf16); }
bool cpu_has_amx_bf16() { return cpu_info().amx_bf16 && test_allows(CpuIsa::kAvx512CoreAmx); }

std::atomic<bool> g_avx512_allowed{true};
std::atomic<bool> g_stationary_allowed{true};

// bf16 runs on AMX where there is AMX, else on AVX512_BF16's vdpbf16ps (twice FMA's products per
// instruction; K/V converted once per (batch, head) also halves what the tiles read); a CPU with
// neither runs the f32 path.
TileOps tile_ops(const Params& p) {
  if (!g_avx512_allowed.load(std::memory_order_relaxed) || !cpu_has_avx512()) return avx2_tile_ops();
  if (p.precision == Precision::kBf16 && cpu_has_amx_bf16()) return amx_bf16_tile_ops();
  if (p.precision == Precision::kBf16 && cpu_has_avx512_bf16()) return avx512_bf16_tile_ops();
  return avx512_tile_ops();
}

// One attention problem: a (batch, head) pair's rows, addressed through strides; keys [0, Sc)
// come from the cache and [Sc, Sk) from the new K/V, read in place.
struct Problem {
  const Params* p;
  const Geometry* g;
  const float* q;  // this (b, h)'s first query row
  int64_t q_row;
  const float* k[2];  // cache part, new part (this (b, h)'s first row)
  const float* v[2];
  int64_t kv_row[2];
  const void* mask;  // this (b, h)'s mask origin (bool or float), or null
  float* out;
  int64_t out_row;
  const void* kpacked;  // K and V from TileOps::pack_head, or null
  const void* vpacked;

  // The K (t = 0) or V (t = 1) rows of keys k0 on, as pack_head reads a head's.
  HeadRows rows_from(int t, int64_t k0) const {
    const float* const* base = t ? v : k;
    HeadRows r;
    r.row[0] = kv_row[0];
    r.row[1] = kv_row[1];
    r.split = std::max<int64_t>(0, g->Sc - k0);
    r.base[0] = k0 < g->Sc ? base[0] + k0 * kv_row[0] : nullptr;
    r.base[1] = base[1] + std::max<int64_t>(0, k0 - g->Sc) * kv_row[1];
    return r;
  }
  const float* row(const float* const* base, int64_t j) const {
    return j < g->Sc ? base[0] + j * kv_row[0] : base[1] + (j - g->Sc) * kv_row[1];
  }
  bool mask_visible(int64_t i, int64_t j) const {
    const int64_t off = i * g->mask_stride[2] + j * g->mask_stride[3];
    if (p->mask == MaskKind::kBool) return static_cast<const bool*>(mask)[off];
    return static_cast<const float*>(mask)[off] != kNegInf;
  }
};

// Bit j of a query row's word: key k0 + j is visible (tiles have at most kTk = 64 keys).
using KeyBits = uint64_t;
static_assert(kTk <= 64, "one 64-bit word of key bits per query row");
inline KeyBits low_bits(int64_t n) { return n >= 64 ? ~KeyBits{0} : (KeyBits{1} << n) - 1; }

// Visible-key bits of nk (<= 64) contiguous bool bytes; `in_bounds` says 64 bytes may be read.
inline KeyBits bool_row_bits(const bool* m, int64_t nk, bool in_bounds) {
  alignas(32) uint8_t copy[64];
  const uint8_t* b = reinterpret_cast<const uint8_t*>(m);
  if (!in_bounds) {
    std::memset(copy, 0, sizeof(copy));
    std::memcpy(copy, b, static_cast<size_t>(nk));
    b = copy;
  }
  const __m256i zero = _mm256_setzero_si256();
  const auto hidden = [&](int half) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32 * half));
    return static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, zero)));
  };
  return ~(KeyBits{hidden(1)} << 32 | hidden(0)) & low_bits(nk);
}

// How an explicit mask covers one tile: per query row the visible keys (bits[i]), and whether the
// tile has any visible (query, key) pair and whether all of them are visible. A bool mask that is
// contiguous along the keys is read 32 bytes at a time (a tile costs nq loads, not nq * nk branches).
struct TileCover {
  bool any = false, all = true;
};
TileCover mask_tile_cover(const Problem& pr, int64_t q0, int64_t nq, int64_t k0, int64_t nk, KeyBits* bits) {
  const Geometry& g = *pr.g;
  const KeyBits full = low_bits(nk);
  TileCover c;
  const bool fast = pr.p->mask == MaskKind::kBool && g.mask_stride[3] == 1;
  const bool in_bounds = k0 + 64 <= g.Sk_total();
  // A mask that broadcasts over the queries ([B,1,1,Sk] padding masks, [1,Sk]) shows every query
  // row the same keys, so one row's bits serve the tile. Reading all nq rows of a float mask one
  // element at a time costs about as much as the tile's Q·Kᵀ (BERT-style padding masks).
  const int64_t rows = g.mask_stride[2] == 0 ? std::min<int64_t>(nq, 1) : nq;
  for (int64_t i = 0; i < rows; ++i) {
    KeyBits b = 0;
    if (fast) {
      b = bool_row_bits(static_cast<const bool*>(pr.mask) + (q0 + i) * g.mask_stride[2] + k0, nk, in_bounds);
    } else {
      for (int64_t j = 0; j < nk; ++j)
        if (pr.mask_visible(q0 + i, k0 + j)) b |= KeyBits{1} << j;
    }
    bits[i] = b;
    c.any |= b != 0;
    c.all &= b == full;
  }
  for (int64_t i = rows; i < nq; ++i) bits[i] = bits[0];
  return c;
}

// What a bool mask shows of each (query tile, key tile), computed once per call for every mask
// plane (the (batch, head) pairs the mask does not broadcast over), so a query tile never reads
// the mask for tiles it wholly shows or hides; only mixed tiles read their rows again. Only for
// bool masks contiguous along the keys (the exported [Sq, Sk] masks).
enum TileClass : uint8_t { kHidden = 0, kShown = 1, kMixed = 2 };

bool summarizes_mask(const Params& p, const Geometry& g) {
  return p.mask == MaskKind::kBool && g.mask_stride[3] == 1;
}

// Classes of the key tiles (of key_tile keys) of query rows [q0, q0 + nq) in the mask plane
// starting at `mask`, reading the rows front to back.
void classify_tiles(const bool* mask, const Geometry& g, int64_t q0, int64_t nq, int64_t key_tile, uint8_t* classes) {
  const int64_t Sk = g.Sk_total(), k_tiles = (Sk + key_tile - 1) / key_tile;
  constexpr int64_t kChunk = 256;
  bool any[kChunk], all[kChunk];
  for (int64_t c0 = 0; c0 < k_tiles; c0 += kChunk) {
    const int64_t nc = std::min(kChunk, k_tiles - c0);
    std::fill(any, any + nc, false);
    std::fill(all, all + nc, true);
    for (int64_t i = 0; i < nq; ++i) {
      const bool* row = mask + (q0 + i) * g.mask_stride[2];
      for (int64_t c = 0; c < nc; ++c) {
        const int64_t k0 = (c0 + c) * key_tile, nk = std::min(key_tile, Sk - k0);
        const KeyBits b = bool_row_bits(row + k0, nk, k0 + 64 <= Sk);
        any[c] |= b != 0;
        all[c] &= b == low_bits(nk);
      }
    }
    for (int64_t c = 0; c < nc; ++c) classes[c0 + c] = all[c] ? kShown : any[c] ? kMixed : kHidden;
  }
}

// Applies a causal or block-causal rule to S^T (s[j, i] for key k0 + j and query q0 + i).
// visible_limit does not decrease along the queries, so the queries that may not see a key are a
// prefix of the tile, growing with the key: row j of S^T gets -inf in its first `hidden` lanes, a
// contiguous fill instead of per-element strided stores.
void apply_positional_mask(const Problem& pr, float* s, int64_t q0, int64_t nq, int64_t k0, int64_t nk) {
  const int64_t first = pr.g->query_offset() + q0;
  int64_t hidden = 0;
  for (int64_t j = 0; j < nk; ++j) {
    while (hidden < nq && visible_limit(*pr.p, first + hidden) <= k0 + j) ++hidden;
    std::fill_n(s + j * kTq, hidden, kNegInf);
  }
}

// Applies an explicit mask to S^T: hides the keys whose bit is clear (bool), or adds the mask's
// values (additive; keys whose value is -inf are also clear in bits).
void apply_explicit_mask(const Problem& pr, float* s, int64_t q0, int64_t nq, int64_t k0, int64_t nk,
                         const KeyBits* bits) {
  const KeyBits full = low_bits(nk);
  if (pr.p->mask == MaskKind::kBool) {
    for (int64_t i = 0; i < nq; ++i)
      for (KeyBits hidden = ~bits[i] & full; hidden; hidden &= hidden - 1)
        s[__builtin_ctzll(hidden) * kTq + i] = kNegInf;
    return;
  }
  const int64_t si = pr.g->mask_stride[2], sj = pr.g->mask_stride[3];
  for (int64_t j = 0; j < nk; ++j) {
    float* row = s + j * kTq;
    const float* m = static_cast<const float*>(pr.mask) + q0 * si + (k0 + j) * sj;
    if (si == 0) {  // one value per key for every query: a broadcast add
      const float mv = *m;
      // omp simd: -O2's very cheap vectorizer cost model leaves this loop scalar (it needs an
      // epilogue), and scalar it cost as much as the tile's Q·Kᵀ on a BERT-style padding mask.
#pragma omp simd
      for (int64_t i = 0; i < nq; ++i) row[i] += mv;
    } else {
      for (int64_t i = 0; i < nq; ++i) row[i] += m[i * si];
    }
  }
}

// Writes rows [q0, q0 + n) of the output: the accumulator rows over their softmax sums (a row
// that saw no key is 0).
void write_rows(const Problem& pr, const Scratch& sc, int64_t q0, int64_t n) {
  const int64_t Dh = pr.g->Dh, Dhp = padded_dh(Dh);
  for (int64_t i = 0; i < n; ++i) {
    float* dst = pr.out + (q0 + i) * pr.out_row;
    const float* o = sc.o + i * Dhp;
    if (sc.l[i] > 0) {
      const float inv = 1.0f / sc.l[i];
      const __m256 iv = _mm256_set1_ps(inv);
      int64_t d = 0;
      for (; d + 8 <= Dh; d += 8) _mm256_storeu_ps(dst + d, _mm256_mul_ps(iv, _mm256_loadu_ps(o + d)));
      for (; d < Dh; ++d) dst[d] = o[d] * inv;
    } else {
      std::memset(dst, 0, sizeof(float) * Dh);
    }
  }
}

// The key range [0, k_end) rows [q0, q0 + nq) may see, and the keys below all_visible_below that
// all of them see (positional masks; otherwise every key). A live length ends both: no key tile,
// mask or bias column at or past it is read.
struct KeyRange {
  int64_t k_end, all_visible_below;
};
KeyRange key_range(const Problem& pr, int64_t q0, int64_t nq) {
  const Params& p = *pr.p;
  const Geometry& g = *pr.g;
  KeyRange r{g.key_limit(), g.key_limit()};
  if (p.mask == MaskKind::kCausal || p.mask == MaskKind::kBlockCausal) {
    r.k_end = std::clamp<int64_t>(visible_limit(p, g.query_offset() + q0 + nq - 1), 0, r.k_end);
    r.all_visible_below = visible_limit(p, g.query_offset() + q0);
  }
  return r;
}

// Whether key tile [k0, k0 + nk) has anything visible to rows [q0, q0 + nq) under an explicit mask,
// and (in `cover`, `bits`) how much: from the tile's class in the mask summary when there is one.
bool explicit_tile_visible(const Problem& pr, const uint8_t* classes, int64_t key_tile, int64_t q0, int64_t nq, int64_t k0,
                           int64_t nk, KeyBits* bits, TileCover* cover) {
  const uint8_t cls = classes ? classes[k0 / key_tile] : uint8_t{kMixed};
  if (cls == kHidden) return false;
  *cover = cls == kShown ? TileCover{true, true} : mask_tile_cover(pr, q0, nq, k0, nk, bits);
  return cover->any;
}

// Points krow / vrow at the K and V rows of keys [k0, k0 + nk).
void key_rows(const Problem& pr, int64_t k0, int64_t nk, const float** krow, const float** vrow) {
  for (int64_t j = 0; j < nk; ++j) {
    krow[j] = pr.row(pr.k, k0 + j);
    vrow[j] = pr.row(pr.v, k0 + j);
  }
}

// The bf16 operands of key tile [k0, k0 + nk) where heads are not packed whole
// (TileOps::packs_key_tiles): its K and V converted into sc.ktile / vtile, addressed from k0 = 0.
KeyTile pack_key_tile(const Problem& pr, const TileOps& ops, const Scratch& sc, const float* const* krow, const float* const* vrow,
                      int64_t nk, int64_t k0) {
  ops.pack_head(pr.rows_from(0, k0), pr.rows_from(1, k0), nk, pr.g->Dh, sc.ktile, sc.vtile);
  return KeyTile{krow, vrow, nk, sc.ktile, sc.vtile, 0};
}

// Rows [q0, q0 + nq) of a query tile against every key tile, queries on the vector lanes.
// `classes` (or null) are the tile classes of this query tile's row of the mask summary.
void lane_rows(const Problem& pr, const TileOps& ops, const Scratch& sc, int64_t q0, int64_t nq, const uint8_t* classes) {
  const Params& p = *pr.p;
  const Geometry& g = *pr.g;
  const int64_t Dh = g.Dh, Dhp = padded_dh(Dh);
  const int64_t nqp = round_up(nq, ops.query_pad);
  ops.pack_q(pr.q + q0 * pr.q_row, pr.q_row, nq, nqp, Dh, p.scale, sc);
  std::memset(sc.o, 0, sizeof(float) * nqp * Dhp);
  std::fill(sc.m, sc.m + nqp, kNegInf);
  std::fill(sc.l, sc.l + nqp, 0.0f);
  std::memset(sc.zero, 0, sizeof(float) * Dhp);

  const bool positional = p.mask == MaskKind::kCausal || p.mask == MaskKind::kBlockCausal;
  const bool explicit_mask = p.mask == MaskKind::kBool || p.mask == MaskKind::kAdditive;
  // With a positional mask, keys at or past the last query's limit are hidden from the whole tile
  // and keys below the first query's limit are visible to all of it.
  const KeyRange range = key_range(pr, q0, nq);
  const float* krow[kTk];
  const float* vrow[kTk];
  KeyBits bits[kTq];
  for (int64_t k0 = 0; k0 < range.k_end; k0 += ops.key_tile) {
    const int64_t nk = std::min(ops.key_tile, range.k_end - k0), nkp = round_up(nk, ops.key_pad);
    TileCover cover;
    if (explicit_mask && !explicit_tile_visible(pr, classes, ops.key_tile, q0, nq, k0, nk, bits, &cover)) continue;
    key_rows(pr, k0, nk, krow, vrow);
    for (int64_t j = nk; j < nkp; ++j) krow[j] = vrow[j] = sc.zero;
    KeyTile kt{krow, vrow, nk, pr.kpacked, pr.vpacked, k0};
    if (ops.pack_head && !pr.kpacked) kt = pack_key_tile(pr, ops, sc, krow, vrow, nk, k0);
    ops.score(kt, sc, nqp, Dh);
    if (explicit_mask && (p.mask == MaskKind::kAdditive || !cover.all))
      apply_explicit_mask(pr, sc.s, q0, nq, k0, nk, bits);
    if (positional && k0 + nk > range.all_visible_below) apply_positional_mask(pr, sc.s, q0, nq, k0, nk);
    ops.update(kt, sc, nqp, Dh);
  }
  if (ops.finish) ops.finish();
  write_rows(pr, sc, q0, nq);
}

// Hides or adds the masks to few-row scores: sc.s rows of kTk keys, row r = query q0 + r.
void mask_few_rows(const Problem& pr, float* s, int64_t q0, int64_t nr, int64_t k0, int64_t nk, const KeyBits* bits,
                   bool explicit_mask_needed, bool positional_needed) {
  const Params& p = *pr.p;
  const Geometry& g = *pr.g;
  if (explicit_mask_needed && p.mask == MaskKind::kBool) {
    const KeyBits full = low_bits(nk);
    for (int64_t r = 0; r < nr; ++r)
      for (KeyBits hidden = ~bits[r] & full; hidden; hidden &= hidden - 1) s[r * kTk + __builtin_ctzll(hidden)] = kNegInf;
  } else if (explicit_mask_needed) {
    const int64_t si = g.mask_stride[2], sj = g.mask_stride[3];
    for (int64_t r = 0; r < nr; ++r) {
      const float* m = static_cast<const float*>(pr.mask) + (q0 + r) * si + k0 * sj;
      for (int64_t j = 0; j < nk; ++j) s[r * kTk + j] += m[j * sj];
    }
  }
  if (positional_needed)
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t first_hidden = std::max<int64_t>(0, visible_limit(p, g.query_offset() + q0 + r) - k0);
      for (int64_t j = first_hidden; j < nk; ++j) s[r * kTk + j] = kNegInf;
    }
}

// The few-row state of rows [q0, q0 + nr): scaled queries packed, accumulators cleared.
void few_begin(const Problem& pr, const TileOps& ops, const Scratch& sc, int64_t q0, int64_t nr) {
  const int64_t Dh = pr.g->Dh, Dhp = padded_dh(Dh);
  ops.pack_few(pr.q + q0 * pr.q_row, pr.q_row, nr, Dh, pr.p->scale, sc);
  std::memset(sc.o, 0, sizeof(float) * nr * Dhp);
  std::fill(sc.m, sc.m + nr, kNegInf);
  std::fill(sc.l, sc.l + nr, 0.0f);
}

// Rows [q0, q0 + nr) against key tile [k0, k0 + nk) (krow / vrow: its rows), unless the mask hides
// the tile from them; `range` is key_range of the rows.
void few_key_tile(const Problem& pr, const TileOps& ops, const Scratch& sc, int64_t q0, int64_t nr, const KeyRange& range,
                  int64_t k0, int64_t nk, const float* const* krow, const float* const* vrow, const uint8_t* classes) {
  const Params& p = *pr.p;
  const bool positional = p.mask == MaskKind::kCausal || p.mask == MaskKind::kBlockCausal;
  const bool explicit_mask = p.mask == MaskKind::kBool || p.mask == MaskKind::kAdditive;
  TileCover cover;
  KeyBits bits[kTq];
  if (explicit_mask && !explicit_tile_visible(pr, classes, ops.key_tile, q0, nr, k0, nk, bits, &cover)) return;
  const KeyTile kt{krow, vrow, nk, nullptr, nullptr, k0};
  ops.few_score(kt, sc, nr, pr.g->Dh);
  mask_few_rows(pr, sc.s, q0, nr, k0, nk, bits, explicit_mask && (p.mask == MaskKind::kAdditive || !cover.all),
                positional && k0 + nk > range.all_visible_below);
  ops.few_update(kt, sc, nr, pr.g->Dh);
}

// Rows [q0, q0 + nr), nr <= kFewRows, against every key tile with the keys on the vector lanes
// (TileOps::few_score): the same tiles, masks and online softmax as lane_rows.
void few_rows(const Problem& pr, const TileOps& ops, const Scratch& sc, int64_t q0, int64_t nr, const uint8_t* classes) {
  few_begin(pr, ops, sc, q0, nr);
  const KeyRange range = key_range(pr, q0, nr);
  const float* krow[kTk];
  const float* vrow[kTk];
  for (int64_t k0 = 0; k0 < range.k_end; k0 += ops.key_tile) {
    const int64_t nk = std::min(ops.key_tile, range.k_end - k0);
    key_rows(pr, k0, nk, krow, vrow);
    few_key_tile(pr, ops, sc, q0, nr, range, k0, nk, krow, vrow, classes);
  }
  write_rows(pr, sc, q0, nr);
}

// How a problem's Sq query rows are cut into tiles: tiles of kTq rows on the vector lanes, in
// whole vectors of query_pad rows (the last may be partial). When the rows past the last whole
// vector are at most kFewRows and the CPU's tile code has the few-row path, they go to it instead
// (an incremental step's 274 queries end in 2 rows; decoding has 1), appended to the last tile.
// Tiles are not evened out: 272 rows as four of 64 and one of 16 ran faster on 2 threads than as
// 48, 48, 64, 48, 64, although the 16-row tile's score kernel runs below the FMA rate (one query
// vector per broadcast key): a small last tile per head evens out the threads.
struct QueryTiling {
  int64_t tiles = 0, lane_rows = 0, few = 0;
  int64_t lane_begin(int64_t t) const { return std::min(lane_rows, t * kTq); }
  int64_t lane_end(int64_t t) const { return std::min(lane_rows, (t + 1) * kTq); }
  // All rows of tile t, the few rows included.
  int64_t rows(int64_t t) const { return lane_end(t) - lane_begin(t) + (t + 1 == tiles ? few : 0); }
};

QueryTiling query_tiling(const TileOps& ops, int64_t Sq) {
  QueryTiling q;
  if (Sq <= 0) return q;
  const int64_t tail = Sq % ops.query_pad;
  // The bf16 paths (those packing heads) keep the tail on the lanes unless every row is in it
  // (decoding): a few f32 rows beside bf16 ones would make a query's result depend on where the
  // tiles cut, and full(T) differ from full(T-1) + one step by bf16 rounding, not 1e-6.
  q.few = ops.few_score && tail <= kFewRows && (!ops.pack_head || tail == Sq) ? tail : 0;
  q.lane_rows = Sq - q.few;
  q.tiles = std::max<int64_t>(1, (q.lane_rows + kTq - 1) / kTq);
  return q;
}

// Query tile t: its rows on the vector lanes, then the few-row tail where tiling gave it one.
void query_tile(const Problem& pr, const TileOps& ops, const Scratch& sc, const QueryTiling& qt, int64_t t,
                const uint8_t* classes) {
  const int64_t q0 = qt.lane_begin(t), n = qt.lane_end(t) - q0;
  if (n > 0) lane_rows(pr, ops, sc, q0, n, classes);
  if (t + 1 == qt.tiles && qt.few > 0) few_rows(pr, ops, sc, qt.lane_rows, qt.few, classes);
}

// Prefetches the K and V rows of keys [j0, j1) into L2.
void prefetch_key_rows_l2(const Problem& pr, int64_t j0, int64_t j1) {
  const int64_t bytes = pr.g->Dh * static_cast<int64_t>(sizeof(float));
  for (int64_t j = j0; j < j1; ++j) {
    const char* k = reinterpret_cast<const char*>(pr.row(pr.k, j));
    const char* v = reinterpret_cast<const char*>(pr.row(pr.v, j));
    for (int64_t b = 0; b < bytes; b += 64) {
      _mm_prefetch(k + b, _MM_HINT_T1);
      _mm_prefetch(v + b, _MM_HINT_T1);
    }
  }
}

// Up to this many query tiles (512 rows) of a head run key-tile-stationary.
constexpr int64_t kMaxStationaryTiles = 8;

// Scratch slots per thread the workspace holds: one per query tile up to kMaxStationaryTiles, and
// one for the few-row tail. It grows with Sq, so the value at the largest shapes covers every
// smaller run.
int64_t stationary_slots(const Geometry& g) {
  return std::clamp<int64_t>((g.Sq + kTq - 1) / kTq, 1, kMaxStationaryTiles) + 1;  // + the few-row tail
}

// Whether a run goes head by head with key tiles outer (head_stationary): f32 tile code (the bf16
// path packs whole heads already), at least two query tiles of lane rows and at most
// kMaxStationaryTiles of them.
bool uses_stationary_heads(const TileOps& ops, const Geometry& g, const QueryTiling& qt, bool packed_heads) {
  return g_stationary_allowed.load(std::memory_order_relaxed) && !packed_heads && (!ops.pack_head || ops.packs_key_tiles) &&
         qt.lane_rows > kTq &&
         qt.tiles + 1 <= std::min(kMaxStationaryTiles + 1, stationary_slots(g));
}

// All query tiles of one (batch, head), each with its own scratch, against each key tile in turn:
// a key tile's K and V rows are read once, from memory or L3, and serve every query tile of the
// head while in L1, instead of being streamed once per query tile: this pays where the cache was
// last touched a run earlier, as in the incremental step (274 queries, 5 tiles a head). Same
// tiles, masks and arithmetic as query_tile, so the outputs are bitwise those of the
// tile-parallel order.
void head_stationary(const Problem& pr, const TileOps& ops, const Scratch* sc, const QueryTiling& qt,
                     const uint8_t* const* classes) {
  const Params& p = *pr.p;
  const Geometry& g = *pr.g;
  const int64_t Dh = g.Dh, Dhp = padded_dh(Dh), T = qt.tiles;
  const bool positional = p.mask == MaskKind::kCausal || p.mask == MaskKind::kBlockCausal;
  const bool explicit_mask = p.mask == MaskKind::kBool || p.mask == MaskKind::kAdditive;
  KeyRange range[kMaxStationaryTiles];
  int64_t k_end = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t q0 = qt.lane_begin(t), n = qt.lane_end(t) - q0, nqp = round_up(n, ops.query_pad);
    ops.pack_q(pr.q + q0 * pr.q_row, pr.q_row, n, nqp, Dh, p.scale, sc[t]);
    std::memset(sc[t].o, 0, sizeof(float) * nqp * Dhp);
    std::fill(sc[t].m, sc[t].m + nqp, kNegInf);
    std::fill(sc[t].l, sc[t].l + nqp, 0.0f);
    std::memset(sc[t].zero, 0, sizeof(float) * Dhp);
    range[t] = key_range(pr, q0, n);
    k_end = std::max(k_end, range[t].k_end);
  }
  // The tile's few-row tail (an incremental step's last 2 queries) rides along in sc[T].
  const KeyRange few_range = qt.few > 0 ? key_range(pr, qt.lane_rows, qt.few) : KeyRange{0, 0};
  if (qt.few > 0) {
    few_begin(pr, ops, sc[T], qt.lane_rows, qt.few);
    k_end = std::max(k_end, few_range.k_end);
  }
  const float* krow[kTk];
  const float* vrow[kTk];
  KeyBits bits[kTq];
  for (int64_t k0 = 0; k0 < k_end; k0 += ops.key_tile) {
    const int64_t nk_all = std::min(ops.key_tile, k_end - k0);
    key_rows(pr, k0, nk_all, krow, vrow);
    // bf16: the tile's K and V converted once, for every query tile of the head.
    if (ops.pack_head) ops.pack_head(pr.rows_from(0, k0), pr.rows_from(1, k0), nk_all, Dh, sc[0].ktile, sc[0].vtile);
    if (k0 < few_range.k_end)
      few_key_tile(pr, ops, sc[T], qt.lane_rows, qt.few, few_range, k0, std::min(nk_all, few_range.k_end - k0), krow, vrow,
                   classes[T - 1]);
    const int64_t next0 = k0 + nk_all, next_n = std::min(ops.key_tile, k_end - next0);
    for (int64_t t = 0; t < T; ++t) {
      // The next key tile's K and V rows come from memory (an incremental step's cache was last
      // touched a run earlier): each query tile prefetches its share of them into L2, a key tile
      // (T query tiles of work) ahead, so the loads overlap this tile's arithmetic.
      if (next_n > 0) prefetch_key_rows_l2(pr, next0 + next_n * t / T, next0 + next_n * (t + 1) / T);
      if (k0 >= range[t].k_end) continue;
      const int64_t q0 = qt.lane_begin(t), n = qt.lane_end(t) - q0, nqp = round_up(n, ops.query_pad);
      const int64_t nk = std::min(nk_all, range[t].k_end - k0);
      TileCover cover;
      if (explicit_mask && !explicit_tile_visible(pr, classes[t], ops.key_tile, q0, n, k0, nk, bits, &cover)) continue;
      const int64_t nkp = round_up(nk, ops.key_pad);
      const float* kr[kTk];
      const float* vr[kTk];
      const float* const* kp = krow;
      const float* const* vp = vrow;
      if (nkp != nk || nk != nk_all) {
        for (int64_t j = 0; j < nkp; ++j) {
          kr[j] = j < nk ? krow[j] : sc[t].zero;
          vr[j] = j < nk ? vrow[j] : sc[t].zero;
        }
        kp = kr;
        vp = vr;
      }
      const KeyTile kt{kp, vp, nk, sc[0].ktile, sc[0].vtile, 0};
      ops.score(kt, sc[t], nqp, Dh);
      if (explicit_mask && (p.mask == MaskKind::kAdditive || !cover.all)) apply_explicit_mask(pr, sc[t].s, q0, n, k0, nk, bits);
      if (positional && k0 + nk > range[t].all_visible_below) apply_positional_mask(pr, sc[t].s, q0, n, k0, nk);
      ops.update(kt, sc[t], nqp, Dh);
    }
  }
  if (ops.finish) ops.finish();
  for (int64_t t = 0; t < T; ++t) write_rows(pr, sc[t], qt.lane_begin(t), qt.lane_end(t) - qt.lane_begin(t));
  if (qt.few > 0) write_rows(pr, sc[T], qt.lane_rows, qt.few);
}

}  // namespace

bool allow_avx512(bool allowed) {
  g_avx512_allowed.store(allowed);
  return allowed && cpu_has_avx512();
}

bool bf16_supported() { return cpu_has_amx_bf16() || cpu_has_avx512_bf16(); }

CpuIsa cap_isa_for_testing(CpuIsa isa) { return static_cast<CpuIsa>(g_test_cap.exchange(static_cast<int>(isa))); }

const char* bf16_path() { return cpu_has_amx_bf16() ? "amx" : cpu_has_avx512_bf16() ? "avx512_bf16" : "none"; }

void allow_stationary_heads(bool allowed) { g_stationary_allowed.store(allowed); }

size_t scratch_bytes(int64_t Dh) {
  // Dhp (Dh rounded up to 32) also covers the bf16 path's padding of the reduction axis.
  const int64_t Dhp = padded_dh(Dh), f = sizeof(float);
  return aligned_bytes(Dhp * kTq * f) + aligned_bytes(kTk * kTq * f) + aligned_bytes(kTq * Dhp * f) +
         3 * aligned_bytes(kTq * f) + aligned_bytes(Dhp * f) + aligned_bytes(kTq * kTk / 2 * 4) +
         2 * aligned_bytes(static_cast<int64_t>(bf16_head_bytes(kTk, Dh)));
}

Scratch carve_scratch(void* base, int64_t Dh) {
  const int64_t Dhp = padded_dh(Dh), f = sizeof(float);
  char* p = static_cast<char*>(base);
  auto take = [&](int64_t bytes) {
    void* r = p;
    p += aligned_bytes(bytes);
    return r;
  };
  Scratch s;
  s.q = take(Dhp * kTq * f);
  s.s = static_cast<float*>(take(kTk * kTq * f));
  s.o = static_cast<float*>(take(kTq * Dhp * f));
  s.m = static_cast<float*>(take(kTq * f));
  s.l = static_cast<float*>(take(kTq * f));
  s.alpha = static_cast<float*>(take(kTq * f));
  s.zero = static_cast<float*>(take(Dhp * f));
  s.ppack = take(kTq * kTk / 2 * 4);
  s.ktile = take(static_cast<int64_t>(bf16_head_bytes(kTk, Dh)));
  s.vtile = take(static_cast<int64_t>(bf16_head_bytes(kTk, Dh)));
  return s;
}

// Per (batch, head) bytes of each of K and V packed by TileOps::pack_head (0 when not used).
size_t head_bytes(const TileOps& ops, const Geometry& g) {
  return ops.pack_head ? aligned_bytes(static_cast<int64_t>(bf16_head_bytes(g.Sk_total(), g.Dh))) : 0;
}

// Bytes of the bool mask's tile classes: one per (mask plane, query tile, key tile), sized for
// every (batch, head) being its own plane and the smallest key tile of any implementation.
size_t mask_summary_bytes(const Params& p, const Geometry& g) {
  if (p.mask != MaskKind::kBool) return 0;
  constexpr int64_t kSmallestKeyTile = 48;
  // query_tiling never makes more than ceil(Sq / kTq) tiles.
  const int64_t q_tiles = (g.Sq + kTq - 1) / kTq, k_tiles = (g.Sk_total() + kSmallestKeyTile - 1) / kSmallestKeyTile;
  return aligned_bytes(g.B * g.H * q_tiles * k_tiles);
}

size_t workspace_bytes(const Params& p, const Geometry& g, int slots) {
  // Sized for the packed heads whenever bf16 is asked for, whichever CPU the run will find.
  const size_t head =
      p.precision == Precision::kBf16 ? aligned_bytes(static_cast<int64_t>(bf16_head_bytes(g.Sk_total(), g.Dh))) : 0;
  return kAlign + 2 * head * static_cast<size_t>(g.B * g.H) + mask_summary_bytes(p, g) +
         static_cast<size_t>(std::max(slots, 1)) * static_cast<size_t>(stationary_slots(g)) * scratch_bytes(g.Dh);
}

Status run_attention(const Params& p, const Geometry& g, std::span<const TensorView> in,
                     std::span<const TensorView> out, void* workspace, int slots) {
  const TileOps ops = tile_ops(p);
  const QueryTiling tiling = query_tiling(ops, g.Sq);
  // Rows that all take the few-row path (decoding's one query) read the f32 K/V: nothing to pack.
  // A head of few query tiles (an incremental step's 5) converts its key tiles one at a time as
  // its tiles reach them (packs_key_tiles), read once from memory, rather than the whole head
  // in a pass of its own before them; one of many (a full forward's 26) converts it whole once.
  const bool per_key_tile = ops.packs_key_tiles && tiling.tiles <= kMaxStationaryTiles;
  const size_t head = tiling.lane_rows > 0 && !per_key_tile ? head_bytes(ops, g) : 0;
  const int64_t q_tiles = tiling.tiles;
  const int64_t work = g.B * g.H * q_tiles;
  if (work > 0 && g.Dh > 0) {
    if (!workspace || slots < 1) return Internal("kiln::Attention: run without its workspace");
    const size_t stride = scratch_bytes(g.Dh);
    char* packed = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(workspace), kAlign));
    uint8_t* summary = reinterpret_cast<uint8_t*>(packed + 2 * head * static_cast<size_t>(g.B * g.H));
    char* base = reinterpret_cast<char*>(summary) + mask_summary_bytes(p, g);
    // The bool mask's planes: one per batch and/or head only where the mask does not broadcast.
    const bool summarized = summarizes_mask(p, g);
    const int64_t plane_b = g.mask_stride[0] ? g.B : 1, plane_h = g.mask_stride[1] ? g.H : 1;
    const int64_t k_tiles = (g.Sk_total() + ops.key_tile - 1) / ops.key_tile;
    auto classes = [&](int64_t b, int64_t h, int64_t qt) {
      const int64_t plane = (g.mask_stride[0] ? b : 0) * plane_h + (g.mask_stride[1] ? h : 0);
      return summary + (plane * q_tiles + qt) * k_tiles;
    };
    const RowStrides qs = row_strides(p.layout, g.B, g.Sq, g.H, g.Dh);
    const RowStrides ks = row_strides(p.layout, g.B, g.Sk_new, g.H, g.Dh);
    const RowStrides cs = row_strides(p.layout, g.B, g.Sc, g.H, g.Dh);
    auto head_rows = [&](int t, int64_t b, int64_t h) {
      HeadRows r;
      r.base[0] = p.kv_cache ? in[kKCache + t].as<const float>() + b * cs.batch + h * cs.head : nullptr;
      r.base[1] = in[kK + t].as<const float>() + b * ks.batch + h * ks.head;
      r.row[0] = cs.row;
      r.row[1] = ks.row;
      r.split = g.Sc;
      return r;
    };
    // kiln's pool (runtime/thread_pool.h): every phase is a loop of independent items that the
    // threads claim one at a time, so a thread whose core is busy holds back no other. A thread's
    // scratch is its slot's; the workspace has `slots` of them.
    ThreadPool& pool = ThreadPool::global();
    // Whole heads per item, key tiles outer (head_stationary), where the workspace has a scratch
    // per query tile.
    const bool stationary = uses_stationary_heads(ops, g, tiling, head > 0);
    const size_t per_slot = static_cast<size_t>(stationary_slots(g));
    if (head) {
      pool.parallel_for(g.B * g.H, 1, [&](int64_t b0, int64_t b1, int) {
        for (int64_t bh = b0; bh < b1; ++bh) {
          char* dst = packed + 2 * head * static_cast<size_t>(bh);
          ops.pack_head(head_rows(0, bh / g.H, bh % g.H), head_rows(1, bh / g.H, bh % g.H), g.Sk_total(), g.Dh, dst, dst + head);
        }
      }, slots);
    }
    if (summarized) {
      pool.parallel_for(plane_b * plane_h * q_tiles, 1, [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t b = t / q_tiles / plane_h, h = t / q_tiles % plane_h, qt = t % q_tiles;
          const bool* plane = in[kMask].as<const bool>() + b * g.mask_stride[0] + h * g.mask_stride[1];
          classify_tiles(plane, g, tiling.lane_begin(qt), tiling.rows(qt), ops.key_tile, classes(b, h, qt));
        }
      }, slots);
    }
    auto problem = [&](int64_t b, int64_t h) {
      const int64_t bh = b * g.H + h;
      Problem pr;
      pr.p = &p;
      pr.g = &g;
      pr.q = in[kQ].as<const float>() + b * qs.batch + h * qs.head;
      pr.q_row = qs.row;
      pr.out = out[0].as<float>() + b * qs.batch + h * qs.head;
      pr.out_row = qs.row;
      const HeadRows kr = head_rows(0, b, h), vr = head_rows(1, b, h);
      pr.k[0] = kr.base[0];
      pr.k[1] = kr.base[1];
      pr.v[0] = vr.base[0];
      pr.v[1] = vr.base[1];
      pr.kv_row[0] = cs.row;
      pr.kv_row[1] = ks.row;
      pr.kpacked = head ? packed + 2 * head * static_cast<size_t>(bh) : nullptr;
      pr.vpacked = head ? packed + 2 * head * static_cast<size_t>(bh) + head : nullptr;
      pr.mask = nullptr;
      if (p.mask == MaskKind::kBool || p.mask == MaskKind::kAdditive) {
        const int64_t off = b * g.mask_stride[0] + h * g.mask_stride[1];
        pr.mask = p.mask == MaskKind::kBool ? static_cast<const void*>(in[kMask].as<const bool>() + off)
                                            : static_cast<const void*>(in[kMask].as<const float>() + off);
      }
      return pr;
    };
    auto slot_base = [&](int slot) { return base + stride * per_slot * static_cast<size_t>(slot); };
    if (stationary && g.B * g.H >= std::min<int64_t>(slots, pool.max_threads())) {
      pool.parallel_for(g.B * g.H, 1, [&](int64_t b0, int64_t b1, int slot) {
        Scratch sc[kMaxStationaryTiles + 1];
        for (int64_t t = 0; t <= q_tiles; ++t) sc[t] = carve_scratch(slot_base(slot) + stride * t, g.Dh);
        for (int64_t bh = b0; bh < b1; ++bh) {
          const int64_t b = bh / g.H, h = bh % g.H;
          const uint8_t* cls[kMaxStationaryTiles];
          for (int64_t t = 0; t < q_tiles; ++t) cls[t] = summarized ? classes(b, h, t) : nullptr;
          head_stationary(problem(b, h), ops, sc, tiling, cls);
        }
      }, slots);
    } else {
      pool.parallel_for(work, 1, [&](int64_t w0, int64_t w1, int slot) {
        for (int64_t w = w0; w < w1; ++w) {
          const int64_t bh = w / q_tiles, b = bh / g.H, h = bh % g.H, qt = w % q_tiles;
          query_tile(problem(b, h), ops, carve_scratch(slot_base(slot), g.Dh), tiling, qt, summarized ? classes(b, h, qt) : nullptr);
        }
      }, slots);
    }
  }
  if (p.kv_cache) append_kv(p, g, in, out);
  return Status::Ok();
}

}  // namespace kiln::attention
