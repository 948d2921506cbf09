// Softmax, LogSoftmax, Hardmax, NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/kernel.h"
#include "runtime/kernels/reduction_common.h"
#include "runtime/kernels/softmax_row.h"
#include "runtime/thread_pool.h"

namespace kiln {
namespace {

enum class SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };

// The transformer hot path: float32 rows along the contiguous last axis (runtime/kernels/
// softmax_row.h). Rows are spread over kiln's pool, not an OpenMP team: an OpenMP region waits at
// its barrier for a descheduled thread, which on a shared machine cost milliseconds per call.
void softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t n, bool log) {
  ThreadPool::global().parallel_for(rows, LoopCost{8.0 * static_cast<double>(n), 12.0 * static_cast<double>(n)},
                                    [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) softmax_row_f32(x + r * n, y + r * n, n, log);
  });
}

// Any float type, any axis: rows of sp.n elements strided by sp.inner.
template <typename S>
void softmax_generic(SoftmaxKind kind, const AxisSplit& sp, const S* x, S* y) {
  using C = typename Elem<S>::Compute;
  const int64_t lines = sp.outer * sp.inner;
  // Three passes over the line and an exp per element (two for LogSoftmax's and Softmax's passes).
  const double n = static_cast<double>(sp.n);
  parallel_for_each(lines, LoopCost{3.0 * 2.0 * sizeof(S) * n, 40.0 * n}, [&](int64_t l) {
    const int64_t o = l / sp.inner, i = l % sp.inner;
    const int64_t base = o * sp.n * sp.inner + i, st = sp.inner;
    C m = Elem<S>::load(x[base]);
    int64_t arg = 0;
    for (int64_t a = 1; a < sp.n; ++a) {
      const C v = Elem<S>::load(x[base + a * st]);
      if (v > m) {
        m = v;
        arg = a;
      }
    }
    if (kind == SoftmaxKind::kHardmax) {
      for (int64_t a = 0; a < sp.n; ++a) y[base + a * st] = Elem<S>::store(static_cast<C>(a == arg ? 1 : 0));
      return;
    }
    C s = 0;
    for (int64_t a = 0; a < sp.n; ++a) s += std::exp(Elem<S>::load(x[base + a * st]) - m);
    if (kind == SoftmaxKind::kLogSoftmax) {
      const C ls = std::log(s);
      for (int64_t a = 0; a < sp.n; ++a) y[base + a * st] = Elem<S>::store((Elem<S>::load(x[base + a * st]) - m) - ls);
    } else {
      const C inv = C(1) / s;
      for (int64_t a = 0; a < sp.n; ++a) y[base + a * st] = Elem<S>::store(std::exp(Elem<S>::load(x[base + a * st]) - m) * inv);
    }
  });
}

class SoftmaxKernel final : public Kernel {
 public:
  // Before opset 13 these ops flatten the input to 2-D at `axis` (default 1) and work on rows of
  // the flattened matrix; from 13 they work along the one axis (default -1).
  SoftmaxKernel(SoftmaxKind kind, int64_t axis, bool flatten) : kind_(kind), axis_(axis), flatten_(flatten) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
    KILN_RETURN_IF_ERROR(dispatch_float_half(in[0].dtype, [](auto) { return Status::Ok(); }, "input 0"));
    KILN_ASSIGN_OR_RETURN(AxisSplit sp, split(in[0].shape));
    (void)sp;
    out[0] = in[0].desc();
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_ASSIGN_OR_RETURN(AxisSplit sp, split(in[0].shape));
    if (in[0].numel() == 0) return Status::Ok();
    if (in[0].dtype == DType::kFloat32 && sp.inner == 1 && kind_ != SoftmaxKind::kHardmax) {
      softmax_rows_f32(in[0].as<float>(), out[0].as<float>(), sp.outer, sp.n, kind_ == SoftmaxKind::kLogSoftmax);
      return Status::Ok();
    }
    return dispatch_float_half(in[0].dtype, [&](auto tag) {
      using S = decltype(tag);
      softmax_generic<S>(kind_, sp, in[0].as<S>(), out[0].as<S>());
      return Status::Ok();
    });
  }

 private:
  StatusOr<AxisSplit> split(const Shape& s) const {
    const int rank = s.rank();
    if (rank == 0) return AxisSplit{1, 1, 1};
    KILN_ASSIGN_OR_RETURN(int a, normalize_axis(axis_, rank));
    if (flatten_) return AxisSplit{s.numel(0, a), s.numel(a, rank), 1};
    return split_at_axis(s, a);
  }

  SoftmaxKind kind_;
  int64_t axis_;
  bool flatten_;
};

