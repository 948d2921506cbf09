// FusedMatMul in int8 (impl "onednn_int8"; the step's attribute `a_scale` comes from calibration,
// builder/plan/int8_lowering.cpp, or with `w_scale` from a QDQ model, qdq_matmul_fusion.cpp):
//   Y = act(dequant(q(A) x q(W)) + bias) + residual
// A is quantized per run, per tensor and symmetrically: q(A) = saturate(round(A / a_scale)) as s8
// (a oneDNN reorder); W once, per output column n: w_scale[n] = max_k |W[k, n]| / 127,
// q(W) = round(W / w_scale[n]). oneDNN's s8 x s8 -> s32 matmul (VNNI vpdpbusd, AMX-INT8 where
// present) applies a_scale * w_scale[n] as per-column output scales, then the bias, GELU and the
// residual as post-ops, writing f32. q(W) is packed once into oneDNN's layout (with the s8-source
// compensation oneDNN keeps beside it) and shared by every context, like the f32 weights.
//
// Without VNNI (AVX2, AVX-512 before Cascade Lake, or an ISA cap below it) oneDNN multiplies u8 x s8
// pairs with vpmaddubsw, whose 16-bit pair sums saturate once |q(W)| exceeds 63 (2 * 255 * 127 >
// 32767): the results are then wrong, not just coarse. There, as ONNX Runtime's reduce_range does,
// calibrated weights are quantized to 7 bits (int8_weight_levels()). A QDQ model's own weights
// cannot be: when they use more than 7 bits the kernel keeps the model's exact semantics by
// multiplying q(A) (the s8 values as f32) with the dequantized weights in f32 ("emulated").
#include "runtime/kernels/fused_matmul_int8.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kernels/onednn_common.h"
#include "runtime/kernels/packed_weights.h"

namespace kiln {

namespace {

using dnnl::memory;
using tag = memory::format_tag;

// Per-column symmetric scales of W [K, N]: the largest |W[k, n]| maps to `levels` (an all-zero
// column gets scale 1, so it quantizes to zeros and dequantizes to exact zeros).
std::vector<float> column_scales(const float* w, int64_t K, int64_t N, int levels) {
  std::vector<float> amax(static_cast<size_t>(N), 0.0f);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) amax[n] = std::max(amax[n], std::fabs(w[k * N + n]));
  for (float& a : amax) a = a > 0 ? a / static_cast<float>(levels) : 1.0f;
  return amax;
}

class OnednnInt8FusedMatMul final : public OnednnKernel {
 public:
  OnednnInt8FusedMatMul(std::unique_ptr<Kernel> ref, std::string act, float a_scale, std::vector<float> w_scale)
      : OnednnKernel(std::move(ref)), act_(std::move(act)), a_scale_(a_scale), w_scale_attr_(std::move(w_scale)) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : emulated_ ? "onednn_int8_emulated" : "onednn_int8"; }

