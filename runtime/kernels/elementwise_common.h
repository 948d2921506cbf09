// Private helpers of the elementwise kernel family: dtype masks and dispatch (including the 16-bit
// float storage types, which compute in float), and the broadcast loop machinery shared by unary,
// binary, variadic and ternary kernels.
//
// Broadcast loops work on a "plan": the output shape with size-1 dims dropped and adjacent dims
// merged wherever every operand is contiguous across them. Same-shape operands collapse to one
// dim, a scalar operand gets stride 0, and [B,S,D] + [D] becomes [B*S, D] with the [D] operand
// at strides {0, 1}. The innermost dim then always has stride 0 or 1 in every operand, so the
// inner loops are plain contiguous loops the compiler vectorizes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include <omp.h>

#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/vec_kernels.h"
#include "runtime/thread_pool.h"

namespace kiln {

// Family sub-tables, called from register_elementwise_kernels.
void register_elementwise_unary_kernels(KernelRegistry& r);   // math functions, activations, IsNaN/IsInf/Not
void register_elementwise_binary_kernels(KernelRegistry& r);  // arithmetic, compare, logic, Pow, Mod, PRelu, Max/Min/Sum/Mean
void register_elementwise_cast_kernels(KernelRegistry& r);    // Cast, CastLike
void register_fused_elementwise_kernels(KernelRegistry& r);  // kiln::FusedElementwise

namespace ew {

// Above this many output elements loops run in parallel; below it thread start-up costs more than it saves.
constexpr int64_t kParallelThreshold = int64_t{1} << 15;

// ---- dtype masks ----------------------------------------------------------------------------

constexpr uint32_t bit(DType t) { return 1u << static_cast<int>(t); }
constexpr uint32_t kFloatTypes = bit(DType::kFloat32) | bit(DType::kFloat64) | bit(DType::kFloat16) | bit(DType::kBFloat16);
constexpr uint32_t kSignedIntTypes = bit(DType::kInt8) | bit(DType::kInt16) | bit(DType::kInt32) | bit(DType::kInt64);
constexpr uint32_t kUnsignedIntTypes = bit(DType::kUInt8) | bit(DType::kUInt16) | bit(DType::kUInt32) | bit(DType::kUInt64);
constexpr uint32_t kIntTypes = kSignedIntTypes | kUnsignedIntTypes;
constexpr uint32_t kNumericTypes = kFloatTypes | kIntTypes;
constexpr uint32_t kBoolType = bit(DType::kBool);
constexpr uint32_t kAllTypes = kNumericTypes | kBoolType;

template <typename T>
constexpr uint32_t type_bit = bit(DTypeOf<T>::value);

inline std::string type_list(uint32_t mask) {
  std::string s;
  for (int code = 0; code < 32; ++code)
    if (mask & (1u << code)) s += (s.empty() ? "" : ", ") + dtype_name(static_cast<DType>(code));
  return s;
}

// Validates the dtype of input `index` against `mask`. String tensors get Unimplemented because
// kiln cannot store them at all; any other dtype outside the op's type constraint is invalid.
inline Status check_dtype(uint32_t mask, DType dt, int index) {
  if (dt == DType::kString)
    return Unimplemented("input " + std::to_string(index) + " has dtype string, which kiln does not support");
  if (static_cast<int>(dt) < 0 || static_cast<int>(dt) >= 32 || !(mask & bit(dt)))
    return InvalidArgument("input " + std::to_string(index) + " has dtype " + dtype_name(dt) + "; expected one of " +
                           type_list(mask));
  return Status::Ok();
}

inline Status check_output_count(std::span<TensorDesc> out, size_t n) {
  if (out.size() != n)
    return InvalidArgument("expects " + std::to_string(n) + " output(s), got " + std::to_string(out.size()));
  return Status::Ok();
}

// Calls f(T{}) for the C++ storage type T of `dt` when `Mask` admits it; T is Half or BFloat16 for
// the 16-bit floats. Other dtypes never reach here because infer() checked them, hence Internal.
template <uint32_t Mask, typename F>
Status dispatch_types(DType dt, F&& f) {
#define KILN_EW_CASE(CODE, TYPE)             \
  case DType::CODE:                          \
    if constexpr ((Mask & type_bit<TYPE>) != 0) \
      return f(TYPE{});                      \
    else                                     \
      break;
  switch (dt) {
    KILN_EW_CASE(kFloat32, float)
    KILN_EW_CASE(kFloat64, double)
    KILN_EW_CASE(kFloat16, Half)
    KILN_EW_CASE(kBFloat16, BFloat16)
    KILN_EW_CASE(kInt8, int8_t)
    KILN_EW_CASE(kInt16, int16_t)
    KILN_EW_CASE(kInt32, int32_t)
    KILN_EW_CASE(kInt64, int64_t)
    KILN_EW_CASE(kUInt8, uint8_t)
    KILN_EW_CASE(kUInt16, uint16_t)
    KILN_EW_CASE(kUInt32, uint32_t)
    KILN_EW_CASE(kUInt64, uint64_t)
    KILN_EW_CASE(kBool, bool)
    default: break;
  }
#undef KILN_EW_CASE
  return Internal("dtype " + dtype_name(dt) + " reached an elementwise loop that was not built for it");
}

// ---- element access: 16-bit floats compute in float ---------------------------------------------

template <typename T>
struct Elem {
  using C = T;
  static C load(T v) { return v; }
  static T store(C v) { return v; }
};
template <>
struct Elem<Half> {
  using C = float;
  static float load(Half v) { return half_to_float(v.bits); }
  static Half store(float v) { return Half{float_to_half(v)}; }
};
template <>
struct Elem<BFloat16> {
  using C = float;
  static float load(BFloat16 v) { return bf16_to_float(v.bits); }
  static BFloat16 store(float v) { return BFloat16{float_to_bf16(v)}; }
};

// Stores an op's result into an output element of type O; bool results (compare, IsNaN) go as is.
template <typename O, typename V>
inline O store_as(V v) {
  if constexpr (std::is_same_v<O, bool>) return static_cast<bool>(v);
  else return Elem<O>::store(static_cast<typename Elem<O>::C>(v));
}

// Two's-complement wrap-around for signed integers, as numpy does, instead of undefined overflow.
template <typename C>
inline C wrap_add(C a, C b) {
  if constexpr (std::is_integral_v<C> && std::is_signed_v<C> && sizeof(C) >= sizeof(int))
    return static_cast<C>(static_cast<std::make_unsigned_t<C>>(a) + static_cast<std::make_unsigned_t<C>>(b));
  else return static_cast<C>(a + b);
}
template <typename C>
inline C wrap_sub(C a, C b) {
  if constexpr (std::is_integral_v<C> && std::is_signed_v<C> && sizeof(C) >= sizeof(int))
    return static_cast<C>(static_cast<std::make_unsigned_t<C>>(a) - static_cast<std::make_unsigned_t<C>>(b));
  else return static_cast<C>(a - b);
}
template <typename C>
inline C wrap_mul(C a, C b) {
  if constexpr (std::is_integral_v<C> && std::is_signed_v<C> && sizeof(C) >= sizeof(int))
    return static_cast<C>(static_cast<std::make_unsigned_t<C>>(a) * static_cast<std::make_unsigned_t<C>>(b));
  else if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool> && sizeof(C) < sizeof(int))
    // Small types promote to int, whose product can overflow (uint16 * uint16); unsigned math wraps.
    return static_cast<C>(static_cast<unsigned>(a) * static_cast<unsigned>(b));
  else return static_cast<C>(a * b);
}

// ---- broadcast plans ------------------------------------------------------------------------

constexpr int kMaxOperands = 3;

struct LoopPlan {
  int rank = 0;  // >= 1 once built
  int nops = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxOperands][kMaxRank] = {};

