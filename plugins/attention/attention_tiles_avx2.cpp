// The AVX2 f32 tile compute: the baseline for CPUs without AVX-512 (kiln builds for x86-64-v3).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "plugins/attention/attention_tiles.h"

#if !defined(__AVX2__) || !defined(__FMA__)
#error "the attention kernel needs AVX2 and FMA (kiln builds with -march=x86-64-v3)"
#endif

namespace kiln::attention {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Register blocks of both tile products: kRows rows (keys of S^T, or queries of O) by two vectors
// of 8 lanes, 12 accumulators of the 16 ymm registers: the two FMA pipes with their 4-cycle latency
// need 8 in flight, and the 2 vector loads and 6 broadcasts per 12 FMAs stay under the load rate.
constexpr int kRows = 6;
// Keys per tile: 8 whole register blocks of keys.
constexpr int64_t kKeyTile = 8 * kRows;
static_assert(kKeyTile <= kTk);

// e^x for the softmax's arguments, x <= 0 (score minus running max), -inf or NaN: the reduction
// and polynomial of kiln's exp (runtime/simd/vec_math.inc), so equal to simd::avx2::exp(x) to the
// bit down to -87.3, and 0 below (where e^x would be denormal; exp(-inf) = 0, so masked scores
// carry no weight). Above -87.3, 2^n keeps p * 2^n normal, so one exponent add applies it: about
// a quarter fewer instructions than the general exp, which the softmax runs once per score.
inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 xc = _mm256_max_ps(lo, x);  // NaN stays NaN
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  const __m256 y = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
  return _mm256_and_ps(y, _mm256_cmp_ps(x, lo, _CMP_NLT_UQ));  // 0 below -87.3, NaN kept
}

// Lanes [0, n) of 8 set (n may exceed 8 or be <= 0).
inline __m256i lane_mask8(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(n, 0, 8))), idx);
}

// ---- score: s[j, i] = sum_d krow[j][d] * qt[d, i] ------------------------------------------------

// R keys by 16 queries; each accumulator sums over d in order.
template <int R>
inline void score_block(const float* const* krow, const float* qt, float* s, int64_t Dh) {
  const float* k[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) k[r] = krow[r];
  __m256 c[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) c[r][0] = c[r][1] = _mm256_setzero_ps();
  for (int64_t d = 0; d < Dh; ++d) {
    const __m256 b0 = _mm256_loadu_ps(qt + d * kTq), b1 = _mm256_loadu_ps(qt + d * kTq + 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(k[r] + d);
      c[r][0] = _mm256_fmadd_ps(x, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(x, b1, c[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(s + r * kTq, c[r][0]);
    _mm256_storeu_ps(s + r * kTq + 8, c[r][1]);
  }
}

void score(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh) {
  const float* qt = static_cast<const float*>(sc.q);
  for (int64_t i = 0; i < nqp; i += 16) {
    int64_t j = 0;
    for (; j + kRows <= kt.nk; j += kRows) score_block<kRows>(kt.krow + j, qt + i, sc.s + j * kTq + i, Dh);
    const float* const* k = kt.krow + j;
    float* s = sc.s + j * kTq + i;
    switch (kt.nk - j) {
      case 1: score_block<1>(k, qt + i, s, Dh); break;
      case 2: score_block<2>(k, qt + i, s, Dh); break;
      case 3: score_block<3>(k, qt + i, s, Dh); break;
      case 4: score_block<4>(k, qt + i, s, Dh); break;
      case 5: score_block<5>(k, qt + i, s, Dh); break;
      default: break;
    }
  }
}

// ---- update: online softmax, then o = alpha * o + P * V ------------------------------------------

// Folds a tile of S^T into each query's running max and sum, turns it into P^T relative to the new
// max, and records the factor the accumulator rows must be rescaled by.
void online_softmax(const Scratch& sc, int64_t nk, int64_t nqp) {
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  for (int64_t i = 0; i < nqp; i += 8) {
    float* col = sc.s + i;
    const __m256 m_old = _mm256_loadu_ps(sc.m + i);
    // Independent chains: one would be bound by the max's latency, not its throughput.
    __m256 mx[4] = {m_old, m_old, m_old, m_old};
    int64_t j = 0;
    for (; j + 4 <= nk; j += 4)
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) mx[u] = _mm256_max_ps(mx[u], _mm256_loadu_ps(col + (j + u) * kTq));
    for (; j < nk; ++j) mx[0] = _mm256_max_ps(mx[0], _mm256_loadu_ps(col + j * kTq));
    const __m256 m_new = _mm256_max_ps(_mm256_max_ps(mx[0], mx[1]), _mm256_max_ps(mx[2], mx[3]));
    // A query with nothing visible yet keeps max -inf; subtracting 0 instead keeps its
    // probabilities at exp(-inf) = 0 rather than NaN.
    const __m256 sub = _mm256_andnot_ps(_mm256_cmp_ps(m_new, neg_inf, _CMP_EQ_OQ), m_new);
    // Two sums (named, not an array: GCC keeps an array indexed by j & 1 in memory).
    __m256 sum0 = _mm256_setzero_ps(), sum1 = sum0;
    const auto p = [&](int64_t jj) {
      float* row = col + jj * kTq;
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row), sub));
      _mm256_storeu_ps(row, e);
      return e;
    };
    for (j = 0; j + 2 <= nk; j += 2) {
      sum0 = _mm256_add_ps(sum0, p(j));
      sum1 = _mm256_add_ps(sum1, p(j + 1));
    }
    if (j < nk) sum0 = _mm256_add_ps(sum0, p(j));
    const __m256 alpha = exp8(_mm256_sub_ps(m_old, sub));
    _mm256_storeu_ps(sc.alpha + i, alpha);
    _mm256_storeu_ps(sc.l + i, _mm256_fmadd_ps(_mm256_loadu_ps(sc.l + i), alpha, _mm256_add_ps(sum0, sum1)));
    _mm256_storeu_ps(sc.m + i, m_new);
  }
}

