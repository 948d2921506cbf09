// The AVX-512 tile compute: f32 (FMA) and bf16 (AMX tdpbf16ps: bf16 products, f32 accumulation;
// the softmax stays f32). Both are chosen at run time, so this file is compiled for them through a
// target pragma and must not instantiate any template with external linkage (such a copy could be
// picked by the linker for callers on CPUs without AVX-512): helpers are internal, no std templates.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "plugins/attention/attention_tiles.h"
#include "runtime/simd/vec_avx512.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,amx-tile,amx-bf16")
// Clang ignores GCC's target pragma; its own attribute pragma does the same.
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,amx-tile,amx-bf16"))), apply_to = function)
#endif
// GCC 12's _mm512_undefined_ps() initializes a variable from itself, which -Wmaybe-uninitialized
// reports at every max/min/roundscale.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kiln::attention {
namespace {

constexpr float kNegInf = -__builtin_inff();
// Register blocks: kRows rows (keys of S^T, or queries of O) by up to 4 vectors of 16 lanes.
constexpr int kRows = 6;

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t idiv_up(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline __mmask16 lanes(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xffff : n <= 0 ? 0 : (1u << n) - 1);
}

// exp of kiln's vector math library (runtime/simd/vec_avx512.h: header-only, no runtime
// dependency; see docs/simd.md): exp(-inf) = 0, so masked scores carry no weight.
inline __m512 exp16(__m512 x) { return simd::avx512::exp(x); }

// Folds a tile of S^T (nk keys) into each query's running max and sum, turns it into P^T relative
// to the new max, and records the factor the accumulator rows must be rescaled by.
void softmax(const Scratch& sc, int64_t nk, int64_t nqp) {
  const __m512 neg_inf = _mm512_set1_ps(kNegInf);
  for (int64_t i = 0; i < nqp; i += 16) {
    float* col = sc.s + i;
    const __m512 m_old = _mm512_loadu_ps(sc.m + i);
    // Four independent chains: the max's latency, not its throughput, would bound one.
    __m512 mx[4] = {m_old, m_old, m_old, m_old};
    int64_t j = 0;
    for (; j + 4 <= nk; j += 4)
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) mx[u] = _mm512_max_ps(mx[u], _mm512_loadu_ps(col + (j + u) * kTq));
    for (; j < nk; ++j) mx[0] = _mm512_max_ps(mx[0], _mm512_loadu_ps(col + j * kTq));
    const __m512 m_new = _mm512_max_ps(_mm512_max_ps(mx[0], mx[1]), _mm512_max_ps(mx[2], mx[3]));
    // A query with nothing visible yet keeps max -inf; subtracting 0 instead keeps its
    // probabilities at exp(-inf) = 0 rather than NaN.
    const __m512 sub = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m_new, neg_inf, _CMP_NEQ_OQ), m_new);
    __m512 sum[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (j = 0; j < nk; ++j) {
      float* row = col + j * kTq;
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row), sub));
      _mm512_storeu_ps(row, e);
      sum[j & 1] = _mm512_add_ps(sum[j & 1], e);
    }
    const __m512 alpha = exp16(_mm512_sub_ps(m_old, sub));
    _mm512_storeu_ps(sc.alpha + i, alpha);
    _mm512_storeu_ps(sc.l + i, _mm512_fmadd_ps(_mm512_loadu_ps(sc.l + i), alpha, _mm512_add_ps(sum[0], sum[1])));
    _mm512_storeu_ps(sc.m + i, m_new);
  }
}

// ---- f32 -------------------------------------------------------------------------------------