 protected:
  StatusOr<bool> build(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const Shape& a = in[0].shape;
    if (in[0].dtype != DType::kFloat32 || in[1].dtype != DType::kFloat32) return false;
    const int64_t K = in[1].shape[0], N = in[1].shape[1];
    const int64_t M = K > 0 ? a.numel() / K : 0;
    if (M == 0 || N == 0 || K == 0 || out[0].numel() != M * N) return false;
    has_bias_ = in.size() > 2 && in[2].present();
    has_res_ = in.size() > 3 && in[3].present();
    if (has_res_ && in[3].shape != out[0].shape) return false;  // a broadcasting residual: the reference
    const auto f32 = memory::data_type::f32, s8 = memory::data_type::s8;
    const memory::desc a_md({M, K}, f32, tag::ab), a_q({M, K}, s8, tag::ab);
    const memory::desc w_q_plain({K, N}, s8, tag::ab), w_any({K, N}, s8, tag::any);
    const memory::desc y_md({M, N}, f32, tag::ab);
    const float* w = in[1].as<const float>();
    // The model's own weight scales (a QDQ model: W = W_q * w_scale, so W / w_scale gives W_q back
    // exactly), else per-column symmetric ones.
    const int levels = int8_weight_levels();
    std::vector<float> w_scale = column_scales(w, K, N, levels);
    emulated_ = false;
    if (!w_scale_attr_.empty()) {
      if (w_scale_attr_.size() != 1 && static_cast<int64_t>(w_scale_attr_.size()) != N) return false;
      for (int64_t n = 0; n < N; ++n) w_scale[n] = w_scale_attr_.size() == 1 ? w_scale_attr_[0] : w_scale_attr_[n];
      for (int64_t i = 0; i < K * N && !emulated_; ++i) emulated_ = std::fabs(std::lrintf(w[i] / w_scale[i % N])) > levels;
    }
    std::vector<float> out_scale(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) out_scale[n] = a_scale_ * w_scale[n];

    // The bias joins after the scales, as a per-column binary add (oneDNN 2.x would add its bias
    // argument to the s32 accumulator before scaling).
    dnnl::post_ops po;
    const memory::desc bias_md({1, N}, f32, tag::ab);
    if (has_bias_) po.append_binary(dnnl::algorithm::binary_add, bias_md);
    if (act_ == "gelu_erf") po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
    if (act_ == "gelu_tanh") po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
    if (has_res_) po.append_binary(dnnl::algorithm::binary_add, y_md);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_post_ops(po);
    // A -> q(A): a reorder with the output scale 1 / a_scale (round to nearest, saturating).
    dnnl::primitive_attr qattr;
    qattr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    qattr.set_output_scales(0, {1.0f / a_scale_});
    const dnnl::reorder::primitive_desc qpd(onednn_engine(), a_md, onednn_engine(), a_q, qattr);
    quantize_.reset();
    quantize_.init(qpd, dnnl::reorder(qpd));
    q_src_slot_ = quantize_.add_arg(DNNL_ARG_FROM, a_md);
    a_buffer_ = aligned_alloc_shared(a_q.get_size() + (emulated_ ? a_md.get_size() : 0));
    if (!a_buffer_) return ResourceExhausted("FusedMatMul int8: cannot allocate the quantized input");
    quantize_.bind(quantize_.add_arg(DNNL_ARG_TO, a_q), a_buffer_.get());
    if (emulated_) return build_emulated(in, a_md, a_q, y_md, attr, bias_md, po.len());
    attr.set_output_scales(1 << 1, out_scale);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_q, w_any, y_md), attr, onednn_engine());
    const memory::desc packed_md = pd.weights_desc();

    // q(W) in oneDNN's layout, computed once per engine (the layout string names the quantization).
    std::string layout("int8_per_column:");
    layout.append(reinterpret_cast<const char*>(w_scale.data()), w_scale.size() * sizeof(float));
    layout.append(reinterpret_cast<const char*>(&packed_md.data), sizeof(packed_md.data));
    KILN_ASSIGN_OR_RETURN(packed_, shared_packed_weights(w, sizeof(float) * static_cast<size_t>(K * N), layout, packed_md.get_size(),
                                                         [&](void* dst) -> Status {
                                                           std::vector<int8_t> q(static_cast<size_t>(K * N));
                                                           for (int64_t k = 0; k < K; ++k)
                                                             for (int64_t n = 0; n < N; ++n)
                                                               q[k * N + n] = static_cast<int8_t>(
                                                                   std::clamp(std::lrintf(w[k * N + n] / w_scale[n]), -128L, 127L));
                                                           // levels < 127 only without VNNI, and then |q(W)| <= levels by the scales.
                                                           try {
                                                             dnnl::stream s(onednn_engine());
                                                             dnnl::memory from(w_q_plain, onednn_engine(), q.data());
                                                             dnnl::memory to(packed_md, onednn_engine(), dst);
                                                             dnnl::reorder(from, to).execute(s, from, to);
                                                             s.wait();
                                                           } catch (const dnnl::error& e) {
                                                             return Internal(std::string("oneDNN int8 weight reorder failed: ") + e.what());
                                                           }
                                                           return Status::Ok();
                                                         }));
    exec_.reset();
    exec_.init(pd, dnnl::matmul(pd));
    a_slot_ = exec_.add_arg(DNNL_ARG_SRC, a_q);
    exec_.bind(exec_.add_arg(DNNL_ARG_WEIGHTS, packed_md), packed_.get());
    y_slot_ = exec_.add_arg(DNNL_ARG_DST, y_md);
    if (has_bias_) bias_slot_ = exec_.add_arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, bias_md);
    if (has_res_) res_slot_ = exec_.add_arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(po.len() - 1) | DNNL_ARG_SRC_1, y_md);
    exec_.bind(a_slot_, a_buffer_.get());
    return true;
  }

  // q(A) as f32 (a second reorder, exact) times the dequantized weights W in f32, scaled by a_scale:
  // the QDQ model's arithmetic without integer kernels. The weights stay the model's plain f32.
  StatusOr<bool> build_emulated(std::span<const TensorView> in, const dnnl::memory::desc& a_md, const dnnl::memory::desc& a_q,
                                const dnnl::memory::desc& y_md, dnnl::primitive_attr attr, const dnnl::memory::desc& bias_md, int post_ops) {
    const int64_t K = in[1].shape[0], N = in[1].shape[1];
    const dnnl::memory::desc w_md({K, N}, memory::data_type::f32, tag::ab);
    attr.set_output_scales(0, {a_scale_});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, w_md, y_md), attr, onednn_engine());
    dnnl::primitive_attr dattr;
    dattr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::reorder::primitive_desc dpd(onednn_engine(), a_q, onednn_engine(), a_md, dattr);
    char* a_f = static_cast<char*>(a_buffer_.get()) + a_q.get_size();
    dequantize_.reset();
    dequantize_.init(dpd, dnnl::reorder(dpd));
    dequantize_.bind(dequantize_.add_arg(DNNL_ARG_FROM, a_q), a_buffer_.get());
    dequantize_.bind(dequantize_.add_arg(DNNL_ARG_TO, a_md), a_f);
    exec_.reset();
    exec_.init(pd, dnnl::matmul(pd));
    exec_.bind(exec_.add_arg(DNNL_ARG_SRC, a_md), a_f);
    w_slot_ = exec_.add_arg(DNNL_ARG_WEIGHTS, w_md);
    y_slot_ = exec_.add_arg(DNNL_ARG_DST, y_md);
    if (has_bias_) bias_slot_ = exec_.add_arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, bias_md);
    if (has_res_) res_slot_ = exec_.add_arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_ops - 1) | DNNL_ARG_SRC_1, y_md);
    return true;
  }

  Status execute(std::span<const TensorView> in, std::span<const TensorView> out) override {
    quantize_.bind(q_src_slot_, in[0].data);
    KILN_RETURN_IF_ERROR(quantize_.execute(stream_));
    if (emulated_) {
      KILN_RETURN_IF_ERROR(dequantize_.execute(stream_));
      exec_.bind(w_slot_, in[1].data);
    }
    exec_.bind(y_slot_, out[0].data);
    if (has_bias_) exec_.bind(bias_slot_, in[2].data);
    if (has_res_) exec_.bind(res_slot_, in[3].data);
    return exec_.execute(stream_);
  }

 private:
  std::string act_;
  float a_scale_;
  std::vector<float> w_scale_attr_;
  bool has_bias_ = false, has_res_ = false, emulated_ = false;
  std::shared_ptr<void> packed_, a_buffer_;
  OnednnExec quantize_, dequantize_, exec_;
  int q_src_slot_ = 0, a_slot_ = 0, w_slot_ = 0, y_slot_ = 0, bias_slot_ = 0, res_slot_ = 0;
};

}  // namespace