// o[r, d0 + 8z] = alpha[r] * o[r, d0 + 8z] + sum_j p[j, r] * vrow[j][d0 + 8z] for R queries by NZ
// vectors of head lanes; with kMask the last vector reads V through `last` (the tail of Dh: V rows
// end there).
template <int R, int NZ, bool kMask>
inline void pv_block(const float* p, const float* const* vrow, int64_t nk, int64_t d0, __m256i last, float* o,
                     int64_t Dhp, const float* alpha) {
  __m256 c[R][NZ];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m256 a = _mm256_broadcast_ss(alpha + r);
#pragma GCC unroll 2
    for (int z = 0; z < NZ; ++z) c[r][z] = _mm256_mul_ps(a, _mm256_loadu_ps(o + r * Dhp + 8 * z));
  }
  for (int64_t j = 0; j < nk; ++j) {
    const float* v = vrow[j] + d0;
    __m256 b[NZ];
#pragma GCC unroll 2
    for (int z = 0; z < NZ; ++z) b[z] = kMask && z + 1 == NZ ? _mm256_maskload_ps(v + 8 * z, last) : _mm256_loadu_ps(v + 8 * z);
    const float* pj = p + j * kTq;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(pj + r);
#pragma GCC unroll 2
      for (int z = 0; z < NZ; ++z) c[r][z] = _mm256_fmadd_ps(x, b[z], c[r][z]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int z = 0; z < NZ; ++z) _mm256_storeu_ps(o + r * Dhp + 8 * z, c[r][z]);
}

template <int NZ, bool kMask>
void pv_queries(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t d0, __m256i last, int64_t Dhp) {
  int64_t i = 0;
  for (; i + kRows <= nqp; i += kRows)
    pv_block<kRows, NZ, kMask>(sc.s + i, kt.vrow, kt.nk, d0, last, sc.o + i * Dhp + d0, Dhp, sc.alpha + i);
  const float* p = sc.s + i;
  float* o = sc.o + i * Dhp + d0;
  const float* a = sc.alpha + i;
  switch (nqp - i) {
    case 1: pv_block<1, NZ, kMask>(p, kt.vrow, kt.nk, d0, last, o, Dhp, a); break;
    case 2: pv_block<2, NZ, kMask>(p, kt.vrow, kt.nk, d0, last, o, Dhp, a); break;
    case 3: pv_block<3, NZ, kMask>(p, kt.vrow, kt.nk, d0, last, o, Dhp, a); break;
    case 4: pv_block<4, NZ, kMask>(p, kt.vrow, kt.nk, d0, last, o, Dhp, a); break;
    case 5: pv_block<5, NZ, kMask>(p, kt.vrow, kt.nk, d0, last, o, Dhp, a); break;
    default: break;
  }
}