// Transposes a 16 x 16 matrix of 32-bit words held as 16 rows.
__attribute__((always_inline)) inline void transpose16(__m512i r[16]) {
  __m512i t[16];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    r[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    r[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    r[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    r[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      t[8 * h + k] = _mm512_shuffle_i32x4(r[8 * h + k], r[8 * h + k + 4], 0x88);
      t[8 * h + k + 4] = _mm512_shuffle_i32x4(r[8 * h + k], r[8 * h + k + 4], 0xdd);
    }
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    r[k] = _mm512_shuffle_i32x4(t[k], t[k + 8], 0x88);
    r[k + 8] = _mm512_shuffle_i32x4(t[k], t[k + 8], 0xdd);
  }
}

// qt[d, i] = scale * q_i[d], zero past nq: 16 x 16 blocks transposed in registers.
void pack_q_f32_avx512(const float* q, int64_t q_row, int64_t nq, int64_t nqp, int64_t Dh, float scale,
                       const Scratch& sc) {
  float* qt = static_cast<float*>(sc.q);
  const __m512 sv = _mm512_set1_ps(scale);
  for (int64_t i0 = 0; i0 < nqp; i0 += 16)
    for (int64_t d = 0; d < Dh; d += 16) {
      __m512i r[16];
#pragma GCC unroll 16
      for (int u = 0; u < 16; ++u) {
        const __m512 x = _mm512_maskz_loadu_ps(i0 + u < nq ? lanes(Dh - d) : 0, q + (i0 + u) * q_row + d);
        r[u] = _mm512_castps_si512(_mm512_mul_ps(sv, x));
      }
      transpose16(r);
      for (int64_t w = 0; w < imin(16, Dh - d); ++w) _mm512_storeu_si512(qt + (d + w) * kTq + i0, r[w]);
    }
}


// s[r, z] = sum_d k[r][d] * qt[d, z] for R keys by 16 * NZ queries.
template <int R, int NZ>
inline void score_block(const float* const* krow, const float* qt, float* s, int64_t Dh) {
  const float* k[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) k[r] = krow[r];
  __m512 c[R][NZ];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_setzero_ps();
  for (int64_t d = 0; d < Dh; ++d) {
    __m512 b[NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) b[z] = _mm512_loadu_ps(qt + d * kTq + 16 * z);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(k[r][d]);
#pragma GCC unroll 4
      for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_fmadd_ps(x, b[z], c[r][z]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) _mm512_storeu_ps(s + r * kTq + 16 * z, c[r][z]);
}

template <int NZ>
void score_keys(const KeyTile& kt, const float* qt, float* s, int64_t Dh) {
  int64_t j = 0;
  for (; j + kRows <= kt.nk; j += kRows) score_block<kRows, NZ>(kt.krow + j, qt, s + j * kTq, Dh);
  const float* const* k = kt.krow + j;
  s += j * kTq;
  switch (kt.nk - j) {
    case 1: score_block<1, NZ>(k, qt, s, Dh); break;
    case 2: score_block<2, NZ>(k, qt, s, Dh); break;
    case 3: score_block<3, NZ>(k, qt, s, Dh); break;
    case 4: score_block<4, NZ>(k, qt, s, Dh); break;
    case 5: score_block<5, NZ>(k, qt, s, Dh); break;
    default: break;
  }
}

void score_f32(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh) {
  const float* qt = static_cast<const float*>(sc.q);
  for (int64_t i = 0; i < nqp; i += 64) {
    switch (imin(4, (nqp - i) / 16)) {
      case 4: score_keys<4>(kt, qt + i, sc.s + i, Dh); break;
      case 3: score_keys<3>(kt, qt + i, sc.s + i, Dh); break;
      case 2: score_keys<2>(kt, qt + i, sc.s + i, Dh); break;
      default: score_keys<1>(kt, qt + i, sc.s + i, Dh); break;
    }
  }
}

// o[r, d0 + z] = alpha[r] * o[r, d0 + z] + sum_j p[j, r] * vrow[j][d0 + z] for R queries by
// 16 * NZ head lanes (the last vector masked at Dh by `last`).
template <int R, int NZ>
inline void pv_block(const float* p, const float* const* vrow, int64_t nk, int64_t d0, __mmask16 last, float* o,
                     int64_t Dhp, const float* alpha) {
  __m512 c[R][NZ];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_mul_ps(a, _mm512_loadu_ps(o + r * Dhp + 16 * z));
  }
  for (int64_t j = 0; j < nk; ++j) {
    const float* v = vrow[j] + d0;
    __m512 b[NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z)
      b[z] = z + 1 < NZ ? _mm512_loadu_ps(v + 16 * z) : _mm512_maskz_loadu_ps(last, v + 16 * z);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(p[j * kTq + r]);
#pragma GCC unroll 4
      for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_fmadd_ps(x, b[z], c[r][z]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) _mm512_storeu_ps(o + r * Dhp + 16 * z, c[r][z]);
}

template <int NZ>
void pv_queries(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t d0, __mmask16 last, int64_t Dhp) {
  int64_t i = 0;
  for (; i + kRows <= nqp; i += kRows)
    pv_block<kRows, NZ>(sc.s + i, kt.vrow, kt.nk, d0, last, sc.o + i * Dhp + d0, Dhp, sc.alpha + i);
  const float* p = sc.s + i;
  float* o = sc.o + i * Dhp + d0;
  const float* a = sc.alpha + i;
  switch (nqp - i) {
    case 1: pv_block<1, NZ>(p, kt.vrow, kt.nk, d0, last, o, Dhp, a); break;
    case 2: pv_block<2, NZ>(p, kt.vrow, kt.nk, d0, last, o, Dhp, a); break;
    case 3: pv_block<3, NZ>(p, kt.vrow, kt.nk, d0, last, o, Dhp, a); break;
    case 4: pv_block<4, NZ>(p, kt.vrow, kt.nk, d0, last, o, Dhp, a); break;
    case 5: pv_block<5, NZ>(p, kt.vrow, kt.nk, d0, last, o, Dhp, a); break;
    default: break;
  }
}

void update_f32(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh) {
  softmax(sc, kt.nk, nqp);
  const int64_t Dhp = padded_dh(Dh);
  for (int64_t d0 = 0; d0 < Dh; d0 += 64) {
    const int64_t nz = imin(4, idiv_up(Dh - d0, 16));
    const __mmask16 last = lanes(Dh - d0 - 16 * (nz - 1));
    switch (nz) {
      case 4: pv_queries<4>(kt, sc, nqp, d0, last, Dhp); break;
      case 3: pv_queries<3>(kt, sc, nqp, d0, last, Dhp); break;
      case 2: pv_queries<2>(kt, sc, nqp, d0, last, Dhp); break;
      default: pv_queries<1>(kt, sc, nqp, d0, last, Dhp); break;
    }
  }
}

// ---- f32, few query rows: keys on the lanes ---------------------------------------------------
// A score is a dot product over Dh: 16 keys' products accumulate in 16 vectors, which one 16 x 16
// transpose and an add tree turn into the 16 keys' scores. For one or two rows this costs a sixth
// to a third of the lane path's padded query vector.

void pack_few_f32(const float* q, int64_t q_row, int64_t nr, int64_t Dh, float scale, const Scratch& sc) {
  float* qs = static_cast<float*>(sc.q);
  const int64_t Dhp = padded_dh(Dh);
  const __m512 sv = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t d = 0; d < Dhp; d += 16)
      _mm512_storeu_ps(qs + r * Dhp + d, _mm512_mul_ps(sv, _mm512_maskz_loadu_ps(lanes(Dh - d), q + r * q_row + d)));
}

// Lane u of the result = the sum of v[u]'s 16 lanes.
inline __m512 lane_sums(__m512i v[16]) {
  transpose16(v);
#pragma GCC unroll 8
  for (int w = 8; w >= 1; w /= 2)
#pragma GCC unroll 8
    for (int u = 0; u < w; ++u) v[u] = _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(v[u]), _mm512_castsi512_ps(v[u + w])));
  return _mm512_castsi512_ps(v[0]);
}

