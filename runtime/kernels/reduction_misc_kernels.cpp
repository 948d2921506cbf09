// CumSum, TopK and Einsum.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "runtime/kernel.h"
#include "runtime/kernels/reduction_common.h"
#include "runtime/thread_pool.h"

namespace kiln {
namespace {

// Sums of floats accumulate in double, integers in their own type (wrapping like the tensor type).
template <typename C>
using SumAcc = std::conditional_t<std::is_floating_point_v<C>, double, C>;

// ---------------------------------------------------------------------------------------------
// CumSum

StatusOr<int> cumsum_axis(std::span<const TensorView> in) {
  const TensorView& ax = in[1];
  if (ax.dtype != DType::kInt64 && ax.dtype != DType::kInt32)
    return InvalidArgument("input 1 (axis) must be int32 or int64, got " + dtype_name(ax.dtype));
  if (ax.numel() != 1 || ax.shape.rank() > 1)
    return InvalidArgument("input 1 (axis) must be a scalar, got shape " + ax.shape.str());
  const int rank = in[0].shape.rank();
  if (rank == 0) return InvalidArgument("input 0 must have rank >= 1, got a scalar");
  return normalize_axis(read_int(ax, 0), rank, "input 1 (axis)");
}

template <typename S>
void cumsum_typed(const AxisSplit& sp, bool exclusive, bool reverse, const S* x, S* y) {
  using C = typename Elem<S>::Compute;
  const int64_t lines = sp.outer * sp.inner;
  const double n = static_cast<double>(sp.n);
  parallel_for_each(lines, LoopCost{2.0 * sizeof(S) * n, n}, [&](int64_t l) {
    const int64_t o = l / sp.inner, i = l % sp.inner;
    const int64_t base = o * sp.n * sp.inner + i;
    SumAcc<C> acc = 0;
    for (int64_t k = 0; k < sp.n; ++k) {
      const int64_t a = reverse ? sp.n - 1 - k : k;
      const int64_t off = base + a * sp.inner;
      const C v = Elem<S>::load(x[off]);
      if (!exclusive) acc += v;
      y[off] = Elem<S>::store(static_cast<C>(acc));
      if (exclusive) acc += v;
    }
  });
}

KernelFactory cumsum_factory() {
  return [](const KernelArgs&, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
    KILN_ASSIGN_OR_RETURN(int64_t exclusive, attrs.get_int("exclusive", 0));
    KILN_ASSIGN_OR_RETURN(int64_t reverse, attrs.get_int("reverse", 0));
    auto infer = [](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
      KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
      KILN_RETURN_IF_ERROR(dispatch_arith(in[0].dtype, [](auto) { return Status::Ok(); }, "input 0"));
      KILN_ASSIGN_OR_RETURN(int axis, cumsum_axis(in));
      (void)axis;
      out[0] = in[0].desc();
      return Status::Ok();
    };
    auto run = [exclusive, reverse](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
      KILN_ASSIGN_OR_RETURN(int axis, cumsum_axis(in));
      if (in[0].numel() == 0) return Status::Ok();
      const AxisSplit sp = split_at_axis(in[0].shape, axis);
      return dispatch_arith(in[0].dtype, [&](auto tag) {
        using S = decltype(tag);
        cumsum_typed<S>(sp, exclusive != 0, reverse != 0, in[0].as<S>(), out[0].as<S>());
        return Status::Ok();
      });
    };
    return make_lambda_kernel(infer, run);
  };
}

// ---------------------------------------------------------------------------------------------
// TopK

class TopKKernel final : public Kernel {
 public:
  TopKKernel(int64_t axis, bool largest, int64_t attr_k) : axis_(axis), largest_(largest), attr_k_(attr_k) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, attr_k_ >= 0 ? 1 : 2, attr_k_ >= 0 ? 1 : 2));
    KILN_RETURN_IF_ERROR(dispatch_arith(in[0].dtype, [](auto) { return Status::Ok(); }, "input 0"));
    int axis = 0;
    int64_t k = 0;
    KILN_RETURN_IF_ERROR(resolve(in, &axis, &k));
    Shape os = in[0].shape;
    os[axis] = k;
    out[0] = TensorDesc{in[0].dtype, os};
    if (out.size() > 1) out[1] = TensorDesc{DType::kInt64, os};
    return Status::Ok();
  }

  Status prepare(std::span<const TensorView> in, std::span<const TensorView>) override {
    int axis = 0;
    int64_t k = 0;
    KILN_RETURN_IF_ERROR(resolve(in, &axis, &k));
    order_.resize(static_cast<size_t>(in[0].shape[axis]));
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    int axis = 0;
    int64_t k = 0;
    KILN_RETURN_IF_ERROR(resolve(in, &axis, &k));
    const AxisSplit sp = split_at_axis(in[0].shape, axis);
    if (static_cast<int64_t>(order_.size()) != sp.n) return Internal("TopK run() before prepare() for this shape");
    if (k == 0 || in[0].numel() == 0) return Status::Ok();
    return dispatch_arith(in[0].dtype, [&](auto tag) {
      using S = decltype(tag);
      run_typed<S>(sp, k, in[0].as<S>(), out[0].as<S>(), out.size() > 1 ? out[1].as<int64_t>() : nullptr);
      return Status::Ok();
    });
  }

 private:
  Status resolve(std::span<const TensorView> in, int* axis, int64_t* k) const {
    const Shape& s = in[0].shape;
    if (s.rank() == 0) return InvalidArgument("input 0 must have rank >= 1, got a scalar");
    KILN_ASSIGN_OR_RETURN(*axis, normalize_axis(axis_, s.rank()));
    if (attr_k_ >= 0) {
      *k = attr_k_;
    } else {
      const TensorView& kt = in[1];
      if (kt.dtype != DType::kInt64) return InvalidArgument("input 1 (K) must be int64, got " + dtype_name(kt.dtype));
      if (kt.numel() != 1) return InvalidArgument("input 1 (K) must hold one value, got shape " + kt.shape.str());
      *k = read_int(kt, 0);
    }
    if (*k < 0 || *k > s[*axis])
      return InvalidArgument("K = " + std::to_string(*k) + " is out of range [0, " + std::to_string(s[*axis]) +
                             "] for input 0 dim " + std::to_string(*axis));
    return Status::Ok();
  }

  // Always sorted (also for sorted=0, where ONNX leaves the order free); equal values keep the
  // lower index first. NaN counts as larger than every number.
  template <typename S>
  void run_typed(const AxisSplit& sp, int64_t k, const S* x, S* values, int64_t* indices) {
    using C = typename Elem<S>::Compute;
    auto greater = [](C a, C b) { return is_nan(a) ? !is_nan(b) : (!is_nan(b) && a > b); };
    for (int64_t o = 0; o < sp.outer; ++o) {
      for (int64_t i = 0; i < sp.inner; ++i) {
        const int64_t base = o * sp.n * sp.inner + i;
        auto val = [&](int64_t a) { return Elem<S>::load(x[base + a * sp.inner]); };
        for (int64_t a = 0; a < sp.n; ++a) order_[a] = a;
        auto before = [&](int64_t a, int64_t b) {
          const C va = val(a), vb = val(b);
          if (largest_ ? greater(va, vb) : greater(vb, va)) return true;
          if (largest_ ? greater(vb, va) : greater(va, vb)) return false;
          return a < b;
        };
        std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), before);
        const int64_t obase = o * k * sp.inner + i;
        for (int64_t j = 0; j < k; ++j) {
          values[obase + j * sp.inner] = x[base + order_[j] * sp.inner];
          if (indices) indices[obase + j * sp.inner] = order_[j];
        }
      }
    }
  }

  int64_t axis_;
  bool largest_;
  int64_t attr_k_;  // opset < 10 takes K as an attribute; -1 when it comes as input 1
  std::vector<int64_t> order_;
};

