// The AVX-512 tile compute: f32 (FMA) and bf16 (vdpbf16ps: bf16 products, f32 accumulation; the
// softmax stays f32). Both are chosen at run time, so this file is compiled for AVX-512 through a
// target pragma and must not instantiate any template with external linkage (such a copy could be
// picked by the linker for callers on CPUs without AVX-512): helpers are internal, no std templates.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "plugins/attention/attention_tiles.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")
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

// exp for 16 floats: Cody-Waite reduction to r in [-ln2/2, ln2/2], the Cephes polynomial (~1 ulp),
// scaled by 2^n; inputs below the float range (including -inf) give exactly 0, so masked scores
// carry no weight.
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f)), lo);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500E-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507E-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073E-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894E-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459E-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201E-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_scalef_ps(keep, y, n);
}

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

// ---- bf16 ------------------------------------------------------------------------------------
// vdpbf16ps multiplies bf16 pairs along the reduction axis, so the packed operands keep the two
// elements of each pair adjacent: Q as (d, d+1) pairs per query, K rows as they are (pairs of d),
// V and P as (j, j+1) pairs of keys per head lane / per query.

inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }

// 32 bf16: a[0], b[0], a[1], b[1], ..., a[15], b[15].
inline __m512i interleave_bf16(__m512 a, __m512 b) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                                       20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512bh ab = _mm512_cvtne2ps_pbh(b, a);  // a in the low half, b in the high half
  return _mm512_permutexvar_epi16(idx, (__m512i)ab);
}

void pack_q_bf16(const float* q, int64_t q_row, int64_t nq, int64_t nqp, int64_t Dh, float scale, const Scratch& sc) {
  const int64_t Dh2 = idiv_up(Dh, 2);
  uint32_t* qb = static_cast<uint32_t*>(sc.q);
  const __m512 sv = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < nqp; ++i)
    for (int64_t d = 0; d < Dh; d += 32) {
      __m512 x0 = _mm512_setzero_ps(), x1 = x0;
      if (i < nq) {
        x0 = _mm512_mul_ps(sv, _mm512_maskz_loadu_ps(lanes(Dh - d), q + i * q_row + d));
        x1 = _mm512_mul_ps(sv, _mm512_maskz_loadu_ps(lanes(Dh - d - 16), q + i * q_row + d + 16));
      }
      // The 32 bf16 of q[d, d + 32) in order: 16 (d, d+1) pairs.
      alignas(64) uint32_t pairs[16];
      _mm512_store_si512(pairs, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
      for (int64_t w = 0; w < imin(16, Dh2 - d / 2); ++w) qb[(d / 2 + w) * kTq + i] = pairs[w];
    }
}

// kb[j, d] = bf16(K_j[d]) for j < nk, rows of 2 * ceil(Dh / 2) (a zero pad for odd Dh).
void pack_k_bf16(const KeyTile& kt, const Scratch& sc, int64_t Dh) {
  const int64_t Dh2 = idiv_up(Dh, 2);
  uint16_t* kb = static_cast<uint16_t*>(sc.kpack);
  for (int64_t j = 0; j < kt.nk; ++j)
    for (int64_t d = 0; d < 2 * Dh2; d += 16) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lanes(Dh - d), kt.krow[j] + d));
      _mm256_mask_storeu_epi16(kb + j * 2 * Dh2 + d, lanes(2 * Dh2 - d), (__m256i)h);
    }
}

template <int R, int NZ>
inline void score_block_bf16(const uint32_t* kb, int64_t Dh2, const uint32_t* qb, float* s) {
  __m512 c[R][NZ];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_setzero_ps();
  for (int64_t dp = 0; dp < Dh2; ++dp) {
    __m512i b[NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) b[z] = _mm512_loadu_si512(qb + dp * kTq + 16 * z);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh x = as_bh(_mm512_set1_epi32(static_cast<int>(kb[r * Dh2 + dp])));
#pragma GCC unroll 4
      for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_dpbf16_ps(c[r][z], x, as_bh(b[z]));
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) _mm512_storeu_ps(s + r * kTq + 16 * z, c[r][z]);
}

template <int NZ>
void score_keys_bf16(int64_t nk, const uint32_t* kb, int64_t Dh2, const uint32_t* qb, float* s) {
  int64_t j = 0;
  for (; j + kRows <= nk; j += kRows) score_block_bf16<kRows, NZ>(kb + j * Dh2, Dh2, qb, s + j * kTq);
  kb += j * Dh2;
  s += j * kTq;
  switch (nk - j) {
    case 1: score_block_bf16<1, NZ>(kb, Dh2, qb, s); break;
    case 2: score_block_bf16<2, NZ>(kb, Dh2, qb, s); break;
    case 3: score_block_bf16<3, NZ>(kb, Dh2, qb, s); break;
    case 4: score_block_bf16<4, NZ>(kb, Dh2, qb, s); break;
    case 5: score_block_bf16<5, NZ>(kb, Dh2, qb, s); break;
    default: break;
  }
}

