// Ops whose output shape depends on input values: Compress, NonZero, Unique. infer() computes the
// selection from the data and run() recomputes it, so both agree without caching state.
#include <algorithm>
#include <numeric>
#include <vector>

#include "runtime/kernels/tensor_util.h"

namespace kiln {

namespace {

using KernelOr = StatusOr<std::unique_ptr<Kernel>>;

// ---- Compress ----

struct CompressGeom {
  int axis = 0;  // -1 when compressing the flattened input
  int64_t outer = 1, dim = 0, inner = 1;
  int64_t selected = 0;
};

Status compress_geom(std::span<const TensorView> in, bool has_axis, int64_t axis_attr, CompressGeom* g) {
  const Shape& s = in[0].shape;
  const TensorView& cond = in[1];
  if (cond.dtype != DType::kBool && !dtype_is_integer(cond.dtype))
    return InvalidArgument("input 1 (condition) must be bool, got " + dtype_name(cond.dtype));
  if (cond.shape.rank() != 1) return InvalidArgument("input 1 (condition) must be 1-D, got shape " + cond.shape.str());
  if (has_axis) {
    if (s.rank() == 0) return InvalidArgument("input 0 is a scalar; Compress with an axis needs rank >= 1");
    KILN_ASSIGN_OR_RETURN(g->axis, normalize_axis(axis_attr, s.rank()));
    g->outer = s.numel(0, g->axis);
    g->dim = s[g->axis];
    g->inner = s.numel(g->axis + 1, s.rank());
  } else {
    g->axis = -1;
    g->dim = s.numel();
  }
  g->selected = 0;
  for (int64_t k = 0; k < cond.numel(); ++k) {
    if (read_int(cond, k) == 0) continue;
    if (k >= g->dim)
      return InvalidArgument("input 1 (condition) selects position " + std::to_string(k) + " but the dim has size " +
                             std::to_string(g->dim));
    ++g->selected;
  }
  return Status::Ok();
}

KernelOr make_compress(const KernelArgs&, AttrReader& attrs) {
  const bool has_axis = attrs.has("axis");
  KILN_ASSIGN_OR_RETURN(int64_t axis_attr, attrs.get_int("axis", 0));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        CompressGeom g;
        KILN_RETURN_IF_ERROR(compress_geom(in, has_axis, axis_attr, &g));
        out[0].dtype = in[0].dtype;
        if (g.axis < 0) {
          out[0].shape = Shape{g.selected};
        } else {
          out[0].shape = in[0].shape;
          out[0].shape[g.axis] = g.selected;
        }
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        CompressGeom g;
        KILN_RETURN_IF_ERROR(compress_geom(in, has_axis, axis_attr, &g));
        const size_t row = static_cast<size_t>(g.inner) * dtype_size(in[0].dtype);
        const char* src = static_cast<const char*>(in[0].data);
        char* dst = static_cast<char*>(out[0].data);
        const int64_t n = std::min(g.dim, in[1].numel());
        for (int64_t o = 0; o < g.outer; ++o)
          for (int64_t k = 0; k < n; ++k)
            if (read_int(in[1], k) != 0) {
              std::memcpy(dst, src + (o * g.dim + k) * row, row);
              dst += row;
            }
        return Status::Ok();
      });
}

// ---- NonZero ----

// Calls f(i) for every non-zero element index i of v.
template <typename F>
Status for_each_nonzero(const TensorView& v, F&& f) {
  return dispatch_numeric_or_half(v.dtype, [&](auto t) {
    using T = decltype(t);
    const T* p = v.as<T>();
    for (int64_t i = 0; i < v.numel(); ++i)
      if (as_value(p[i]) != decltype(as_value(p[i])){}) f(i);
    return Status::Ok();
  });
}

KernelOr make_nonzero(const KernelArgs&, AttrReader&) {
  return lambda_kernel(
      [](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        int64_t count = 0;
        KILN_RETURN_IF_ERROR(for_each_nonzero(in[0], [&](int64_t) { ++count; }));
        // numpy treats a 0-d input as 1-d.
        out[0] = {DType::kInt64, Shape{std::max(1, in[0].shape.rank()), count}};
        return Status::Ok();
      },
      [](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        const Shape& s = in[0].shape;
        const int64_t count = out[0].shape[1];
        int64_t* dst = out[0].as<int64_t>();
        int64_t j = 0;
        return for_each_nonzero(in[0], [&](int64_t i) {
          if (j >= count) return;
          if (s.rank() == 0) dst[j] = 0;
          for (int d = s.rank() - 1; d >= 0; --d) {
            dst[d * count + j] = i % s[d];
            i /= s[d];
          }
          ++j;
        });
      });
}

// ---- Unique ----

struct UniqueResult {
  int axis = -1;                    // -1: flattened input
  int64_t outer = 1, n = 0, inner = 1;
  std::vector<int64_t> first;       // per unique slice, in output order: its first occurrence
  std::vector<int64_t> inverse;     // per input slice: its unique slice
  std::vector<int64_t> counts;
};

