// batchnorm_folding: inference-time BatchNormalization, y = (x - mean) / sqrt(var + eps) * gamma
// + beta = x * s + t per channel (axis 1), with s = gamma / sqrt(var + eps), t = beta - mean * s.
//
// - After a Conv with a constant weight (and constant or no bias) whose output only the BN reads,
//   the BN folds into the Conv: W'[o] = W[o] * s[o], B' = B * s + t. What exporters do in eval
//   mode, done again for graphs exported without it.
// - Otherwise (a BN after a concatenation, as in DenseNet, or before a convolution with an
//   activation between) it becomes Mul(x, s) and Add(., t) with s and t constants of shape
//   [C, 1, ...]: elementwise_fusion then makes them and the activation after them one step.
// Folding a BN into the convolution *after* it is not done: with zero padding the shift t would
// reach the padded border, where the original graph has zeros, so it is only exact without padding.
#include <cmath>
#include <utility>
#include <vector>

#include "builder/passes/pass.h"

namespace kiln {

namespace {

bool is(const Node* n, const char* op) { return n && !n->removed && n->domain.empty() && n->op_type == op; }

// The float32 constant `v` with `n` elements, or null.
const float* const_f32(const Graph& g, int v, int64_t n) {
  if (v < 0) return nullptr;
  const Value& c = g.values[v];
  if (!c.is_constant() || c.constant.dtype() != DType::kFloat32 || c.constant.numel() != n) return nullptr;
  return c.constant.as<float>();
}

}  // namespace

Status batchnorm_folding(Graph& g, PassContext& ctx) {
  const std::vector<int> uses = g.use_counts();
  std::vector<int> producer(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!g.nodes[i].removed)
      for (int o : g.nodes[i].outputs) producer[o] = static_cast<int>(i);
  int folded = 0;
  std::vector<std::pair<size_t, Node>> adds;  // Add nodes to insert after the node at that index
  for (size_t bi = 0; bi < g.nodes.size(); ++bi) {
    Node& bn = g.nodes[bi];
    if (!is(&bn, "BatchNormalization") || bn.inputs.size() != 5 || bn.outputs.size() != 1) continue;
    if (auto tm = bn.attrs.find("training_mode"); tm != bn.attrs.end() && tm->second.i != 0) continue;
    // Only today's attributes: legacy ones (opset 6's is_test, spatial = 0) stay for the kernel to reject.
    bool known = true;
    for (const auto& [name, a] : bn.attrs)
      known &= name == "epsilon" || name == "momentum" || name == "training_mode" || (name == "spatial" && a.i == 1);
    if (!known) continue;
    const Value& x = g.values[bn.inputs[0]];
    if (x.dtype != DType::kFloat32 || !x.shape || x.shape->size() < 2 || !(*x.shape)[1].is_known()) continue;
    const SymShape xshape = *x.shape;  // g.values may grow below
    const int64_t C = xshape[1].value;
    const float *gamma = const_f32(g, bn.inputs[1], C), *beta = const_f32(g, bn.inputs[2], C);
    const float *mean = const_f32(g, bn.inputs[3], C), *var = const_f32(g, bn.inputs[4], C);
    if (!gamma || !beta || !mean || !var) continue;
    auto eps_it = bn.attrs.find("epsilon");
    const double eps = eps_it != bn.attrs.end() ? eps_it->second.f : 1e-5;
    std::vector<float> s(C), t(C);
    for (int64_t c = 0; c < C; ++c) {
      const double sc = gamma[c] / std::sqrt(static_cast<double>(var[c]) + eps);
      s[c] = static_cast<float>(sc);
      t[c] = static_cast<float>(beta[c] - mean[c] * sc);
    }
    // Into the Conv before it.
    Node* conv = producer[bn.inputs[0]] >= 0 ? &g.nodes[producer[bn.inputs[0]]] : nullptr;
    if (is(conv, "Conv") && uses[bn.inputs[0]] == 1 && conv->inputs.size() >= 2 && conv->outputs.size() == 1) {
      const Value& w = g.values[conv->inputs[1]];
      const bool w_ok = w.is_constant() && w.constant.dtype() == DType::kFloat32 && w.constant.shape().rank() >= 3 &&
                        w.constant.shape()[0] == C;
      const bool has_b = conv->inputs.size() > 2 && conv->inputs[2] >= 0;
      const float* b = has_b ? const_f32(g, conv->inputs[2], C) : nullptr;
      if (w_ok && (!has_b || b)) {
        Tensor w2 = Tensor::zeros(DType::kFloat32, w.constant.shape());
        const int64_t per = w.constant.numel() / C;
        for (int64_t o = 0; o < C; ++o)
          for (int64_t i = 0; i < per; ++i) w2.as<float>()[o * per + i] = w.constant.as<float>()[o * per + i] * s[o];
        Tensor b2 = Tensor::zeros(DType::kFloat32, Shape{C});
        for (int64_t o = 0; o < C; ++o) b2.as<float>()[o] = (b ? b[o] * s[o] : 0.0f) + t[o];
        conv->inputs[1] = g.add_constant(g.unique_name(conv->name + "_bn_folded_W"), std::move(w2));
        conv->inputs.resize(3);
        conv->inputs[2] = g.add_constant(g.unique_name(conv->name + "_bn_folded_B"), std::move(b2));
        conv->outputs = bn.outputs;
        conv->replaced_nodes.push_back(bn.name);
        bn.removed = true;
        ++folded;
        continue;
      }
    }
    // Otherwise a per-channel scale and shift.
    Shape cshape{C};
    for (size_t d = 2; d < xshape.size(); ++d) cshape.push_back(1);
    Tensor st = Tensor::zeros(DType::kFloat32, cshape), tt = Tensor::zeros(DType::kFloat32, cshape);
    std::copy(s.begin(), s.end(), st.as<float>());
    std::copy(t.begin(), t.end(), tt.as<float>());
    const int sv = g.add_constant(g.unique_name(bn.name + "_scale"), std::move(st));
    const int tv = g.add_constant(g.unique_name(bn.name + "_shift"), std::move(tt));
    const int mid = g.add_value(g.unique_name(bn.name + "_scaled"));
    g.values[mid].dtype = DType::kFloat32;
    g.values[mid].shape = xshape;
    Node mul;
    mul.name = bn.name + "_scale";
    mul.op_type = "Mul";
    mul.inputs = {bn.inputs[0], sv};
    mul.outputs = {mid};
    Node add;
    add.name = bn.name;
    add.op_type = "Add";
    add.inputs = {mid, tv};
    add.outputs = bn.outputs;
    add.replaced_nodes = {bn.name};
    // The Mul takes the BN's place and the Add goes right after it (inserted after the loop, which
    // holds references into g.nodes).
    g.nodes[bi] = std::move(mul);
    adds.emplace_back(bi, std::move(add));
  }
  if (!adds.empty()) {
    std::vector<Node> nodes;
    nodes.reserve(g.nodes.size() + adds.size());
    size_t next = 0;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      nodes.push_back(std::move(g.nodes[i]));
      if (next < adds.size() && adds[next].first == i) nodes.push_back(std::move(adds[next++].second));
    }
    g.nodes = std::move(nodes);
  }
  if (folded || !adds.empty())
    ctx.log.push_back("batchnorm_folding: " + std::to_string(folded) + " BatchNormalization folded into the Conv before it, " +
                      std::to_string(adds.size()) + " turned into a per-channel scale and shift");
  return Status::Ok();
}

}  // namespace kiln