KernelFactory topk_factory() {
  return [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
    KILN_ASSIGN_OR_RETURN(int64_t axis, attrs.get_int("axis", -1));
    KILN_ASSIGN_OR_RETURN(int64_t largest, attrs.get_int("largest", 1));
    KILN_ASSIGN_OR_RETURN(int64_t sorted, attrs.get_int("sorted", 1));
    (void)sorted;  // the output is always sorted, which satisfies both values
    int64_t attr_k = -1;
    if (args.opset < 10) {
      KILN_ASSIGN_OR_RETURN(attr_k, attrs.require_int("k"));
      if (attr_k < 0) return InvalidArgument("attribute 'k' must be >= 0, got " + std::to_string(attr_k));
    }
    return std::unique_ptr<Kernel>(std::make_unique<TopKKernel>(axis, largest != 0, attr_k));
  };
}

// ---------------------------------------------------------------------------------------------
// Einsum

// A parsed equation: per input term the labels (letters as their char codes, -1 for "..."),
// and the output term when given explicitly.
struct EinsumEquation {
  std::vector<std::vector<int>> inputs;
  bool explicit_output = false;
  std::vector<int> output;
};

constexpr int kEllipsis = -1;

StatusOr<std::vector<int>> parse_einsum_term(const std::string& term, const std::string& eq) {
  std::vector<int> labels;
  bool seen_ellipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    const char c = term[i];
    if (c == '.') {
      if (term.compare(i, 3, "...") != 0 || seen_ellipsis)
        return InvalidArgument("attribute 'equation'='" + eq + "': malformed '...' in term '" + term + "'");
      seen_ellipsis = true;
      labels.push_back(kEllipsis);
      i += 2;
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      labels.push_back(c);
    } else {
      return InvalidArgument("attribute 'equation'='" + eq + "': unexpected character '" + std::string(1, c) + "'");
    }
  }
  return labels;
}

