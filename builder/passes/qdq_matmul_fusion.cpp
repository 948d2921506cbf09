// qdq_matmul_fusion: explicit quantization (QDQ). A model that carries its own quantization writes
// each quantized linear layer as
//
//   x -> QuantizeLinear(s, z) -> DequantizeLinear(s, z) --+
//   W_q (int8) -> DequantizeLinear(s_w, 0) ----------------+-> MatMul (or Gemm) -> ...
//
// (PyTorch's quantization flows, ONNX Runtime's quantize_static, NVIDIA's model optimizer, and what
// TensorRT consumes as explicit quantization). Such a MatMul becomes a MatMul on x and the
// dequantized weights carrying the scales as kiln attributes `a_scale` (s) and `w_scale` (s_w, per
// output column): matmul_epilogue_fusion keeps them on the FusedMatMul it makes, whose step then runs
// on the int8 kernel (runtime/kernels/fused_matmul_int8.cpp), with the model's own scales, no
// calibration. That kernel quantizes x exactly as the QDQ pair does (round half to even, saturate)
// and recovers W_q exactly from W_q * s_w, so the int8 products are the model's.
//
// Matched: activations symmetric (int8 zero point 0, or uint8 zero point 128: the same values), one
// scale for the tensor; weights int8, zero point 0, one scale per output column or for the tensor,
// 2-D and constant. Anything else stays as written and runs on the reference QDQ kernels in float.
// Runs before constant_folding, which would fold DequantizeLinear(W_q) and lose s_w.
#include <cmath>

#include "builder/passes/pass.h"

