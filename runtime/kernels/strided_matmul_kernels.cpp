// StridedMatMul (created by builder/passes/matmul_transpose_folding.cpp): a MatMul of two
// activations that reads its operands through Transposes and writes its product through one,
// scaled by a constant:
//   y = Transpose(alpha * MatMul(Transpose(a, perm_a), Transpose(b, perm_b)), perm_y)
// with numpy batch broadcasting between the permuted operands. Each perm is optional (absent: the
// identity); alpha defaults to 1.
//
// An attention that did not fuse splits heads with Transposes ([B, S, H, D] -> [B, H, S, D], K to
// [B, H, D, S]) and merges them with another; run as written, each is a pass over a tensor the
// MatMul then reads again. Here they are strides: a product reads its rows of Q and V where the
// projection wrote them, packs its K^T panel straight from K's rows, and writes its rows of the
// output where the merge Transpose would have put them.
//
// impl "reference": any dtype MatMul takes, any strides. impl "panel" (float32): each product is
// one panel GEMM (runtime/kernels/panel_gemm.h) whose B is packed (times alpha) from its strided
// view by the thread that runs it; it needs the permuted A's and the product's last axes to stay
// the stored last axes (K, resp. N, contiguous) and B's K or N axis contiguous, and otherwise runs
// the reference. The threads split the products; fewer products than threads run one after
// another, each on every thread.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/panel_gemm.h"
#include "runtime/kernels/strided_matmul.h"
#include "runtime/tensor.h"
#include "runtime/thread_pool.h"

