// MatMul impl "panel": float32 MatMul whose second operand is an activation (attention's Q x K^T
// and P x V when the attention did not fuse, batched over heads), on the panel GEMM's register
// blocks (runtime/kernels/panel_gemm.h).
//
// oneDNN's matmul primitive runs a batch of small products ([T, 64] x [64, T] per head) with
// per-product overheads that dominate at these sizes. Here each product is one panel GEMM: its B
// is packed into the panel layout by the thread that runs it (K x N floats, a fraction of the
// product's 2 M N K flops; a B of exactly one panel, N = 64, is already in that layout and is
// read in place), then run on that thread. The threads split the products; a batch smaller than
// the team runs its products one after another, each on every thread. A B shared by every product
// (rank 2, or broadcast) is packed once, and with A's batches contiguous the whole batch is one
// GEMM of batch x M rows.
//
// It ranks below "onednn": tactic selection times both on the step's shapes. Other dtypes, 1-D
// operands and empty products run the reference.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/panel_gemm.h"
#include "runtime/tensor.h"
#include "runtime/thread_pool.h"

namespace kiln {

namespace {

class PanelMatMulKernel final : public Kernel {
 public:
  explicit PanelMatMulKernel(std::unique_ptr<Kernel> ref) : ref_(std::move(ref)) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : "panel"; }
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override { return ref_->infer(in, out); }

  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const Shape& a = in[0].shape;
    const Shape& b = in[1].shape;
    use_ref_ = !panel_gemm::supported() || in[0].dtype != DType::kFloat32 || in[1].dtype != DType::kFloat32 ||
               a.rank() < 2 || b.rank() < 2 || out[0].numel() == 0 || a[a.rank() - 1] == 0;
    if (use_ref_) return ref_->prepare(in, out);
    M_ = a[a.rank() - 2];
    K_ = a[a.rank() - 1];
    N_ = b[b.rank() - 1];
    // Each product's offsets into A and B, numpy batch broadcasting: the output's batch dims are
    // walked in order, an operand's dim of size 1 (or missing) repeats its one slice.
    const Shape& y = out[0].shape;
    const int R = y.rank();
    const int64_t products = out[0].numel() / (M_ * N_);
    a_off_.assign(static_cast<size_t>(products), 0);
    b_off_.assign(static_cast<size_t>(products), 0);
    for (int64_t p = 0; p < products; ++p) {
      int64_t rest = p, ao = 0, bo = 0, as = M_ * K_, bs = K_ * N_;
      for (int d = R - 3; d >= 0; --d) {
        const int64_t idx = rest % y[d];
        rest /= y[d];
        const int ad = d - (R - a.rank()), bd = d - (R - b.rank());
        if (ad >= 0) {
          if (a[ad] != 1) ao += idx * as;
          as *= a[ad];
        }
        if (bd >= 0) {
          if (b[bd] != 1) bo += idx * bs;
          bs *= b[bd];
        }
      }
      a_off_[static_cast<size_t>(p)] = ao;
      b_off_[static_cast<size_t>(p)] = bo;
    }
    shared_b_ = true;
    contiguous_a_ = true;
    for (int64_t p = 0; p < products; ++p) {
      shared_b_ = shared_b_ && b_off_[static_cast<size_t>(p)] == 0;
      contiguous_a_ = contiguous_a_ && a_off_[static_cast<size_t>(p)] == p * M_ * K_;
    }
    // One panel of B in B's own layout needs no packing (the blocks' aligned loads need 64 bytes).
    in_place_b_ = N_ == panel_gemm::kPanelCols && reinterpret_cast<uintptr_t>(in[1].data) % 64 == 0;
    threads_ = static_cast<int>(std::max<int64_t>(1, omp_get_max_threads()));
    slots_ = std::max(threads_, ThreadPool::global().max_threads());
    // Packing space per slot even when B is read in place: run() rechecks the alignment.
    const size_t per = static_cast<size_t>(panel_gemm::packed_floats(K_, N_));
    const size_t slots = shared_b_ ? 1 : static_cast<size_t>(slots_);
    scratch_floats_ = per;
    if (slots * per > scratch_capacity_) {
      scratch_ = aligned_alloc_shared(sizeof(float) * slots * per);
      if (!scratch_) return ResourceExhausted("MatMul panel: packing buffer of " + std::to_string(sizeof(float) * slots * per) + " bytes");
      scratch_capacity_ = slots * per;
    }
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (use_ref_) return ref_->run(in, out);
    const float* a = in[0].as<const float>();
    const float* b = in[1].as<const float>();
    float* y = out[0].as<float>();
    const int64_t products = static_cast<int64_t>(a_off_.size());
    float* scratch = static_cast<float*>(scratch_.get());
    const bool in_place = in_place_b_ && reinterpret_cast<uintptr_t>(b) % 64 == 0;
    panel_gemm::Args g;
    g.M = M_;
    g.K = K_;
    g.N = N_;
    if (shared_b_) {
      g.packed = in_place ? b : scratch;
      if (!in_place) panel_gemm::pack(b, K_, N_, scratch);
      if (contiguous_a_) {  // the whole batch is one GEMM
        g.a = a;
        g.M = M_ * products;
        g.y = y;
        panel_gemm::run(g, threads_);
        return Status::Ok();
      }
    }
    auto product = [&](int64_t p, int threads, float* pack_to) {
      panel_gemm::Args gp = g;
      gp.a = a + a_off_[static_cast<size_t>(p)];
      gp.y = y + p * M_ * N_;
      if (!shared_b_) {
        const float* bp = b + b_off_[static_cast<size_t>(p)];
        if (in_place) {
          gp.packed = bp;
        } else {
          panel_gemm::pack(bp, K_, N_, pack_to);
          gp.packed = pack_to;
        }
      }
      panel_gemm::run(gp, threads);
    };
    if (products < threads_) {
      for (int64_t p = 0; p < products; ++p) product(p, threads_, scratch);
      return Status::Ok();
    }
    const double m = static_cast<double>(M_), k = static_cast<double>(K_), n = static_cast<double>(N_);
    const LoopCost cost{4 * (m * k + 2 * k * n + m * n), 2 * m * n * k};
    auto body = [&](int64_t p0, int64_t p1, int slot) {
      for (int64_t p = p0; p < p1; ++p) product(p, 1, scratch + static_cast<size_t>(slot) * scratch_floats_);
    };
    ThreadPool& pool = ThreadPool::global();
    if (!pool.worth_a_region(products, cost))
      body(0, products, 0);
    else
      pool.parallel_for(products, pool.grain_for(products, cost), body, slots_);
    return Status::Ok();
  }

 private:
  std::unique_ptr<Kernel> ref_;
  bool use_ref_ = false;
  int64_t M_ = 0, K_ = 0, N_ = 0;
  std::vector<int64_t> a_off_, b_off_;
  bool shared_b_ = false, contiguous_a_ = false, in_place_b_ = false;
  int threads_ = 1, slots_ = 1;
  std::shared_ptr<void> scratch_;
  size_t scratch_floats_ = 0, scratch_capacity_ = 0;
};

}  // namespace

void register_panel_matmul_kernels(KernelRegistry& r) {
  // Below "onednn" (10): tactic selection decides per step.
  r.add({"MatMul", "panel", 8, [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(auto ref, make_reference_matmul(args, attrs));
           return std::unique_ptr<Kernel>(std::make_unique<PanelMatMulKernel>(std::move(ref)));
         }});
}

}  // namespace kiln
