// float32 MatMul and Gemm on oneDNN's matmul primitive. impl "onednn_bf16" (engines built with
// precision: bf16) converts both operands to bfloat16 on every run (neither is known to be
// constant here; constant weights are FusedMatMul's case) and accumulates into a float32 output.
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/onednn_common.h"

namespace kiln {

namespace {

using dnnl::memory;
using tag = memory::format_tag;

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Batch broadcasting maps onto oneDNN's broadcast of unit batch dims: both operands are padded with
// leading unit dims to the output rank.
class OnednnMatMulKernel final : public OnednnKernel {
 public:
  OnednnMatMulKernel(std::unique_ptr<Kernel> ref, bool bf16) : OnednnKernel(std::move(ref)), bf16_(bf16) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : bf16_ ? "onednn_bf16" : "onednn"; }

 protected:
  StatusOr<bool> build(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const Shape& a = in[0].shape;
    const Shape& b = in[1].shape;
    const Shape& y = out[0].shape;
    if (in[0].dtype != DType::kFloat32 || a.rank() < 2 || b.rank() < 2 || y.numel() == 0 || a[a.rank() - 1] == 0)
      return false;
    const int R = y.rank();
    auto padded = [&](const Shape& s) {
      memory::dims d(R, 1);
      for (int i = 0; i < s.rank(); ++i) d[R - s.rank() + i] = s[i];
      return d;
    };
    memory::dims ad = padded(a), bd = padded(b), yd = padded(y);
    // Shared weights ([batch..., M, K] x [K, N], the transformer projection case): one 2-D matmul
    // with the batch folded into M beats a batched one.
    if (b.numel(0, b.rank() - 2) == 1 && a.rank() > 2) {
      const int64_t M = a.numel(0, a.rank() - 1), K = a[a.rank() - 1], N = b[b.rank() - 1];
      ad = {M, K};
      bd = {K, N};
      yd = {M, N};
    }
    const auto cdt = bf16_ ? memory::data_type::bf16 : memory::data_type::f32;
    const memory::desc a_md(ad, memory::data_type::f32, onednn_plain_strides(ad)), a_cmd(ad, cdt, onednn_plain_strides(ad));
    const memory::desc b_md(bd, memory::data_type::f32, onednn_plain_strides(bd)), b_cmd(bd, cdt, onednn_plain_strides(bd));
    const memory::desc y_md(yd, memory::data_type::f32, onednn_plain_strides(yd));
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_cmd, b_cmd, y_md), user_scratchpad_attr(), onednn_engine());
    exec_.reset();
    exec_.init(pd, dnnl::matmul(pd));
    a_slot_ = exec_.add_arg(DNNL_ARG_SRC, a_cmd);
    b_slot_ = exec_.add_arg(DNNL_ARG_WEIGHTS, b_cmd);
    y_slot_ = exec_.add_arg(DNNL_ARG_DST, y_md);
    KILN_RETURN_IF_ERROR(a_convert_.build(a_md, a_cmd));
    KILN_RETURN_IF_ERROR(b_convert_.build(b_md, b_cmd));
    return true;
  }
  Status execute(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_ASSIGN_OR_RETURN(const void* a, a_convert_.run(in[0].data, stream_));
    KILN_ASSIGN_OR_RETURN(const void* b, b_convert_.run(in[1].data, stream_));
    exec_.bind(a_slot_, a);
    exec_.bind(b_slot_, b);
    exec_.bind(y_slot_, out[0].data);
    return exec_.execute(stream_);
  }

 private:
  bool bf16_;
  OnednnConvert a_convert_, b_convert_;
  OnednnExec exec_;
  int a_slot_ = 0, b_slot_ = 0, y_slot_ = 0;
};

