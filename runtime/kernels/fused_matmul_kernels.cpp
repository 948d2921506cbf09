// FusedMatMul: a kiln-internal op written by builder/passes/matmul_epilogue_fusion.cpp for
//   Y = act(A x W + bias) + residual
// with A:[batch..., M, K] (or [K]) float32, W:[K, N] a constant of the plan, bias (optional) N
// floats laid out as [..., 1, N], act "none" | "gelu_erf" | "gelu_tanh", and residual (optional)
// added with numpy broadcasting exactly like the Add it replaces (the pass cannot always see
// shapes, so Y takes the broadcast shape; only the common case, a residual of the matmul's own
// shape, runs on oneDNN). Inputs: A, W, bias (may be absent), residual. Attribute: activation.
//
// The oneDNN kernels run it as ONE matmul primitive: the bias is the primitive's bias, GELU an
// eltwise post-op and the residual a binary_add post-op. W is reordered once into oneDNN's blocked
// layout (onednn_packed_weights, shared by every context that runs the same plan): W being a plan
// constant is the op's contract, so run() never re-reads it.
//
// impl "onednn" computes in float32; impl "onednn_bf16" converts W to bfloat16 once and A per run
// (f32 accumulation, f32 output), for engines built with precision: bf16.
//
// impl "panel" (AVX-512 or AVX2, float32) is kiln's own matmul for the weight-streaming shapes
// (runtime/kernels/panel_gemm.h), epilogue included. It ranks below "onednn": tactic selection
// times both at each profile's shapes: at 274 rows against weights read from memory (an
// incremental step) the panel kernel wins; at 1644 rows oneDNN mostly does.
#include <omp.h>

#include <cmath>

#include "runtime/engine_format.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/onednn_common.h"
#include "runtime/kernels/packed_weights.h"
#include "runtime/kernels/panel_gemm.h"