  int64_t inner() const { return dims[rank - 1]; }
  // Element offset of every operand at the start of outer row `row`.
  void row_offsets(int64_t row, int64_t* off) const {
    for (int k = 0; k < nops; ++k) off[k] = 0;
    for (int d = rank - 2; d >= 0 && row > 0; --d) {
      const int64_t i = row % dims[d];
      row /= dims[d];
      for (int k = 0; k < nops; ++k) off[k] += i * strides[k][d];
    }
  }
};

// Builds the plan for reading operands of shapes `ins` broadcast to `out` (which must be their
// broadcast shape).
inline LoopPlan make_plan(const Shape& out, std::initializer_list<const Shape*> ins) {
  LoopPlan p;
  p.nops = static_cast<int>(ins.size());
  Shape st[kMaxOperands];
  int k = 0;
  for (const Shape* s : ins) st[k++] = broadcast_strides(*s, out);
  for (int d = 0; d < out.rank(); ++d) {
    if (out[d] == 1) continue;
    bool merge = p.rank > 0;
    for (int j = 0; j < p.nops && merge; ++j) merge = p.strides[j][p.rank - 1] == st[j][d] * out[d];
    if (merge) {
      p.dims[p.rank - 1] *= out[d];
      for (int j = 0; j < p.nops; ++j) p.strides[j][p.rank - 1] = st[j][d];
    } else {
      p.dims[p.rank] = out[d];
      for (int j = 0; j < p.nops; ++j) p.strides[j][p.rank] = st[j][d];
      ++p.rank;
    }
  }
  if (p.rank == 0) {  // every dim is 1: one element, offsets 0
    p.rank = 1;
    p.dims[0] = 1;
  }
  return p;
}

