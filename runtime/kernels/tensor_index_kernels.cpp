// Index-driven ops: Gather, GatherElements, GatherND, ScatterElements, Scatter, ScatterND, OneHot,
// ReverseSequence. Indices may be negative (counted from the end); an index out of range fails the
// run with a message naming the index, its position and the valid range.
#include <algorithm>

#include "runtime/kernels/tensor_util.h"
#include "runtime/thread_pool.h"

namespace kiln {

namespace {

using KernelOr = StatusOr<std::unique_ptr<Kernel>>;

// Calls f(I{}) with the C++ type of an int32/int64 index tensor.
template <typename F>
Status dispatch_index(DType dt, F&& f) {
  if (dt == DType::kInt64) return f(int64_t{});
  return f(int32_t{});
}

Status index_error(int input, int64_t pos, int64_t value, int64_t dim) {
  return InvalidArgument("input " + std::to_string(input) + " index " + std::to_string(value) + " at position " +
                         std::to_string(pos) + " is out of range [" + std::to_string(-dim) + ", " +
                         std::to_string(dim) + ")");
}

// Normalizes a possibly negative index against `dim`; false when out of range.
inline bool fix_index(int64_t& i, int64_t dim) {
  if (i < 0) i += dim;
  return i >= 0 && i < dim;
}

// Advances a multi-index over `shape` in C order.
inline void next_index(int64_t* idx, const Shape& shape) {
  for (int d = shape.rank() - 1; d >= 0; --d) {
    if (++idx[d] < shape[d]) return;
    idx[d] = 0;
  }
}

// ---- Gather ----

KernelOr make_gather(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t axis_attr, attrs.get_int("axis", 0));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        KILN_RETURN_IF_ERROR(check_int_index_dtype(in[1], 1));
        const Shape& s = in[0].shape;
        const Shape& is = in[1].shape;
        if (s.rank() == 0) return InvalidArgument("input 0 is a scalar; Gather needs rank >= 1");
        KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_attr, s.rank()));
        const int rank = s.rank() - 1 + is.rank();
        if (rank > kMaxRank)
          return InvalidArgument("output rank " + std::to_string(rank) + " exceeds " + std::to_string(kMaxRank));
        out[0].dtype = in[0].dtype;
        out[0].shape = Shape{};
        for (int d = 0; d < axis; ++d) out[0].shape.push_back(s[d]);
        for (int d = 0; d < is.rank(); ++d) out[0].shape.push_back(is[d]);
        for (int d = axis + 1; d < s.rank(); ++d) out[0].shape.push_back(s[d]);
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        const Shape& s = in[0].shape;
        const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + s.rank() : axis_attr);
        const int64_t outer = s.numel(0, axis), dim = s[axis], n = in[1].numel();
        const size_t row = static_cast<size_t>(s.numel(axis + 1, s.rank())) * dtype_size(in[0].dtype);
        const char* src = static_cast<const char*>(in[0].data);
        char* dst = static_cast<char*>(out[0].data);
        return dispatch_index(in[1].dtype, [&](auto t) -> Status {
          using I = decltype(t);
          const I* idx = in[1].as<I>();
          for (int64_t j = 0; j < n; ++j) {
            int64_t i = idx[j];
            if (!fix_index(i, dim)) return index_error(1, j, idx[j], dim);
          }
          if (row == 0) return Status::Ok();
          // One item per gathered row: an embedding lookup has outer = 1 and one row per token.
          parallel_for_each(outer * n, LoopCost{2.0 * static_cast<double>(row), 0}, [&](int64_t k) {
            const int64_t o = k / n, j = k % n;
            const int64_t i = idx[j] < 0 ? idx[j] + dim : idx[j];
            std::memcpy(dst + k * row, src + (o * dim + i) * row, row);
          });
          return Status::Ok();
        });
      });
}

// ---- GatherElements ----