KernelFactory softmax_factory(SoftmaxKind kind) {
  return [kind](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
    const bool flatten = args.opset < 13;
    KILN_ASSIGN_OR_RETURN(int64_t axis, attrs.get_int("axis", flatten ? 1 : -1));
    return std::unique_ptr<Kernel>(std::make_unique<SoftmaxKernel>(kind, axis, flatten));
  };
}

enum class LossReduction { kNone, kSum, kMean };

// NegativeLogLikelihoodLoss (input holds log-probabilities) and SoftmaxCrossEntropyLoss (input
// holds scores; log-softmax along dim 1 first). Shapes: input (N, C, d1..dk), target (N, d1..dk),
// weight (C).
class LossKernel final : public Kernel {
 public:
  LossKernel(bool softmax, LossReduction reduction, bool has_ignore, int64_t ignore_index)
      : softmax_(softmax), reduction_(reduction), has_ignore_(has_ignore), ignore_(ignore_index) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 2, 3));
    const TensorView &x = in[0], &t = in[1];
    KILN_RETURN_IF_ERROR(dispatch_float_half(x.dtype, [](auto) { return Status::Ok(); }, "input 0"));
    if (t.dtype != DType::kInt64 && t.dtype != DType::kInt32)
      return InvalidArgument("input 1 (target) must be int32 or int64, got " + dtype_name(t.dtype));
    const int rank = x.shape.rank();
    if (rank < 2) return InvalidArgument("input 0 must have rank >= 2 (N, C, ...), got shape " + x.shape.str());
    if (t.shape.rank() != rank - 1)
      return InvalidArgument("input 1 (target) must have rank " + std::to_string(rank - 1) + ", got shape " +
                             t.shape.str());
    for (int d = 0; d < rank - 1; ++d) {
      const int xd = d == 0 ? 0 : d + 1;
      if (t.shape[d] != x.shape[xd])
        return InvalidArgument("input 1 (target) dim " + std::to_string(d) + " is " + std::to_string(t.shape[d]) +
                               ", expected " + std::to_string(x.shape[xd]) + " from input 0 shape " + x.shape.str());
    }
    if (in.size() > 2 && in[2].present()) {
      if (in[2].dtype != x.dtype)
        return InvalidArgument("input 2 (weight) dtype " + dtype_name(in[2].dtype) + " differs from input 0 dtype " +
                               dtype_name(x.dtype));
      if (in[2].shape.rank() != 1 || in[2].shape[0] != x.shape[1])
        return InvalidArgument("input 2 (weight) must have shape [" + std::to_string(x.shape[1]) + "], got " +
                               in[2].shape.str());
    }
    if (!softmax_ && out.size() > 1) return InvalidArgument("expects 1 output, got " + std::to_string(out.size()));
    out[0] = TensorDesc{x.dtype, reduction_ == LossReduction::kNone ? t.shape : Shape{}};
    if (out.size() > 1) out[1] = x.desc();
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return dispatch_float_half(in[0].dtype, [&](auto tag) { return run_typed<decltype(tag)>(in, out); });
  }

 private:
  template <typename S>
  Status run_typed(std::span<const TensorView> in, std::span<const TensorView> out) const {
    const TensorView &x = in[0], &t = in[1];
    auto store = [](double v) { return Elem<S>::store(static_cast<typename Elem<S>::Compute>(v)); };
    const S* w = in.size() > 2 && in[2].present() ? in[2].as<S>() : nullptr;
    const S* xp = x.as<S>();
    S* logp = out.size() > 1 ? out[1].as<S>() : nullptr;
    const int64_t N = x.shape[0], C = x.shape[1], D = x.shape.numel(2, x.shape.rank());
    double loss_sum = 0, weight_sum = 0;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t d = 0; d < D; ++d) {
        const int64_t base = n * C * D + d;
        // Log-softmax normalizer of this (n, d) column; 0 for NLL, whose input already is log-probabilities.
        double lse = 0;
        if (softmax_ && C > 0) {
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t c = 0; c < C; ++c) m = std::max(m, static_cast<double>(Elem<S>::load(xp[base + c * D])));
          double s = 0;
          for (int64_t c = 0; c < C; ++c) s += std::exp(static_cast<double>(Elem<S>::load(xp[base + c * D])) - m);
          lse = m + std::log(s);
          if (logp)
            for (int64_t c = 0; c < C; ++c)
              logp[base + c * D] = store(Elem<S>::load(xp[base + c * D]) - lse);
        }
        const int64_t target = read_int(t, n * D + d);
        double loss = 0, weight = 0;
        if (!(has_ignore_ && target == ignore_)) {
          if (target < 0 || target >= C)
            return InvalidArgument("input 1 (target) value " + std::to_string(target) + " at index " +
                                   std::to_string(n * D + d) + " is out of range [0, " + std::to_string(C) + ")");
          weight = w ? static_cast<double>(Elem<S>::load(w[target])) : 1.0;
          loss = -(static_cast<double>(Elem<S>::load(xp[base + target * D])) - lse) * weight;
        }
        if (reduction_ == LossReduction::kNone) out[0].as<S>()[n * D + d] = store(loss);
        loss_sum += loss;
        weight_sum += weight;
      }
    }
    if (reduction_ == LossReduction::kSum) out[0].as<S>()[0] = store(loss_sum);
    // Mean divides by the total weight of the counted elements (their number without weights);
    // with every element ignored that is 0/0, NaN, as in the ONNX reference.
    if (reduction_ == LossReduction::kMean)
      out[0].as<S>()[0] = store(loss_sum / weight_sum);
    return Status::Ok();
  }

  bool softmax_;
  LossReduction reduction_;
  bool has_ignore_;
  int64_t ignore_;
};

