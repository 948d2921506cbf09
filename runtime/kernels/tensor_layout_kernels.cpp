// Layout ops: Transpose, Concat, Split, Slice, Expand, Tile, Pad, DepthToSpace, SpaceToDepth.
// Most are a strided view of the input copied by copy_strided, so they are dtype-agnostic.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <limits>

#include "runtime/kernels/tensor_util.h"
#include "runtime/thread_pool.h"

namespace kiln {

namespace {

using KernelOr = StatusOr<std::unique_ptr<Kernel>>;

// ---- Transpose ----

Status transpose_perm(const std::vector<int64_t>& attr, int rank, int* perm) {
  if (attr.empty()) {
    for (int i = 0; i < rank; ++i) perm[i] = rank - 1 - i;
    return Status::Ok();
  }
  if (static_cast<int>(attr.size()) != rank)
    return InvalidArgument("attribute 'perm' has " + std::to_string(attr.size()) + " entries for input rank " +
                           std::to_string(rank));
  bool seen[kMaxRank] = {};
  for (int i = 0; i < rank; ++i) {
    const int64_t p = attr[i];
    if (p < 0 || p >= rank || seen[p])
      return InvalidArgument("attribute 'perm' entry " + std::to_string(i) + " (" + std::to_string(p) +
                             ") does not form a permutation of rank " + std::to_string(rank));
    seen[p] = true;
    perm[i] = static_cast<int>(p);
  }
  return Status::Ok();
}

KernelOr make_transpose(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> perm_attr, attrs.get_ints("perm"));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        int perm[kMaxRank];
        const int r = in[0].shape.rank();
        KILN_RETURN_IF_ERROR(transpose_perm(perm_attr, r, perm));
        out[0].dtype = in[0].dtype;
        out[0].shape.resize(r);
        for (int i = 0; i < r; ++i) out[0].shape[i] = in[0].shape[perm[i]];
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        int perm[kMaxRank];
        const int r = in[0].shape.rank();
        KILN_RETURN_IF_ERROR(transpose_perm(perm_attr, r, perm));
        const Shape in_st = contiguous_strides(in[0].shape);
        int64_t st[kMaxRank];
        for (int i = 0; i < r; ++i) st[i] = in_st[perm[i]];
        copy_strided(out[0].data, in[0].data, r, out[0].shape.data(), st, dtype_size(in[0].dtype));
        return Status::Ok();
      });
}

// ---- Concat, Split ----

// Rows of a Concat input up to this long are copied by copy_short, row by row.
constexpr int64_t kShortRowBytes = 4096;

// memcpy of a short piece without the call: 32-byte moves, then the tail. Pieces of a Concat's
// rows, so n is small and often a multiple of 32.
inline void copy_short(char* dst, const char* src, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  if (i < n) std::memcpy(dst + i, src + i, static_cast<size_t>(n - i));
}

