// Reference MatMul (numpy semantics: batch broadcasting, 1-D operands) and Gemm.
#include <type_traits>

#include "runtime/kernels/nn_common.h"
#include "runtime/thread_pool.h"

namespace kiln {

namespace {

bool matmul_dtype_ok(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt32 || t == DType::kInt64 ||
         t == DType::kUInt32 || t == DType::kUInt64;
}

template <typename F>
Status dispatch_matmul(DType dt, F&& f) {
  switch (dt) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
    case DType::kUInt32: return f(uint32_t{});
    case DType::kUInt64: return f(uint64_t{});
    default: return Unimplemented("dtype " + dtype_name(dt) + " is not supported");
  }
}

// MatMul operands viewed as [batch..., M, K] x [batch..., K, N] (1-D operands promoted numpy-style).
struct MatMulDims {
  Shape batch;  // broadcast batch shape
  Shape a_batch_strides, b_batch_strides;  // element strides of each operand over `batch`
  int64_t M = 0, K = 0, N = 0;
};

StatusOr<MatMulDims> matmul_dims(const Shape& a, const Shape& b, Shape* out_shape) {
  if (a.rank() == 0 || b.rank() == 0) return InvalidArgument("MatMul inputs must have rank >= 1");
  Shape a2 = a, b2 = b;
  if (a.rank() == 1) a2 = Shape{1, a[0]};
  if (b.rank() == 1) b2 = Shape{b[0], 1};
  MatMulDims d;
  d.M = a2[a2.rank() - 2];
  d.K = a2[a2.rank() - 1];
  d.N = b2[b2.rank() - 1];
  const int64_t kb = b2[b2.rank() - 2];
  if (d.K != kb)
    return InvalidArgument("input 0 dim " + std::to_string(a.rank() - 1) + " (K=" + std::to_string(d.K) +
                           ") does not match input 1 dim " + std::to_string(b2.rank() - 2) + " (K=" + std::to_string(kb) + ")");
  Shape ab, bb;
  for (int i = 0; i < a2.rank() - 2; ++i) ab.push_back(a2[i]);
  for (int i = 0; i < b2.rank() - 2; ++i) bb.push_back(b2[i]);
  auto batch = broadcast_shapes(ab, bb);
  if (!batch.ok()) return InvalidArgument("batch dims: " + batch.status().message());
  d.batch = *batch;
  if (d.batch.rank() + 2 > kMaxRank) return InvalidArgument("MatMul output rank exceeds " + std::to_string(kMaxRank));
  d.a_batch_strides = broadcast_strides(ab, d.batch);
  d.b_batch_strides = broadcast_strides(bb, d.batch);
  for (int i = 0; i < d.a_batch_strides.rank(); ++i) d.a_batch_strides[i] *= d.M * d.K;
  for (int i = 0; i < d.b_batch_strides.rank(); ++i) d.b_batch_strides[i] *= d.K * d.N;
  if (out_shape) {
    *out_shape = d.batch;
    if (a.rank() > 1) out_shape->push_back(d.M);
    if (b.rank() > 1) out_shape->push_back(d.N);
  }
  return d;
}

void batch_offsets(int64_t bi, const MatMulDims& d, int64_t* a_off, int64_t* b_off) {
  *a_off = 0;
  *b_off = 0;
  for (int i = d.batch.rank() - 1; i >= 0; --i) {
    const int64_t idx = bi % d.batch[i];
    bi /= d.batch[i];
    *a_off += idx * d.a_batch_strides[i];
    *b_off += idx * d.b_batch_strides[i];
  }
}

class MatMulKernel final : public Kernel {
 public:
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
    if (in[0].dtype != in[1].dtype)
      return InvalidArgument("input 1 dtype " + dtype_name(in[1].dtype) + " differs from input 0 dtype " +
                             dtype_name(in[0].dtype));
    if (!matmul_dtype_ok(in[0].dtype)) return Unimplemented("input 0 dtype " + dtype_name(in[0].dtype) + " is not supported");
    Shape os;
    KILN_ASSIGN_OR_RETURN(dims_, matmul_dims(in[0].shape, in[1].shape, &os));
    out[0] = {in[0].dtype, os};
    return Status::Ok();
  }
  Status prepare(std::span<const TensorView> in, std::span<const TensorView>) override {
    KILN_ASSIGN_OR_RETURN(dims_, matmul_dims(in[0].shape, in[1].shape, nullptr));
    return Status::Ok();
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return dispatch_matmul(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      const MatMulDims& d = dims_;
      const T* a = in[0].as<T>();
      const T* b = in[1].as<T>();
      T* y = out[0].as<T>();
      const int64_t rows = d.batch.numel() * d.M;
      parallel_for_each(rows, LoopCost{4.0 * static_cast<double>(d.K + d.K * d.N + d.N), 2.0 * static_cast<double>(d.K * d.N)}, [&](int64_t r) {
        const int64_t bi = r / d.M, m = r % d.M;
        int64_t ao, bo;
        batch_offsets(bi, d, &ao, &bo);
        const T* arow = a + ao + m * d.K;
        const T* bm = b + bo;
        T* yrow = y + r * d.N;
        for (int64_t n = 0; n < d.N; ++n) yrow[n] = T(0);
        for (int64_t k = 0; k < d.K; ++k) {
          const T av = arow[k];
          const T* brow = bm + k * d.N;
          for (int64_t n = 0; n < d.N; ++n) yrow[n] += av * brow[n];
        }
      });
      return Status::Ok();
    });
  }

 private:
  MatMulDims dims_;
};