Status check_same_rank_indices(const Shape& data, const Shape& idx, int axis, const char* what) {
  if (idx.rank() != data.rank())
    return InvalidArgument(std::string(what) + " has rank " + std::to_string(idx.rank()) + ", input 0 has rank " +
                           std::to_string(data.rank()));
  for (int d = 0; d < data.rank(); ++d)
    if (d != axis && idx[d] > data[d])
      return InvalidArgument(std::string(what) + " dim " + std::to_string(d) + " is " + std::to_string(idx[d]) +
                             ", larger than input 0's " + std::to_string(data[d]));
  return Status::Ok();
}

KernelOr make_gather_elements(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t axis_attr, attrs.get_int("axis", 0));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        KILN_RETURN_IF_ERROR(check_int_index_dtype(in[1], 1));
        if (in[0].shape.rank() == 0) return InvalidArgument("input 0 is a scalar; GatherElements needs rank >= 1");
        KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_attr, in[0].shape.rank()));
        KILN_RETURN_IF_ERROR(check_same_rank_indices(in[0].shape, in[1].shape, axis, "input 1 (indices)"));
        out[0] = {in[0].dtype, in[1].shape};
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        const Shape& s = in[0].shape;
        const Shape& is = in[1].shape;
        const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + s.rank() : axis_attr);
        const Shape st = contiguous_strides(s);
        return dispatch_bytes(in[0].dtype, [&](auto t) {
          using T = decltype(t);
          return dispatch_index(in[1].dtype, [&](auto ti) -> Status {
            using I = decltype(ti);
            const I* idx = in[1].as<I>();
            const T* src = in[0].as<T>();
            T* dst = out[0].as<T>();
            int64_t c[kMaxRank] = {};
            for (int64_t e = 0; e < in[1].numel(); ++e, next_index(c, is)) {
              int64_t i = idx[e];
              if (!fix_index(i, s[axis])) return index_error(1, e, idx[e], s[axis]);
              int64_t off = 0;
              for (int d = 0; d < s.rank(); ++d) off += (d == axis ? i : c[d]) * st[d];
              dst[e] = src[off];
            }
            return Status::Ok();
          });
        });
      });
}

// ---- GatherND ----

struct GatherNDGeom {
  int64_t batch = 1;     // product of the batch dims
  int64_t per_batch = 1; // index tuples per batch
  int m = 0;             // length of an index tuple
  int64_t slice = 1;     // elements copied per tuple
  int64_t data_batch = 1;
};

Status gather_nd_geom(const Shape& s, const Shape& is, int64_t b, GatherNDGeom* g, Shape* out) {
  const int r = s.rank(), q = is.rank();
  if (q < 1) return InvalidArgument("input 1 (indices) must have rank >= 1");
  if (b < 0 || b >= std::min(r, q))
    return InvalidArgument("attribute 'batch_dims'=" + std::to_string(b) + " must be less than both ranks (" +
                           std::to_string(r) + ", " + std::to_string(q) + ")");
  const int bd = static_cast<int>(b);
  for (int d = 0; d < bd; ++d)
    if (s[d] != is[d])
      return InvalidArgument("batch dim " + std::to_string(d) + " differs: input 0 has " + std::to_string(s[d]) +
                             ", input 1 has " + std::to_string(is[d]));
  const int64_t m = is[q - 1];
  if (m < 1 || m > r - bd)
    return InvalidArgument("input 1 (indices) last dim " + std::to_string(m) + " must be in [1, " +
                           std::to_string(r - bd) + "]");
  g->m = static_cast<int>(m);
  g->batch = s.numel(0, bd);
  g->per_batch = is.numel(bd, q - 1);
  g->slice = s.numel(bd + g->m, r);
  g->data_batch = s.numel(bd, r);
  if (out) {
    *out = Shape{};
    for (int d = 0; d < q - 1; ++d) out->push_back(is[d]);
    for (int d = bd + g->m; d < r; ++d) out->push_back(s[d]);
    if ((q - 1) + (r - bd - g->m) > kMaxRank) return InvalidArgument("output rank exceeds " + std::to_string(kMaxRank));
  }
  return Status::Ok();
}