KernelFactory loss_factory(bool softmax) {
  return [softmax](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
    KILN_ASSIGN_OR_RETURN(std::string red, attrs.get_string("reduction", "mean"));
    LossReduction reduction;
    if (red == "none") reduction = LossReduction::kNone;
    else if (red == "sum") reduction = LossReduction::kSum;
    else if (red == "mean") reduction = LossReduction::kMean;
    else return Unimplemented("attribute 'reduction'='" + red + "' is not supported (none, sum, mean)");
    const bool has_ignore = attrs.has("ignore_index");
    KILN_ASSIGN_OR_RETURN(int64_t ignore, attrs.get_int("ignore_index", 0));
    return std::unique_ptr<Kernel>(std::make_unique<LossKernel>(softmax, reduction, has_ignore, ignore));
  };
}

}  // namespace

void register_reduction_softmax_kernels(KernelRegistry& r) {
  r.add({"Softmax", "reference", 0, softmax_factory(SoftmaxKind::kSoftmax)});
  r.add({"LogSoftmax", "reference", 0, softmax_factory(SoftmaxKind::kLogSoftmax)});
  r.add({"Hardmax", "reference", 0, softmax_factory(SoftmaxKind::kHardmax)});
  r.add({"NegativeLogLikelihoodLoss", "reference", 0, loss_factory(false)});
  r.add({"SoftmaxCrossEntropyLoss", "reference", 0, loss_factory(true)});
}

}  // namespace kiln