namespace kiln {

namespace {

const Node* producer(const Graph& g, int v) {
  if (v < 0 || g.values[v].producer < 0) return nullptr;
  const Node& n = g.nodes[g.values[v].producer];
  return n.removed ? nullptr : &n;
}

bool is_op(const Node* n, const char* op) { return n && n->domain.empty() && n->op_type == op; }

const Tensor* constant(const Graph& g, const Node& n, size_t i) {
  if (i >= n.inputs.size() || n.inputs[i] < 0 || !g.values[n.inputs[i]].is_constant()) return nullptr;
  return &g.values[n.inputs[i]].constant;
}

int64_t axis_of(const Node& n) {
  auto it = n.attrs.find("axis");
  return it == n.attrs.end() ? 1 : it->second.i;
}

// The zero point of a Q/DQ node as an int (0 when absent), or nullopt when not one constant value.
std::optional<int64_t> zero_point(const Graph& g, const Node& n) {
  if (n.inputs.size() < 3 || n.inputs[2] < 0) return 0;
  const Tensor* z = constant(g, n, 2);
  if (!z || z->numel() != 1) return std::nullopt;
  if (z->dtype() == DType::kInt8) return z->as<int8_t>()[0];
  if (z->dtype() == DType::kUInt8) return z->as<uint8_t>()[0];
  return std::nullopt;
}

// s when `v` = DequantizeLinear(QuantizeLinear(x, s, z), s, z) with one scale and a symmetric
// zero point; x in *x.
std::optional<float> activation_scale(const Graph& g, int v, int* x) {
  const Node* dq = producer(g, v);
  if (!is_op(dq, "DequantizeLinear") || dq->inputs.empty()) return std::nullopt;
  const Node* q = producer(g, dq->inputs[0]);
  if (!is_op(q, "QuantizeLinear") || q->inputs.size() < 2) return std::nullopt;
  const Tensor* s = constant(g, *dq, 1);
  const Tensor* s2 = constant(g, *q, 1);
  if (!s || !s2 || s->numel() != 1 || s2->numel() != 1 || s->dtype() != DType::kFloat32 || s2->dtype() != DType::kFloat32) return std::nullopt;
  if (s->as<float>()[0] != s2->as<float>()[0] || !(s->as<float>()[0] > 0)) return std::nullopt;
  const auto z = zero_point(g, *dq), z2 = zero_point(g, *q);
  if (!z || !z2 || *z != *z2) return std::nullopt;
  // The quantized type is the zero point's (uint8 without one); shapes may still be symbolic here,
  // so the QuantizeLinear's output dtype may not be known yet.
  const Tensor* zt = constant(g, *q, 2);
  const DType qt = zt ? zt->dtype() : DType::kUInt8;
  const bool symmetric = (qt == DType::kInt8 && *z == 0) || (qt == DType::kUInt8 && *z == 128);
  if (!symmetric) return std::nullopt;
  *x = q->inputs[0];
  return s->as<float>()[0];
}

// The dequantized weights and their per-column scales when `v` = DequantizeLinear(W_q, s_w, 0)
// with W_q a 2-D int8 constant; `column_axis` is the weight dim of the output columns (1 for
// MatMul's [K, N], 0 for Gemm's transposed [N, K]).
bool dequantized_weight(const Graph& g, int v, int column_axis, Tensor* w, std::vector<float>* scales) {
  const Node* dq = producer(g, v);
  if (!is_op(dq, "DequantizeLinear")) return false;
  const Tensor* wq = constant(g, *dq, 0);
  const Tensor* s = constant(g, *dq, 1);
  if (!wq || !s || wq->dtype() != DType::kInt8 || wq->shape().rank() != 2 || s->dtype() != DType::kFloat32) return false;
  const auto z = zero_point(g, *dq);
  if (!z || *z != 0) {
    // A per-channel zero point: every value must be 0.
    const Tensor* zt = constant(g, *dq, 2);
    if (!zt || zt->dtype() != DType::kInt8) return false;
    for (int64_t i = 0; i < zt->numel(); ++i)
      if (zt->as<int8_t>()[i] != 0) return false;
  }
  const int64_t cols = wq->shape()[column_axis];
  int64_t axis = axis_of(*dq);
  if (axis < 0) axis += 2;
  if (s->numel() != 1 && (s->numel() != cols || axis != column_axis)) return false;
  *w = Tensor::zeros(DType::kFloat32, wq->shape());
  scales->assign(static_cast<size_t>(cols), 0.0f);
  const int64_t C = wq->shape()[1];
  for (int64_t i = 0; i < wq->numel(); ++i) {
    const int64_t col = column_axis == 1 ? i % C : i / C;
    const float sc = s->numel() == 1 ? s->as<float>()[0] : s->as<float>()[col];
    (*scales)[col] = sc;
    w->as<float>()[i] = static_cast<float>(wq->as<int8_t>()[i]) * sc;
  }
  return true;
}

}  // namespace

Status qdq_matmul_fusion(Graph& g, PassContext& ctx) {
  if (ctx.disabled.count("matmul_epilogue_fusion")) return Status::Ok();  // it carries the scales to the int8 kernel
  int rewritten = 0;
  for (auto& n : g.nodes) {
    if (n.removed || !n.domain.empty() || (n.op_type != "MatMul" && n.op_type != "Gemm") || n.inputs.size() < 2) continue;
    if (n.op_type == "Gemm") {
      auto ta = n.attrs.find("transA");
      if (ta != n.attrs.end() && ta->second.i != 0) continue;
    }
    auto tb = n.attrs.find("transB");
    const int column_axis = n.op_type == "Gemm" && tb != n.attrs.end() && tb->second.i != 0 ? 0 : 1;
    int x = -1;
    const std::optional<float> a_scale = activation_scale(g, n.inputs[0], &x);
    if (!a_scale) continue;
    Tensor w;
    std::vector<float> w_scale;
    if (!dequantized_weight(g, n.inputs[1], column_axis, &w, &w_scale)) continue;
    n.inputs[0] = x;
    n.inputs[1] = g.add_constant(g.unique_name(g.values[n.inputs[1]].name + "_dequantized"), std::move(w));
    n.attrs["a_scale"] = Attribute::Float(*a_scale);
    n.attrs["w_scale"] = Attribute::Floats(std::move(w_scale));
    ++rewritten;
  }
  if (rewritten) ctx.log.push_back("qdq_matmul_fusion: " + std::to_string(rewritten) + " quantized MatMul/Gemm nodes run on the int8 kernel");
  return Status::Ok();
}

}  // namespace kiln