KernelOr make_concat(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t axis_attr, attrs.require_int("axis"));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        if (in.empty()) return InvalidArgument("expects at least 1 input, got 0");
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        const Shape& s0 = in[0].shape;
        KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_attr, s0.rank()));
        if (s0.rank() == 0) return InvalidArgument("input 0 is a scalar; Concat needs rank >= 1");
        Shape os = s0;
        os[axis] = 0;
        for (size_t i = 0; i < in.size(); ++i) {
          const Shape& s = in[i].shape;
          if (!in[i].present()) return InvalidArgument("input " + std::to_string(i) + " is missing");
          if (in[i].dtype != in[0].dtype)
            return InvalidArgument("input " + std::to_string(i) + " dtype " + dtype_name(in[i].dtype) +
                                   " differs from input 0 dtype " + dtype_name(in[0].dtype));
          if (s.rank() != s0.rank())
            return InvalidArgument("input " + std::to_string(i) + " has rank " + std::to_string(s.rank()) +
                                   ", input 0 has rank " + std::to_string(s0.rank()));
          for (int d = 0; d < s.rank(); ++d)
            if (d != axis && s[d] != s0[d])
              return InvalidArgument("input " + std::to_string(i) + " dim " + std::to_string(d) + " is " +
                                     std::to_string(s[d]) + ", input 0 has " + std::to_string(s0[d]));
          os[axis] += s[axis];
        }
        out[0] = {in[0].dtype, os};
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        const Shape& os = out[0].shape;
        const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + os.rank() : axis_attr);
        const size_t es = dtype_size(out[0].dtype);
        const int64_t outer = os.numel(0, axis);
        const int64_t out_row = os.numel(axis, os.rank()) * static_cast<int64_t>(es);
        char* dst = static_cast<char*>(out[0].data);
        // Many short rows (a channel Concat in NHWC: DenseNet's dense blocks join 128-byte pieces of
        // up to 32 inputs per pixel): one region over blocks of output rows, each row assembled from
        // every input in turn, instead of a region per input with a task per piece.
        int64_t widest = 0;
        for (const TensorView& t : in) widest = std::max(widest, t.shape.numel(axis, os.rank()) * static_cast<int64_t>(es));
        if (outer > 1 && widest <= kShortRowBytes) {
          ThreadPool::global().parallel_for(outer, LoopCost{2.0 * static_cast<double>(out_row), 0}, [&](int64_t begin, int64_t end, int) {
            for (int64_t o = begin; o < end; ++o) {
              char* row = dst + o * out_row;
              for (const TensorView& t : in) {
                const int64_t chunk = t.shape.numel(axis, os.rank()) * static_cast<int64_t>(es);
                copy_short(row, static_cast<const char*>(t.data) + o * chunk, chunk);
                row += chunk;
              }
            }
          });
          return Status::Ok();
        }
        int64_t offset = 0;
        for (const TensorView& t : in) {
          const int64_t chunk = t.shape.numel(axis, os.rank()) * static_cast<int64_t>(es);
          const char* src = static_cast<const char*>(t.data);
          // An input already in place (a streaming cache the output grows from) is not copied.
          if (chunk > 0 && !(outer == 1 && src == dst + offset)) {
            // Rows cut into pieces, so a few long rows (a cached sequence joined with a step's new
            // tokens: one 2.1 MB row) are copied by every thread too.
            constexpr int64_t kPiece = int64_t{1} << 16;
            const int64_t pieces = (chunk + kPiece - 1) / kPiece;
            const double piece_bytes = 2.0 * static_cast<double>(std::min(kPiece, chunk));
            parallel_for_each(outer * pieces, LoopCost{piece_bytes, 0}, [&](int64_t t) {
              const int64_t o = t / pieces, b = t % pieces * kPiece;
              std::memcpy(dst + o * out_row + offset + b, src + o * chunk + b, static_cast<size_t>(std::min(kPiece, chunk - b)));
            });
          }
          offset += chunk;
        }
        return Status::Ok();
      });
}

