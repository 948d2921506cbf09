// matmul_scale_fusion: a FusedMatMul without activation followed by a Mul by a constant per-column
// vector (or scalar) and then a residual Add (ConvNeXt's layer scale: x + gamma * Linear(...), once
// nhwc_transpose_folding has removed the Transpose between them) becomes one FusedMatMul:
//   (A W + b) * gamma + r = A (W diag(gamma)) + b * gamma + r,
// the scale folded into new copies of the weights and bias, the Add its residual. One pass over the
// output instead of two. Exact up to the rounding of W * gamma (one float multiply per weight).
//
// Conditions: the FusedMatMul has constant float32 [K, N] weights, activation none, no residual and
// no int8 scales; gamma is a float32 constant of N values varying along the last axis only, or one
// value (an unfused attention's q * 1/sqrt(d) after the split projection), either way of a rank
// that changes no shape; every intermediate value has one reader and is not a graph output. Without
// a residual Add after the Mul, the Mul alone is folded.
#include <set>

#include "builder/passes/pass.h"

namespace kiln {

namespace {

bool is_plain(const Node* n, const char* op) { return n && !n->removed && n->domain.empty() && n->op_type == op && n->attrs.empty(); }

// gamma: N float32 values along the last axis, or a single value, of a rank the Mul's rank-`rank`
// output keeps (rank 0: unknown, then only rank 0 or 1).
bool per_column(const Graph& g, int v, int64_t N, size_t rank) {
  if (v < 0 || !g.values[v].is_constant()) return false;
  const Tensor& t = g.values[v].constant;
  const Shape& s = t.shape();
  if (t.dtype() != DType::kFloat32) return false;
  const bool single = t.numel() == 1;
  if (!single && (t.numel() != N || s.rank() < 1 || s[s.rank() - 1] != N)) return false;
  return rank == 0 ? s.rank() <= 1 : static_cast<size_t>(s.rank()) <= rank;
}

int other(const Node& n, int v) {
  if (n.inputs.size() != 2) return -1;
  if (n.inputs[0] == v && n.inputs[1] != v) return n.inputs[1];
  if (n.inputs[1] == v && n.inputs[0] != v) return n.inputs[0];
  return -1;
}

}  // namespace

Status matmul_scale_fusion(Graph& g, PassContext& ctx) {
  const std::vector<int> uses = g.use_counts();
  const std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  std::vector<Node*> reader(g.values.size(), nullptr);  // a value's reader, when it has one
  for (auto& n : g.nodes)
    if (!n.removed)
      for (int v : n.inputs)
        if (v >= 0) reader[v] = &n;
  auto sole_reader = [&](int v) { return uses[v] == 1 && !outputs.count(v) ? reader[v] : nullptr; };
  int fused = 0;
  for (size_t idx = 0; idx < g.nodes.size(); ++idx) {
    Node& f = g.nodes[idx];
    if (f.removed || f.domain != kKilnDomain || f.op_type != "FusedMatMul" || f.inputs.size() < 2 || f.inputs.size() > 3) continue;
    if (f.attrs.count("a_scale") || f.attrs.count("w_scale")) continue;
    auto act = f.attrs.find("activation");
    if (act != f.attrs.end() && act->second.s != "none") continue;
    const int w = f.inputs[1], bias = f.inputs.size() > 2 ? f.inputs[2] : -1;
    if (w < 0 || !g.values[w].is_constant() || g.values[w].constant.dtype() != DType::kFloat32 ||
        g.values[w].constant.shape().rank() != 2)
      continue;
    const int64_t K = g.values[w].constant.shape()[0], N = g.values[w].constant.shape()[1];
    if (bias >= 0 && (!g.values[bias].is_constant() || g.values[bias].constant.dtype() != DType::kFloat32 ||
                      g.values[bias].constant.numel() != N))
      continue;
    const int y = f.outputs[0];
    const auto& shape = g.values[y].shape;
    Node* mul = sole_reader(y);
    if (!is_plain(mul, "Mul")) continue;
    const int gamma = other(*mul, y);
    if (!per_column(g, gamma, N, shape ? shape->size() : 0)) continue;
    Node* add = sole_reader(mul->outputs[0]);
    const int residual = is_plain(add, "Add") ? other(*add, mul->outputs[0]) : -1;
    if (residual >= 0 && g.values[residual].is_constant()) continue;  // a bias: not this pattern
    const float* gv = g.values[gamma].constant.as<float>();
    const int64_t gstride = g.values[gamma].constant.numel() == 1 ? 0 : 1;
    Tensor ws = Tensor::zeros(DType::kFloat32, Shape{K, N});
    const float* wv = g.values[w].constant.as<float>();
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) ws.as<float>()[k * N + n] = wv[k * N + n] * gv[n * gstride];
    Node fused_node = f;
    fused_node.inputs[1] = g.add_constant(g.unique_name(g.values[w].name + "_scaled"), std::move(ws));
    if (bias >= 0) {
      Tensor bs = Tensor::copy_of(g.values[bias].constant.view());
      for (int64_t n = 0; n < N; ++n) bs.as<float>()[n] *= gv[n * gstride];
      fused_node.inputs[2] = g.add_constant(g.unique_name(g.values[bias].name + "_scaled"), std::move(bs));
    }
    Node* last = mul;
    fused_node.replaced_nodes.push_back(mul->name);
    if (residual >= 0) {
      fused_node.inputs.resize(3, -1);
      fused_node.inputs.push_back(residual);
      fused_node.replaced_nodes.push_back(add->name);
      last = add;
    }
    fused_node.outputs = {last->outputs[0]};
    // The fused node takes the place of the last node it replaces, where the residual is available.
    f.removed = true;
    if (residual >= 0) mul->removed = true;
    *last = std::move(fused_node);
    ++fused;
  }
  if (fused) ctx.log.push_back("matmul_scale_fusion: " + std::to_string(fused) + " per-column or scalar scales (and residual Adds) folded into FusedMatMuls");
  return Status::Ok();
}

}  // namespace kiln