namespace kiln {

namespace {

using dnnl::memory;
using tag = memory::format_tag;

enum class Activation { kNone, kGeluErf, kGeluTanh };

StatusOr<Activation> parse_activation(const std::string& s) {
  if (s == "none") return Activation::kNone;
  if (s == "gelu_erf") return Activation::kGeluErf;
  if (s == "gelu_tanh") return Activation::kGeluTanh;
  return InvalidArgument("attribute 'activation' must be none, gelu_erf or gelu_tanh, got '" + s + "'");
}

StatusOr<std::unique_ptr<Kernel>> make_reference_fused(const KernelArgs& args, AttrReader& attrs, Activation* act);

// The reference: the reference MatMul, then the epilogue element by element.
class FusedMatMulReference final : public Kernel {
 public:
  FusedMatMulReference(std::unique_ptr<Kernel> matmul, Activation act) : matmul_(std::move(matmul)), act_(act) {}

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 2, 4));
    if (in[0].dtype != DType::kFloat32) return Unimplemented("input 0 dtype " + dtype_name(in[0].dtype) + " is not supported");
    if (in[1].shape.rank() != 2) return InvalidArgument("input 1 (weights) must be 2-D, got shape " + in[1].shape.str());
    KILN_RETURN_IF_ERROR(matmul_->infer(in.subspan(0, 2), out));
    const Shape y = out[0].shape;
    const int64_t N = in[1].shape[1];
    if (in.size() > 2 && in[2].present()) {
      const Shape& b = in[2].shape;
      if (in[2].dtype != DType::kFloat32 || b.numel() != N || b.rank() > y.rank() || (b.rank() > 0 && b[b.rank() - 1] != N))
        return InvalidArgument("input 2 (bias) must be float32 with " + std::to_string(N) + " elements along the last dim, got " +
                               dtype_name(in[2].dtype) + " " + b.str());
    }
    if (in.size() > 3 && in[3].present()) {
      if (in[3].dtype != DType::kFloat32)
        return InvalidArgument("input 3 (residual) must be float32, got " + dtype_name(in[3].dtype));
      auto b = broadcast_shapes(y, in[3].shape);
      if (!b.ok()) return InvalidArgument("input 3 (residual): " + b.status().message());
      out[0].shape = *b;
    }
    return Status::Ok();
  }
  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    std::vector<TensorDesc> mm(1);
    KILN_RETURN_IF_ERROR(matmul_->infer(in.subspan(0, 2), mm));
    mm_shape_ = mm[0].shape;
    // A residual that broadcasts the output larger than the matmul, or any residual (it may be the
    // output's own buffer, read after the product would have overwritten it): the matmul goes to
    // a buffer. This is the reference, so the memory is not worth the case analysis.
    mm_buffer_ = Tensor();
    if (mm_shape_ != out[0].shape || (in.size() > 3 && in[3].present())) {
      KILN_ASSIGN_OR_RETURN(mm_buffer_, Tensor::try_zeros(DType::kFloat32, mm_shape_, "FusedMatMul product"));
    }
    const TensorView mm_view = mm_buffer_.empty() ? out[0] : mm_buffer_.view();
    return matmul_->prepare(in.subspan(0, 2), std::span<const TensorView>(&mm_view, 1));
  }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const TensorView mm_view = mm_buffer_.empty() ? out[0] : mm_buffer_.view();
    KILN_RETURN_IF_ERROR(matmul_->run(in.subspan(0, 2), std::span<const TensorView>(&mm_view, 1)));
    const Shape& ys = out[0].shape;
    if (ys.numel() == 0) return Status::Ok();
    const bool has_res = in.size() > 3 && in[3].present();
    const int64_t N = in[1].shape[1];
    const float* bias = in.size() > 2 && in[2].present() ? in[2].as<float>() : nullptr;
    // The strides below assume the shapes prepare() saw. The engine_load fuzz target once got here
    // with a step without outputs (out[0] was another step's stale view); the loader and the
    // registry now refuse such steps, and this check keeps any other mismatch from indexing out
    // of bounds.
    if (mm_shape_.rank() > ys.rank() || (has_res && in[3].shape.rank() > ys.rank()))
      return Internal("the product " + mm_shape_.str() + " or residual does not broadcast to the output " + ys.str());
    const Shape strides[2] = {broadcast_strides(mm_shape_, ys), has_res ? broadcast_strides(in[3].shape, ys) : Shape()};
    const float* mm = mm_view.as<float>();
    const float* res = has_res ? in[3].as<float>() : nullptr;
    float* y = out[0].as<float>();
    // In place when the product is the output: element i reads mm[i] before writing y[i].
    int64_t i = 0;
    for (BroadcastIter it(ys, strides, has_res ? 2 : 1); !it.done(); it.next(), ++i) {
      double v = mm[it.off[0]];
      if (bias) v += bias[it.off[0] % N];
      if (act_ == Activation::kGeluErf) v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
      if (act_ == Activation::kGeluTanh) v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
      if (res) v += res[it.off[1]];
      y[i] = static_cast<float>(v);
    }
    return Status::Ok();
  }

 private:
  std::unique_ptr<Kernel> matmul_;
  Activation act_;
  Shape mm_shape_;
  Tensor mm_buffer_;
};

}  // namespace

StatusOr<std::unique_ptr<Kernel>> make_fused_matmul_reference(const KernelArgs& args, AttrReader& attrs) {
  Activation act;
  return make_reference_fused(args, attrs, &act);
}