KernelOr make_split(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t axis_attr, attrs.get_int("axis", 0));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> split_attr, attrs.get_ints("split"));
  KILN_ASSIGN_OR_RETURN(int64_t num_outputs, attrs.get_int("num_outputs", 0));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 2));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        if (out.empty()) return InvalidArgument("expects at least 1 output");
        if (num_outputs > 0 && num_outputs != static_cast<int64_t>(out.size()))
          return InvalidArgument("attribute 'num_outputs'=" + std::to_string(num_outputs) + " but the node has " +
                                 std::to_string(out.size()) + " outputs");
        const Shape& s = in[0].shape;
        if (s.rank() == 0) return InvalidArgument("input 0 is a scalar; Split needs rank >= 1");
        KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_attr, s.rank()));
        const int64_t dim = s[axis], n = static_cast<int64_t>(out.size());
        // Sizes are read in place (input 1, the attribute, or equal chunks): infer runs on every
        // execution and must not allocate.
        const bool from_input = in.size() > 1 && in[1].present();
        if (from_input) {
          if (!dtype_is_integer(in[1].dtype) || in[1].shape.rank() > 1)
            return InvalidArgument("input 1 (split) must be a 1-D integer tensor, got " + dtype_name(in[1].dtype) +
                                   in[1].shape.str());
          if (in[1].numel() > 0 && in[1].data == nullptr) return InvalidArgument("input 1 (split) has no data");
        }
        const int64_t given = from_input ? in[1].numel() : static_cast<int64_t>(split_attr.size());
        const int64_t chunk = (dim + n - 1) / n;
        if (given == 0 && num_outputs == 0 && dim % n != 0)
          // Opset 18's num_outputs allows a smaller last chunk; before, the split must be even.
          return InvalidArgument("dim " + std::to_string(axis) + " of size " + std::to_string(dim) +
                                 " cannot be split evenly into " + std::to_string(n) + " outputs");
        if (given != 0 && given != n)
          return InvalidArgument("split has " + std::to_string(given) + " entries for " + std::to_string(n) +
                                 " outputs");
        int64_t sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t size = from_input ? read_int(in[1], i)
                               : given    ? split_attr[i]
                                          : std::clamp<int64_t>(dim - i * chunk, 0, chunk);
          if (size < 0) return InvalidArgument("split entry " + std::to_string(i) + " is " + std::to_string(size));
          if (__builtin_add_overflow(sum, size, &sum))
            return InvalidArgument("split entries overflow int64 at entry " + std::to_string(i));
          out[i] = {in[0].dtype, s};
          out[i].shape[axis] = size;
        }
        if (sum != dim)
          return InvalidArgument("split sums to " + std::to_string(sum) + " but dim " + std::to_string(axis) +
                                 " has size " + std::to_string(dim));
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        const Shape& s = in[0].shape;
        const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + s.rank() : axis_attr);
        const size_t es = dtype_size(in[0].dtype);
        const int64_t outer = s.numel(0, axis);
        const int64_t in_row = s.numel(axis, s.rank()) * static_cast<int64_t>(es);
        const char* src = static_cast<const char*>(in[0].data);
        int64_t offset = 0;
        for (const TensorView& t : out) {
          const int64_t chunk = t.shape.numel(axis, s.rank()) * static_cast<int64_t>(es);
          char* dst = static_cast<char*>(t.data);
          if (chunk > 0) {
            parallel_for_each(outer, LoopCost{2.0 * static_cast<double>(chunk), 0},
                              [&](int64_t o) { std::memcpy(dst + o * chunk, src + o * in_row + offset, chunk); });
          }
          offset += chunk;
        }
        return Status::Ok();
      });
}

// ---- Slice ----

// Per-dim start and step of a slice; the output dims are its lengths.
struct SliceParams {
  int64_t start[kMaxRank];
  int64_t step[kMaxRank];
  Shape out;
};

struct SliceAttrs {
  bool from_attrs = false;  // opset < 10: starts/ends/axes are attributes
  std::vector<int64_t> starts, ends, axes;
};