// Offset (in elements, within one batch) of the slice addressed by `tuple`, or an error.
template <typename I>
Status nd_offset(const I* tuple, int m, const Shape& s, int bd, const Shape& st, int64_t pos, int input,
                 int64_t* off) {
  *off = 0;
  for (int k = 0; k < m; ++k) {
    int64_t i = tuple[k];
    const int64_t dim = s[bd + k];
    if (!fix_index(i, dim)) return index_error(input, pos + k, tuple[k], dim);
    *off += i * st[bd + k];
  }
  return Status::Ok();
}

KernelOr make_gather_nd(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t batch_dims, attrs.get_int("batch_dims", 0));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        KILN_RETURN_IF_ERROR(check_int_index_dtype(in[1], 1));
        GatherNDGeom g;
        out[0].dtype = in[0].dtype;
        return gather_nd_geom(in[0].shape, in[1].shape, batch_dims, &g, &out[0].shape);
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        GatherNDGeom g;
        KILN_RETURN_IF_ERROR(gather_nd_geom(in[0].shape, in[1].shape, batch_dims, &g, nullptr));
        const Shape st = contiguous_strides(in[0].shape);
        const size_t es = dtype_size(in[0].dtype);
        const char* src = static_cast<const char*>(in[0].data);
        char* dst = static_cast<char*>(out[0].data);
        return dispatch_index(in[1].dtype, [&](auto t) -> Status {
          using I = decltype(t);
          const I* idx = in[1].as<I>();
          for (int64_t bi = 0; bi < g.batch; ++bi)
            for (int64_t j = 0; j < g.per_batch; ++j) {
              const int64_t tuple = bi * g.per_batch + j;
              int64_t off;
              KILN_RETURN_IF_ERROR(nd_offset(idx + tuple * g.m, g.m, in[0].shape, static_cast<int>(batch_dims), st,
                                             tuple * g.m, 1, &off));
              std::memcpy(dst + tuple * g.slice * es, src + (bi * g.data_batch + off) * es, g.slice * es);
            }
          return Status::Ok();
        });
      });
}

// ---- Scatter family ----

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

StatusOr<Reduction> parse_reduction(AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(std::string s, attrs.get_string("reduction", "none"));
  if (s == "none") return Reduction::kNone;
  if (s == "add") return Reduction::kAdd;
  if (s == "mul") return Reduction::kMul;
  if (s == "max") return Reduction::kMax;
  if (s == "min") return Reduction::kMin;
  return Unimplemented("attribute 'reduction'='" + s + "' is not supported");
}

template <typename T>
inline void reduce_into(T* dst, T v, Reduction r) {
  if constexpr (std::is_same_v<T, bool>) {
    // Boolean add/mul are or/and, as numpy computes them.
    switch (r) {
      case Reduction::kNone: *dst = v; break;
      case Reduction::kAdd: case Reduction::kMax: *dst = *dst || v; break;
      case Reduction::kMul: case Reduction::kMin: *dst = *dst && v; break;
    }
  } else {
    using V = decltype(as_value(T{}));
    const V a = as_value(*dst), b = as_value(v);
    V res = b;
    switch (r) {
      case Reduction::kNone: break;
      case Reduction::kAdd: res = static_cast<V>(a + b); break;
      case Reduction::kMul: res = static_cast<V>(a * b); break;
      case Reduction::kMax: res = std::max(a, b); break;
      case Reduction::kMin: res = std::min(a, b); break;
    }
    *dst = from_value(T{}, res);
  }
}

// Runs f(T{}) with a type that can hold the elements: raw bytes without a reduction, values with one.
template <typename F>
Status dispatch_scatter(DType dt, Reduction r, F&& f) {
  if (r == Reduction::kNone) return dispatch_bytes(dt, std::forward<F>(f));
  return dispatch_numeric_or_half(dt, std::forward<F>(f));
}