void score_bf16(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh) {
  pack_k_bf16(kt, sc, Dh);
  const int64_t Dh2 = idiv_up(Dh, 2);
  const uint32_t* kb = static_cast<const uint32_t*>(sc.kpack);
  const uint32_t* qb = static_cast<const uint32_t*>(sc.q);
  for (int64_t i = 0; i < nqp; i += 64) {
    switch (imin(4, (nqp - i) / 16)) {
      case 4: score_keys_bf16<4>(kt.nk, kb, Dh2, qb + i, sc.s + i); break;
      case 3: score_keys_bf16<3>(kt.nk, kb, Dh2, qb + i, sc.s + i); break;
      case 2: score_keys_bf16<2>(kt.nk, kb, Dh2, qb + i, sc.s + i); break;
      default: score_keys_bf16<1>(kt.nk, kb, Dh2, qb + i, sc.s + i); break;
    }
  }
}

// vb[jp, d] = (V_2jp[d], V_2jp+1[d]) and pb[jp, i] = (P[2jp, i], P[2jp+1, i]), the odd key's
// partner zero.
void pack_pv_bf16(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh, int64_t Dhp) {
  uint32_t* vb = static_cast<uint32_t*>(sc.vpack);
  uint32_t* pb = static_cast<uint32_t*>(sc.ppack);
  for (int64_t jp = 0; jp < idiv_up(kt.nk, 2); ++jp) {
    const bool pair = 2 * jp + 1 < kt.nk;
    const float* v0 = kt.vrow[2 * jp];
    const float* v1 = pair ? kt.vrow[2 * jp + 1] : sc.zero;
    for (int64_t d = 0; d < Dh; d += 16) {
      const __mmask16 m = lanes(Dh - d);
      _mm512_storeu_si512(vb + jp * Dhp + d,
                          interleave_bf16(_mm512_maskz_loadu_ps(m, v0 + d), _mm512_maskz_loadu_ps(m, v1 + d)));
    }
    const float* p0 = sc.s + 2 * jp * kTq;
    for (int64_t i = 0; i < nqp; i += 16)
      _mm512_storeu_si512(pb + jp * kTq + i, interleave_bf16(_mm512_loadu_ps(p0 + i),
                                                             pair ? _mm512_loadu_ps(p0 + kTq + i) : _mm512_setzero_ps()));
  }
}

template <int R, int NZ>
inline void pv_block_bf16(const uint32_t* pb, const uint32_t* vb, int64_t nk2, float* o, int64_t Dhp,
                          const float* alpha) {
  __m512 c[R][NZ];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_mul_ps(a, _mm512_loadu_ps(o + r * Dhp + 16 * z));
  }
  for (int64_t jp = 0; jp < nk2; ++jp) {
    __m512i b[NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) b[z] = _mm512_loadu_si512(vb + jp * Dhp + 16 * z);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh x = as_bh(_mm512_set1_epi32(static_cast<int>(pb[jp * kTq + r])));
#pragma GCC unroll 4
      for (int z = 0; z < NZ; ++z) c[r][z] = _mm512_dpbf16_ps(c[r][z], x, as_bh(b[z]));
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) _mm512_storeu_ps(o + r * Dhp + 16 * z, c[r][z]);
}

template <int NZ>
void pv_queries_bf16(const Scratch& sc, int64_t nk2, int64_t nqp, int64_t d0, int64_t Dhp) {
  const uint32_t* pb = static_cast<const uint32_t*>(sc.ppack);
  const uint32_t* vb = static_cast<const uint32_t*>(sc.vpack) + d0;
  int64_t i = 0;
  for (; i + kRows <= nqp; i += kRows)
    pv_block_bf16<kRows, NZ>(pb + i, vb, nk2, sc.o + i * Dhp + d0, Dhp, sc.alpha + i);
  float* o = sc.o + i * Dhp + d0;
  const float* a = sc.alpha + i;
  switch (nqp - i) {
    case 1: pv_block_bf16<1, NZ>(pb + i, vb, nk2, o, Dhp, a); break;
    case 2: pv_block_bf16<2, NZ>(pb + i, vb, nk2, o, Dhp, a); break;
    case 3: pv_block_bf16<3, NZ>(pb + i, vb, nk2, o, Dhp, a); break;
    case 4: pv_block_bf16<4, NZ>(pb + i, vb, nk2, o, Dhp, a); break;
    case 5: pv_block_bf16<5, NZ>(pb + i, vb, nk2, o, Dhp, a); break;
    default: break;
  }
}

void update_bf16(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh) {
  softmax(sc, kt.nk, nqp);
  const int64_t Dhp = padded_dh(Dh);
  pack_pv_bf16(kt, sc, nqp, Dh, Dhp);
  const int64_t nk2 = idiv_up(kt.nk, 2);
  // V's padding lanes past Dh are zero, so whole vectors can be accumulated.
  for (int64_t d0 = 0; d0 < Dh; d0 += 64) {
    switch (imin(4, idiv_up(Dh - d0, 16))) {
      case 4: pv_queries_bf16<4>(sc, nk2, nqp, d0, Dhp); break;
      case 3: pv_queries_bf16<3>(sc, nk2, nqp, d0, Dhp); break;
      case 2: pv_queries_bf16<2>(sc, nk2, nqp, d0, Dhp); break;
      default: pv_queries_bf16<1>(sc, nk2, nqp, d0, Dhp); break;
    }
  }
}

}  // namespace

TileOps avx512_tile_ops() { return TileOps{16, 1, pack_q_f32, score_f32, update_f32}; }
TileOps avx512_bf16_tile_ops() { return TileOps{16, 1, pack_q_bf16, score_bf16, update_bf16}; }

}  // namespace kiln::attention

#pragma GCC diagnostic pop
#pragma GCC pop_options