namespace kiln {

namespace {

Status check_perm(const std::vector<int64_t>& perm, int rank, const char* name) {
  if (perm.empty()) return Status::Ok();
  if (static_cast<int>(perm.size()) != rank)
    return InvalidArgument(std::string(name) + " has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(rank));
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[static_cast<size_t>(p)])
      return InvalidArgument(std::string(name) + " is not a permutation of 0.." + std::to_string(rank - 1));
    seen[static_cast<size_t>(p)] = true;
  }
  return Status::Ok();
}

// The view Transpose(x, perm) of a dense x: its shape and the element strides of its axes in x.
void permuted(const Shape& stored, const std::vector<int64_t>& perm, Shape* shape, std::vector<int64_t>* strides) {
  const int r = stored.rank();
  std::vector<int64_t> dense(static_cast<size_t>(r), 1);
  for (int i = r - 2; i >= 0; --i) dense[static_cast<size_t>(i)] = dense[static_cast<size_t>(i) + 1] * stored[i + 1];
  *shape = Shape{};
  strides->clear();
  for (int i = 0; i < r; ++i) {
    const int src = perm.empty() ? i : static_cast<int>(perm[static_cast<size_t>(i)]);
    shape->push_back(stored[src]);
    strides->push_back(dense[static_cast<size_t>(src)]);
  }
}

class StridedMatMulKernel final : public Kernel {
 public:
  StridedMatMulKernel(std::vector<int64_t> perm_a, std::vector<int64_t> perm_b, std::vector<int64_t> perm_y, float alpha, bool panel)
      : perm_a_(std::move(perm_a)), perm_b_(std::move(perm_b)), perm_y_(std::move(perm_y)), alpha_(alpha), panel_(panel) {}
  // Before prepare() decided (engine-run --inspect asks a fresh context), the impl it was made as.
  const char* impl_name() const override { return panel_ && (!prepared_ || use_panel_) ? "panel" : "reference"; }

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
    if (in[0].dtype != in[1].dtype)
      return InvalidArgument("input 1 dtype " + dtype_name(in[1].dtype) + " differs from input 0 dtype " + dtype_name(in[0].dtype));
    if (in[0].dtype != DType::kFloat32 && in[0].dtype != DType::kFloat64)
      return Unimplemented("input 0 dtype " + dtype_name(in[0].dtype) + " is not supported");
    // infer() runs on every run: the shapes it worked out last are kept, so a run at the same
    // shapes does not build the stride vectors again (a steady-state run allocates nothing).
    if (!inferred_ || in[0].shape != inferred_a_ || in[1].shape != inferred_b_) {
      KILN_RETURN_IF_ERROR(strided_matmul_dims(in[0].shape, in[1].shape, perm_a_, perm_b_, perm_y_, &inferred_y_, nullptr));
      inferred_a_ = in[0].shape, inferred_b_ = in[1].shape, inferred_ = true;
    }
    out[0] = {in[0].dtype, inferred_y_};
    return Status::Ok();
  }

  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_RETURN_IF_ERROR(strided_matmul_dims(in[0].shape, in[1].shape, perm_a_, perm_b_, perm_y_, nullptr, &d_));
    use_panel_ = panel_ && panel_gemm::supported() && in[0].dtype == DType::kFloat32 && out[0].numel() > 0 && d_.K > 0 &&
                 d_.a_k == 1 && d_.y_n == 1 && (d_.b_n == 1 || d_.b_k == 1);
    prepared_ = true;
    if (!use_panel_) return Status::Ok();
    shared_b_ = std::all_of(d_.b_off.begin(), d_.b_off.end(), [](int64_t o) { return o == 0; });
    threads_ = static_cast<int>(std::max<int64_t>(1, omp_get_max_threads()));
    slots_ = std::max(threads_, ThreadPool::global().max_threads());
    per_slot_ = static_cast<size_t>(panel_gemm::packed_floats(d_.K, d_.N));
    const size_t need = per_slot_ * (shared_b_ ? 1 : static_cast<size_t>(slots_));
    if (need > scratch_capacity_) {
      scratch_ = aligned_alloc_shared(sizeof(float) * need);
      if (!scratch_) return ResourceExhausted("StridedMatMul panel: packing buffer of " + std::to_string(sizeof(float) * need) + " bytes");
      scratch_capacity_ = need;
    }
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (use_panel_) return run_panel(in[0].as<const float>(), in[1].as<const float>(), out[0].as<float>());
    if (in[0].dtype == DType::kFloat64) return run_reference(in[0].as<const double>(), in[1].as<const double>(), out[0].as<double>());
    return run_reference(in[0].as<const float>(), in[1].as<const float>(), out[0].as<float>());
  }

 private:
  template <typename T>
  Status run_reference(const T* a, const T* b, T* y) {
    const StridedDims& d = d_;
    const int64_t products = static_cast<int64_t>(d.a_off.size());
    const T alpha = static_cast<T>(alpha_);
    const double k = static_cast<double>(d.K), n = static_cast<double>(d.N);
    parallel_for_each(products * d.M, LoopCost{4.0 * (k + k * n + n), 2.0 * k * n}, [&](int64_t r) {
      const int64_t q = r / d.M, m = r % d.M;
      const T* arow = a + d.a_off[static_cast<size_t>(q)] + m * d.a_m;
      const T* bq = b + d.b_off[static_cast<size_t>(q)];
      T* yrow = y + d.y_off[static_cast<size_t>(q)] + m * d.y_m;
      for (int64_t j = 0; j < d.N; ++j) {
        T acc = T(0);
        for (int64_t i = 0; i < d.K; ++i) acc += arow[i * d.a_k] * bq[i * d.b_k + j * d.b_n];
        yrow[j * d.y_n] = alpha * acc;
      }
    });
    return Status::Ok();
  }

  Status run_panel(const float* a, const float* b, float* y) {
    const StridedDims& d = d_;
    const int64_t products = static_cast<int64_t>(d.a_off.size());
    float* scratch = static_cast<float*>(scratch_.get());
    if (shared_b_) panel_gemm::pack_strided(b, d.K, d.N, d.b_k, d.b_n, alpha_, scratch);
    auto product = [&](int64_t q, int threads, float* pack_to) {
      panel_gemm::Args g;
      g.M = d.M;
      g.K = d.K;
      g.N = d.N;
      g.a = a + d.a_off[static_cast<size_t>(q)];
      g.lda = d.a_m;
      g.y = y + d.y_off[static_cast<size_t>(q)];
      g.ldy = d.y_m;
      if (shared_b_) {
        g.packed = scratch;
      } else {
        panel_gemm::pack_strided(b + d.b_off[static_cast<size_t>(q)], d.K, d.N, d.b_k, d.b_n, alpha_, pack_to);
        g.packed = pack_to;
      }
      panel_gemm::run(g, threads);
    };
    if (products < threads_) {
      for (int64_t q = 0; q < products; ++q) product(q, threads_, scratch);
      return Status::Ok();
    }
    const double m = static_cast<double>(d.M), k = static_cast<double>(d.K), n = static_cast<double>(d.N);
    const LoopCost cost{4 * (m * k + 2 * k * n + m * n), 2 * m * n * k};
    auto body = [&](int64_t q0, int64_t q1, int slot) {
      for (int64_t q = q0; q < q1; ++q) product(q, 1, scratch + (shared_b_ ? 0 : static_cast<size_t>(slot) * per_slot_));
    };
    ThreadPool& pool = ThreadPool::global();
    if (!pool.worth_a_region(products, cost))
      body(0, products, 0);
    else
      pool.parallel_for(products, pool.grain_for(products, cost), body, slots_);
    return Status::Ok();
  }

  std::vector<int64_t> perm_a_, perm_b_, perm_y_;
  float alpha_;
  bool panel_;
  bool inferred_ = false;
  Shape inferred_a_, inferred_b_, inferred_y_;
  bool use_panel_ = false, shared_b_ = false, prepared_ = false;
  StridedDims d_;
  int threads_ = 1, slots_ = 1;
  std::shared_ptr<void> scratch_;
  size_t per_slot_ = 0, scratch_capacity_ = 0;
};

