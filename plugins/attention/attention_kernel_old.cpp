#include "plugins/attention/attention_kernel.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if !defined(__AVX2__) || !defined(__FMA__)
#error "the attention kernel needs AVX2 and FMA (kiln builds with -march=x86-64-v3)"
#endif

// Layout of the work: scores are computed transposed, S^T = K_tile * (scale * Q_tile)^T, so the
// query axis is the vector axis. Then K and V rows are read straight from the inputs (from the
// cache or the new part, no packing and no transposition per tile), only Q^T is packed once per
// query tile, and the online softmax (max, exp, sum per query) runs on whole vectors of queries.
namespace kiln::attention_old {
using namespace kiln::attention;
namespace {

// Query rows and keys per tile: a tile's scores, Q^T and accumulator stay in L2 for Dh up to ~128.
constexpr int64_t kTq = 64;
constexpr int64_t kTk = 64;
// Padding to whole register blocks of the micro-kernels: queries to 32 lanes, keys to 8 rows,
// the accumulator's head dim to 32 lanes.
constexpr int64_t kQueryPad = 32;
constexpr int64_t kKeyPad = 8;
constexpr int64_t kDhPad = 32;
constexpr size_t kAlign = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
size_t aligned_floats(int64_t n) { return round_up(n * static_cast<int64_t>(sizeof(float)), kAlign); }
int64_t padded_dh(int64_t Dh) { return round_up(std::max<int64_t>(Dh, 1), kDhPad); }

// One thread's scratch, carved from its workspace slot.
struct Scratch {
  float* qt;     // [Dh, kTq]   (scale * Q_tile)^T; columns past the tile are zero
  float* s;      // [kTk, kTq]  S^T, then P^T
  float* o;      // [kTq, Dhp]  unnormalized output accumulator
  float* m;      // [kTq]       running max per query
  float* l;      // [kTq]       running sum per query
  float* alpha;  // [kTq]       rescale factor of the current key tile
  float* zero;   // [Dh]        zeros: the K row of padding keys
};

size_t slot_bytes(int64_t Dh) {
  return aligned_floats(Dh * kTq) + aligned_floats(kTk * kTq) + aligned_floats(kTq * padded_dh(Dh)) +
         3 * aligned_floats(kTq) + aligned_floats(std::max<int64_t>(Dh, 1));
}

Scratch carve(void* base, int64_t Dh) {
  char* p = static_cast<char*>(base);
  auto take = [&](int64_t n) {
    float* f = reinterpret_cast<float*>(p);
    p += aligned_floats(n);
    return f;
  };
  Scratch s;
  s.qt = take(Dh * kTq);
  s.s = take(kTk * kTq);
  s.o = take(kTq * padded_dh(Dh));
  s.m = take(kTq);
  s.l = take(kTq);
  s.alpha = take(kTq);
  s.zero = take(std::max<int64_t>(Dh, 1));
  return s;
}

// exp for 8 floats (Cephes polynomial, ~1 ulp); inputs below the float range (including -inf)
// give exactly 0 so masked scores carry no weight.
inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)), lo);
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500E-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

// The two tile products. `krow`/`vrow` are the key tile's K/V rows in the inputs.
//   score:      s[j, i] = sum_d krow[j][d] * qt[d, i]       j < keys (multiple of 8), i < queries (of 32)
//   accumulate: o[i, d] += sum_{j < keys} s[j, i] * vrow[j][d]   i < queries, d < Dhp (V read masked at Dh)
struct TileOps {
  void (*score)(const float* const* krow, const float* qt, float* s, int64_t keys, int64_t queries, int64_t Dh);
  void (*accumulate)(const float* s, const float* const* vrow, float* o, int64_t keys, int64_t queries, int64_t Dh,
                     int64_t Dhp);
};

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

// AVX-512 versions: 8 rows by 32 lanes per register block (16 accumulators); chosen at run time
// when the CPU has AVX-512F.
__attribute__((target("avx512f"))) void score_avx512(const float* const* krow, const float* qt, float* s,
                                                     int64_t keys, int64_t queries, int64_t Dh) {
  for (int64_t j = 0; j < keys; j += 8) {
    const float* k[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) k[r] = krow[j + r];
    for (int64_t i = 0; i < queries; i += 32) {
      __m512 c[8][2];
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) c[r][0] = c[r][1] = _mm512_setzero_ps();
      const float* b = qt + i;
      for (int64_t d = 0; d < Dh; ++d) {
        const __m512 b0 = _mm512_loadu_ps(b + d * kTq), b1 = _mm512_loadu_ps(b + d * kTq + 16);
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) {
          const __m512 x = _mm512_set1_ps(k[r][d]);
          c[r][0] = _mm512_fmadd_ps(x, b0, c[r][0]);
          c[r][1] = _mm512_fmadd_ps(x, b1, c[r][1]);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        _mm512_storeu_ps(s + (j + r) * kTq + i, c[r][0]);
        _mm512_storeu_ps(s + (j + r) * kTq + i + 16, c[r][1]);
      }
    }
  }
}