// The accumulator's columns past Dh are never written (they stay the zeros the driver cleared them
// to, and write_rows reads only [0, Dh)).
void update(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh) {
  const int64_t Dhp = padded_dh(Dh);
  online_softmax(sc, kt.nk, nqp);
  for (int64_t d0 = 0; d0 < Dh; d0 += 16) {
    const int64_t rest = Dh - d0;
    if (rest >= 16) pv_queries<2, false>(kt, sc, nqp, d0, __m256i{}, Dhp);
    else if (rest > 8) pv_queries<2, true>(kt, sc, nqp, d0, lane_mask8(rest - 8), Dhp);
    else if (rest == 8) pv_queries<1, false>(kt, sc, nqp, d0, __m256i{}, Dhp);
    else pv_queries<1, true>(kt, sc, nqp, d0, lane_mask8(rest), Dhp);
  }
}

// Transposes an 8 x 8 matrix held as 8 rows.
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    u[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}

// qt[d, i] = scale * q_i[d], zero past nq: 8 x 8 blocks transposed in registers.
void pack_q(const float* q, int64_t q_row, int64_t nq, int64_t nqp, int64_t Dh, float scale, const Scratch& sc) {
  float* qt = static_cast<float*>(sc.q);
  const __m256 sv = _mm256_set1_ps(scale);
  for (int64_t i0 = 0; i0 < nqp; i0 += 8)
    for (int64_t d = 0; d < Dh; d += 8) {
      const __m256i m = lane_mask8(Dh - d);
      __m256 r[8];
#pragma GCC unroll 8
      for (int u = 0; u < 8; ++u)
        r[u] = i0 + u < nq ? _mm256_mul_ps(sv, _mm256_maskload_ps(q + (i0 + u) * q_row + d, m)) : _mm256_setzero_ps();
      transpose8(r);
      const int64_t w_end = std::min<int64_t>(8, Dh - d);
      for (int64_t w = 0; w < w_end; ++w) _mm256_storeu_ps(qt + (d + w) * kTq + i0, r[w]);
    }
}

// ---- few rows (decoding's one query, a tile's last 1-4): keys along the loop, Dh on the lanes --
// The lane path would pad one query to a 16-query vector pair and do 16 times its work.

float hsum8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

// sc.q = scale * Q rows as [nr, Dhp], zero past Dh.
void pack_few(const float* q, int64_t q_row, int64_t nr, int64_t Dh, float scale, const Scratch& sc) {
  float* qs = static_cast<float*>(sc.q);
  const int64_t Dhp = padded_dh(Dh);
  for (int64_t r = 0; r < nr; ++r) {
    for (int64_t d = 0; d < Dh; ++d) qs[r * Dhp + d] = q[r * q_row + d] * scale;
    std::memset(qs + r * Dhp + Dh, 0, sizeof(float) * (Dhp - Dh));
  }
}

// Lane u of the result = the sum of a[u]'s 8 lanes.
inline __m256 lane_sums8(const __m256 a[8]) {
  const __m256 g0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 g1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(g0, g1, 0x20), _mm256_permute2f128_ps(g0, g1, 0x31));
}

// sc.s[r * kTk + j] = <Q_r, K_j>: 8 keys' products accumulate in 8 vectors, which one reduction
// turns into the 8 keys' scores (the lanes past nk hold some key's score; few_update ignores them).
void few_score(const KeyTile& kt, const Scratch& sc, int64_t nr, int64_t Dh) {
  const float* qs = static_cast<const float*>(sc.q);
  const int64_t Dhp = padded_dh(Dh);
  const __m256i tail = lane_mask8(Dh % 8);
  const int64_t whole = Dh / 8 * 8;
  for (int64_t j0 = 0; j0 < kt.nk; j0 += 8) {
    const float* k[8];
    for (int u = 0; u < 8; ++u) k[u] = kt.krow[j0 + u < kt.nk ? j0 + u : j0];
    for (int64_t r = 0; r < nr; ++r) {
      const float* qr = qs + r * Dhp;
      __m256 acc[8];
#pragma GCC unroll 8
      for (int u = 0; u < 8; ++u) acc[u] = _mm256_setzero_ps();
      for (int64_t d = 0; d < whole; d += 8) {
        const __m256 qv = _mm256_loadu_ps(qr + d);
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u) acc[u] = _mm256_fmadd_ps(_mm256_loadu_ps(k[u] + d), qv, acc[u]);
      }
      if (whole < Dh) {  // K rows end at Dh (Q is zero up to Dhp)
        const __m256 qv = _mm256_loadu_ps(qr + whole);
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u) acc[u] = _mm256_fmadd_ps(_mm256_maskload_ps(k[u] + whole, tail), qv, acc[u]);
      }
      _mm256_storeu_ps(sc.s + r * kTk + j0, lane_sums8(acc));
    }
  }
}

