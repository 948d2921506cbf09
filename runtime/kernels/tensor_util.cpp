#include "runtime/kernels/tensor_util.h"

#include <immintrin.h>

#include <algorithm>

#include "runtime/thread_pool.h"

namespace kiln {

namespace {

// Below this many elements a copy is not worth waking threads for.
constexpr int64_t kParallelElements = int64_t{1} << 16;

// Copies rows of the innermost dim; each row is contiguous in dst, strided (or contiguous) in src.
template <typename T>
void copy_rows(T* dst, const T* src, int r, const int64_t* dims, const int64_t* st, int64_t total) {
  const int64_t row = dims[r - 1], rs = st[r - 1];
  const int64_t rows = total / row;
  auto body = [&](int64_t r0, int64_t r1) {
    int64_t idx[kMaxViewRank];
    int64_t off = 0, q = r0;
    for (int d = r - 2; d >= 0; --d) {
      idx[d] = q % dims[d];
      q /= dims[d];
      off += idx[d] * st[d];
    }
    T* o = dst + r0 * row;
    for (int64_t k = r0; k < r1; ++k, o += row) {
      const T* s = src + off;
      if (rs == 1) std::memcpy(o, s, static_cast<size_t>(row) * sizeof(T));
      else if (rs == 0) std::fill(o, o + row, *s);
      else
        for (int64_t j = 0; j < row; ++j) o[j] = s[j * rs];
      for (int d = r - 2; d >= 0; --d) {
        off += st[d];
        if (++idx[d] < dims[d]) break;
        off -= st[d] * dims[d];
        idx[d] = 0;
      }
    }
  };
  if (total < kParallelElements || rows == 1) {
    body(0, rows);
    return;
  }
  ThreadPool::global().parallel_for(rows, LoopCost{2.0 * static_cast<double>(row * sizeof(T)), 0},
                                     [&](int64_t r0, int64_t r1, int) { body(r0, r1); });
}

#ifdef __AVX2__
// d[i][k] = s[k][i] for an 8 x 8 block of 4-byte elements (moved as bits: any 4-byte dtype).
template <typename T>
inline void transpose8x8(const T* s, int64_t sld, T* d, int64_t dld) {
  const float* sf = reinterpret_cast<const float*>(s);
  float* df = reinterpret_cast<float*>(d);
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(sf + i * sld);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(df + i * dld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(df + (i + 4) * dld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}
#endif

// Transposes with the source's unit-stride dim J moving away from the innermost position: copies
// in square tiles so that both the strided reads and the contiguous writes stay in cache.
template <typename T>
void copy_tiled(T* dst, const T* src, int r, const int64_t* dims, const int64_t* st, int J, int64_t total) {
  constexpr int64_t kTile = 16;
  int64_t ost[kMaxViewRank];
  int64_t acc = 1;
  for (int d = r - 1; d >= 0; --d) {
    ost[d] = acc;
    acc *= dims[d];
  }
  const int L = r - 1;
  const int64_t nJ = dims[J], nL = dims[L], sL = st[L], oJ = ost[J];
  const int64_t jblocks = (nJ + kTile - 1) / kTile;
  const int64_t outer = total / (nJ * nL);
  const int64_t work = outer * jblocks;
  auto tile = [&](int64_t w) {
    int64_t q = w / jblocks;
    const int64_t j0 = (w % jblocks) * kTile, j1 = std::min(nJ, j0 + kTile);
    int64_t ioff = 0, ooff = 0;
    for (int d = L - 1; d >= 0; --d) {
      if (d == J) continue;
      const int64_t i = q % dims[d];
      q /= dims[d];
      ioff += i * st[d];
      ooff += i * ost[d];
    }
    for (int64_t l0 = 0; l0 < nL; l0 += kTile) {
      const int64_t l1 = std::min(nL, l0 + kTile);
      int64_t jv = j0;
#ifdef __AVX2__
      if constexpr (sizeof(T) == 4) {
        // Whole 8 x 8 blocks in registers: 8 contiguous reads and 8 contiguous writes each.
        for (; jv + 8 <= j1; jv += 8) {
          int64_t l = l0;
          for (; l + 8 <= l1; l += 8) transpose8x8(src + ioff + jv + l * sL, sL, dst + ooff + jv * oJ + l, oJ);
          for (; l < l1; ++l)
            for (int64_t j = jv; j < jv + 8; ++j) dst[ooff + j * oJ + l] = src[ioff + j + l * sL];
        }
      }
#endif
      for (int64_t j = jv; j < j1; ++j) {
        const T* s = src + ioff + j;
        T* o = dst + ooff + j * oJ;
        for (int64_t l = l0; l < l1; ++l) o[l] = s[l * sL];
      }
    }
  };
  if (total < kParallelElements) {
    for (int64_t w = 0; w < work; ++w) tile(w);
    return;
  }
  parallel_for_each(work, LoopCost{2.0 * static_cast<double>(total / std::max<int64_t>(work, 1) * sizeof(T)), 0}, tile);
}

template <typename T>
void copy_strided_typed(T* dst, const T* src, int r, const int64_t* dims, const int64_t* st, int64_t total) {
  if (st[r - 1] != 1 && st[r - 1] != 0 && dims[r - 1] >= 4) {
    for (int j = 0; j < r - 1; ++j)
      if (st[j] == 1 && dims[j] >= 4) return copy_tiled(dst, src, r, dims, st, j, total);
  }
  copy_rows(dst, src, r, dims, st, total);
}

}  // namespace

void copy_strided(void* dst, const void* src, int rank, const int64_t* dims_in, const int64_t* strides_in,
                  size_t elem_size) {
  int64_t total = 1;
  for (int i = 0; i < rank; ++i) total *= dims_in[i];
  if (total == 0) return;
  // Drop unit dims and merge dims that are contiguous in the source too, so the inner loops run long.
  int64_t dims[kMaxViewRank], st[kMaxViewRank];
  int r = 0;
  for (int i = 0; i < rank; ++i) {
    if (dims_in[i] == 1) continue;
    if (r > 0 && st[r - 1] == strides_in[i] * dims_in[i]) {
      dims[r - 1] *= dims_in[i];
      st[r - 1] = strides_in[i];
    } else {
      dims[r] = dims_in[i];
      st[r] = strides_in[i];
      ++r;
    }
  }
  if (r == 0) {
    std::memcpy(dst, src, elem_size);
    return;
  }
  switch (elem_size) {
    case 1: return copy_strided_typed(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), r, dims, st, total);
    case 2: return copy_strided_typed(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), r, dims, st, total);
    case 4: return copy_strided_typed(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), r, dims, st, total);
    case 8: return copy_strided_typed(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(src), r, dims, st, total);
    default: break;
  }
}