__attribute__((target("avx512f"))) void accumulate_avx512(const float* s, const float* const* vrow, float* o,
                                                          int64_t keys, int64_t queries, int64_t Dh, int64_t Dhp) {
  for (int64_t d = 0; d < Dhp; d += 32) {
    auto lanes = [](int64_t n) {
      return static_cast<__mmask16>(n >= 16 ? 0xffff : n <= 0 ? 0 : (1u << n) - 1);
    };
    const __mmask16 m0 = lanes(Dh - d), m1 = lanes(Dh - d - 16);
    for (int64_t i = 0; i < queries; i += 8) {
      float* out = o + i * Dhp + d;
      __m512 c[8][2];
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        c[r][0] = _mm512_loadu_ps(out + r * Dhp);
        c[r][1] = _mm512_loadu_ps(out + r * Dhp + 16);
      }
      for (int64_t j = 0; j < keys; ++j) {
        const float* vr = vrow[j] + d;
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, vr), b1 = _mm512_maskz_loadu_ps(m1, vr + 16);
        const float* p = s + j * kTq + i;
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) {
          const __m512 x = _mm512_set1_ps(p[r]);
          c[r][0] = _mm512_fmadd_ps(x, b0, c[r][0]);
          c[r][1] = _mm512_fmadd_ps(x, b1, c[r][1]);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        _mm512_storeu_ps(out + r * Dhp, c[r][0]);
        _mm512_storeu_ps(out + r * Dhp + 16, c[r][1]);
      }
    }
  }
}

bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

std::atomic<bool> g_avx512_allowed{true};

TileOps tile_ops() {
  if (g_avx512_allowed.load(std::memory_order_relaxed) && cpu_has_avx512()) return TileOps{score_avx512, accumulate_avx512};
  return TileOps{score_avx2, accumulate_avx2};
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

  const float* row(const float* const* base, int64_t j) const {
    return j < g->Sc ? base[0] + j * kv_row[0] : base[1] + (j - g->Sc) * kv_row[1];
  }
  bool mask_visible(int64_t i, int64_t j) const {
    const int64_t off = i * g->mask_stride[2] + j * g->mask_stride[3];
    if (p->mask == MaskKind::kBool) return static_cast<const bool*>(mask)[off];
    return static_cast<const float*>(mask)[off] != kNegInf;
  }
};

// Whether any (query, key) of the tile is visible under an explicit mask.
bool mask_tile_any_visible(const Problem& pr, int64_t q0, int64_t nq, int64_t k0, int64_t nk) {
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j)
      if (pr.mask_visible(q0 + i, k0 + j)) return true;
  return false;
}

