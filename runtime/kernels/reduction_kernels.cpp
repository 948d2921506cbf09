// Reduce* (Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare) and ArgMax/ArgMin,
// plus the family's registration function.
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/kernel.h"
#include "runtime/kernels/families.h"
#include "runtime/kernels/reduction_common.h"
#include "runtime/kernels/vec_kernels.h"
#include "runtime/thread_pool.h"

namespace kiln {
namespace {

enum class ReduceOp { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

// The input viewed as kept dims (which index the contiguous output) and reduced dims, after
// dropping size-1 dims and merging neighbours of the same kind, so that the common cases become
// one or two tight loops.
struct ReducePlan {
  int nkept = 0, nred = 0;
  int64_t kept_size[kMaxRank], kept_stride[kMaxRank];
  int64_t red_size[kMaxRank], red_stride[kMaxRank];
  int64_t out_count = 1, red_count = 1;
};

ReducePlan make_reduce_plan(const Shape& in, const bool* reduced) {
  ReducePlan p;
  const Shape strides = contiguous_strides(in);
  int last_kind = -1;  // 0 kept, 1 reduced
  for (int d = 0; d < in.rank(); ++d) {
    if (in[d] == 1) continue;
    const int kind = reduced[d] ? 1 : 0;
    int64_t* sizes = kind ? p.red_size : p.kept_size;
    int64_t* strd = kind ? p.red_stride : p.kept_stride;
    int& n = kind ? p.nred : p.nkept;
    if (kind == last_kind) {  // contiguous with the previous dim of the same kind: merge
      sizes[n - 1] *= in[d];
      strd[n - 1] = strides[d];
    } else {
      sizes[n] = in[d];
      strd[n] = strides[d];
      ++n;
    }
    last_kind = kind;
    (kind ? p.red_count : p.out_count) *= in[d];
  }
  return p;
}

// Offset in the input of the first element reduced into output element `o`.
inline int64_t kept_offset(const ReducePlan& p, int64_t o) {
  int64_t off = 0;
  for (int k = p.nkept - 1; k >= 0; --k) {
    off += (o % p.kept_size[k]) * p.kept_stride[k];
    o /= p.kept_size[k];
  }
  return off;
}

// Calls f(value) for every input element reduced into the output element whose first input
// element is at `base`.
template <typename S, typename F>
inline void for_each_reduced(const ReducePlan& p, const S* x, int64_t base, F&& f) {
  if (p.nred == 0) {
    f(Elem<S>::load(x[base]));
    return;
  }
  if (p.nred == 1) {
    const int64_t n = p.red_size[0], st = p.red_stride[0];
    for (int64_t i = 0; i < n; ++i) f(Elem<S>::load(x[base + i * st]));
    return;
  }
  if (p.red_count == 0) return;
  int64_t idx[kMaxRank] = {};
  int64_t off = base;
  const int last = p.nred - 1;
  for (;;) {
    for (int64_t i = 0; i < p.red_size[last]; ++i) f(Elem<S>::load(x[off + i * p.red_stride[last]]));
    int d = last - 1;
    for (; d >= 0; --d) {
      off += p.red_stride[d];
      if (++idx[d] < p.red_size[d]) break;
      off -= p.red_stride[d] * p.red_size[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// float32 Sum / Mean / Max / Min over contiguous rows (the reduced axes are the innermost ones,
// what LayerNorm-style statistics and pooling-by-reduce produce) through the vector loops of
// runtime/kernels/vec_kernels.h, rows spread over kiln's pool. Sums accumulate in double like the
// scalar loop below; a row with a NaN falls back to it for Max / Min. False: not this case.
bool reduce_rows_f32(ReduceOp op, const ReducePlan& p, const float* x, float* y) {
  const bool sum = op == ReduceOp::kSum || op == ReduceOp::kMean;
  if ((!sum && op != ReduceOp::kMax && op != ReduceOp::kMin) || p.nred != 1 || p.red_stride[0] != 1) return false;
  const int64_t n = p.red_count;
  if (n == 0 || (p.nkept > 0 && p.kept_stride[p.nkept - 1] != n)) return false;  // rows must be back to back
  const vec::Table& t = vec::table();
  ThreadPool::global().parallel_for(p.out_count, LoopCost{4.0 * static_cast<double>(n), static_cast<double>(n)},
                                    [&](int64_t b, int64_t e, int) {
    for (int64_t o = b; o < e; ++o) {
      const float* row = x + o * n;
      if (sum) {
        const double a = t.row_sum(row, n);
        y[o] = static_cast<float>(op == ReduceOp::kMean ? a / static_cast<double>(n) : a);
      } else if (!t.row_extreme(row, n, op == ReduceOp::kMax, &y[o])) {
        float m = op == ReduceOp::kMax ? -INFINITY : INFINITY;
        for (int64_t i = 0; i < n; ++i)
          if (std::isnan(row[i])) {
            m = row[i];
            break;
          }
        y[o] = m;
      }
    }
  });
  return true;
}

template <typename S>
void reduce_typed(ReduceOp op, const ReducePlan& p, const S* x, S* y) {
  if constexpr (std::is_same_v<S, float>)
    if (reduce_rows_f32(op, p, x, y)) return;
  using C = typename Elem<S>::Compute;
  constexpr bool kFloat = std::is_floating_point_v<C>;
  // Sums and products accumulate in double (floats) or unsigned 64-bit integers: integer tensors
  // wrap around on overflow, as in numpy, and unsigned arithmetic makes that defined (a model's
  // int64 constants can be anything; the onnx_import fuzz target folded a ReduceSumSquare of them).
  using Acc = std::conditional_t<kFloat, double, uint64_t>;
  const int64_t count = p.red_count;
  // Per output: its reduced elements (strided reads, a few flops; exp or log for the Log ops).
  const double c = static_cast<double>(count);
  const LoopCost cost{2.0 * sizeof(S) * c, (op == ReduceOp::kLogSumExp ? 30.0 : 4.0) * c};
  ThreadPool::global().parallel_for(p.out_count, cost, [&](int64_t o_begin, int64_t o_end, int) {
    for (int64_t o = o_begin; o < o_end; ++o) {
      const int64_t base = kept_offset(p, o);
      double r = 0;  // result for the ops that end in floating point math
      switch (op) {
        case ReduceOp::kMax:
        case ReduceOp::kMin: {
          const bool is_max = op == ReduceOp::kMax;
          C m = is_max ? (kFloat ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest())
                       : (kFloat ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max());
          // NaN wins, as in numpy: once m is NaN neither comparison replaces it.
          for_each_reduced(p, x, base, [&](C v) {
            if ((is_max ? v > m : v < m) || is_nan(v)) m = v;
          });
          y[o] = Elem<S>::store(m);
          continue;
        }
        case ReduceOp::kProd: {
          Acc a = 1;
          for_each_reduced(p, x, base, [&](C v) { a *= static_cast<Acc>(v); });
          y[o] = Elem<S>::store(static_cast<C>(a));
          continue;
        }
        case ReduceOp::kSum:
        case ReduceOp::kMean:
        case ReduceOp::kL1:
        case ReduceOp::kSumSquare: {
          Acc a = 0;
          if (op == ReduceOp::kL1)
            for_each_reduced(p, x, base, [&](C v) { a += v < 0 ? Acc{0} - static_cast<Acc>(v) : static_cast<Acc>(v); });
          else if (op == ReduceOp::kSumSquare)
            for_each_reduced(p, x, base, [&](C v) { a += static_cast<Acc>(v) * static_cast<Acc>(v); });
          else
            for_each_reduced(p, x, base, [&](C v) { a += static_cast<Acc>(v); });
          if (op == ReduceOp::kMean) {
            if constexpr (kFloat) a /= static_cast<Acc>(count);  // empty: 0/0 = NaN, as numpy
            else if constexpr (std::is_signed_v<C>) a = count ? static_cast<Acc>(static_cast<int64_t>(a) / count) : 0;
            else a = count ? a / static_cast<Acc>(count) : 0;
          }
          y[o] = Elem<S>::store(static_cast<C>(a));
          continue;
        }
        case ReduceOp::kL2: {
          double a = 0;
          for_each_reduced(p, x, base, [&](C v) { a += static_cast<double>(v) * static_cast<double>(v); });
          r = std::sqrt(a);
          break;
        }
        case ReduceOp::kLogSum: {
          double a = 0;
          for_each_reduced(p, x, base, [&](C v) { a += static_cast<double>(v); });
          r = std::log(a);
          break;
        }
        case ReduceOp::kLogSumExp: {
          double m = -std::numeric_limits<double>::infinity();
          for_each_reduced(p, x, base, [&](C v) {
            if (static_cast<double>(v) > m || is_nan(v)) m = static_cast<double>(v);
          });
          if (std::isinf(m)) {  // empty, all -inf, or a +inf present: the sum of exps does not help
            r = m;
            break;
          }
          double a = 0;
          for_each_reduced(p, x, base, [&](C v) { a += std::exp(static_cast<double>(v) - m); });
          r = m + std::log(a);
          break;
        }
      }
      if constexpr (kFloat) y[o] = Elem<S>::store(static_cast<C>(r));
      else {
        // An integer tensor's L2 / log results saturate: converting an out-of-range double to an
        // integer is undefined (the onnx_import fuzz target found a uint64 ReduceL2 of 1.8e19).
        constexpr double lo = static_cast<double>(std::numeric_limits<C>::lowest());
        constexpr double hi = static_cast<double>(std::numeric_limits<C>::max());
        y[o] = !std::isfinite(r) ? C{0} : r <= lo ? std::numeric_limits<C>::lowest() : r >= hi ? std::numeric_limits<C>::max() : static_cast<C>(r);
      }
    }
  });
}

class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(ReduceOp op, bool keepdims, bool noop_with_empty_axes, bool has_attr_axes, std::vector<int64_t> axes)
      : op_(op), keepdims_(keepdims), noop_(noop_with_empty_axes), has_attr_axes_(has_attr_axes),
        attr_axes_(std::move(axes)) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 1, 2));
    KILN_RETURN_IF_ERROR(dispatch_arith(in[0].dtype, [](auto) { return Status::Ok(); }, "input 0"));
    bool reduced[kMaxRank];
    bool identity = false;
    KILN_RETURN_IF_ERROR(reduced_axes(in, reduced, &identity));
    const Shape& s = in[0].shape;
    Shape os;
    for (int d = 0; d < s.rank(); ++d) {
      if (identity || !reduced[d]) os.push_back(s[d]);
      else if (keepdims_) os.push_back(1);
    }
    out[0] = TensorDesc{in[0].dtype, os};
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    bool reduced[kMaxRank];
    bool identity = false;
    KILN_RETURN_IF_ERROR(reduced_axes(in, reduced, &identity));
    if (identity) {
      if (in[0].nbytes()) std::memcpy(out[0].data, in[0].data, in[0].nbytes());
      return Status::Ok();
    }
    if (out[0].numel() == 0) return Status::Ok();
    const ReducePlan plan = make_reduce_plan(in[0].shape, reduced);
    return dispatch_arith(in[0].dtype, [&](auto tag) {
      using S = decltype(tag);
      reduce_typed<S>(op_, plan, in[0].as<S>(), out[0].as<S>());
      return Status::Ok();
    });
  }

 private:
  // Fills reduced[d] for each input dim; *identity is set when empty axes with
  // noop_with_empty_axes make the op a copy.
  Status reduced_axes(std::span<const TensorView> in, bool* reduced, bool* identity) const {
    const int rank = in[0].shape.rank();
    for (int d = 0; d < rank; ++d) reduced[d] = false;
    const bool has_input_axes = in.size() > 1 && in[1].present();
    if (has_input_axes && has_attr_axes_)
      return InvalidArgument("axes given both as attribute and as input 1");
    int64_t n = 0;
    if (has_input_axes) {
      if (in[1].dtype != DType::kInt64 && in[1].dtype != DType::kInt32)
        return InvalidArgument("input 1 (axes) must be int64, got " + dtype_name(in[1].dtype));
      if (in[1].shape.rank() > 1)
        return InvalidArgument("input 1 (axes) must be 1-D, got shape " + in[1].shape.str());
      n = in[1].numel();
    } else {
      n = static_cast<int64_t>(attr_axes_.size());
    }
    *identity = n == 0 && noop_;
    if (n == 0) {
      for (int d = 0; d < rank; ++d) reduced[d] = true;
      return Status::Ok();
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t a = has_input_axes ? read_int(in[1], i) : attr_axes_[i];
      if (a < -rank || a >= rank)
        return InvalidArgument("axes[" + std::to_string(i) + "] = " + std::to_string(a) +
                               " is out of range for input 0 of rank " + std::to_string(rank));
      const int d = static_cast<int>(a < 0 ? a + rank : a);
      if (reduced[d]) return InvalidArgument("axes[" + std::to_string(i) + "] repeats axis " + std::to_string(a));
      reduced[d] = true;
    }
    return Status::Ok();
  }

  ReduceOp op_;
  bool keepdims_, noop_, has_attr_axes_;
  std::vector<int64_t> attr_axes_;
};

KernelFactory reduce_factory(ReduceOp op) {
  return [op](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
    KILN_ASSIGN_OR_RETURN(int64_t keepdims, attrs.get_int("keepdims", 1));
    KILN_ASSIGN_OR_RETURN(int64_t noop, attrs.get_int("noop_with_empty_axes", 0));
    const bool has_axes = attrs.has("axes");
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes, attrs.get_ints("axes"));
    if (has_axes && args.num_inputs > 1) return InvalidArgument("axes given both as attribute and as input 1");
    return std::unique_ptr<Kernel>(
        std::make_unique<ReduceKernel>(op, keepdims != 0, noop != 0, has_axes, std::move(axes)));
  };
}

template <typename S>
void arg_reduce_typed(bool is_max, bool last, const AxisSplit& sp, const S* x, int64_t* y) {
  using C = typename Elem<S>::Compute;
  const double per_outer = static_cast<double>(sp.n * sp.inner);
  parallel_for_each(sp.outer, LoopCost{2.0 * sizeof(S) * per_outer, 2.0 * per_outer}, [&](int64_t o) {
    for (int64_t i = 0; i < sp.inner; ++i) {
      const S* row = x + o * sp.n * sp.inner + i;
      C best = Elem<S>::load(row[0]);
      int64_t best_idx = 0;
      for (int64_t a = 1; a < sp.n; ++a) {
        const C v = Elem<S>::load(row[a * sp.inner]);
        // A NaN stays selected (numpy's argmax returns the first NaN).
        if (is_nan(best)) break;
        const bool better = is_max ? (v > best || (last && v == best)) : (v < best || (last && v == best));
        if (better || is_nan(v)) {
          best = v;
          best_idx = a;
        }
      }
      y[o * sp.inner + i] = best_idx;
    }
  });
}

KernelFactory arg_reduce_factory(bool is_max) {
  return [is_max](const KernelArgs&, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
    KILN_ASSIGN_OR_RETURN(int64_t axis, attrs.get_int("axis", 0));
    KILN_ASSIGN_OR_RETURN(int64_t keepdims, attrs.get_int("keepdims", 1));
    KILN_ASSIGN_OR_RETURN(int64_t last, attrs.get_int("select_last_index", 0));
    auto resolve = [axis](const TensorView& x) -> StatusOr<int> {
      if (x.shape.rank() == 0) return InvalidArgument("input 0 must have rank >= 1, got a scalar");
      KILN_ASSIGN_OR_RETURN(int a, normalize_axis(axis, x.shape.rank()));
      if (x.shape[a] == 0)
        return InvalidArgument("input 0 has size 0 along axis " + std::to_string(axis) + ": no index to return");
      return a;
    };
    auto infer = [resolve, keepdims](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
      KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
      KILN_RETURN_IF_ERROR(dispatch_arith(in[0].dtype, [](auto) { return Status::Ok(); }, "input 0"));
      KILN_ASSIGN_OR_RETURN(int a, resolve(in[0]));
      Shape os;
      for (int d = 0; d < in[0].shape.rank(); ++d) {
        if (d != a) os.push_back(in[0].shape[d]);
        else if (keepdims) os.push_back(1);
      }
      out[0] = TensorDesc{DType::kInt64, os};
      return Status::Ok();
    };
    auto run = [resolve, is_max, last](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
      KILN_ASSIGN_OR_RETURN(int a, resolve(in[0]));
      const AxisSplit sp = split_at_axis(in[0].shape, a);
      return dispatch_arith(in[0].dtype, [&](auto tag) {
        using S = decltype(tag);
        arg_reduce_typed<S>(is_max, last != 0, sp, in[0].as<S>(), out[0].as<int64_t>());
        return Status::Ok();
      });
    };
    return make_lambda_kernel(infer, run);
  };
}

}  // namespace

void register_reduction_kernels(KernelRegistry& r) {
  const std::pair<const char*, ReduceOp> reduces[] = {
      {"ReduceSum", ReduceOp::kSum},         {"ReduceMean", ReduceOp::kMean},
      {"ReduceMax", ReduceOp::kMax},         {"ReduceMin", ReduceOp::kMin},
      {"ReduceProd", ReduceOp::kProd},       {"ReduceL1", ReduceOp::kL1},
      {"ReduceL2", ReduceOp::kL2},           {"ReduceLogSum", ReduceOp::kLogSum},
      {"ReduceLogSumExp", ReduceOp::kLogSumExp}, {"ReduceSumSquare", ReduceOp::kSumSquare},
  };
  for (const auto& [name, op] : reduces) r.add({name, "reference", 0, reduce_factory(op)});
  r.add({"ArgMax", "reference", 0, arg_reduce_factory(true)});
  r.add({"ArgMin", "reference", 0, arg_reduce_factory(false)});
  register_reduction_softmax_kernels(r);
  register_reduction_misc_kernels(r);
}

}  // namespace kiln
