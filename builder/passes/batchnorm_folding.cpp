// batchnorm_folding: inference-time BatchNormalization, y = (x - mean) / sqrt(var + eps) * gamma
// + beta = x * s + t per channel (axis 1), with s = gamma / sqrt(var + eps), t = beta - mean * s.
//
// - After a Conv with a constant weight (and constant or no bias) whose output only the BN reads,
//   the BN folds into the Conv: W'[o] = W[o] * s[o], B' = B * s + t. What exporters do in eval
//   mode, done again for graphs exported without it.
// - After a MatMul / Gemm with a constant 2-D weight (nn.Linear then BatchNorm1d), when the BN's
//   channel axis is the matmul's column axis (a rank-2 BN input), the BN folds into the weight's
//   columns and the bias: W'[:, c] = W[:, c] * s[c], bias' = bias * s + t (a Gemm's beta * C, a
//   MatMul's constant Add after it, or a new bias Add that matmul_epilogue_fusion then takes).
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

float attr_f(const Node& n, const char* name, float dflt) {
  auto it = n.attrs.find(name);
  return it != n.attrs.end() ? it->second.f : dflt;
}
int64_t attr_i(const Node& n, const char* name, int64_t dflt) {
  auto it = n.attrs.find(name);
  return it != n.attrs.end() ? it->second.i : dflt;
}

// W with each output column c scaled by s[c]: columns are W's dim 1, or dim 0 when `transposed`.
int scaled_weight(Graph& g, const Node& mm, int w, const std::vector<float>& s, bool transposed) {
  const Tensor& wt = g.values[w].constant;
  const int64_t rows = wt.shape()[0], cols = wt.shape()[1];
  Tensor w2 = Tensor::zeros(DType::kFloat32, wt.shape());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      w2.as<float>()[r * cols + c] = wt.as<float>()[r * cols + c] * s[static_cast<size_t>(transposed ? r : c)];
  return g.add_constant(g.unique_name(mm.name + "_bn_folded_W"), std::move(w2));
}

// The folded bias beta * b * s + t as a [C] constant; b may be null (no bias), one value or C values.
int folded_bias(Graph& g, const std::string& name, const float* b, int64_t bn, float beta, const std::vector<float>& s,
                const std::vector<float>& t) {
  const int64_t C = static_cast<int64_t>(s.size());
  Tensor b2 = Tensor::zeros(DType::kFloat32, Shape{C});
  for (int64_t c = 0; c < C; ++c)
    b2.as<float>()[c] = (b ? beta * b[bn == 1 ? 0 : c] * s[static_cast<size_t>(c)] : 0.0f) + t[static_cast<size_t>(c)];
  return g.add_constant(g.unique_name(name + "_bn_folded_B"), std::move(b2));
}

// A constant float32 bias that broadcasts along the last axis of a [M, C] output: one value, [C] or
// [1, C]. Returns its data and sets *n to its element count.
const float* row_bias(const Graph& g, int v, int64_t C, int64_t* n) {
  if (v < 0) return nullptr;
  const Value& b = g.values[v];
  if (!b.is_constant() || b.constant.dtype() != DType::kFloat32) return nullptr;
  const Shape& bs = b.constant.shape();
  const bool one = b.constant.numel() == 1 && bs.rank() <= 2;
  const bool row = b.constant.numel() == C && bs.rank() >= 1 && bs.rank() <= 2 && bs[bs.rank() - 1] == C;
  if (!one && !row) return nullptr;
  *n = b.constant.numel();
  return b.constant.as<float>();
}