void few_score_f32(const KeyTile& kt, const Scratch& sc, int64_t nr, int64_t Dh) {
  const float* qs = static_cast<const float*>(sc.q);
  const int64_t Dhp = padded_dh(Dh);
  for (int64_t j0 = 0; j0 < kt.nk; j0 += 16) {
    const int64_t n = imin(16, kt.nk - j0);
    for (int64_t r = 0; r < nr; ++r) {
      __m512i acc[16];
#pragma GCC unroll 16
      for (int u = 0; u < 16; ++u) acc[u] = _mm512_setzero_si512();
      for (int64_t d = 0; d < Dh; d += 16) {
        const __mmask16 m = lanes(Dh - d);
        const __m512 qv = _mm512_loadu_ps(qs + r * Dhp + d);
#pragma GCC unroll 16
        for (int u = 0; u < 16; ++u)
          if (u < n)
            acc[u] = _mm512_castps_si512(
                _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, kt.krow[j0 + u] + d), qv, _mm512_castsi512_ps(acc[u])));
      }
      _mm512_storeu_ps(sc.s + r * kTk + j0, lane_sums(acc));
    }
  }
}

// o[r, d0 + 16 z] = alpha[r] * o[r, ...] + sum_j p[r, j] * V_j[d0 + 16 z] for NR rows by NZ vectors.
template <int NR, int NZ>
inline void few_pv(const KeyTile& kt, const Scratch& sc, int64_t d0, __mmask16 last, int64_t Dhp) {
  __m512 c[NR][NZ];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
    const __m512 a = _mm512_set1_ps(sc.alpha[r]);
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_mul_ps(a, _mm512_loadu_ps(sc.o + r * Dhp + d0 + 16 * z));
  }
  for (int64_t j = 0; j < kt.nk; ++j) {
    const float* v = kt.vrow[j] + d0;
    __m512 b[NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) b[z] = z + 1 < NZ ? _mm512_loadu_ps(v + 16 * z) : _mm512_maskz_loadu_ps(last, v + 16 * z);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const __m512 x = _mm512_set1_ps(sc.s[r * kTk + j]);
#pragma GCC unroll 4
      for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_fmadd_ps(x, b[z], c[r][z]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) _mm512_storeu_ps(sc.o + r * Dhp + d0 + 16 * z, c[r][z]);
}