namespace {

StatusOr<std::unique_ptr<Kernel>> make_reference_fused(const KernelArgs& args, AttrReader& attrs, Activation* act) {
  KILN_ASSIGN_OR_RETURN(std::string name, attrs.get_string("activation", "none"));
  KILN_ASSIGN_OR_RETURN(*act, parse_activation(name));
  KernelArgs mm = args;
  mm.op_type = "MatMul";
  mm.num_inputs = 2;
  AttrMap none;
  AttrReader none_reader(none);
  KILN_ASSIGN_OR_RETURN(auto matmul, make_reference_matmul(mm, none_reader));
  return std::unique_ptr<Kernel>(std::make_unique<FusedMatMulReference>(std::move(matmul), *act));
}

class OnednnFusedMatMulKernel final : public OnednnKernel {
 public:
  OnednnFusedMatMulKernel(std::unique_ptr<Kernel> ref, Activation act, bool bf16)
      : OnednnKernel(std::move(ref)), act_(act), bf16_(bf16) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : bf16_ ? "onednn_bf16" : "onednn"; }

 protected:
  StatusOr<bool> build(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const Shape& a = in[0].shape;
    const int64_t K = in[1].shape[0], N = in[1].shape[1];
    const int64_t M = K > 0 ? a.numel() / K : 0;
    if (M == 0 || N == 0 || K == 0) return false;
    // A residual that broadcasts runs on the reference (the exported residual never does).
    if (in.size() > 3 && in[3].present() && in[3].shape != out[0].shape) return false;
    if (out[0].numel() != M * N) return false;
    const auto f32 = memory::data_type::f32;
    const auto cdt = bf16_ ? memory::data_type::bf16 : f32;
    const memory::desc a_md({M, K}, f32, tag::ab), a_cmd({M, K}, cdt, tag::ab);
    const memory::desc w_plain({K, N}, f32, tag::ab), w_any({K, N}, cdt, tag::any);
    const memory::desc y_md({M, N}, f32, tag::ab);
    has_bias_ = in.size() > 2 && in[2].present();
    has_res_ = in.size() > 3 && in[3].present();
    const memory::desc bias_md = has_bias_ ? memory::desc({1, N}, f32, tag::ab) : memory::desc();
    dnnl::post_ops po;
    if (act_ == Activation::kGeluErf) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
    if (act_ == Activation::kGeluTanh) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
    if (has_res_) po.append_binary(dnnl::algorithm::binary_add, y_md);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_post_ops(po);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_cmd, w_any, bias_md, y_md), attr, onednn_engine());
    KILN_ASSIGN_OR_RETURN(packed_, onednn_packed_weights(in[1].data, w_plain, pd.weights_desc()));
    exec_.reset();
    exec_.init(pd, dnnl::matmul(pd));
    a_slot_ = exec_.add_arg(DNNL_ARG_SRC, a_cmd);
    exec_.bind(exec_.add_arg(DNNL_ARG_WEIGHTS, pd.weights_desc()), packed_.get());
    y_slot_ = exec_.add_arg(DNNL_ARG_DST, y_md);
    if (has_bias_) bias_slot_ = exec_.add_arg(DNNL_ARG_BIAS, bias_md);
    if (has_res_) res_slot_ = exec_.add_arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(po.len() - 1) | DNNL_ARG_SRC_1, y_md);
    KILN_RETURN_IF_ERROR(src_convert_.build(a_md, a_cmd));
    return true;
  }
  Status execute(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_ASSIGN_OR_RETURN(const void* a, src_convert_.run(in[0].data, stream_));
    exec_.bind(a_slot_, a);
    exec_.bind(y_slot_, out[0].data);
    if (has_bias_) exec_.bind(bias_slot_, in[2].data);
    if (has_res_) exec_.bind(res_slot_, in[3].data);
    return exec_.execute(stream_);
  }

 private:
  Activation act_;
  bool bf16_;
  bool has_bias_ = false, has_res_ = false;
  std::shared_ptr<void> packed_;
  OnednnConvert src_convert_;
  OnednnExec exec_;
  int a_slot_ = 0, y_slot_ = 0, bias_slot_ = 0, res_slot_ = 0;
};

KernelFactory onednn_factory(bool bf16) {
  return [bf16](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
    Activation act;
    KILN_ASSIGN_OR_RETURN(auto ref, make_reference_fused(args, attrs, &act));
    return std::unique_ptr<Kernel>(std::make_unique<OnednnFusedMatMulKernel>(std::move(ref), act, bf16));
  };
}