Status slice_params(const SliceAttrs& a, std::span<const TensorView> in, SliceParams* p) {
  const Shape& s = in[0].shape;
  const int r = s.rank();
  int64_t starts[kMaxRank], ends[kMaxRank], axes[kMaxRank], steps[kMaxRank];
  int ns = 0, ne = 0, na = -1, nst = -1;
  if (a.from_attrs) {
    if (a.starts.size() > static_cast<size_t>(kMaxRank) || a.ends.size() > static_cast<size_t>(kMaxRank) ||
        a.axes.size() > static_cast<size_t>(kMaxRank))
      return InvalidArgument("attributes 'starts'/'ends'/'axes' have too many entries");
    ns = static_cast<int>(a.starts.size());
    ne = static_cast<int>(a.ends.size());
    std::copy(a.starts.begin(), a.starts.end(), starts);
    std::copy(a.ends.begin(), a.ends.end(), ends);
    if (!a.axes.empty()) {
      na = static_cast<int>(a.axes.size());
      std::copy(a.axes.begin(), a.axes.end(), axes);
    }
  } else {
    if (in.size() < 3 || !in[1].present() || !in[2].present())
      return InvalidArgument("inputs 1 (starts) and 2 (ends) are required");
    KILN_RETURN_IF_ERROR(read_small_ints(in[1], starts, kMaxRank, &ns, "input 1 (starts)"));
    KILN_RETURN_IF_ERROR(read_small_ints(in[2], ends, kMaxRank, &ne, "input 2 (ends)"));
    if (in.size() > 3 && in[3].present())
      KILN_RETURN_IF_ERROR(read_small_ints(in[3], axes, kMaxRank, &na, "input 3 (axes)"));
    if (in.size() > 4 && in[4].present())
      KILN_RETURN_IF_ERROR(read_small_ints(in[4], steps, kMaxRank, &nst, "input 4 (steps)"));
  }
  if (ne != ns)
    return InvalidArgument("starts has " + std::to_string(ns) + " entries but ends has " + std::to_string(ne));
  if (na >= 0 && na != ns)
    return InvalidArgument("axes has " + std::to_string(na) + " entries but starts has " + std::to_string(ns));
  if (nst >= 0 && nst != ns)
    return InvalidArgument("steps has " + std::to_string(nst) + " entries but starts has " + std::to_string(ns));
  p->out = s;
  for (int d = 0; d < r; ++d) {
    p->start[d] = 0;
    p->step[d] = 1;
  }
  bool seen[kMaxRank] = {};
  for (int i = 0; i < ns; ++i) {
    KILN_ASSIGN_OR_RETURN(int d, normalize_axis(na >= 0 ? axes[i] : i, r, "axes entry"));
    if (seen[d]) return InvalidArgument("axis " + std::to_string(d) + " appears twice in axes");
    seen[d] = true;
    const int64_t step = nst >= 0 ? steps[i] : 1;
    if (step == 0) return InvalidArgument("steps entry " + std::to_string(i) + " is 0");
    const int64_t dim = s[d];
    int64_t b = starts[i], e = ends[i];
    // Adding dim to INT64_MIN cannot overflow, and INT64_MAX is never adjusted.
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    int64_t len;
    if (step > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > b ? (e - b + step - 1) / step : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len = b > e ? (b - e - step - 1) / -step : 0;
    }
    p->start[d] = len > 0 ? b : 0;
    p->step[d] = step;
    p->out[d] = len;
  }
  return Status::Ok();
}

KernelOr make_slice(const KernelArgs& args, AttrReader& attrs) {
  SliceAttrs a;
  a.from_attrs = attrs.has("starts") || args.opset < 10;
  if (a.from_attrs) {
    KILN_ASSIGN_OR_RETURN(a.starts, attrs.require_ints("starts"));
    KILN_ASSIGN_OR_RETURN(a.ends, attrs.require_ints("ends"));
    KILN_ASSIGN_OR_RETURN(a.axes, attrs.get_ints("axes"));
  }
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, a.from_attrs ? 1 : 5));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        SliceParams p;
        KILN_RETURN_IF_ERROR(slice_params(a, in, &p));
        out[0] = {in[0].dtype, p.out};
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        SliceParams p;
        KILN_RETURN_IF_ERROR(slice_params(a, in, &p));
        const Shape st = contiguous_strides(in[0].shape);
        const int r = in[0].shape.rank();
        int64_t strides[kMaxRank];
        int64_t base = 0;
        for (int d = 0; d < r; ++d) {
          base += p.start[d] * st[d];
          strides[d] = p.step[d] * st[d];
        }
        const size_t es = dtype_size(in[0].dtype);
        copy_strided(out[0].data, static_cast<const char*>(in[0].data) + base * static_cast<int64_t>(es), r,
                     out[0].shape.data(), strides, es);
        return Status::Ok();
      });
}

// ---- Expand, Tile ----