Status check_updates(std::span<const TensorView> in) {
  if (in[2].dtype != in[0].dtype)
    return InvalidArgument("input 2 (updates) dtype " + dtype_name(in[2].dtype) + " differs from input 0 dtype " +
                           dtype_name(in[0].dtype));
  return Status::Ok();
}

StatusOr<std::unique_ptr<Kernel>> scatter_elements_kernel(int64_t axis_attr, Reduction red) {
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 3, 3));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        KILN_RETURN_IF_ERROR(check_int_index_dtype(in[1], 1));
        KILN_RETURN_IF_ERROR(check_updates(in));
        if (in[0].shape.rank() == 0) return InvalidArgument("input 0 is a scalar; scatter needs rank >= 1");
        KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_attr, in[0].shape.rank()));
        KILN_RETURN_IF_ERROR(check_same_rank_indices(in[0].shape, in[1].shape, axis, "input 1 (indices)"));
        if (in[2].shape != in[1].shape)
          return InvalidArgument("input 2 (updates) shape " + in[2].shape.str() + " differs from input 1 shape " +
                                 in[1].shape.str());
        out[0] = in[0].desc();
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        copy_bytes(out[0], in[0]);
        const Shape& s = in[0].shape;
        const Shape& is = in[1].shape;
        const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + s.rank() : axis_attr);
        const Shape st = contiguous_strides(s);
        return dispatch_scatter(in[0].dtype, red, [&](auto t) {
          using T = decltype(t);
          return dispatch_index(in[1].dtype, [&](auto ti) -> Status {
            using I = decltype(ti);
            const I* idx = in[1].as<I>();
            const T* upd = in[2].as<T>();
            T* dst = out[0].as<T>();
            int64_t c[kMaxRank] = {};
            for (int64_t e = 0; e < in[1].numel(); ++e, next_index(c, is)) {
              int64_t i = idx[e];
              if (!fix_index(i, s[axis])) return index_error(1, e, idx[e], s[axis]);
              int64_t off = 0;
              for (int d = 0; d < s.rank(); ++d) off += (d == axis ? i : c[d]) * st[d];
              reduce_into(dst + off, upd[e], red);
            }
            return Status::Ok();
          });
        });
      });
}

KernelOr make_scatter_elements(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t axis, attrs.get_int("axis", 0));
  KILN_ASSIGN_OR_RETURN(Reduction red, parse_reduction(attrs));
  return scatter_elements_kernel(axis, red);
}

// The deprecated Scatter (opsets 9-10) is ScatterElements without reduction.
KernelOr make_scatter(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t axis, attrs.get_int("axis", 0));
  return scatter_elements_kernel(axis, Reduction::kNone);
}

KernelOr make_scatter_nd(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(Reduction red, parse_reduction(attrs));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 3, 3));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        KILN_RETURN_IF_ERROR(check_int_index_dtype(in[1], 1));
        KILN_RETURN_IF_ERROR(check_updates(in));
        GatherNDGeom g;
        Shape expect;
        KILN_RETURN_IF_ERROR(gather_nd_geom(in[0].shape, in[1].shape, 0, &g, &expect));
        if (in[2].shape != expect)
          return InvalidArgument("input 2 (updates) shape " + in[2].shape.str() + " should be " + expect.str());
        out[0] = in[0].desc();
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        copy_bytes(out[0], in[0]);
        GatherNDGeom g;
        KILN_RETURN_IF_ERROR(gather_nd_geom(in[0].shape, in[1].shape, 0, &g, nullptr));
        const Shape st = contiguous_strides(in[0].shape);
        return dispatch_scatter(in[0].dtype, red, [&](auto t) {
          using T = decltype(t);
          return dispatch_index(in[1].dtype, [&](auto ti) -> Status {
            using I = decltype(ti);
            const I* idx = in[1].as<I>();
            const T* upd = in[2].as<T>();
            T* dst = out[0].as<T>();
            for (int64_t j = 0; j < g.per_batch; ++j) {
              int64_t off;
              KILN_RETURN_IF_ERROR(nd_offset(idx + j * g.m, g.m, in[0].shape, 0, st, j * g.m, 1, &off));
              for (int64_t k = 0; k < g.slice; ++k) reduce_into(dst + off + k, upd[j * g.slice + k], red);
            }
            return Status::Ok();
          });
        });
      });
}