StatusOr<std::unique_ptr<Kernel>> make_strided_matmul(AttrReader& attrs, bool panel) {
  KILN_ASSIGN_OR_RETURN(auto pa, attrs.get_ints("perm_a"));
  KILN_ASSIGN_OR_RETURN(auto pb, attrs.get_ints("perm_b"));
  KILN_ASSIGN_OR_RETURN(auto py, attrs.get_ints("perm_y"));
  KILN_ASSIGN_OR_RETURN(float alpha, attrs.get_float("alpha", 1.0f));
  return std::unique_ptr<Kernel>(std::make_unique<StridedMatMulKernel>(std::move(pa), std::move(pb), std::move(py), alpha, panel));
}

}  // namespace

Status strided_matmul_dims(const Shape& as, const Shape& bs, const std::vector<int64_t>& perm_a, const std::vector<int64_t>& perm_b,
                           const std::vector<int64_t>& perm_y, Shape* y, StridedDims* d) {
  if (as.rank() < 2 || bs.rank() < 2)
    return InvalidArgument("inputs must have rank >= 2, got " + as.str() + " and " + bs.str());
  KILN_RETURN_IF_ERROR(check_perm(perm_a, as.rank(), "perm_a"));
  KILN_RETURN_IF_ERROR(check_perm(perm_b, bs.rank(), "perm_b"));
  Shape a, b;
  std::vector<int64_t> sa, sb;
  permuted(as, perm_a, &a, &sa);
  permuted(bs, perm_b, &b, &sb);
  const int ra = a.rank(), rb = b.rank();
  const int64_t M = a[ra - 2], K = a[ra - 1], N = b[rb - 1];
  if (b[rb - 2] != K)
    return InvalidArgument("permuted input 0 " + a.str() + " and input 1 " + b.str() + " disagree on K");
  Shape ab, bb;
  for (int i = 0; i < ra - 2; ++i) ab.push_back(a[i]);
  for (int i = 0; i < rb - 2; ++i) bb.push_back(b[i]);
  auto batch = broadcast_shapes(ab, bb);
  if (!batch.ok()) return InvalidArgument("batch dims: " + batch.status().message());
  Shape p = *batch;
  p.push_back(M);
  p.push_back(N);
  const int R = p.rank();
  KILN_RETURN_IF_ERROR(check_perm(perm_y, R, "perm_y"));
  Shape ys;
  std::vector<int64_t> inv(static_cast<size_t>(R));
  for (int j = 0; j < R; ++j) {
    const int src = perm_y.empty() ? j : static_cast<int>(perm_y[static_cast<size_t>(j)]);
    ys.push_back(p[src]);
    inv[static_cast<size_t>(src)] = j;
  }
  if (y) *y = ys;
  if (!d) return Status::Ok();
  // The product's axes' strides in the stored output.
  std::vector<int64_t> ydense(static_cast<size_t>(R), 1), sy(static_cast<size_t>(R));
  for (int j = R - 2; j >= 0; --j) ydense[static_cast<size_t>(j)] = ydense[static_cast<size_t>(j) + 1] * ys[j + 1];
  for (int i = 0; i < R; ++i) sy[static_cast<size_t>(i)] = ydense[static_cast<size_t>(inv[static_cast<size_t>(i)])];
  d->M = M;
  d->K = K;
  d->N = N;
  d->a_m = sa[static_cast<size_t>(ra - 2)];
  d->a_k = sa[static_cast<size_t>(ra - 1)];
  d->b_k = sb[static_cast<size_t>(rb - 2)];
  d->b_n = sb[static_cast<size_t>(rb - 1)];
  d->y_m = sy[static_cast<size_t>(R - 2)];
  d->y_n = sy[static_cast<size_t>(R - 1)];
  const int64_t products = batch->numel();
  d->batch = *batch;
  d->a_batch.assign(static_cast<size_t>(R - 2), 0);
  d->b_batch.assign(static_cast<size_t>(R - 2), 0);
  d->y_batch.assign(sy.begin(), sy.end() - 2);
  for (int i = 0; i < R - 2; ++i) {
    const int ai = i - (R - ra), bi = i - (R - rb);
    if (ai >= 0 && a[ai] != 1) d->a_batch[static_cast<size_t>(i)] = sa[static_cast<size_t>(ai)];
    if (bi >= 0 && b[bi] != 1) d->b_batch[static_cast<size_t>(i)] = sb[static_cast<size_t>(bi)];
  }
  d->a_off.assign(static_cast<size_t>(products), 0);
  d->b_off.assign(static_cast<size_t>(products), 0);
  d->y_off.assign(static_cast<size_t>(products), 0);
  for (int64_t q = 0; q < products; ++q) {
    int64_t rest = q, ao = 0, bo = 0, yo = 0;
    for (int i = R - 3; i >= 0; --i) {
      const int64_t idx = rest % p[i];
      rest /= p[i];
      ao += idx * d->a_batch[static_cast<size_t>(i)];
      bo += idx * d->b_batch[static_cast<size_t>(i)];
      yo += idx * d->y_batch[static_cast<size_t>(i)];
    }
    d->a_off[static_cast<size_t>(q)] = ao;
    d->b_off[static_cast<size_t>(q)] = bo;
    d->y_off[static_cast<size_t>(q)] = yo;
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Kernel>> make_reference_strided_matmul(const KernelArgs&, AttrReader& attrs) { return make_strided_matmul(attrs, false); }

void register_strided_matmul_kernels(KernelRegistry& r) {
  r.add_kiln_op({"StridedMatMul", "reference", 0, [](const KernelArgs&, AttrReader& attrs) { return make_strided_matmul(attrs, false); }});
  r.add_kiln_op({"StridedMatMul", "panel", 8, [](const KernelArgs&, AttrReader& attrs) { return make_strided_matmul(attrs, true); }});
}

}  // namespace kiln