KernelOr make_expand(const KernelArgs&, AttrReader&) {
  return lambda_kernel(
      [](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        int64_t dims[kMaxRank];
        int n = 0;
        KILN_RETURN_IF_ERROR(read_small_ints(in[1], dims, kMaxRank, &n, "input 1 (shape)"));
        for (int i = 0; i < n; ++i)
          if (dims[i] < 0)
            return InvalidArgument("input 1 (shape) dim " + std::to_string(i) + " is " + std::to_string(dims[i]));
        KILN_ASSIGN_OR_RETURN(Shape os, broadcast_shapes(in[0].shape, Shape(std::span<const int64_t>(dims, n))));
        out[0] = {in[0].dtype, os};
        return Status::Ok();
      },
      [](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        const Shape st = broadcast_strides(in[0].shape, out[0].shape);
        copy_strided(out[0].data, in[0].data, out[0].shape.rank(), out[0].shape.data(), st.data(),
                     dtype_size(in[0].dtype));
        return Status::Ok();
      });
}

KernelOr make_tile(const KernelArgs&, AttrReader&) {
  return lambda_kernel(
      [](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        int64_t reps[kMaxRank];
        int n = 0;
        KILN_RETURN_IF_ERROR(read_small_ints(in[1], reps, kMaxRank, &n, "input 1 (repeats)"));
        const Shape& s = in[0].shape;
        if (n != s.rank())
          return InvalidArgument("input 1 (repeats) has " + std::to_string(n) + " entries for input rank " +
                                 std::to_string(s.rank()));
        out[0] = {in[0].dtype, s};
        for (int d = 0; d < n; ++d) {
          if (reps[d] < 0)
            return InvalidArgument("input 1 (repeats) entry " + std::to_string(d) + " is " + std::to_string(reps[d]));
          out[0].shape[d] = s[d] * reps[d];
        }
        return Status::Ok();
      },
      [](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        // The output is the view [rep0, d0, rep1, d1, ...] of the input with zero strides on reps.
        const Shape& s = in[0].shape;
        const Shape st = contiguous_strides(s);
        int64_t dims[kMaxViewRank], strides[kMaxViewRank];
        for (int d = 0; d < s.rank(); ++d) {
          dims[2 * d] = s[d] == 0 ? 0 : out[0].shape[d] / s[d];
          strides[2 * d] = 0;
          dims[2 * d + 1] = s[d];
          strides[2 * d + 1] = st[d];
        }
        copy_strided(out[0].data, in[0].data, 2 * s.rank(), dims, strides, dtype_size(in[0].dtype));
        return Status::Ok();
      });
}

// ---- Pad ----

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

struct PadParams {
  int64_t begin[kMaxRank];
  Shape out;
};

Status pad_params(std::span<const TensorView> in, bool from_attr, const std::vector<int64_t>& pads_attr,
                  PadMode mode, PadParams* p) {
  const Shape& s = in[0].shape;
  const int r = s.rank();
  int64_t pads[2 * kMaxRank];
  int np = 0;
  if (from_attr) {
    if (pads_attr.size() > static_cast<size_t>(2 * kMaxRank)) return InvalidArgument("attribute 'pads' is too long");
    np = static_cast<int>(pads_attr.size());
    std::copy(pads_attr.begin(), pads_attr.end(), pads);
  } else {
    if (in.size() < 2 || !in[1].present()) return InvalidArgument("input 1 (pads) is required");
    KILN_RETURN_IF_ERROR(read_small_ints(in[1], pads, 2 * kMaxRank, &np, "input 1 (pads)"));
  }
  int64_t axes[kMaxRank];
  int na = r;
  for (int d = 0; d < r; ++d) axes[d] = d;
  if (in.size() > 3 && in[3].present())
    KILN_RETURN_IF_ERROR(read_small_ints(in[3], axes, kMaxRank, &na, "input 3 (axes)"));
  if (np != 2 * na)
    return InvalidArgument("pads has " + std::to_string(np) + " entries, expected " + std::to_string(2 * na));
  p->out = s;
  int64_t end[kMaxRank] = {};
  for (int d = 0; d < r; ++d) p->begin[d] = 0;
  for (int i = 0; i < na; ++i) {
    KILN_ASSIGN_OR_RETURN(int d, normalize_axis(axes[i], r, "axes entry"));
    p->begin[d] = pads[i];
    end[d] = pads[i + na];
  }
  for (int d = 0; d < r; ++d) {
    const int64_t o = s[d] + p->begin[d] + end[d];
    if (o < 0)
      return InvalidArgument("pads make dim " + std::to_string(d) + " negative (" + std::to_string(o) + ")");
    if (mode != PadMode::kConstant && s[d] == 0 && o > 0)
      return InvalidArgument("cannot pad empty dim " + std::to_string(d) + " in a non-constant mode");
    p->out[d] = o;
  }
  return Status::Ok();
}