StatusOr<EinsumEquation> parse_einsum(const std::string& eq) {
  std::string s;
  for (char c : eq)
    if (c != ' ' && c != '\t') s += c;
  EinsumEquation e;
  std::string lhs = s;
  if (size_t arrow = s.find("->"); arrow != std::string::npos) {
    lhs = s.substr(0, arrow);
    e.explicit_output = true;
    KILN_ASSIGN_OR_RETURN(e.output, parse_einsum_term(s.substr(arrow + 2), eq));
    for (size_t i = 0; i < e.output.size(); ++i)
      for (size_t j = i + 1; j < e.output.size(); ++j)
        if (e.output[i] == e.output[j])
          return InvalidArgument("attribute 'equation'='" + eq + "': output repeats a label");
  }
  size_t start = 0;
  for (;;) {
    const size_t comma = lhs.find(',', start);
    KILN_ASSIGN_OR_RETURN(auto term, parse_einsum_term(lhs.substr(start, comma - start), eq));
    e.inputs.push_back(std::move(term));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return e;
}

// The loop nest of one Einsum call for concrete input shapes: every distinct label (letters and
// the broadcast "..." dims) is one loop; output labels form the outer loops, the rest are summed.
// strides[k][j] is input k's stride for loop j (summed over repeated labels, which walks a
// diagonal; 0 for broadcast dims).
struct EinsumPlan {
  std::vector<int64_t> out_sizes, sum_sizes;
  std::vector<std::vector<int64_t>> out_strides, sum_strides;
  Shape out_shape;
};

StatusOr<EinsumPlan> plan_einsum(const EinsumEquation& eq, std::span<const TensorView> in) {
  if (in.size() != eq.inputs.size())
    return InvalidArgument("equation has " + std::to_string(eq.inputs.size()) + " input terms but " +
                           std::to_string(in.size()) + " inputs are given");
  // Labels: letters keep their char code (< 128); "..." dim j (right-aligned) is 128 + j.
  int ell_rank = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const auto& term = eq.inputs[k];
    const bool has_ell = std::find(term.begin(), term.end(), kEllipsis) != term.end();
    const int letters = static_cast<int>(term.size()) - (has_ell ? 1 : 0);
    const int rank = in[k].shape.rank();
    if (has_ell ? rank < letters : rank != letters)
      return InvalidArgument("input " + std::to_string(k) + " has rank " + std::to_string(rank) + " but its term has " +
                             std::to_string(letters) + " labels");
    if (has_ell) ell_rank = std::max(ell_rank, rank - letters);
  }
  constexpr int kNumLabels = 128 + kMaxRank;
  std::vector<int64_t> size(kNumLabels, -1);
  std::vector<int> count(kNumLabels, 0);
  std::vector<std::vector<std::pair<int, int64_t>>> dims(in.size());  // (label, stride) per input dim
  for (size_t k = 0; k < in.size(); ++k) {
    const auto& term = eq.inputs[k];
    const Shape& s = in[k].shape;
    const Shape st = contiguous_strides(s);
    const int ell_here = s.rank() - (static_cast<int>(term.size()) -
                                     (std::find(term.begin(), term.end(), kEllipsis) != term.end() ? 1 : 0));
    int d = 0;
    for (int lab : term) {
      if (lab == kEllipsis) {
        for (int q = 0; q < ell_here; ++q, ++d) {
          const int label = 128 + ell_rank - ell_here + q;
          dims[k].push_back({label, s[d] == 1 ? 0 : st[d]});
          if (s[d] != 1) {
            if (size[label] > 1 && size[label] != s[d])
              return InvalidArgument("input " + std::to_string(k) + " dim " + std::to_string(d) + " is " +
                                     std::to_string(s[d]) + ", which does not broadcast with " +
                                     std::to_string(size[label]) + " in '...'");
            size[label] = s[d];
          } else if (size[label] < 0) {
            size[label] = 1;
          }
        }
        continue;
      }
      if (size[lab] >= 0 && size[lab] != s[d])
        return InvalidArgument("input " + std::to_string(k) + " dim " + std::to_string(d) + " is " +
                               std::to_string(s[d]) + " but label '" + std::string(1, static_cast<char>(lab)) +
                               "' has size " + std::to_string(size[lab]) + " elsewhere");
      size[lab] = s[d];
      ++count[lab];
      dims[k].push_back({lab, st[d]});
      ++d;
    }
  }
  std::vector<int> out_labels;
  if (eq.explicit_output) {
    for (int lab : eq.output) {
      if (lab == kEllipsis) {
        for (int j = 0; j < ell_rank; ++j) out_labels.push_back(128 + j);
        continue;
      }
      if (size[lab] < 0)
        return InvalidArgument("output label '" + std::string(1, static_cast<char>(lab)) + "' is in no input");
      out_labels.push_back(lab);
    }
  } else {
    for (int j = 0; j < ell_rank; ++j) out_labels.push_back(128 + j);
    for (int lab = 0; lab < 128; ++lab)
      if (count[lab] == 1) out_labels.push_back(lab);
  }
  if (!Shape::fits_rank(out_labels.size()))
    return InvalidArgument("output rank " + std::to_string(out_labels.size()) + " exceeds " + std::to_string(kMaxRank));
  EinsumPlan p;
  std::vector<int> sum_labels;
  for (int lab = 0; lab < kNumLabels; ++lab)
    if (size[lab] >= 0 && std::find(out_labels.begin(), out_labels.end(), lab) == out_labels.end())
      sum_labels.push_back(lab);
  auto strides_for = [&](const std::vector<int>& labels, std::vector<std::vector<int64_t>>* out) {
    out->assign(in.size(), std::vector<int64_t>(labels.size(), 0));
    for (size_t k = 0; k < in.size(); ++k)
      for (const auto& [lab, st] : dims[k])
        for (size_t j = 0; j < labels.size(); ++j)
          if (labels[j] == lab) (*out)[k][j] += st;
  };
  strides_for(out_labels, &p.out_strides);
  strides_for(sum_labels, &p.sum_strides);
  for (int lab : out_labels) {
    p.out_sizes.push_back(size[lab]);
    p.out_shape.push_back(size[lab]);
  }
  for (int lab : sum_labels) p.sum_sizes.push_back(size[lab]);
  return p;
}