template <int NR>
void few_pv_rows(const KeyTile& kt, const Scratch& sc, int64_t Dh) {
  const int64_t Dhp = padded_dh(Dh);
  for (int64_t d0 = 0; d0 < Dh; d0 += 64) {
    const int64_t nz = imin(4, idiv_up(Dh - d0, 16));
    const __mmask16 last = lanes(Dh - d0 - 16 * (nz - 1));
    switch (nz) {
      case 4: few_pv<NR, 4>(kt, sc, d0, last, Dhp); break;
      case 3: few_pv<NR, 3>(kt, sc, d0, last, Dhp); break;
      case 2: few_pv<NR, 2>(kt, sc, d0, last, Dhp); break;
      default: few_pv<NR, 1>(kt, sc, d0, last, Dhp); break;
    }
  }
}

void few_update_f32(const KeyTile& kt, const Scratch& sc, int64_t nr, int64_t Dh) {
  const __m512 neg_inf = _mm512_set1_ps(kNegInf);
  for (int64_t r = 0; r < nr; ++r) {
    float* s = sc.s + r * kTk;
    __m512 mx = neg_inf;
    for (int64_t j0 = 0; j0 < kt.nk; j0 += 16) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(neg_inf, lanes(kt.nk - j0), s + j0));
    const float m_old = sc.m[r], m_tile = _mm512_reduce_max_ps(mx);
    const float m_new = m_old > m_tile ? m_old : m_tile;
    // Nothing visible yet: subtract 0, so exp(-inf) = 0 weights instead of NaN.
    const __m512 sub = _mm512_set1_ps(m_new == kNegInf ? 0.0f : m_new);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j0 = 0; j0 < kt.nk; j0 += 16) {
      // Lanes past the tile's keys load -inf and store weight 0.
      const __m512 e = exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, lanes(kt.nk - j0), s + j0), sub));
      _mm512_storeu_ps(s + j0, e);
      sum = _mm512_add_ps(sum, e);
    }
    const float alpha = _mm512_cvtss_f32(exp16(_mm512_sub_ps(_mm512_set1_ps(m_old), sub)));
    sc.alpha[r] = alpha;
    sc.l[r] = sc.l[r] * alpha + _mm512_reduce_add_ps(sum);
    sc.m[r] = m_new;
  }
  switch (nr) {
    case 1: few_pv_rows<1>(kt, sc, Dh); break;
    case 2: few_pv_rows<2>(kt, sc, Dh); break;
    case 3: few_pv_rows<3>(kt, sc, Dh); break;
    default: few_pv_rows<4>(kt, sc, Dh); break;
  }
}