// Input coordinate of output coordinate `o` along a dim of size n padded by `begin`; -1 = pad value.
inline int64_t pad_source(int64_t o, int64_t begin, int64_t n, PadMode mode) {
  int64_t i = o - begin;
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::kConstant: return -1;
    case PadMode::kEdge: return i < 0 ? 0 : n - 1;
    case PadMode::kWrap: return ((i % n) + n) % n;
    case PadMode::kReflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      i = ((i % period) + period) % period;
      return i < n ? i : period - i;
    }
  }
  return -1;
}

template <typename T>
void pad_run(const TensorView& in, const TensorView& out, const PadParams& p, PadMode mode, T value) {
  const Shape& s = in.shape;
  const int r = s.rank();
  const T* src = in.as<T>();
  T* dst = out.as<T>();
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  const Shape ist = contiguous_strides(s);
  const int64_t row = p.out[r - 1], n_last = s[r - 1], b_last = p.begin[r - 1];
  const int64_t rows = row == 0 ? 0 : out.numel() / row;
  // Per output row: its elements read and written, and an index computation each.
  const LoopCost cost{2.0 * sizeof(T) * static_cast<double>(row), 2.0 * static_cast<double>(row)};
  ThreadPool::global().parallel_for(rows, cost, [&](int64_t k_begin, int64_t k_end, int) {
    for (int64_t k = k_begin; k < k_end; ++k) {
      int64_t q = k, off = 0;
      bool inside = true;
      for (int d = r - 2; d >= 0; --d) {
        const int64_t o = q % p.out[d];
        q /= p.out[d];
        const int64_t i = pad_source(o, p.begin[d], s[d], mode);
        if (i < 0) inside = false;
        off += i * ist[d];
      }
      T* o = dst + k * row;
      if (!inside) {
        std::fill(o, o + row, value);
        continue;
      }
      for (int64_t j = 0; j < row; ++j) {
        const int64_t i = pad_source(j, b_last, n_last, mode);
        o[j] = i < 0 ? value : src[off + i];
      }
    }
  });
}

KernelOr make_pad(const KernelArgs& args, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(std::string mode_s, attrs.get_string("mode", "constant"));
  PadMode mode;
  if (mode_s == "constant") mode = PadMode::kConstant;
  else if (mode_s == "reflect") mode = PadMode::kReflect;
  else if (mode_s == "edge") mode = PadMode::kEdge;
  else if (mode_s == "wrap") mode = PadMode::kWrap;
  else return Unimplemented("attribute 'mode'='" + mode_s + "' is not supported");
  const bool from_attr = attrs.has("pads") || args.opset < 11;
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pads_attr, attrs.get_ints("pads"));
  KILN_ASSIGN_OR_RETURN(float value_attr, attrs.get_float("value", 0.0f));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, from_attr ? 1 : 4));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        if (in.size() > 2 && in[2].present()) {
          if (in[2].dtype != in[0].dtype)
            return InvalidArgument("input 2 (constant_value) dtype " + dtype_name(in[2].dtype) +
                                   " differs from input 0 dtype " + dtype_name(in[0].dtype));
          if (in[2].numel() > 1)
            return InvalidArgument("input 2 (constant_value) must be a scalar, got shape " + in[2].shape.str());
        }
        PadParams p;
        KILN_RETURN_IF_ERROR(pad_params(in, from_attr, pads_attr, mode, &p));
        out[0] = {in[0].dtype, p.out};
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        PadParams p;
        KILN_RETURN_IF_ERROR(pad_params(in, from_attr, pads_attr, mode, &p));
        char value[8] = {};
        if (in.size() > 2 && in[2].present()) {
          if (in[2].numel() == 1) std::memcpy(value, in[2].data, dtype_size(in[2].dtype));
        } else {
          KILN_RETURN_IF_ERROR(store_double(in[0].dtype, value, value_attr));
        }
        return dispatch_bytes(in[0].dtype, [&](auto t) {
          using T = decltype(t);
          T v;
          std::memcpy(&v, value, sizeof(T));
          pad_run<T>(in[0], out[0], p, mode, v);
          return Status::Ok();
        });
      });
}