// Advances a multi-index over `sizes`, keeping each input's offset in step. Returns false after
// the last index.
inline bool einsum_step(std::vector<int64_t>& idx, const std::vector<int64_t>& sizes,
                        const std::vector<std::vector<int64_t>>& strides, std::vector<int64_t>& off) {
  for (int j = static_cast<int>(sizes.size()) - 1; j >= 0; --j) {
    for (size_t k = 0; k < off.size(); ++k) off[k] += strides[k][j];
    if (++idx[j] < sizes[j]) return true;
    for (size_t k = 0; k < off.size(); ++k) off[k] -= strides[k][j] * sizes[j];
    idx[j] = 0;
  }
  return false;
}

template <typename S>
void einsum_typed(const EinsumPlan& p, std::span<const TensorView> in, S* y) {
  using C = typename Elem<S>::Compute;
  const size_t n = in.size();
  int64_t sum_total = 1;
  for (int64_t s : p.sum_sizes) sum_total *= s;
  std::vector<int64_t> out_idx(p.out_sizes.size(), 0), sum_idx(p.sum_sizes.size(), 0);
  std::vector<int64_t> out_off(n, 0), off(n, 0);
  int64_t o = 0;
  do {
    SumAcc<C> acc = 0;
    if (sum_total > 0) {
      off = out_off;
      do {
        SumAcc<C> prod = 1;
        for (size_t k = 0; k < n; ++k) prod *= static_cast<SumAcc<C>>(Elem<S>::load(in[k].as<S>()[off[k]]));
        acc += prod;
      } while (einsum_step(sum_idx, p.sum_sizes, p.sum_strides, off));
    }
    y[o++] = Elem<S>::store(static_cast<C>(acc));
  } while (einsum_step(out_idx, p.out_sizes, p.out_strides, out_off));
}