// Calls fn(out_offset, in_offsets, len) over contiguous runs of the output covering `total`
// elements, where in_offsets[k] is operand k's element offset at the run start and operand k
// advances by p.strides[k][p.rank - 1] (0 or 1) per element. Large outputs run in parallel; when
// there are few rows, rows are split into blocks so that one big row still spreads over threads.
template <typename F>
void for_each_run(const LoopPlan& p, int64_t total, F&& fn) {
  if (total == 0) return;
  const int64_t inner = p.inner();
  const int64_t rows = total / inner;
  const int last = p.rank - 1;
  auto body = [&](int64_t row, int64_t start, int64_t len) {
    int64_t off[kMaxOperands];
    p.row_offsets(row, off);
    for (int k = 0; k < p.nops; ++k) off[k] += start * p.strides[k][last];
    fn(row * inner + start, off, len);
  };
  if (total <= kParallelThreshold) {
    for (int64_t r = 0; r < rows; ++r) body(r, 0, inner);
    return;
  }
  // Short rows (a channel vector broadcast over pixels in a channels-inner layout: rows of 8) go
  // several to an item, so the pool's per-item cost is not paid every few elements.
  if (rows >= 64 && inner < 4096) {
    const int64_t rows_per_item = 4096 / inner;
    const int64_t items = (rows + rows_per_item - 1) / rows_per_item;
    parallel_for_each(items, LoopCost{12.0 * static_cast<double>(inner * rows_per_item), 0}, [&](int64_t it) {
      const int64_t r0 = it * rows_per_item, r1 = std::min(rows, r0 + rows_per_item);
      // The outer indices of row r0, then an odometer: no division per row.
      int64_t idx[kMaxRank] = {}, off[kMaxOperands] = {};
      for (int64_t d = last - 1, row = r0; d >= 0; --d) {
        idx[d] = row % p.dims[d];
        row /= p.dims[d];
        for (int k = 0; k < p.nops; ++k) off[k] += idx[d] * p.strides[k][d];
      }
      for (int64_t r = r0; r < r1; ++r) {
        fn(r * inner, off, inner);
        for (int d = last - 1; d >= 0; --d) {
          for (int k = 0; k < p.nops; ++k) off[k] += p.strides[k][d];
          if (++idx[d] < p.dims[d]) break;
          for (int k = 0; k < p.nops; ++k) off[k] -= p.strides[k][d] * p.dims[d];
          idx[d] = 0;
        }
      }
    });
    return;
  }
  const int64_t block = rows >= 64 ? inner : std::min(inner, std::max<int64_t>(4096, (total + 63) / 64 / rows));
  const int64_t per_row = (inner + block - 1) / block;
  const int64_t items = rows * per_row;
  parallel_for_each(items, LoopCost{12.0 * static_cast<double>(total) / static_cast<double>(items), 0}, [&](int64_t it) {
    const int64_t row = it / per_row, start = (it % per_row) * block;
    body(row, start, std::min(block, inner - start));
  });
}