template <typename T>
void unique_typed(const T* x, UniqueResult* u, bool sorted) {
  const int64_t n = u->n, inner = u->inner, outer = u->outer;
  // Slices are compared lexicographically in C order of the input with the axis removed.
  auto cmp = [&](int64_t a, int64_t b) -> int {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const auto va = as_value(x[(o * n + a) * inner + i]), vb = as_value(x[(o * n + b) * inner + i]);
        if (va < vb) return -1;
        if (vb < va) return 1;
      }
    return 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
  std::vector<int64_t> group_of(static_cast<size_t>(n));
  std::vector<int64_t> first, counts;
  for (int64_t k = 0; k < n; ++k) {
    if (k == 0 || cmp(order[k - 1], order[k]) != 0) {
      first.push_back(order[k]);
      counts.push_back(0);
    }
    group_of[order[k]] = static_cast<int64_t>(first.size()) - 1;
    ++counts.back();
  }
  // rank[g] = output position of sorted group g.
  std::vector<int64_t> rank(first.size());
  std::iota(rank.begin(), rank.end(), 0);
  if (!sorted) {
    std::vector<int64_t> by_first(first.size());
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) { return first[a] < first[b]; });
    for (size_t p = 0; p < by_first.size(); ++p) rank[by_first[p]] = static_cast<int64_t>(p);
  }
  u->first.assign(first.size(), 0);
  u->counts.assign(first.size(), 0);
  for (size_t g = 0; g < first.size(); ++g) {
    u->first[rank[g]] = first[g];
    u->counts[rank[g]] = counts[g];
  }
  u->inverse.resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) u->inverse[k] = rank[group_of[k]];
}

Status unique_compute(const TensorView& x, bool has_axis, int64_t axis_attr, bool sorted, UniqueResult* u) {
  const Shape& s = x.shape;
  if (has_axis) {
    if (s.rank() == 0) return InvalidArgument("input 0 is a scalar; Unique with an axis needs rank >= 1");
    KILN_ASSIGN_OR_RETURN(u->axis, normalize_axis(axis_attr, s.rank()));
    u->outer = s.numel(0, u->axis);
    u->n = s[u->axis];
    u->inner = s.numel(u->axis + 1, s.rank());
  } else {
    u->axis = -1;
    u->n = s.numel();
  }
  if (u->outer * u->inner == 0) {
    // Slices with no elements are all equal.
    u->first.assign(u->n > 0 ? 1 : 0, 0);
    u->counts.assign(u->n > 0 ? 1 : 0, u->n);
    u->inverse.assign(static_cast<size_t>(u->n), 0);
    return Status::Ok();
  }
  return dispatch_numeric_or_half(x.dtype, [&](auto t) {
    using T = decltype(t);
    unique_typed<T>(x.as<T>(), u, sorted);
    return Status::Ok();
  });
}

KernelOr make_unique(const KernelArgs&, AttrReader& attrs) {
  const bool has_axis = attrs.has("axis");
  KILN_ASSIGN_OR_RETURN(int64_t axis_attr, attrs.get_int("axis", 0));
  KILN_ASSIGN_OR_RETURN(int64_t sorted, attrs.get_int("sorted", 1));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 4));
        UniqueResult u;
        KILN_RETURN_IF_ERROR(unique_compute(in[0], has_axis, axis_attr, sorted != 0, &u));
        const int64_t groups = static_cast<int64_t>(u.first.size());
        out[0].dtype = in[0].dtype;
        if (u.axis < 0) {
          out[0].shape = Shape{groups};
        } else {
          out[0].shape = in[0].shape;
          out[0].shape[u.axis] = groups;
        }
        if (out.size() > 1) out[1] = {DType::kInt64, Shape{groups}};
        if (out.size() > 2) out[2] = {DType::kInt64, Shape{u.n}};
        if (out.size() > 3) out[3] = {DType::kInt64, Shape{groups}};
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        UniqueResult u;
        KILN_RETURN_IF_ERROR(unique_compute(in[0], has_axis, axis_attr, sorted != 0, &u));
        const int64_t groups = static_cast<int64_t>(u.first.size());
        const size_t row = static_cast<size_t>(u.inner) * dtype_size(in[0].dtype);
        const char* src = static_cast<const char*>(in[0].data);
        char* dst = static_cast<char*>(out[0].data);
        for (int64_t o = 0; o < u.outer; ++o)
          for (int64_t g = 0; g < groups; ++g)
            std::memcpy(dst + (o * groups + g) * row, src + (o * u.n + u.first[g]) * row, row);
        auto put = [&](size_t k, const std::vector<int64_t>& v) {
          if (out.size() > k && !v.empty()) std::memcpy(out[k].data, v.data(), v.size() * sizeof(int64_t));
        };
        put(1, u.first);
        put(2, u.inverse);
        put(3, u.counts);
        return Status::Ok();
      });
}

}  // namespace

void register_tensor_select_kernels(KernelRegistry& r) {
  r.add({"Compress", "reference", 0, make_compress});
  r.add({"NonZero", "reference", 0, make_nonzero});
  r.add({"Unique", "reference", 0, make_unique});
}

}  // namespace kiln