// ---- bf16 on AMX ---------------------------------------------------------------------------
// Every tile register is 16 rows of 64 bytes: 16 f32, or 16 bf16 pairs. tdpbf16ps multiplies bf16
// pairs along the reduction axis, so B operands keep each pair adjacent ("VNNI" layout).
//   Q·Kᵀ: S^T[16 keys, 16 queries] += K rows (A: 16 keys x 32 d) * Q pairs (B: 16 d pairs x 16 queries)
//   P·V:  O[16 queries, 16 d] += P rows (A: 16 queries x 32 keys) * V pairs (B: 16 key pairs x 16 d)
// K and V are packed once per (batch, head), Q once per query tile and P once per key tile (with a
// 32-bit transpose, since the softmax runs on S^T with queries along the vectors).

struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

void configure_tiles() {
  TileConfig c;
  std::memset(&c, 0, sizeof(c));
  c.palette = 1;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
}

// 32 bf16: a[0], b[0], a[1], b[1], ..., a[15], b[15].
inline __m512i interleave_bf16(__m512 a, __m512 b) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,  //
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(b, a));  // a low, b high
}

}  // namespace

// qb[dp, i] = (q_i[2dp], q_i[2dp+1]) * scale for dp < padded_dh(Dh) / 2, zero past Dh and nq: rows
// of 16 queries' pairs, transposed 16 x 16 at a time.
void pack_q_bf16_pairs(const float* q, int64_t q_row, int64_t nq, int64_t nqp, int64_t Dh, float scale, const Scratch& sc) {
  uint32_t* qb = static_cast<uint32_t*>(sc.q);
  const __m512 sv = _mm512_set1_ps(scale);
  for (int64_t i0 = 0; i0 < nqp; i0 += 16)
    for (int64_t d = 0; d < padded_dh(Dh); d += 32) {
      __m512i r[16];
#pragma GCC unroll 16
      for (int u = 0; u < 16; ++u) {
        __m512 x0 = _mm512_setzero_ps(), x1 = x0;
        if (i0 + u < nq) {
          const float* row = q + (i0 + u) * q_row + d;
          x0 = _mm512_mul_ps(sv, _mm512_maskz_loadu_ps(lanes(Dh - d), row));
          x1 = _mm512_mul_ps(sv, _mm512_maskz_loadu_ps(lanes(Dh - d - 16), row + 16));
        }
        r[u] = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);  // q[d, d + 32) as 16 (d, d+1) pairs
      }
      transpose16(r);
#pragma GCC unroll 16
      for (int w = 0; w < 16; ++w) _mm512_storeu_si512(qb + (d / 2 + w) * kTq + i0, r[w]);
    }
}