// o[r, d0 + 8z] = alpha[r] * o[r, d0 + 8z] + sum_j p[r, j] * V_j[d0 + 8z] for NR rows by NZ vectors
// (with kMask, the one vector reads V through `last`: the tail of Dh).
template <int NR, int NZ, bool kMask>
inline void few_pv(const KeyTile& kt, const Scratch& sc, int64_t d0, __m256i last, int64_t Dhp) {
  __m256 c[NR][NZ];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
    const __m256 a = _mm256_broadcast_ss(sc.alpha + r);
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) c[r][z] = _mm256_mul_ps(a, _mm256_loadu_ps(sc.o + r * Dhp + d0 + 8 * z));
  }
  for (int64_t j = 0; j < kt.nk; ++j) {
    const float* v = kt.vrow[j] + d0;
    __m256 b[NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) b[z] = kMask ? _mm256_maskload_ps(v + 8 * z, last) : _mm256_loadu_ps(v + 8 * z);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const __m256 x = _mm256_broadcast_ss(sc.s + r * kTk + j);
#pragma GCC unroll 4
      for (int z = 0; z < NZ; ++z) c[r][z] = _mm256_fmadd_ps(x, b[z], c[r][z]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) _mm256_storeu_ps(sc.o + r * Dhp + d0 + 8 * z, c[r][z]);
}

// Blocks of 8 (NR <= 2) or 4 vectors keep 8 accumulators in flight, then single vectors to Dh.
template <int NR>
void few_pv_rows(const KeyTile& kt, const Scratch& sc, int64_t Dh) {
  constexpr int NZ = NR <= 2 ? 4 : 2;
  const int64_t Dhp = padded_dh(Dh);
  int64_t d0 = 0;
  for (; d0 + 8 * NZ <= Dh; d0 += 8 * NZ) few_pv<NR, NZ, false>(kt, sc, d0, __m256i{}, Dhp);
  for (; d0 + 8 <= Dh; d0 += 8) few_pv<NR, 1, false>(kt, sc, d0, __m256i{}, Dhp);
  if (d0 < Dh) few_pv<NR, 1, true>(kt, sc, d0, lane_mask8(Dh - d0), Dhp);
}

// Online softmax of the rows' scores (keys [0, nk); masked ones are -inf), then
// o[r] = alpha[r] * o[r] + sum_j P[r, j] * V_j.
void few_update(const KeyTile& kt, const Scratch& sc, int64_t nr, int64_t Dh) {
  const int64_t nk = kt.nk;
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  // Lanes past nk read as -inf (weight 0); a tile row has kTk >= round_up(nk, 8) floats.
  auto scores = [&](const float* s, int64_t j0) {
    const __m256i m = lane_mask8(nk - j0);
    return _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(s + j0, m), _mm256_castsi256_ps(m));
  };
  for (int64_t r = 0; r < nr; ++r) {
    float* s = sc.s + r * kTk;
    __m256 mx = neg_inf;
    for (int64_t j0 = 0; j0 < nk; j0 += 8) mx = _mm256_max_ps(mx, scores(s, j0));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float m_tile = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const float m_old = sc.m[r], m_new = m_old > m_tile ? m_old : m_tile;
    // Nothing visible yet: subtract 0, so exp(-inf) = 0 weights instead of NaN.
    const __m256 sub = _mm256_set1_ps(m_new == kNegInf ? 0.0f : m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j0 = 0; j0 < nk; j0 += 8) {
      const __m256 e = exp8(_mm256_sub_ps(scores(s, j0), sub));
      _mm256_storeu_ps(s + j0, e);
      sum = _mm256_add_ps(sum, e);
    }
    const float alpha = _mm256_cvtss_f32(exp8(_mm256_sub_ps(_mm256_set1_ps(m_old), sub)));
    sc.alpha[r] = alpha;
    sc.l[r] = sc.l[r] * alpha + hsum8(sum);
    sc.m[r] = m_new;
  }
  switch (nr) {
    case 1: few_pv_rows<1>(kt, sc, Dh); break;
    case 2: few_pv_rows<2>(kt, sc, Dh); break;
    case 3: few_pv_rows<3>(kt, sc, Dh); break;
    default: few_pv_rows<4>(kt, sc, Dh); break;
  }
}

}  // namespace

TileOps avx2_tile_ops() {
  return TileOps{16, 1, kKeyTile, pack_q, score, update, nullptr, nullptr, false, pack_few, few_score, few_update};
}

}  // namespace kiln::attention