// ---- DepthToSpace, SpaceToDepth ----

KernelOr make_depth_to_space(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t b, attrs.require_int("blocksize"));
  KILN_ASSIGN_OR_RETURN(std::string mode, attrs.get_string("mode", "DCR"));
  if (b <= 0) return InvalidArgument("attribute 'blocksize' must be positive, got " + std::to_string(b));
  if (mode != "DCR" && mode != "CRD") return Unimplemented("attribute 'mode'='" + mode + "' is not supported");
  const bool dcr = mode == "DCR";
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        const Shape& s = in[0].shape;
        if (s.rank() != 4) return InvalidArgument("input 0 must be 4-D (NCHW), got shape " + s.str());
        if (s[1] % (b * b) != 0)
          return InvalidArgument("input 0 channels " + std::to_string(s[1]) + " are not divisible by blocksize^2 " +
                                 std::to_string(b * b));
        out[0] = {in[0].dtype, Shape{s[0], s[1] / (b * b), s[2] * b, s[3] * b}};
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        const Shape& s = in[0].shape;
        const int64_t C = s[1], H = s[2], W = s[3], Co = C / (b * b), sC = H * W;
        // Output order [N, Co, H, b1, W, b2]; input channel b1*b*Co + b2*Co + c (DCR) or c*b*b + b1*b + b2 (CRD).
        const int64_t dims[6] = {s[0], Co, H, b, W, b};
        const int64_t st[6] = {C * sC, (dcr ? 1 : b * b) * sC, W, (dcr ? b * Co : b) * sC, 1, (dcr ? Co : 1) * sC};
        copy_strided(out[0].data, in[0].data, 6, dims, st, dtype_size(in[0].dtype));
        return Status::Ok();
      });
}

KernelOr make_space_to_depth(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t b, attrs.require_int("blocksize"));
  if (b <= 0) return InvalidArgument("attribute 'blocksize' must be positive, got " + std::to_string(b));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        const Shape& s = in[0].shape;
        if (s.rank() != 4) return InvalidArgument("input 0 must be 4-D (NCHW), got shape " + s.str());
        if (s[2] % b != 0 || s[3] % b != 0)
          return InvalidArgument("input 0 spatial dims " + s.str() + " are not divisible by blocksize " +
                                 std::to_string(b));
        out[0] = {in[0].dtype, Shape{s[0], s[1] * b * b, s[2] / b, s[3] / b}};
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        const Shape& s = in[0].shape;
        const int64_t C = s[1], H = s[2], W = s[3];
        // Output channel (b1*b + b2)*C + c at (h, w) reads input (c, h*b + b1, w*b + b2).
        const int64_t dims[6] = {s[0], b, b, C, H / b, W / b};
        const int64_t st[6] = {C * H * W, W, 1, H * W, b * W, b};
        copy_strided(out[0].data, in[0].data, 6, dims, st, dtype_size(in[0].dtype));
        return Status::Ok();
      });
}