// ---- OneHot ----

StatusOr<int64_t> onehot_depth(const TensorView& v) {
  if (v.numel() != 1) return InvalidArgument("input 1 (depth) must have one element, got shape " + v.shape.str());
  if (!dtype_is_integer(v.dtype) && !dtype_is_float(v.dtype))
    return InvalidArgument("input 1 (depth) must be numeric, got " + dtype_name(v.dtype));
  const int64_t depth = static_cast<int64_t>(read_double(v, 0));
  if (depth < 1) return InvalidArgument("input 1 (depth) must be positive, got " + std::to_string(depth));
  return depth;
}

KernelOr make_onehot(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t axis_attr, attrs.get_int("axis", -1));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 3, 3));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[2], 2));
        if (!dtype_is_integer(in[0].dtype) && !dtype_is_float(in[0].dtype))
          return InvalidArgument("input 0 (indices) must be numeric, got " + dtype_name(in[0].dtype));
        if (in[2].numel() != 2)
          return InvalidArgument("input 2 (values) must have 2 elements, got shape " + in[2].shape.str());
        KILN_ASSIGN_OR_RETURN(int64_t depth, onehot_depth(in[1]));
        const Shape& is = in[0].shape;
        const int rank = is.rank() + 1;
        if (rank > kMaxRank) return InvalidArgument("output rank exceeds " + std::to_string(kMaxRank));
        KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_attr, rank));
        out[0].dtype = in[2].dtype;
        out[0].shape = Shape{};
        for (int d = 0, k = 0; d < rank; ++d) out[0].shape.push_back(d == axis ? depth : is[k++]);
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        KILN_ASSIGN_OR_RETURN(int64_t depth, onehot_depth(in[1]));
        const Shape& is = in[0].shape;
        const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + is.rank() + 1 : axis_attr);
        const int64_t outer = is.numel(0, axis), inner = is.numel(axis, is.rank());
        return dispatch_bytes(in[2].dtype, [&](auto t) {
          using T = decltype(t);
          const T off = in[2].as<T>()[0], on = in[2].as<T>()[1];
          T* dst = out[0].as<T>();
          std::fill(dst, dst + out[0].numel(), off);
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < inner; ++i) {
              int64_t v = static_cast<int64_t>(read_double(in[0], o * inner + i));
              if (v < 0) v += depth;
              if (v >= 0 && v < depth) dst[(o * depth + v) * inner + i] = on;
            }
          return Status::Ok();
        });
      });
}

// ---- ReverseSequence ----

