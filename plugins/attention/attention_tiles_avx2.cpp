// The AVX2 f32 tile compute: the baseline for CPUs without AVX-512 (kiln builds for x86-64-v3).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "plugins/attention/attention_tiles.h"
#include "runtime/simd/vec_avx2.h"

#if !defined(__AVX2__) || !defined(__FMA__)
#error "the attention kernel needs AVX2 and FMA (kiln builds with -march=x86-64-v3)"
#endif

namespace kiln::attention {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// exp of kiln's vector math library (runtime/simd/vec_avx2.h: header-only, no runtime
// dependency; see docs/simd.md): exp(-inf) = 0, so masked scores carry no weight.
inline __m256 exp8(__m256 x) { return simd::avx2::exp(x); }

// The two tile products, 4 rows by 16 lanes per register block:
//   score:      s[j, i] = sum_d krow[j][d] * qt[d, i]       j < keys (multiple of 8), i < queries (of 32)
//   accumulate: o[i, d] += sum_{j < keys} s[j, i] * vrow[j][d]   i < queries, d < Dhp (V read masked at Dh)
void score_avx2(const float* const* krow, const float* qt, float* s, int64_t keys, int64_t queries, int64_t Dh) {
  for (int64_t j = 0; j < keys; j += 4) {
    const float *k0 = krow[j], *k1 = krow[j + 1], *k2 = krow[j + 2], *k3 = krow[j + 3];
    for (int64_t i = 0; i < queries; i += 16) {
      __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
      const float* b = qt + i;
      for (int64_t d = 0; d < Dh; ++d) {
        const __m256 b0 = _mm256_loadu_ps(b + d * kTq), b1 = _mm256_loadu_ps(b + d * kTq + 8);
        __m256 x = _mm256_broadcast_ss(k0 + d);
        c00 = _mm256_fmadd_ps(x, b0, c00);
        c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(k1 + d);
        c10 = _mm256_fmadd_ps(x, b0, c10);
        c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(k2 + d);
        c20 = _mm256_fmadd_ps(x, b0, c20);
        c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(k3 + d);
        c30 = _mm256_fmadd_ps(x, b0, c30);
        c31 = _mm256_fmadd_ps(x, b1, c31);
      }
      float* out = s + j * kTq + i;
      _mm256_storeu_ps(out, c00);
      _mm256_storeu_ps(out + 8, c01);
      _mm256_storeu_ps(out + kTq, c10);
      _mm256_storeu_ps(out + kTq + 8, c11);
      _mm256_storeu_ps(out + 2 * kTq, c20);
      _mm256_storeu_ps(out + 2 * kTq + 8, c21);
      _mm256_storeu_ps(out + 3 * kTq, c30);
      _mm256_storeu_ps(out + 3 * kTq + 8, c31);
    }
  }
}

// Lanes [0, n) of 8 set (n may exceed 8 or be <= 0).
inline __m256i lane_mask8(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(n, 0, 8))), idx);
}

void accumulate_avx2(const float* s, const float* const* vrow, float* o, int64_t keys, int64_t queries, int64_t Dh,
                     int64_t Dhp) {
  for (int64_t d = 0; d < Dhp; d += 16) {
    const __m256i m0 = lane_mask8(Dh - d), m1 = lane_mask8(Dh - d - 8);
    for (int64_t i = 0; i < queries; i += 4) {
      float* out = o + i * Dhp + d;
      __m256 c00 = _mm256_loadu_ps(out), c01 = _mm256_loadu_ps(out + 8);
      __m256 c10 = _mm256_loadu_ps(out + Dhp), c11 = _mm256_loadu_ps(out + Dhp + 8);
      __m256 c20 = _mm256_loadu_ps(out + 2 * Dhp), c21 = _mm256_loadu_ps(out + 2 * Dhp + 8);
      __m256 c30 = _mm256_loadu_ps(out + 3 * Dhp), c31 = _mm256_loadu_ps(out + 3 * Dhp + 8);
      for (int64_t j = 0; j < keys; ++j) {
        const float* vr = vrow[j] + d;
        const __m256 b0 = _mm256_maskload_ps(vr, m0), b1 = _mm256_maskload_ps(vr + 8, m1);
        const float* p = s + j * kTq + i;
        __m256 x = _mm256_broadcast_ss(p);
        c00 = _mm256_fmadd_ps(x, b0, c00);
        c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(p + 1);
        c10 = _mm256_fmadd_ps(x, b0, c10);
        c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(p + 2);
        c20 = _mm256_fmadd_ps(x, b0, c20);
        c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(p + 3);
        c30 = _mm256_fmadd_ps(x, b0, c30);
        c31 = _mm256_fmadd_ps(x, b1, c31);
      }
      _mm256_storeu_ps(out, c00);
      _mm256_storeu_ps(out + 8, c01);
      _mm256_storeu_ps(out + Dhp, c10);
      _mm256_storeu_ps(out + Dhp + 8, c11);
      _mm256_storeu_ps(out + 2 * Dhp, c20);
      _mm256_storeu_ps(out + 2 * Dhp + 8, c21);
      _mm256_storeu_ps(out + 3 * Dhp, c30);
      _mm256_storeu_ps(out + 3 * Dhp + 8, c31);
    }
  }
}