class EinsumKernel final : public Kernel {
 public:
  explicit EinsumKernel(EinsumEquation eq) : eq_(std::move(eq)) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    if (in.empty()) return InvalidArgument("expects at least 1 input, got 0");
    for (size_t k = 0; k < in.size(); ++k) {
      if (!in[k].present()) return InvalidArgument("input " + std::to_string(k) + " is missing");
      if (in[k].dtype != in[0].dtype)
        return InvalidArgument("input " + std::to_string(k) + " dtype " + dtype_name(in[k].dtype) +
                               " differs from input 0 dtype " + dtype_name(in[0].dtype));
    }
    KILN_RETURN_IF_ERROR(dispatch_arith(in[0].dtype, [](auto) { return Status::Ok(); }, "input 0"));
    KILN_ASSIGN_OR_RETURN(EinsumPlan plan, plan_einsum(eq_, in));
    out[0] = TensorDesc{in[0].dtype, plan.out_shape};
    return Status::Ok();
  }

  Status prepare(std::span<const TensorView> in, std::span<const TensorView>) override {
    KILN_ASSIGN_OR_RETURN(plan_, plan_einsum(eq_, in));
    prepared_ = true;
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (!prepared_ || plan_.out_shape != out[0].shape) return Internal("Einsum run() before prepare() for this shape");
    if (out[0].numel() == 0) return Status::Ok();
    return dispatch_arith(in[0].dtype, [&](auto tag) {
      using S = decltype(tag);
      einsum_typed<S>(plan_, in, out[0].as<S>());
      return Status::Ok();
    });
  }

 private:
  EinsumEquation eq_;
  EinsumPlan plan_;
  bool prepared_ = false;
};

KernelFactory einsum_factory() {
  return [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
    KILN_ASSIGN_OR_RETURN(std::string equation, attrs.get_string("equation", ""));
    if (equation.empty()) return InvalidArgument("attribute 'equation' is required");
    KILN_ASSIGN_OR_RETURN(EinsumEquation eq, parse_einsum(equation));
    if (args.num_inputs > 0 && static_cast<size_t>(args.num_inputs) != eq.inputs.size())
      return InvalidArgument("attribute 'equation'='" + equation + "' has " + std::to_string(eq.inputs.size()) +
                             " input terms but the node has " + std::to_string(args.num_inputs) + " inputs");
    return std::unique_ptr<Kernel>(std::make_unique<EinsumKernel>(std::move(eq)));
  };
}

}  // namespace

void register_reduction_misc_kernels(KernelRegistry& r) {
  r.add({"CumSum", "reference", 0, cumsum_factory()});
  r.add({"TopK", "reference", 0, topk_factory()});
  r.add({"Einsum", "reference", 0, einsum_factory()});
}

}  // namespace kiln