namespace {

// Also loads this thread's tile configuration: a query tile is where a thread starts AMX work.
void pack_q_amx(const float* q, int64_t q_row, int64_t nq, int64_t nqp, int64_t Dh, float scale, const Scratch& sc) {
  configure_tiles();
  pack_q_bf16_pairs(q, q_row, nq, nqp, Dh, scale, sc);
}

void score_amx(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh) {
  const int64_t Dht = padded_dh(Dh), nkp = round_up(kt.nk, 16);
  const uint16_t* kb = static_cast<const uint16_t*>(kt.kpacked) + kt.k0 * Dht;
  const uint32_t* qb = static_cast<const uint32_t*>(sc.q);
  const int64_t s_stride = kTq * 4;
  // Blocks of 16 keys by up to 64 queries: four accumulator tiles share each K tile.
  for (int64_t i0 = 0; i0 < nqp; i0 += 64) {
    const int64_t nq16 = imin(4, (nqp - i0) / 16);
    for (int64_t j0 = 0; j0 < nkp; j0 += 16) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t d0 = 0; d0 < Dht; d0 += 32) {
        _tile_loadd(4, kb + j0 * Dht + d0, Dht * 2);
        const uint32_t* b = qb + d0 / 2 * kTq + i0;
        _tile_loadd(5, b, s_stride);
        _tile_dpbf16ps(0, 4, 5);
        if (nq16 > 1) {
          _tile_loadd(6, b + 16, s_stride);
          _tile_dpbf16ps(1, 4, 6);
        }
        if (nq16 > 2) {
          _tile_loadd(7, b + 32, s_stride);
          _tile_dpbf16ps(2, 4, 7);
        }
        if (nq16 > 3) {
          _tile_loadd(5, b + 48, s_stride);
          _tile_dpbf16ps(3, 4, 5);
        }
      }
      float* s = sc.s + j0 * kTq + i0;
      _tile_stored(0, s, s_stride);
      if (nq16 > 1) _tile_stored(1, s + 16, s_stride);
      if (nq16 > 2) _tile_stored(2, s + 32, s_stride);
      if (nq16 > 3) _tile_stored(3, s + 48, s_stride);
    }
  }
}

static_assert(kPairStride == kTk / 2 && kTk % 32 == 0, "P is packed in whole 16-pair tile columns");

}  // namespace

void pack_p_bf16_pairs(const Scratch& sc, int64_t nk, int64_t nqp) {
  const int64_t np = round_up(nk, 32) / 2;
  // pa[i, jp] = (P[i, 2jp], P[i, 2jp+1]): pairs of S^T rows interleaved, then transposed.
  uint32_t* pa = static_cast<uint32_t*>(sc.ppack);
  for (int64_t i0 = 0; i0 < nqp; i0 += 16)
    for (int64_t jp0 = 0; jp0 < np; jp0 += 16) {
      __m512i r[16];
#pragma GCC unroll 16
      for (int u = 0; u < 16; ++u) {
        const int64_t j = 2 * (jp0 + u);
        const __m512 a = j < nk ? _mm512_loadu_ps(sc.s + j * kTq + i0) : _mm512_setzero_ps();
        const __m512 b = j + 1 < nk ? _mm512_loadu_ps(sc.s + (j + 1) * kTq + i0) : _mm512_setzero_ps();
        r[u] = interleave_bf16(a, b);
      }
      transpose16(r);
#pragma GCC unroll 16
      for (int u = 0; u < 16; ++u) _mm512_storeu_si512(pa + (i0 + u) * kPairStride + jp0, r[u]);
    }
}