// One contiguous run of a binary op: out[i] = op(a[i*sa], b[i*sb]) with sa, sb in {0, 1}. `n` may
// be a std::integral_constant: the loops then have a trip count known at compile time.
template <typename A, typename B, typename O, typename Op, typename N = int64_t>
inline void binary_run(const A* a, int64_t sa, const B* b, int64_t sb, O* o, N n, const Op& op) {
  if (sa && sb) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = store_as<O>(op(Elem<A>::load(a[i]), Elem<B>::load(b[i])));
  } else if (sa) {
    const auto y = Elem<B>::load(b[0]);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = store_as<O>(op(Elem<A>::load(a[i]), y));
  } else if (sb) {
    const auto x = Elem<A>::load(a[0]);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = store_as<O>(op(x, Elem<B>::load(b[i])));
  } else {  // only for a one-element output
    const auto v = store_as<O>(op(Elem<A>::load(a[0]), Elem<B>::load(b[0])));
    for (int64_t i = 0; i < n; ++i) o[i] = v;
  }
}

// A run where one operand (kRepA: a, else b) repeats its 8 values rep[0..8) along the run and the
// other is contiguous; `phase` is the run start's position in the period. The whole vectors go
// through binary_run with a compile-time 8, so the repeating one stays in a register.
template <bool kRepA, typename A, typename B, typename O, typename Op>
inline void binary_run_period8(const A* a, const B* b, O* o, int64_t n, int64_t phase, const Op& op) {
  auto one = [&](int64_t i) {
    const int64_t r = (phase + i) & 7;
    o[i] = store_as<O>(op(Elem<A>::load(kRepA ? a[r] : a[i]), Elem<B>::load(kRepA ? b[i] : b[r])));
  };
  int64_t i = 0;
  for (; i < n && ((phase + i) & 7) != 0; ++i) one(i);
  for (; i + 8 <= n; i += 8) {
    if constexpr (kRepA) binary_run(a, 1, b + i, 1, o + i, std::integral_constant<int64_t, 8>{}, op);
    else binary_run(a + i, 1, b, 1, o + i, std::integral_constant<int64_t, 8>{}, op);
  }
  for (; i < n; ++i) one(i);
}

// A run where one operand (kRepA: a, else b) repeats its C values rep[0..C) along the run and the
// other is contiguous; `phase` is the run start's position in the period. Whole periods go several
// at a time against the repeating values tiled into a block on the stack, so a run of short rows (an
// NHWC squeeze-excitation gate of 32 channels) is a few long vector loops, not a short one a pixel.
template <bool kRepA, typename A, typename B, typename O, typename Op>
inline void binary_run_period(const A* a, const B* b, O* o, int64_t n, int64_t phase, int64_t C, const Op& op) {
  using R = std::conditional_t<kRepA, A, B>;
  constexpr int64_t kTileBytes = 2048;
  const R* rep;
  if constexpr (kRepA) rep = a;
  else rep = b;
  // o[i, i + len) against `r`, len contiguous repeating values.
  auto seg = [&](int64_t i, const R* r, int64_t len) {
    if constexpr (kRepA) binary_run(r, 1, b + i, 1, o + i, len, op);
    else binary_run(a + i, 1, r, 1, o + i, len, op);
  };
  int64_t i = std::min(n, (C - phase) % C);
  if (i > 0) seg(0, rep + phase, i);
  const int64_t m = std::max<int64_t>(1, kTileBytes / static_cast<int64_t>(sizeof(R)) / C);
  if (m > 1 && n - i >= m * C) {
    R tile[kTileBytes / sizeof(R)];
    for (int64_t k = 0; k < m; ++k) std::copy(rep, rep + C, tile + k * C);
    for (; i + m * C <= n; i += m * C) seg(i, tile, m * C);
  }
  for (; i + C <= n; i += C) seg(i, rep, C);
  if (i < n) seg(i, rep, n - i);
}