int int8_weight_levels() {
  // oneDNN's own view of the ISA, so DNNL_MAX_CPU_ISA caps it as it caps the kernels.
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  const bool vnni = isa == dnnl::cpu_isa::avx512_core_vnni || isa == dnnl::cpu_isa::avx512_core_bf16 ||
                    isa == dnnl::cpu_isa::avx512_core_amx || isa == dnnl::cpu_isa::avx2_vnni;
  return vnni ? 127 : 63;
}

void register_fused_matmul_int8_kernels(KernelRegistry& r) {
  // Below "onednn": int8 runs only where an engine's precision asked for it (with a_scale).
  r.add_kiln_op({"FusedMatMul", "onednn_int8", 4, [](const KernelArgs& args, AttrReader& attrs) -> StatusOr<std::unique_ptr<Kernel>> {
           KILN_ASSIGN_OR_RETURN(std::string act, attrs.get_string("activation", "none"));
           KILN_ASSIGN_OR_RETURN(float a_scale, attrs.get_float("a_scale", 0.0f));
           if (!(a_scale > 0) || !std::isfinite(a_scale))
             return InvalidArgument("attribute 'a_scale' must be a positive finite float (the calibrated activation scale), got " +
                                    std::to_string(a_scale));
           KILN_ASSIGN_OR_RETURN(std::vector<float> w_scale, attrs.get_floats("w_scale"));
           for (float w : w_scale)
             if (!(w > 0) || !std::isfinite(w)) return InvalidArgument("attribute 'w_scale' must hold positive finite floats");
           KILN_ASSIGN_OR_RETURN(auto ref, make_fused_matmul_reference(args, attrs));
           return std::unique_ptr<Kernel>(std::make_unique<OnednnInt8FusedMatMul>(std::move(ref), act, a_scale, std::move(w_scale)));
         }});
}

}  // namespace kiln
