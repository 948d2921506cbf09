// StridedMatMul impl "onednn" (float32): one oneDNN matmul primitive whose source, weights and
// destination descriptors carry the permuted views' strides, with alpha as its output scale, so
// oneDNN reads Q and K^T and writes the merged heads in place. oneDNN's batched matmul handles a
// batch of small products ([197, 64] x [64, 197] per head) with fewer per-product costs than the
// panel GEMM at some shapes; tactic selection times both. A primitive oneDNN only offers as its
// reference implementation (strides it has no kernel for) is declined: the step then runs kiln's
// reference and tactic selection drops it.
#include <cstring>

#include "runtime/kernels/onednn_common.h"
#include "runtime/kernels/strided_matmul.h"

namespace kiln {

namespace {

using dnnl::memory;

class OnednnStridedMatMulKernel final : public OnednnKernel {
 public:
  OnednnStridedMatMulKernel(std::unique_ptr<Kernel> ref, std::vector<int64_t> pa, std::vector<int64_t> pb, std::vector<int64_t> py, float alpha)
      : OnednnKernel(std::move(ref)), pa_(std::move(pa)), pb_(std::move(pb)), py_(std::move(py)), alpha_(alpha) {}

 protected:
  StatusOr<bool> build(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (in[0].dtype != DType::kFloat32 || out[0].numel() == 0) return false;
    StridedDims d;
    KILN_RETURN_IF_ERROR(strided_matmul_dims(in[0].shape, in[1].shape, pa_, pb_, py_, nullptr, &d));
    if (d.K == 0) return false;
    const int B = d.batch.rank();
    memory::dims ad, as, bd, bs, yd, ys;
    for (int i = 0; i < B; ++i) {
      const auto u = static_cast<size_t>(i);
      // A broadcast dim is a dim of 1 for oneDNN; its stride is then never stepped.
      ad.push_back(d.a_batch[u] ? d.batch[i] : 1);
      as.push_back(d.a_batch[u] ? d.a_batch[u] : 1);
      bd.push_back(d.b_batch[u] ? d.batch[i] : 1);
      bs.push_back(d.b_batch[u] ? d.b_batch[u] : 1);
      yd.push_back(d.batch[i]);
      ys.push_back(d.y_batch[u]);
    }
    // A batch dim of size 1 that is not broadcast keeps its (unused) stride.
    ad.insert(ad.end(), {d.M, d.K});
    as.insert(as.end(), {d.a_m, d.a_k});
    bd.insert(bd.end(), {d.K, d.N});
    bs.insert(bs.end(), {d.b_k, d.b_n});
    yd.insert(yd.end(), {d.M, d.N});
    ys.insert(ys.end(), {d.y_m, d.y_n});
    if (ad.size() < 2 || ad.size() > 12) return false;
    const memory::desc a_md(ad, memory::data_type::f32, as), b_md(bd, memory::data_type::f32, bs), y_md(yd, memory::data_type::f32, ys);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (alpha_ != 1.0f) attr.set_output_scales(0, {alpha_});
    dnnl::matmul::primitive_desc pd;
    try {
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, y_md), attr, onednn_engine());
    } catch (const dnnl::error&) {
      return false;
    }
    if (std::strstr(pd.impl_info_str(), "ref")) return false;
    exec_.reset();
    exec_.init(pd, dnnl::matmul(pd));
    a_slot_ = exec_.add_arg(DNNL_ARG_SRC, a_md);
    b_slot_ = exec_.add_arg(DNNL_ARG_WEIGHTS, b_md);
    y_slot_ = exec_.add_arg(DNNL_ARG_DST, y_md);
    return true;
  }
  Status execute(std::span<const TensorView> in, std::span<const TensorView> out) override {
    exec_.bind(a_slot_, in[0].data);
    exec_.bind(b_slot_, in[1].data);
    exec_.bind(y_slot_, out[0].data);
    return exec_.execute(stream_);
  }

 private:
  std::vector<int64_t> pa_, pb_, py_;
  float alpha_;
  OnednnExec exec_;
  int a_slot_ = 0, b_slot_ = 0, y_slot_ = 0;
};

}  // namespace

void register_onednn_strided_matmul_kernels(KernelRegistry& r) {
  r.add_kiln_op({"StridedMatMul", "onednn", 10, [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
                   KILN_ASSIGN_OR_RETURN(auto ref, make_reference_strided_matmul(args, attrs));
                   KILN_ASSIGN_OR_RETURN(auto pa, attrs.get_ints("perm_a"));
                   KILN_ASSIGN_OR_RETURN(auto pb, attrs.get_ints("perm_b"));
                   KILN_ASSIGN_OR_RETURN(auto py, attrs.get_ints("perm_y"));
                   KILN_ASSIGN_OR_RETURN(float alpha, attrs.get_float("alpha", 1.0f));
                   return std::unique_ptr<Kernel>(std::make_unique<OnednnStridedMatMulKernel>(std::move(ref), std::move(pa), std::move(pb), std::move(py), alpha));
                 }});
}

}  // namespace kiln