// A Transpose is a view (offset 0) whenever it moves only dims of size 1 ([S, 1, D] -> [1, S, D]).
Status transpose_view_offset(const AttrMap& attrs, std::span<const TensorView> in, const TensorDesc&, int64_t* offset) {
  *offset = -1;
  const Shape& x = in[0].shape;
  // A reference, not a copy: this runs every step, and a steady-state run must not allocate.
  static const std::vector<int64_t> kDefaultPerm;
  const auto it = attrs.find("perm");
  const std::vector<int64_t>& perm_attr = it != attrs.end() ? it->second.ints : kDefaultPerm;
  int perm[kMaxRank];
  if (!transpose_perm(perm_attr, x.rank(), perm).ok()) return Status::Ok();  // the kernel reports it
  int last = -1;
  for (int i = 0; i < x.rank(); ++i) {
    if (x[perm[i]] == 1) continue;
    if (perm[i] < last) return Status::Ok();
    last = perm[i];
  }
  *offset = 0;
  return Status::Ok();
}

// A Slice with unit steps is one contiguous block of its input whenever every dim before the first
// sliced one is 1 (pos_table[:S], x[:, -1:] of [1, S, D]).
Status slice_view_offset(const AttrMap&, std::span<const TensorView> in, const TensorDesc& out, int64_t* offset) {
  *offset = -1;
  const Shape& x = in[0].shape;
  if (out.shape.rank() != x.rank() || (out.shape.numel() > 0 && !in[0].data)) return Status::Ok();
  SliceParams p;
  if (!slice_params(SliceAttrs{}, in, &p).ok()) return Status::Ok();  // the kernel reports it
  for (int d = 0; d < x.rank(); ++d)
    if (p.out[d] > 1 && p.step[d] != 1) return Status::Ok();  // strided or reversed
  int first = 0;
  while (first < x.rank() && p.out[first] == x[first]) ++first;
  if (first == x.rank()) return *offset = 0, Status::Ok();  // the whole input
  for (int d = 0; d < first; ++d)
    if (x[d] != 1) return Status::Ok();
  for (int d = first + 1; d < x.rank(); ++d)
    if (p.out[d] != x[d]) return Status::Ok();
  *offset = p.start[first] * x.numel(first + 1, x.rank()) * static_cast<int64_t>(dtype_size(in[0].dtype));
  return Status::Ok();
}

StepMemory transpose_memory(const MemoryQuery& q) {
  if (q.num_outputs != 1 || q.constant_inputs.size() != 1) return {};
  return view_memory(OutputAlias::kMayView, transpose_view_offset);
}

StepMemory slice_memory(const MemoryQuery& q) {
  // Slice-10 and later (starts and ends as inputs); the attribute form of opset 1 always copies.
  if (q.num_outputs != 1 || q.constant_inputs.size() < 3) return {};
  return view_memory(OutputAlias::kMayView, slice_view_offset);
}

// Concat copies only the inputs not already at their place in its output (make_concat).
StepMemory concat_memory(const MemoryQuery& q) {
  auto axis = q.attrs.find("axis");
  if (q.num_outputs != 1 || axis == q.attrs.end() || axis->second.kind != Attribute::Kind::kInt) return {};
  return joining_memory(axis->second.i);
}

}  // namespace

void register_tensor_layout_kernels(KernelRegistry& r) {
  r.add({"Transpose", "reference", 0, make_transpose});
  r.add({"Concat", "reference", 0, make_concat});
  r.add({"Split", "reference", 0, make_split});
  r.add({"Slice", "reference", 0, make_slice});
  r.add({"Expand", "reference", 0, make_expand});
  r.add({"Tile", "reference", 0, make_tile});
  r.add({"Pad", "reference", 0, make_pad});
  r.add({"DepthToSpace", "reference", 0, make_depth_to_space});
  r.add({"SpaceToDepth", "reference", 0, make_space_to_depth});
  r.set_memory_rule("Transpose", transpose_memory);
  r.set_memory_rule("Slice", slice_memory);
  r.set_memory_rule("Concat", concat_memory);
}

}  // namespace kiln