// Transposes are strides of the operand descriptors; alpha is an eltwise_linear post-op and beta*C
// a binary_add post-op whose broadcast C descriptor oneDNN reads directly (scaled into a buffer
// first when beta != 1).
class OnednnGemmKernel final : public OnednnKernel {
 public:
  OnednnGemmKernel(std::unique_ptr<Kernel> ref, float alpha, float beta, bool trans_a, bool trans_b, bool bf16)
      : OnednnKernel(std::move(ref)), alpha_(alpha), beta_(beta), trans_a_(trans_a), trans_b_(trans_b), bf16_(bf16) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : bf16_ ? "onednn_bf16" : "onednn"; }

 protected:
  StatusOr<bool> build(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const int64_t M = out[0].shape[0], N = out[0].shape[1];
    const int64_t K = trans_a_ ? in[0].shape[0] : in[0].shape[1];
    if (in[0].dtype != DType::kFloat32 || M == 0 || N == 0 || K == 0) return false;
    const auto cdt = bf16_ ? memory::data_type::bf16 : memory::data_type::f32;
    const memory::dims a_st = trans_a_ ? memory::dims{1, M} : memory::dims{K, 1};
    const memory::dims b_st = trans_b_ ? memory::dims{1, K} : memory::dims{N, 1};
    const memory::desc a_md({M, K}, memory::data_type::f32, a_st), a_cmd({M, K}, cdt, a_st);
    const memory::desc b_md({K, N}, memory::data_type::f32, b_st), b_cmd({K, N}, cdt, b_st);
    const memory::desc y_md({M, N}, memory::data_type::f32, tag::ab);
    dnnl::post_ops po;
    if (alpha_ != 1.0f) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, alpha_, 0.0f);
    has_c_ = in.size() > 2 && in[2].present() && beta_ != 0.0f;
    memory::desc c_md;
    if (has_c_) {
      const Shape& cs = in[2].shape;
      const memory::dims cd{cs.rank() == 2 ? cs[0] : 1, cs.rank() >= 1 ? cs[cs.rank() - 1] : 1};
      c_md = memory::desc(cd, memory::data_type::f32, tag::ab);
      po.append_binary(dnnl::algorithm::binary_add, c_md);
      scaled_c_.reset();
      if (beta_ != 1.0f) scaled_c_ = aligned_alloc_shared(static_cast<size_t>(in[2].numel()) * sizeof(float));
    }
    dnnl::primitive_attr attr = user_scratchpad_attr();
    attr.set_post_ops(po);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_cmd, b_cmd, y_md), attr, onednn_engine());
    exec_.reset();
    exec_.init(pd, dnnl::matmul(pd));
    a_slot_ = exec_.add_arg(DNNL_ARG_SRC, a_cmd);
    b_slot_ = exec_.add_arg(DNNL_ARG_WEIGHTS, b_cmd);
    KILN_RETURN_IF_ERROR(a_convert_.build(a_md, a_cmd));
    KILN_RETURN_IF_ERROR(b_convert_.build(b_md, b_cmd));
    y_slot_ = exec_.add_arg(DNNL_ARG_DST, y_md);
    if (has_c_) c_slot_ = exec_.add_arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(po.len() - 1) | DNNL_ARG_SRC_1, c_md);
    return true;
  }
  Status execute(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_ASSIGN_OR_RETURN(const void* a, a_convert_.run(in[0].data, stream_));
    KILN_ASSIGN_OR_RETURN(const void* b, b_convert_.run(in[1].data, stream_));
    exec_.bind(a_slot_, a);
    exec_.bind(b_slot_, b);
    exec_.bind(y_slot_, out[0].data);
    if (has_c_) {
      const float* c = in[2].as<float>();
      if (scaled_c_) {
        float* sc = static_cast<float*>(scaled_c_.get());
        const int64_t n = in[2].numel();
        for (int64_t i = 0; i < n; ++i) sc[i] = beta_ * c[i];
        c = sc;
      }
      exec_.bind(c_slot_, c);
    }
    return exec_.execute(stream_);
  }

 private:
  float alpha_, beta_;
  bool trans_a_, trans_b_, bf16_;
  bool has_c_ = false;
  OnednnConvert a_convert_, b_convert_;
  std::shared_ptr<void> scaled_c_;
  OnednnExec exec_;
  int a_slot_ = 0, b_slot_ = 0, y_slot_ = 0, c_slot_ = 0;
};

}  // namespace

// "onednn_bf16" ranks below "onednn": bf16 runs only where an engine's precision asked for it.
void register_onednn_matmul_kernels(KernelRegistry& r) {
  for (bool bf16 : {false, true}) {
    r.add({"MatMul", bf16 ? "onednn_bf16" : "onednn", bf16 ? 5 : 10,
           [bf16](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
             KILN_ASSIGN_OR_RETURN(auto ref, make_reference_matmul(args, attrs));
             return std::unique_ptr<Kernel>(std::make_unique<OnednnMatMulKernel>(std::move(ref), bf16));
           }});
    r.add({"Gemm", bf16 ? "onednn_bf16" : "onednn", bf16 ? 5 : 10,
           [bf16](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(auto ref, make_reference_gemm(args, attrs));
           KILN_ASSIGN_OR_RETURN(float alpha, attrs.get_float("alpha", 1.0f));
           KILN_ASSIGN_OR_RETURN(float beta, attrs.get_float("beta", 1.0f));
           KILN_ASSIGN_OR_RETURN(int64_t ta, attrs.get_int("transA", 0));
           KILN_ASSIGN_OR_RETURN(int64_t tb, attrs.get_int("transB", 0));
           return std::unique_ptr<Kernel>(
               std::make_unique<OnednnGemmKernel>(std::move(ref), alpha, beta, ta != 0, tb != 0, bf16));
         }});
  }
}

}  // namespace kiln