// Folds a tile of S^T into each query's running max and sum, turns it into P^T relative to the new
// max, and records the factor the accumulator rows must be rescaled by.
void online_softmax(const Scratch& sc, int64_t nk, int64_t nqp) {
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  for (int64_t i = 0; i < nqp; i += 8) {
    const __m256 m_old = _mm256_loadu_ps(sc.m + i);
    __m256 mx = m_old;
    for (int64_t j = 0; j < nk; ++j) mx = _mm256_max_ps(mx, _mm256_loadu_ps(sc.s + j * kTq + i));
    // A query with nothing visible yet keeps max -inf; subtracting 0 instead keeps its
    // probabilities at exp(-inf) = 0 rather than NaN.
    const __m256 sub = _mm256_andnot_ps(_mm256_cmp_ps(mx, neg_inf, _CMP_EQ_OQ), mx);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < nk; ++j) {
      float* row = sc.s + j * kTq + i;
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row), sub));
      _mm256_storeu_ps(row, e);
      sum = _mm256_add_ps(sum, e);
    }
    const __m256 alpha = exp8(_mm256_sub_ps(m_old, sub));
    _mm256_storeu_ps(sc.alpha + i, alpha);
    _mm256_storeu_ps(sc.l + i, _mm256_fmadd_ps(_mm256_loadu_ps(sc.l + i), alpha, sum));
    _mm256_storeu_ps(sc.m + i, mx);
  }
}

// qt[d, i] = scale * q_i[d], zero past nq.
void pack_q(const float* q, int64_t q_row, int64_t nq, int64_t nqp, int64_t Dh, float scale, const Scratch& sc) {
  float* qt = static_cast<float*>(sc.q);
  for (int64_t i = 0; i < nq; ++i) {
    const float* src = q + i * q_row;
    for (int64_t d = 0; d < Dh; ++d) qt[d * kTq + i] = src[d] * scale;
  }
  if (nq < nqp)
    for (int64_t d = 0; d < Dh; ++d) std::memset(qt + d * kTq + nq, 0, sizeof(float) * (nqp - nq));
}

void score(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh) {
  score_avx2(kt.krow, static_cast<const float*>(sc.q), sc.s, round_up(kt.nk, 8), nqp, Dh);
}

void update(const KeyTile& kt, const Scratch& sc, int64_t nqp, int64_t Dh) {
  const int64_t Dhp = padded_dh(Dh);
  online_softmax(sc, kt.nk, nqp);
  for (int64_t i = 0; i < nqp; ++i) {
    const float a = sc.alpha[i];
    if (a == 1.0f) continue;
    float* o = sc.o + i * Dhp;
    const __m256 av = _mm256_set1_ps(a);
    for (int64_t d = 0; d < Dhp; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(av, _mm256_loadu_ps(o + d)));
  }
  accumulate_avx2(sc.s, kt.vrow, sc.o, kt.nk, nqp, Dh, Dhp);
}

// ---- few rows (decoding's one query, a tile's last 1-4): keys along the loop, Dh on the lanes --
// The lane path would pad one query to a 32-query tile and do 32 times its work.

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

// sc.s[r * kTk + j] = <Q_r, K_j>: each K row is read once for the nr rows.
void few_score(const KeyTile& kt, const Scratch& sc, int64_t nr, int64_t Dh) {
  const float* qs = static_cast<const float*>(sc.q);
  const int64_t Dhp = padded_dh(Dh);
  const __m256i tail = lane_mask8(Dh % 8);
  const int64_t whole = Dh / 8 * 8;
  for (int64_t j = 0; j < kt.nk; ++j) {
    const float* k = kt.krow[j];
    __m256 acc[kFewRows];
    for (int64_t r = 0; r < nr; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t d = 0; d < whole; d += 8) {
      const __m256 kv = _mm256_loadu_ps(k + d);
      for (int64_t r = 0; r < nr; ++r) acc[r] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(qs + r * Dhp + d), acc[r]);
    }
    if (whole < Dh) {
      const __m256 kv = _mm256_maskload_ps(k + whole, tail);
      for (int64_t r = 0; r < nr; ++r) acc[r] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(qs + r * Dhp + whole), acc[r]);
    }
    for (int64_t r = 0; r < nr; ++r) sc.s[r * kTk + j] = hsum8(acc[r]);
  }
}

// Online softmax of the rows' scores (keys [0, nk); masked ones are -inf), then
// o[r] = alpha[r] * o[r] + sum_j P[r, j] * V_j.
void few_update(const KeyTile& kt, const Scratch& sc, int64_t nr, int64_t Dh) {
  const int64_t Dhp = padded_dh(Dh), nk = kt.nk;
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
  for (int64_t r = 0; r < nr; ++r) {
    float* o = sc.o + r * Dhp;
    const float* p = sc.s + r * kTk;
    const __m256 a = _mm256_set1_ps(sc.alpha[r]);
    for (int64_t d = 0; d < Dh; d += 8) {
      const __m256i m = lane_mask8(Dh - d);
      __m256 c = _mm256_mul_ps(a, _mm256_loadu_ps(o + d));
      for (int64_t j = 0; j < nk; ++j) c = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_maskload_ps(kt.vrow[j] + d, m), c);
      _mm256_storeu_ps(o + d, c);
    }
  }
}

}  // namespace

TileOps avx2_tile_ops() {
  return TileOps{32, 8, kTk, pack_q, score, update, nullptr, nullptr, false, pack_few, few_score, few_update};
}

}  // namespace kiln::attention