// Applies the mask to S^T (s[j, i] for key k0 + j and query q0 + i).
void apply_mask(const Problem& pr, float* s, int64_t q0, int64_t nq, int64_t k0, int64_t nk) {
  const Params& p = *pr.p;
  const Geometry& g = *pr.g;
  if (p.mask == MaskKind::kCausal || p.mask == MaskKind::kBlockCausal) {
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t lim = visible_limit(p, g.query_offset() + q0 + i) - k0;
      for (int64_t j = std::max<int64_t>(lim, 0); j < nk; ++j) s[j * kTq + i] = kNegInf;
    }
    return;
  }
  const int64_t si = g.mask_stride[2];
  for (int64_t j = 0; j < nk; ++j) {
    float* row = s + j * kTq;
    const int64_t base = q0 * si + (k0 + j) * g.mask_stride[3];
    if (p.mask == MaskKind::kBool) {
      const bool* m = static_cast<const bool*>(pr.mask) + base;
      for (int64_t i = 0; i < nq; ++i)
        if (!m[i * si]) row[i] = kNegInf;
    } else {
      const float* m = static_cast<const float*>(pr.mask) + base;
      for (int64_t i = 0; i < nq; ++i) row[i] += m[i * si];
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

void query_tile(const Problem& pr, const Scratch& sc, int64_t q0) {
  const TileOps ops = tile_ops();
  const Params& p = *pr.p;
  const Geometry& g = *pr.g;
  const int64_t Dh = g.Dh, Dhp = padded_dh(Dh);
  const int64_t nq = std::min(kTq, g.Sq - q0), nqp = round_up(nq, kQueryPad);
  for (int64_t i = 0; i < nq; ++i) {
    const float* src = pr.q + (q0 + i) * pr.q_row;
    for (int64_t d = 0; d < Dh; ++d) sc.qt[d * kTq + i] = src[d] * p.scale;
  }
  if (nq < nqp)
    for (int64_t d = 0; d < Dh; ++d) std::memset(sc.qt + d * kTq + nq, 0, sizeof(float) * (nqp - nq));
  std::memset(sc.o, 0, sizeof(float) * nqp * Dhp);
  std::fill(sc.m, sc.m + nqp, kNegInf);
  std::fill(sc.l, sc.l + nqp, 0.0f);
  std::memset(sc.zero, 0, sizeof(float) * Dh);

  const bool positional = p.mask == MaskKind::kCausal || p.mask == MaskKind::kBlockCausal;
  const bool explicit_mask = p.mask == MaskKind::kBool || p.mask == MaskKind::kAdditive;
  // With a positional mask, keys at or past the last query's limit are hidden from the whole tile
  // and keys below the first query's limit are visible to all of it.
  int64_t k_end = g.Sk_total(), all_visible_below = k_end;
  if (positional) {
    k_end = std::clamp<int64_t>(visible_limit(p, g.query_offset() + q0 + nq - 1), 0, k_end);
    all_visible_below = visible_limit(p, g.query_offset() + q0);
  }
  const float* krow[kTk];
  const float* vrow[kTk];
  for (int64_t k0 = 0; k0 < k_end; k0 += kTk) {
    const int64_t nk = std::min(kTk, k_end - k0), nkp = round_up(nk, kKeyPad);
    if (explicit_mask && !mask_tile_any_visible(pr, q0, nq, k0, nk)) continue;
    for (int64_t j = 0; j < nk; ++j) {
      krow[j] = pr.row(pr.k, k0 + j);
      vrow[j] = pr.row(pr.v, k0 + j);
    }
    for (int64_t j = nk; j < nkp; ++j) krow[j] = sc.zero;
    ops.score(krow, sc.qt, sc.s, nkp, nqp, Dh);
    if (explicit_mask || (positional && k0 + nk > all_visible_below)) apply_mask(pr, sc.s, q0, nq, k0, nk);
    online_softmax(sc, nk, nqp);
    for (int64_t i = 0; i < nqp; ++i) {
      const float a = sc.alpha[i];
      if (a == 1.0f) continue;
      float* o = sc.o + i * Dhp;
      const __m256 av = _mm256_set1_ps(a);
      for (int64_t d = 0; d < Dhp; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(av, _mm256_loadu_ps(o + d)));
    }
    ops.accumulate(sc.s, vrow, sc.o, nk, nqp, Dh, Dhp);
  }
  for (int64_t i = 0; i < nq; ++i) {
    float* dst = pr.out + (q0 + i) * pr.out_row;
    const float* o = sc.o + i * Dhp;
    if (sc.l[i] > 0) {
      const float inv = 1.0f / sc.l[i];
      for (int64_t d = 0; d < Dh; ++d) dst[d] = o[d] * inv;
    } else {
      std::memset(dst, 0, sizeof(float) * Dh);
    }
  }
}

}  // namespace

bool allow_avx512_old(bool allowed) {
  g_avx512_allowed.store(allowed);
  return allowed && cpu_has_avx512();
}

size_t workspace_bytes_per_thread_old(int64_t Dh) { return slot_bytes(Dh) + kAlign; }

Status run_attention(const Params& p, const Geometry& g, std::span<const TensorView> in,
                     std::span<const TensorView> out, void* workspace, int slots) {
  const int64_t q_tiles = (g.Sq + kTq - 1) / kTq;
  const int64_t work = g.B * g.H * q_tiles;
  if (work > 0 && g.Dh > 0) {
    if (!workspace || slots < 1) return Internal("kiln::Attention: run without its workspace");
    const size_t stride = slot_bytes(g.Dh);
    char* base = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(workspace), kAlign));
    const RowStrides qs = row_strides(p.layout, g.Sq, g.H, g.Dh);
    const RowStrides ks = row_strides(p.layout, g.Sk_new, g.H, g.Dh);
    const RowStrides cs = row_strides(p.layout, g.Sc, g.H, g.Dh);
    const int threads = static_cast<int>(std::min<int64_t>({slots, omp_get_max_threads(), work}));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t w = 0; w < work; ++w) {
      const int64_t bh = w / q_tiles, b = bh / g.H, h = bh % g.H;
      Problem pr;
      pr.p = &p;
      pr.g = &g;
      pr.q = in[kQ].as<const float>() + b * qs.batch + h * qs.head;
      pr.q_row = qs.row;
      pr.out = out[0].as<float>() + b * qs.batch + h * qs.head;
      pr.out_row = qs.row;
      auto cache_origin = [&](int t) -> const float* {
        return p.kv_cache ? in[kKCache + t].as<const float>() + b * cs.batch + h * cs.head : nullptr;
      };
      pr.k[0] = cache_origin(0);
      pr.v[0] = cache_origin(1);
      pr.k[1] = in[kK].as<const float>() + b * ks.batch + h * ks.head;
      pr.v[1] = in[kV].as<const float>() + b * ks.batch + h * ks.head;
      pr.kv_row[0] = cs.row;
      pr.kv_row[1] = ks.row;
      pr.mask = nullptr;
      if (p.mask == MaskKind::kBool || p.mask == MaskKind::kAdditive) {
        const int64_t off = b * g.mask_stride[0] + h * g.mask_stride[1];
        pr.mask = p.mask == MaskKind::kBool ? static_cast<const void*>(in[kMask].as<const bool>() + off)
                                            : static_cast<const void*>(in[kMask].as<const float>() + off);
      }
      query_tile(pr, carve(base + stride * omp_get_thread_num(), g.Dh), (w % q_tiles) * kTq);
    }
  }
  if (p.kv_cache) append_kv(p, g, in, out);
  return Status::Ok();
}

}  // namespace kiln::attention