Status read_small_ints(const TensorView& v, int64_t* out, int max, int* n, const char* what) {
  if (v.dtype != DType::kInt64 && v.dtype != DType::kInt32)
    return InvalidArgument(std::string(what) + " must be int32 or int64, got " + dtype_name(v.dtype));
  if (v.shape.rank() > 1)
    return InvalidArgument(std::string(what) + " must be 1-D, got shape " + v.shape.str());
  const int64_t count = v.numel();
  if (count > max)
    return InvalidArgument(std::string(what) + " has " + std::to_string(count) + " elements, at most " +
                           std::to_string(max) + " allowed");
  if (count > 0 && v.data == nullptr) return InvalidArgument(std::string(what) + " has no data");
  for (int64_t i = 0; i < count; ++i) out[i] = read_int(v, i);
  *n = static_cast<int>(count);
  return Status::Ok();
}

Status read_scalar_int(const TensorView& v, int64_t* out, const char* what) {
  if (v.numel() != 1)
    return InvalidArgument(std::string(what) + " must have exactly one element, got shape " + v.shape.str());
  if (!dtype_is_integer(v.dtype) && !dtype_is_float(v.dtype))
    return InvalidArgument(std::string(what) + " must be numeric, got " + dtype_name(v.dtype));
  if (v.data == nullptr) return InvalidArgument(std::string(what) + " has no data");
  *out = read_int(v, 0);
  return Status::Ok();
}

Status store_double(DType dt, void* p, double v) {
  if (dt == DType::kFloat16) {
    const uint16_t h = float_to_half(static_cast<float>(v));
    std::memcpy(p, &h, 2);
    return Status::Ok();
  }
  if (dt == DType::kBFloat16) {
    const uint16_t h = float_to_bf16(static_cast<float>(v));
    std::memcpy(p, &h, 2);
    return Status::Ok();
  }
  return dispatch_numeric(dt, [&](auto t) {
    using T = decltype(t);
    *static_cast<T*>(p) = static_cast<T>(v);
    return Status::Ok();
  });
}

}  // namespace kiln