KernelOr make_reverse_sequence(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t batch_axis, attrs.get_int("batch_axis", 1));
  KILN_ASSIGN_OR_RETURN(int64_t time_axis, attrs.get_int("time_axis", 0));
  if (!((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0)))
    return InvalidArgument("attributes 'batch_axis'=" + std::to_string(batch_axis) + " and 'time_axis'=" +
                           std::to_string(time_axis) + " must be 0 and 1 in some order");
  auto check_lens = [=](std::span<const TensorView> in) -> Status {
    const Shape& s = in[0].shape;
    for (int64_t b = 0; b < in[1].numel(); ++b) {
      const int64_t len = read_int(in[1], b);
      if (len < 0 || len > s[time_axis])
        return InvalidArgument("input 1 (sequence_lens) entry " + std::to_string(b) + " is " + std::to_string(len) +
                               ", outside [0, " + std::to_string(s[time_axis]) + "]");
    }
    return Status::Ok();
  };
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        KILN_RETURN_IF_ERROR(check_int_index_dtype(in[1], 1));
        const Shape& s = in[0].shape;
        if (s.rank() < 2) return InvalidArgument("input 0 must have rank >= 2, got shape " + s.str());
        if (in[1].shape.rank() != 1 || in[1].shape[0] != s[batch_axis])
          return InvalidArgument("input 1 (sequence_lens) shape " + in[1].shape.str() + " should be [" +
                                 std::to_string(s[batch_axis]) + "]");
        KILN_RETURN_IF_ERROR(check_lens(in));
        out[0] = in[0].desc();
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        KILN_RETURN_IF_ERROR(check_lens(in));
        copy_bytes(out[0], in[0]);
        const Shape& s = in[0].shape;
        const Shape st = contiguous_strides(s);
        const size_t row = static_cast<size_t>(s.numel(2, s.rank())) * dtype_size(in[0].dtype);
        const int64_t tst = st[time_axis] * static_cast<int64_t>(dtype_size(in[0].dtype));
        const int64_t bst = st[batch_axis] * static_cast<int64_t>(dtype_size(in[0].dtype));
        const char* src = static_cast<const char*>(in[0].data);
        char* dst = static_cast<char*>(out[0].data);
        for (int64_t b = 0; b < s[batch_axis]; ++b) {
          const int64_t len = read_int(in[1], b);
          for (int64_t t = 0; t < len; ++t) std::memcpy(dst + b * bst + t * tst, src + b * bst + (len - 1 - t) * tst, row);
        }
        return Status::Ok();
      });
}

// Gather on axis 0 with one constant index selects one contiguous block of a C-order tensor: a view
// at an offset (one layer's slice of a stacked KV cache), never a copy.
Status leading_gather_offset(const AttrMap&, std::span<const TensorView> in, const TensorDesc&, int64_t* offset) {
  // The kernel checks its index in run(), which a view skips: check it here.
  const int64_t dim0 = in[0].shape.rank() > 0 ? in[0].shape[0] : 0;
  int64_t i = read_int(in[1], 0);
  if (!fix_index(i, dim0))
    return OutOfRange("index " + std::to_string(read_int(in[1], 0)) + " is out of range [" + std::to_string(-dim0) + ", " +
                      std::to_string(dim0) + ") for input 0 dim 0");
  *offset = i * in[0].shape.numel(1, in[0].shape.rank()) * static_cast<int64_t>(dtype_size(in[0].dtype));
  return Status::Ok();
}

StepMemory gather_memory(const MemoryQuery& q) {
  auto axis = q.attrs.find("axis");
  if (axis != q.attrs.end() && (axis->second.kind != Attribute::Kind::kInt || axis->second.i != 0)) return {};
  if (q.num_outputs != 1 || q.constant_inputs.size() != 2 || !q.constant_inputs[1]) return {};
  const Tensor& idx = *q.constant_inputs[1];
  if (!dtype_is_integer(idx.dtype()) || idx.numel() != 1 || idx.shape().rank() > 1) return {};
  return view_memory(OutputAlias::kViewAtOffset, leading_gather_offset);
}

// ScatterND (PyTorch's index_put on a fixed-size cache) may write its updates into its data
// input's buffer when nothing reads the old contents afterwards (runtime/update_in_place.cpp).
StepMemory scatter_nd_memory(const MemoryQuery& q) {
  if (q.num_outputs != 1 || q.constant_inputs.size() != 3) return {};
  return updating_memory(2);
}

}  // namespace

void register_tensor_index_kernels(KernelRegistry& r) {
  r.add({"Gather", "reference", 0, make_gather});
  r.add({"GatherElements", "reference", 0, make_gather_elements});
  r.add({"GatherND", "reference", 0, make_gather_nd});
  r.add({"ScatterElements", "reference", 0, make_scatter_elements});
  r.add({"Scatter", "reference", 0, make_scatter});
  r.add({"ScatterND", "reference", 0, make_scatter_nd});
  r.add({"OneHot", "reference", 0, make_onehot});
  r.add({"ReverseSequence", "reference", 0, make_reverse_sequence});
  r.set_memory_rule("Gather", gather_memory);
  r.set_memory_rule("ScatterND", scatter_nd_memory);
}

}  // namespace kiln