// Folds the BN `bn` (input rank 2, C channels, scale s and shift t) into the MatMul / Gemm that
// produces its input, directly or through a constant bias Add; each intermediate value has the one
// reader (use counts include graph outputs). Returns false, changing nothing,
// when the pattern does not hold.
bool fold_into_matmul(Graph& g, Node& bn, const std::vector<int>& producer, const std::vector<int>& uses,
                      const std::vector<float>& s, const std::vector<float>& t) {
  const int64_t C = static_cast<int64_t>(s.size());
  const int x = bn.inputs[0];
  if (uses[x] != 1 || producer[x] < 0) return false;
  Node* p = &g.nodes[producer[x]];
  Node* add = nullptr;
  const float* add_b = nullptr;
  int64_t add_n = 0;
  if (is(p, "Add") && p->inputs.size() == 2 && p->outputs.size() == 1) {  // MatMul then a constant bias Add
    for (int k = 0; k < 2; ++k) {
      const int m = p->inputs[k];
      const float* b = row_bias(g, p->inputs[1 - k], C, &add_n);
      if (b && m >= 0 && producer[m] >= 0 && uses[m] == 1 && is(&g.nodes[producer[m]], "MatMul")) {
        add = p;
        add_b = b;
        p = &g.nodes[producer[m]];
        break;
      }
    }
    if (!add) return false;
  }
  const bool gemm = is(p, "Gemm");
  if (!gemm && !is(p, "MatMul")) return false;
  if (p->outputs.size() != 1 || p->inputs.size() < 2) return false;
  const bool transposed = gemm && attr_i(*p, "transB", 0) != 0;
  const Value& w = g.values[p->inputs[1]];
  if (!w.is_constant() || w.constant.dtype() != DType::kFloat32 || w.constant.shape().rank() != 2 ||
      w.constant.shape()[transposed ? 0 : 1] != C)
    return false;
  if (gemm) {
    const bool has_c = p->inputs.size() > 2 && p->inputs[2] >= 0;
    int64_t cn = 0;
    const float* cb = has_c ? row_bias(g, p->inputs[2], C, &cn) : nullptr;
    if (has_c && !cb) return false;
    // alpha * A' B' + beta * C, then * s + t: B's columns take s (alpha stays), C becomes beta * C * s + t.
    const int w2 = scaled_weight(g, *p, p->inputs[1], s, transposed);
    const int b2 = folded_bias(g, p->name, cb, cn, attr_f(*p, "beta", 1.0f), s, t);
    p->inputs[1] = w2;
    p->inputs.resize(3);
    p->inputs[2] = b2;
    p->attrs["beta"] = Attribute::Float(1.0f);
    p->outputs = bn.outputs;
    p->replaced_nodes.push_back(bn.name);
    bn.removed = true;
    return true;
  }
  p->inputs[1] = scaled_weight(g, *p, p->inputs[1], s, false);
  if (add) {
    const int k = g.values[add->inputs[0]].is_constant() ? 0 : 1;  // the constant operand
    add->inputs[k] = folded_bias(g, p->name, add_b, add_n, 1.0f, s, t);
    add->outputs = bn.outputs;
    add->replaced_nodes.push_back(bn.name);
    bn.removed = true;
    return true;
  }
  // A MatMul alone: the BN becomes its bias Add, in the BN's place.
  Node a;
  a.name = bn.name;
  a.op_type = "Add";
  a.inputs = {x, folded_bias(g, bn.name, nullptr, 0, 1.0f, s, t)};
  a.outputs = bn.outputs;
  a.replaced_nodes = {bn.name};
  bn = std::move(a);
  return true;
}

}  // namespace

Status batchnorm_folding(Graph& g, PassContext& ctx) {
  const std::vector<int> uses = g.use_counts();
  std::vector<int> producer(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!g.nodes[i].removed)
      for (int o : g.nodes[i].outputs) producer[o] = static_cast<int>(i);
  int folded = 0, into_matmul = 0;
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
    // Into the MatMul / Gemm before it (BatchNorm1d after nn.Linear).
    if (xshape.size() == 2 && fold_into_matmul(g, bn, producer, uses, s, t)) {
      ++into_matmul;
      continue;
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
  if (folded || into_matmul || !adds.empty())
    ctx.log.push_back("batchnorm_folding: " + std::to_string(folded) + " BatchNormalization folded into the Conv before it, " +
                      std::to_string(into_matmul) + " into the MatMul/Gemm before it, " + std::to_string(adds.size()) +
                      " turned into a per-channel scale and shift");
  return Status::Ok();
}

}  // namespace kiln