// out = op(a, b) with numpy broadcasting; out's shape is the broadcast shape of a and b.
template <typename A, typename B, typename O, typename Op>
void binary_broadcast(const TensorView& a, const TensorView& b, const TensorView& out, const Op& op) {
  const LoopPlan p = make_plan(out.shape, {&a.shape, &b.shape});
  const A* pa = a.as<const A>();
  const B* pb = b.as<const B>();
  O* po = out.as<O>();
  const int64_t sa = p.strides[0][p.rank - 1], sb = p.strides[1][p.rank - 1];
  // A channel vector broadcast over pixels (squeeze-excitation's gate: nChw8c's x [N, C/8, H, W, 8]
  // * gate [N, C/8, 1, 1, 8], NHWC's x [N, H, W, C] * gate [N, 1, 1, C] with C up to 256): the pixel
  // dim merges into the rows, which the repeating operand reads with period C, so a run is a whole
  // block of pixels instead of one pixel.
  if (p.inner() >= 8 && p.inner() <= 256 && p.rank > 1 && sa == 1 && sb == 1) {
    const int d = p.rank - 2;
    const int64_t C = p.inner();
    const bool rep_a = p.strides[0][d] == 0 && p.strides[1][d] == C, rep_b = p.strides[1][d] == 0 && p.strides[0][d] == C;
    if (rep_a || rep_b) {
      LoopPlan q = p;
      q.rank = p.rank - 1;
      q.dims[d] = p.dims[d] * C;
      q.strides[0][d] = rep_a ? 0 : 1;  // the repeating operand's offset stays at the period's start
      q.strides[1][d] = rep_b ? 0 : 1;
      // Merged rows are multiples of C long: a run's phase in the period is its output offset's.
      // C 8 keeps its vector in a register; longer periods go against a tiled copy.
      for_each_run(q, out.numel(), [&](int64_t o, const int64_t* off, int64_t n) {
        if (C == 8 && rep_a) binary_run_period8<true>(pa + off[0], pb + off[1], po + o, n, o & 7, op);
        else if (C == 8) binary_run_period8<false>(pa + off[0], pb + off[1], po + o, n, o & 7, op);
        else if (rep_a) binary_run_period<true>(pa + off[0], pb + off[1], po + o, n, o % C, C, op);
        else binary_run_period<false>(pa + off[0], pb + off[1], po + o, n, o % C, C, op);
      });
      return;
    }
  }
  // Rows of 8 (a channel block broadcast over pixels, nChw8c): one vector per row, unrolled.
  if (p.inner() == 8 && p.rank > 1) {
    for_each_run(p, out.numel(), [&](int64_t o, const int64_t* off, int64_t) {
      binary_run(pa + off[0], sa, pb + off[1], sb, po + o, std::integral_constant<int64_t, 8>{}, op);
    });
    return;
  }
  for_each_run(p, out.numel(), [&](int64_t o, const int64_t* off, int64_t n) {
    binary_run(pa + off[0], sa, pb + off[1], sb, po + o, n, op);
  });
}

// y = op(x) over contiguous data.
template <typename T, typename O, typename Op>
void unary_apply(const T* x, O* y, int64_t n, const Op& op) {
  if (n > kParallelThreshold) {
    ThreadPool::global().parallel_for(n, int64_t{4096}, [&](int64_t b, int64_t e, int) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) y[i] = store_as<O>(op(Elem<T>::load(x[i])));
    });
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = store_as<O>(op(Elem<T>::load(x[i])));
  }
}

// y = f(x) over n contiguous floats through a vector loop of runtime/kernels/vec_kernels.h; large
// arrays split into blocks of 64 lanes on kiln's pool (not an OpenMP team, whose barrier waits for
// a descheduled thread: milliseconds per call on a shared machine).
inline void vec_apply(vec::UnaryFn f, const float* x, float* y, int64_t n, vec::Params p) {
  if (n <= kParallelThreshold) {
    f(x, y, n, p);
    return;
  }
  constexpr int64_t kBlock = 64;  // elements an item: whole vectors, so only the last block has a tail
  const int64_t items = (n + kBlock - 1) / kBlock;
  ThreadPool::global().parallel_for(items, LoopCost{8.0 * kBlock, 20.0 * kBlock}, [&](int64_t b, int64_t e, int) {
    const int64_t lo = b * kBlock, hi = std::min(n, e * kBlock);
    f(x + lo, y + lo, hi - lo, p);
  });
}

// Broadcast shape of all present inputs, with the failing input named.
inline StatusOr<Shape> broadcast_all(std::span<const TensorView> in) {
  Shape s = in[0].shape;
  for (size_t i = 1; i < in.size(); ++i) {
    auto r = broadcast_shapes(s, in[i].shape);
    if (!r.ok()) return r.status().with_context("input " + std::to_string(i));
    s = *r;
  }
  return s;
}

}  // namespace ew
}  // namespace kiln