class GemmKernel final : public Kernel {
 public:
  GemmKernel(float alpha, float beta, bool trans_a, bool trans_b)
      : alpha_(alpha), beta_(beta), trans_a_(trans_a), trans_b_(trans_b) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 2, 3));
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i].present() && in[i].dtype != in[0].dtype)
        return InvalidArgument("input " + std::to_string(i) + " dtype " + dtype_name(in[i].dtype) +
                               " differs from input 0 dtype " + dtype_name(in[0].dtype));
    if (!matmul_dtype_ok(in[0].dtype)) return Unimplemented("input 0 dtype " + dtype_name(in[0].dtype) + " is not supported");
    for (int i = 0; i < 2; ++i)
      if (in[i].shape.rank() != 2)
        return InvalidArgument("input " + std::to_string(i) + " must be 2-D, got shape " + in[i].shape.str());
    const Shape& a = in[0].shape;
    const Shape& b = in[1].shape;
    const int64_t M = trans_a_ ? a[1] : a[0], K = trans_a_ ? a[0] : a[1];
    const int64_t Kb = trans_b_ ? b[1] : b[0], N = trans_b_ ? b[0] : b[1];
    if (K != Kb)
      return InvalidArgument("K mismatch: input 0 gives " + std::to_string(K) + ", input 1 gives " + std::to_string(Kb));
    if (in.size() > 2 && in[2].present()) {
      auto bc = broadcast_shapes(in[2].shape, Shape{M, N});
      if (!bc.ok() || *bc != Shape{M, N})
        return InvalidArgument("input 2 shape " + in[2].shape.str() + " does not broadcast to [" + std::to_string(M) +
                               ", " + std::to_string(N) + "]");
    }
    out[0] = {in[0].dtype, Shape{M, N}};
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return dispatch_matmul(in[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      using Acc = std::conditional_t<std::is_floating_point_v<T>, T, double>;
      const Shape& as = in[0].shape;
      const int64_t M = out[0].shape[0], N = out[0].shape[1], K = trans_a_ ? as[0] : as[1];
      const int64_t sam = trans_a_ ? 1 : K, sak = trans_a_ ? M : 1;
      const int64_t sbk = trans_b_ ? 1 : N, sbn = trans_b_ ? K : 1;
      const T* a = in[0].as<T>();
      const T* b = in[1].as<T>();
      const bool has_c = in.size() > 2 && in[2].present();
      Shape cs;
      if (has_c) cs = broadcast_strides(in[2].shape, Shape{M, N});
      const T* c = has_c ? in[2].as<T>() : nullptr;
      T* y = out[0].as<T>();
      const Acc alpha = static_cast<Acc>(alpha_), beta = static_cast<Acc>(beta_);
      parallel_for_each(M, LoopCost{4.0 * static_cast<double>(K + K * N + N), 2.0 * static_cast<double>(K * N)}, [&](int64_t m) {
        T* yrow = y + m * N;
        for (int64_t n = 0; n < N; ++n) yrow[n] = T(0);
        for (int64_t k = 0; k < K; ++k) {
          const T av = a[m * sam + k * sak];
          const T* bk = b + k * sbk;
          for (int64_t n = 0; n < N; ++n) yrow[n] += av * bk[n * sbn];
        }
        for (int64_t n = 0; n < N; ++n) {
          Acc v = alpha * static_cast<Acc>(yrow[n]);
          if (c) v += beta * static_cast<Acc>(c[m * cs[0] + n * cs[1]]);
          yrow[n] = static_cast<T>(v);
        }
      });
      return Status::Ok();
    });
  }

 private:
  float alpha_, beta_;
  bool trans_a_, trans_b_;
};

}  // namespace

StatusOr<std::unique_ptr<Kernel>> make_reference_matmul(const KernelArgs&, AttrReader&) {
  return std::unique_ptr<Kernel>(std::make_unique<MatMulKernel>());
}

StatusOr<std::unique_ptr<Kernel>> make_reference_gemm(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(float alpha, attrs.get_float("alpha", 1.0f));
  KILN_ASSIGN_OR_RETURN(float beta, attrs.get_float("beta", 1.0f));
  KILN_ASSIGN_OR_RETURN(int64_t ta, attrs.get_int("transA", 0));
  KILN_ASSIGN_OR_RETURN(int64_t tb, attrs.get_int("transB", 0));
  return std::unique_ptr<Kernel>(std::make_unique<GemmKernel>(alpha, beta, ta != 0, tb != 0));
}

void register_nn_matmul_kernels(KernelRegistry& r) {
  r.add({"MatMul", "reference", 0, make_reference_matmul});
  r.add({"Gemm", "reference", 0, make_reference_gemm});
}

}  // namespace kiln