namespace {

void update_amx(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh) {
  softmax(sc, kt.nk, nqp);
  const int64_t Dhp = padded_dh(Dh), np = round_up(kt.nk, 32) / 2, nd = idiv_up(Dh, 16);
  for (int64_t i = 0; i < nqp; ++i) {
    const float a = sc.alpha[i];
    if (a == 1.0f) continue;
    float* o = sc.o + i * Dhp;
    const __m512 av = _mm512_set1_ps(a);
    for (int64_t d = 0; d < Dhp; d += 16) _mm512_storeu_ps(o + d, _mm512_mul_ps(av, _mm512_loadu_ps(o + d)));
  }
  const uint32_t* vb = static_cast<const uint32_t*>(kt.vpacked) + kt.k0 / 2 * Dhp;
  pack_p_bf16_pairs(sc, kt.nk, nqp);
  const uint32_t* pa = static_cast<const uint32_t*>(sc.ppack);
  const int64_t o_stride = Dhp * 4, v_stride = Dhp * 4, p_stride = kPairStride * 4;
  for (int64_t i0 = 0; i0 < nqp; i0 += 16)
    for (int64_t z0 = 0; z0 < nd; z0 += 4) {
      float* o = sc.o + i0 * Dhp + 16 * z0;
      const int64_t nz = imin(4, nd - z0);
      _tile_loadd(0, o, o_stride);
      if (nz > 1) _tile_loadd(1, o + 16, o_stride);
      if (nz > 2) _tile_loadd(2, o + 32, o_stride);
      if (nz > 3) _tile_loadd(3, o + 48, o_stride);
      for (int64_t jp0 = 0; jp0 < np; jp0 += 16) {
        _tile_loadd(4, pa + i0 * kPairStride + jp0, p_stride);
        const uint32_t* b = vb + jp0 * Dhp + 16 * z0;
        _tile_loadd(5, b, v_stride);
        _tile_dpbf16ps(0, 4, 5);
        if (nz > 1) {
          _tile_loadd(6, b + 16, v_stride);
          _tile_dpbf16ps(1, 4, 6);
        }
        if (nz > 2) {
          _tile_loadd(7, b + 32, v_stride);
          _tile_dpbf16ps(2, 4, 7);
        }
        if (nz > 3) {
          _tile_loadd(5, b + 48, v_stride);
          _tile_dpbf16ps(3, 4, 5);
        }
      }
      _tile_stored(0, o, o_stride);
      if (nz > 1) _tile_stored(1, o + 16, o_stride);
      if (nz > 2) _tile_stored(2, o + 32, o_stride);
      if (nz > 3) _tile_stored(3, o + 48, o_stride);
    }
}

void release_amx() { _tile_release(); }

}  // namespace

// K as bf16 rows [Skp, Dhp] and V as key pairs [Skp / 2, Dhp], zero past Sk and Dh (Skp = Sk
// rounded up to 32), so every tile reads whole 16-key and 32-key tile operands.
void pack_head_bf16(const HeadRows& k, const HeadRows& v, int64_t Sk, int64_t Dh, void* kdst, void* vdst) {
  const int64_t Dhp = padded_dh(Dh), Skp = round_up(Sk, 32);
  uint16_t* kb = static_cast<uint16_t*>(kdst);
  uint32_t* vb = static_cast<uint32_t*>(vdst);
  alignas(64) static const float zero[16] = {};
  for (int64_t j = 0; j < Skp; j += 2) {
    const float* k0 = j < Sk ? k(j) : zero;
    const float* k1 = j + 1 < Sk ? k(j + 1) : zero;
    const float* v0 = j < Sk ? v(j) : zero;
    const float* v1 = j + 1 < Sk ? v(j + 1) : zero;
    for (int64_t d = 0; d < Dhp; d += 16) {
      // Rows past Sk read `zero` with every lane masked off.
      const __mmask16 m = lanes(Dh - d);
      const __mmask16 m0 = j < Sk ? m : 0, m1 = j + 1 < Sk ? m : 0;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(kb + j * Dhp + d),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m0, k0 + d)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(kb + (j + 1) * Dhp + d),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m1, k1 + d)));
      _mm512_storeu_si512(vb + j / 2 * Dhp + d,
                          interleave_bf16(_mm512_maskz_loadu_ps(m0, v0 + d), _mm512_maskz_loadu_ps(m1, v1 + d)));
    }
  }
}

void softmax_tile_avx512(const Scratch& sc, int64_t nk, int64_t nqp) { softmax(sc, nk, nqp); }

TileOps avx512_tile_ops() {
  return TileOps{16, 1, 48, pack_q_f32_avx512, score_f32, update_f32, nullptr, nullptr, false, pack_few_f32, few_score_f32, few_update_f32};
}
TileOps amx_bf16_tile_ops() {
  return TileOps{16, 1, kTk, pack_q_amx, score_amx, update_amx, release_amx, pack_head_bf16, false, nullptr, nullptr, nullptr};
}

}  // namespace kiln::attention

#pragma GCC diagnostic pop
#ifdef __clang__
#pragma clang attribute pop
#endif
#pragma GCC pop_options
