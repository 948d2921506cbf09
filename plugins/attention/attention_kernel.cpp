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

namespace kiln::attention {
namespace {

// Query rows and keys per tile: one tile's scores, Q, K and V stay in L2 for Dh up to ~128.
constexpr int64_t kTq = 64;
constexpr int64_t kTk = 64;
// Tiles are padded to whole register blocks of the micro-kernels (8 rows, 32 columns).
constexpr int64_t kRowPad = 8;
constexpr int64_t kColPad = 32;
constexpr size_t kAlign = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
size_t aligned_floats(int64_t n) { return round_up(n * static_cast<int64_t>(sizeof(float)), kAlign); }

// One thread's scratch, carved from its workspace slot.
struct Scratch {
  float* q;    // [kTq, Dh]    the query tile times scale (rows past the tile are zero)
  float* kt;   // [Dh, kTk]    the key tile transposed (columns past the tile are zero)
  float* v;    // [kTk, Dhp]   the value tile (columns past Dh are zero)
  float* s;    // [kTq, kTk]   scores, then probabilities
  float* o;    // [kTq, Dhp]   unnormalized output accumulator
  float* m;    // [kTq]        running max per row
  float* l;    // [kTq]        running sum per row
};

int64_t padded_dh(int64_t Dh) { return round_up(std::max<int64_t>(Dh, 1), kColPad); }

size_t slot_bytes(int64_t Dh) {
  const int64_t Dhp = padded_dh(Dh);
  return aligned_floats(kTq * Dh) + aligned_floats(Dh * kTk) + aligned_floats(kTk * Dhp) + aligned_floats(kTq * kTk) +
         aligned_floats(kTq * Dhp) + 2 * aligned_floats(kTq);
}

Scratch carve(void* base, int64_t Dh) {
  const int64_t Dhp = padded_dh(Dh);
  char* p = static_cast<char*>(base);
  auto take = [&](int64_t n) {
    float* f = reinterpret_cast<float*>(p);
    p += aligned_floats(n);
    return f;
  };
  Scratch s;
  s.q = take(kTq * Dh);
  s.kt = take(Dh * kTk);
  s.v = take(kTk * Dhp);
  s.s = take(kTq * kTk);
  s.o = take(kTq * Dhp);
  s.m = take(kTq);
  s.l = take(kTq);
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

inline float hmax8(__m256 v) {
  __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_max_ps(a, _mm_movehl_ps(a, a));
  a = _mm_max_ss(a, _mm_shuffle_ps(a, a, 1));
  return _mm_cvtss_f32(a);
}

inline float hsum8(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
  return _mm_cvtss_f32(a);
}

// s[0:rows, 0:cols] = q[0:rows, 0:Dh] * kt[0:Dh, 0:cols]; rows % 4 == 0, cols % 16 == 0.
void score_tile_avx2(const float* q, const float* kt, float* s, int64_t rows, int64_t cols, int64_t Dh) {
  for (int64_t i = 0; i < rows; i += 4) {
    const float* a = q + i * Dh;
    for (int64_t j = 0; j < cols; j += 16) {
      __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
      const float* b = kt + j;
      for (int64_t d = 0; d < Dh; ++d) {
        const __m256 b0 = _mm256_loadu_ps(b + d * kTk), b1 = _mm256_loadu_ps(b + d * kTk + 8);
        __m256 x = _mm256_broadcast_ss(a + d);
        c00 = _mm256_fmadd_ps(x, b0, c00);
        c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(a + Dh + d);
        c10 = _mm256_fmadd_ps(x, b0, c10);
        c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(a + 2 * Dh + d);
        c20 = _mm256_fmadd_ps(x, b0, c20);
        c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(a + 3 * Dh + d);
        c30 = _mm256_fmadd_ps(x, b0, c30);
        c31 = _mm256_fmadd_ps(x, b1, c31);
      }
      float* out = s + i * kTk + j;
      _mm256_storeu_ps(out, c00);
      _mm256_storeu_ps(out + 8, c01);
      _mm256_storeu_ps(out + kTk, c10);
      _mm256_storeu_ps(out + kTk + 8, c11);
      _mm256_storeu_ps(out + 2 * kTk, c20);
      _mm256_storeu_ps(out + 2 * kTk + 8, c21);
      _mm256_storeu_ps(out + 3 * kTk, c30);
      _mm256_storeu_ps(out + 3 * kTk + 8, c31);
    }
  }
}

// o[0:rows, 0:Dhp] += s[0:rows, 0:keys] * v[0:keys, 0:Dhp]; rows % 4 == 0, Dhp % 16 == 0.
void accumulate_tile_avx2(const float* s, const float* v, float* o, int64_t rows, int64_t keys, int64_t Dhp) {
  for (int64_t i = 0; i < rows; i += 4) {
    const float* p = s + i * kTk;
    for (int64_t d = 0; d < Dhp; d += 16) {
      float* out = o + i * Dhp + d;
      __m256 c00 = _mm256_loadu_ps(out), c01 = _mm256_loadu_ps(out + 8);
      __m256 c10 = _mm256_loadu_ps(out + Dhp), c11 = _mm256_loadu_ps(out + Dhp + 8);
      __m256 c20 = _mm256_loadu_ps(out + 2 * Dhp), c21 = _mm256_loadu_ps(out + 2 * Dhp + 8);
      __m256 c30 = _mm256_loadu_ps(out + 3 * Dhp), c31 = _mm256_loadu_ps(out + 3 * Dhp + 8);
      const float* b = v + d;
      for (int64_t j = 0; j < keys; ++j) {
        const __m256 b0 = _mm256_loadu_ps(b + j * Dhp), b1 = _mm256_loadu_ps(b + j * Dhp + 8);
        __m256 x = _mm256_broadcast_ss(p + j);
        c00 = _mm256_fmadd_ps(x, b0, c00);
        c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(p + kTk + j);
        c10 = _mm256_fmadd_ps(x, b0, c10);
        c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(p + 2 * kTk + j);
        c20 = _mm256_fmadd_ps(x, b0, c20);
        c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(p + 3 * kTk + j);
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

// AVX-512 versions of the two products, 8 rows by 32 columns per register block (16
// accumulators); chosen at run time when the CPU has AVX-512F.
__attribute__((target("avx512f"))) void score_tile_avx512(const float* q, const float* kt, float* s, int64_t rows,
                                                          int64_t cols, int64_t Dh) {
  for (int64_t i = 0; i < rows; i += 8) {
    const float* a = q + i * Dh;
    for (int64_t j = 0; j < cols; j += 32) {
      __m512 c[8][2];
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) c[r][0] = c[r][1] = _mm512_setzero_ps();
      const float* b = kt + j;
      for (int64_t d = 0; d < Dh; ++d) {
        const __m512 b0 = _mm512_loadu_ps(b + d * kTk), b1 = _mm512_loadu_ps(b + d * kTk + 16);
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) {
          const __m512 x = _mm512_set1_ps(a[r * Dh + d]);
          c[r][0] = _mm512_fmadd_ps(x, b0, c[r][0]);
          c[r][1] = _mm512_fmadd_ps(x, b1, c[r][1]);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        _mm512_storeu_ps(s + (i + r) * kTk + j, c[r][0]);
        _mm512_storeu_ps(s + (i + r) * kTk + j + 16, c[r][1]);
      }
    }
  }
}

__attribute__((target("avx512f"))) void accumulate_tile_avx512(const float* s, const float* v, float* o,
                                                               int64_t rows, int64_t keys, int64_t Dhp) {
  for (int64_t i = 0; i < rows; i += 8) {
    const float* p = s + i * kTk;
    for (int64_t d = 0; d < Dhp; d += 32) {
      float* out = o + i * Dhp + d;
      __m512 c[8][2];
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        c[r][0] = _mm512_loadu_ps(out + r * Dhp);
        c[r][1] = _mm512_loadu_ps(out + r * Dhp + 16);
      }
      const float* b = v + d;
      for (int64_t j = 0; j < keys; ++j) {
        const __m512 b0 = _mm512_loadu_ps(b + j * Dhp), b1 = _mm512_loadu_ps(b + j * Dhp + 16);
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) {
          const __m512 x = _mm512_set1_ps(p[r * kTk + j]);
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

struct TileOps {
  void (*score)(const float*, const float*, float*, int64_t, int64_t, int64_t);
  void (*accumulate)(const float*, const float*, float*, int64_t, int64_t, int64_t);
};

bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

std::atomic<bool> g_avx512_allowed{true};

TileOps tile_ops() {
  if (g_avx512_allowed.load(std::memory_order_relaxed) && cpu_has_avx512())
    return TileOps{score_tile_avx512, accumulate_tile_avx512};
  return TileOps{score_tile_avx2, accumulate_tile_avx2};
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

  const float* key(int t, int64_t j) const {
    const float* const* base = t == 0 ? k : v;
    return j < g->Sc ? base[0] + j * kv_row[0] : base[1] + (j - g->Sc) * kv_row[1];
  }
  bool mask_visible(int64_t i, int64_t j) const {
    const int64_t off = i * g->mask_stride[2] + j * g->mask_stride[3];
    if (p->mask == MaskKind::kBool) return static_cast<const bool*>(mask)[off];
    return static_cast<const float*>(mask)[off] != kNegInf;
  }
};

// Whether any (row, key) of the tile is visible under an explicit mask.
bool mask_tile_any_visible(const Problem& pr, int64_t q0, int64_t nq, int64_t k0, int64_t nk) {
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j)
      if (pr.mask_visible(q0 + i, k0 + j)) return true;
  return false;
}

void apply_mask(const Problem& pr, float* s, int64_t q0, int64_t nq, int64_t k0, int64_t nk) {
  const Params& p = *pr.p;
  const Geometry& g = *pr.g;
  for (int64_t i = 0; i < nq; ++i) {
    float* row = s + i * kTk;
    if (p.mask == MaskKind::kCausal || p.mask == MaskKind::kBlockCausal) {
      const int64_t lim = visible_limit(p, g.query_offset() + q0 + i) - k0;
      for (int64_t j = std::max<int64_t>(lim, 0); j < nk; ++j) row[j] = kNegInf;
    } else if (p.mask == MaskKind::kBool) {
      const bool* m = static_cast<const bool*>(pr.mask) + (q0 + i) * g.mask_stride[2] + k0 * g.mask_stride[3];
      for (int64_t j = 0; j < nk; ++j)
        if (!m[j * g.mask_stride[3]]) row[j] = kNegInf;
    } else {
      const float* m = static_cast<const float*>(pr.mask) + (q0 + i) * g.mask_stride[2] + k0 * g.mask_stride[3];
      for (int64_t j = 0; j < nk; ++j) row[j] += m[j * g.mask_stride[3]];
    }
  }
}

// Folds one tile of scores into the running max/sum of each row and turns them into
// probabilities relative to the new max; rescales the accumulator rows.
void online_softmax(const Scratch& sc, int64_t nq, int64_t nqp, int64_t nk, int64_t nkp, int64_t Dhp) {
  for (int64_t i = 0; i < nq; ++i) {
    float* row = sc.s + i * kTk;
    for (int64_t j = nk; j < nkp; ++j) row[j] = kNegInf;
    __m256 mx = _mm256_set1_ps(kNegInf);
    for (int64_t j = 0; j < nkp; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(row + j));
    const float m_new = std::max(sc.m[i], hmax8(mx));
    if (m_new == kNegInf) {  // nothing visible yet in this row
      std::memset(row, 0, sizeof(float) * nkp);
      continue;
    }
    const __m256 mv = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < nkp; j += 8) {
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), mv));
      _mm256_storeu_ps(row + j, e);
      sum = _mm256_add_ps(sum, e);
    }
    const float alpha = std::exp(sc.m[i] - m_new);
    sc.l[i] = sc.l[i] * alpha + hsum8(sum);
    sc.m[i] = m_new;
    if (alpha != 1.0f) {
      float* o = sc.o + i * Dhp;
      const __m256 av = _mm256_set1_ps(alpha);
      for (int64_t d = 0; d < Dhp; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(av, _mm256_loadu_ps(o + d)));
    }
  }
  for (int64_t i = nq; i < nqp; ++i) std::memset(sc.s + i * kTk, 0, sizeof(float) * nkp);
}

void query_tile(const Problem& pr, const Scratch& sc, int64_t q0) {
  const TileOps ops = tile_ops();
  const Params& p = *pr.p;
  const Geometry& g = *pr.g;
  const int64_t Dh = g.Dh, Dhp = padded_dh(Dh);
  const int64_t nq = std::min(kTq, g.Sq - q0), nqp = round_up(nq, kRowPad);
  for (int64_t i = 0; i < nq; ++i) {
    const float* src = pr.q + (q0 + i) * pr.q_row;
    for (int64_t d = 0; d < Dh; ++d) sc.q[i * Dh + d] = src[d] * p.scale;
  }
  std::memset(sc.q + nq * Dh, 0, sizeof(float) * (nqp - nq) * Dh);
  std::memset(sc.o, 0, sizeof(float) * nqp * Dhp);
  std::fill(sc.m, sc.m + nq, kNegInf);
  std::fill(sc.l, sc.l + nq, 0.0f);

  const bool positional = p.mask == MaskKind::kCausal || p.mask == MaskKind::kBlockCausal;
  const bool explicit_mask = p.mask == MaskKind::kBool || p.mask == MaskKind::kAdditive;
  // With a positional mask, keys at or past the last row's limit are hidden from the whole tile
  // and keys below the first row's limit are visible to all of it.
  int64_t k_end = g.Sk_total(), all_visible_below = k_end;
  if (positional) {
    k_end = std::clamp<int64_t>(visible_limit(p, g.query_offset() + q0 + nq - 1), 0, k_end);
    all_visible_below = visible_limit(p, g.query_offset() + q0);
  }
  for (int64_t k0 = 0; k0 < k_end; k0 += kTk) {
    const int64_t nk = std::min(kTk, k_end - k0), nkp = round_up(nk, kColPad);
    if (explicit_mask && !mask_tile_any_visible(pr, q0, nq, k0, nk)) continue;
    for (int64_t j = 0; j < nk; ++j) {
      const float* kr = pr.key(0, k0 + j);
      for (int64_t d = 0; d < Dh; ++d) sc.kt[d * kTk + j] = kr[d];
      const float* vr = pr.key(1, k0 + j);
      float* vd = sc.v + j * Dhp;
      std::memcpy(vd, vr, sizeof(float) * Dh);
      std::memset(vd + Dh, 0, sizeof(float) * (Dhp - Dh));
    }
    if (nk < nkp)
      for (int64_t d = 0; d < Dh; ++d) std::memset(sc.kt + d * kTk + nk, 0, sizeof(float) * (nkp - nk));
    ops.score(sc.q, sc.kt, sc.s, nqp, nkp, Dh);
    if (explicit_mask || (positional && k0 + nk > all_visible_below)) apply_mask(pr, sc.s, q0, nq, k0, nk);
    online_softmax(sc, nq, nqp, nk, nkp, Dhp);
    ops.accumulate(sc.s, sc.v, sc.o, nqp, nk, Dhp);
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

bool allow_avx512(bool allowed) {
  g_avx512_allowed.store(allowed);
  return allowed && cpu_has_avx512();
}

size_t workspace_bytes_per_thread(int64_t Dh) { return slot_bytes(Dh) + kAlign; }

Status run_attention(const Params& p, const Geometry& g, std::span<const TensorView> in,
                     std::span<const TensorView> out, void* workspace, int slots) {
  const int64_t q_tiles = (g.Sq + kTq - 1) / kTq;
  const int64_t work = g.B * g.H * q_tiles;
  if (work > 0 && g.Dh > 0) {
    if (!workspace || slots < 1) return Internal("kiln::Attention: run without its workspace");
    const size_t stride = round_up(static_cast<int64_t>(slot_bytes(g.Dh)), kAlign);
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