class PanelFusedMatMulKernel final : public Kernel {
 public:
  PanelFusedMatMulKernel(std::unique_ptr<Kernel> ref, Activation act) : ref_(std::move(ref)), act_(act) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : "panel"; }
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override { return ref_->infer(in, out); }

  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const int64_t K = in[1].shape[0], N = in[1].shape[1];
    const int64_t M = K > 0 ? in[0].numel() / K : 0;
    const bool has_res = in.size() > 3 && in[3].present();
    // What the reference keeps: other dtypes, empty products, a residual that broadcasts.
    use_ref_ = !panel_gemm::supported() || in[0].dtype != DType::kFloat32 || in[1].dtype != DType::kFloat32 || M == 0 ||
               N == 0 || K == 0 || out[0].numel() != M * N || (has_res && in[3].shape != out[0].shape);
    if (use_ref_) return ref_->prepare(in, out);
    if (!packed_ || packed_src_ != in[1].data) {
      const std::string layout = "panel" + std::to_string(panel_gemm::kPanelCols) + ":" + std::to_string(K) + "x" + std::to_string(N);
      const size_t bytes = sizeof(float) * static_cast<size_t>(panel_gemm::packed_floats(K, N));
      const float* w = in[1].as<const float>();
      KILN_ASSIGN_OR_RETURN(packed_, shared_packed_weights(w, sizeof(float) * static_cast<size_t>(K * N), layout, bytes, [&](void* dst) {
                              panel_gemm::pack(w, K, N, static_cast<float*>(dst));
                              return Status::Ok();
                            }));
      packed_src_ = in[1].data;
    }
    args_ = panel_gemm::Args{};
    args_.M = M;
    args_.K = K;
    args_.N = N;
    args_.packed = static_cast<const float*>(packed_.get());
    args_.act = act_ == Activation::kGeluErf ? panel_gemm::Act::kGeluErf
                : act_ == Activation::kGeluTanh ? panel_gemm::Act::kGeluTanh : panel_gemm::Act::kNone;
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (use_ref_) return ref_->run(in, out);
    panel_gemm::Args a = args_;
    a.a = in[0].as<const float>();
    a.bias = in.size() > 2 && in[2].present() ? in[2].as<const float>() : nullptr;
    a.residual = in.size() > 3 && in[3].present() ? in[3].as<const float>() : nullptr;
    a.y = out[0].as<float>();
    panel_gemm::run(a, omp_get_max_threads());
    return Status::Ok();
  }

 private:
  std::unique_ptr<Kernel> ref_;
  Activation act_;
  bool use_ref_ = false;
  std::shared_ptr<void> packed_;
  const void* packed_src_ = nullptr;
  panel_gemm::Args args_;
};

}  // namespace

void register_fused_matmul_kernels(KernelRegistry& r) {
  r.add_kiln_op({"FusedMatMul", "reference", 0, [](const KernelArgs& args, AttrReader& attrs) {
           Activation act;
           return make_reference_fused(args, attrs, &act);
         }});
  r.add_kiln_op({"FusedMatMul", "onednn", 10, onednn_factory(false)});
  // Below "onednn": bf16 runs only where an engine's precision asked for it.
  r.add_kiln_op({"FusedMatMul", "onednn_bf16", 5, onednn_factory(true)});
  r.add_kiln_op({"FusedMatMul", "panel", 8,
         [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
           Activation act;
           KILN_ASSIGN_OR_RETURN(auto ref, make_reference_fused(args, attrs, &act));
           return std::unique_ptr<Kernel>(std::make_unique<PanelFusedMatMulKernel>(std::move(ref), act));
         },
         // AVX2 + FMA, the engine baseline: panel_gemm::run picks AVX-512 where the loading CPU has it.
         0});
}

}  // namespace kiln
