// matmul_epilogue_fusion: PyTorch exports nn.Linear as MatMul(x, W^T) + Add(bias) (Gemm when x is
// 2-D), GELU at opset 17 as Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5 (Gelu from opset 20),
// and a residual connection as another Add. Each MatMul (or Gemm) with a constant 2-D float32
// weight becomes one FusedMatMul node (runtime/kernels/fused_matmul_kernels.cpp) computing
//   act(A x W + bias) + residual
// in one oneDNN matmul with post-ops and a weight prepacked once, instead of a matmul plus up to
// seven elementwise passes over the output. Every intermediate value must have a single consumer
// (GELU's input exactly its two) and must not be a graph output, so nothing that someone else reads
// disappears. The fused node takes the MatMul's name and lists every node it replaced.
// Shapes are often unknown here (a ranged profile's sliding-window Slice hides even the rank), so
// nothing depends on them: A's dtype follows from W's (MatMul's type constraint), a bias must be
// [N] unless the output rank is known, and the residual keeps the Add's broadcasting in the kernel.
#include <cmath>

#include "builder/passes/pass.h"

namespace kiln {

namespace {

class EpilogueMatcher {
 public:
  explicit EpilogueMatcher(Graph& g) : g_(g), uses_(g.use_counts()) {}

  // The only live consumer of `v`, when it has exactly one and is not a graph output.
  Node* sole_consumer(int v) {
    if (uses_[v] != 1) return nullptr;
    for (auto& n : g_.nodes)
      if (!n.removed && n.domain.empty())
        for (int i : n.inputs)
          if (i == v) return &n;
    return nullptr;
  }
  std::vector<Node*> consumers(int v) {
    std::vector<Node*> out;
    for (auto& n : g_.nodes)
      if (!n.removed)
        for (int i : n.inputs)
          if (i == v) {
            out.push_back(&n);
            break;
          }
    return out;
  }
  bool is_graph_output(int v) const {
    for (int o : g_.outputs)
      if (o == v) return true;
    return false;
  }
  // A float32 constant holding one element equal to `want` (to float precision).
  bool is_scalar(int v, double want) const {
    if (v < 0 || !g_.values[v].is_constant()) return false;
    const Tensor& t = g_.values[v].constant;
    if (t.dtype() != DType::kFloat32 || t.numel() != 1) return false;
    return std::abs(t.as<float>()[0] - want) <= 1e-6 * std::max(1.0, std::abs(want));
  }
  // The operand of binary node `n` other than `v`, or -1 (also when both are `v`).
  static int other(const Node& n, int v) {
    if (n.inputs.size() != 2) return -1;
    if (n.inputs[0] == v && n.inputs[1] != v) return n.inputs[1];
    if (n.inputs[1] == v && n.inputs[0] != v) return n.inputs[0];
    return -1;
  }
  // A default-domain node of type `op` with no attributes: pre-opset-7 Add/Mul/Div carry legacy
  // broadcast/axis attributes whose semantics the fused kernel does not implement.
  static bool is(const Node* n, const char* op) { return n && n->domain.empty() && n->op_type == op && n->attrs.empty(); }

  // GPT-2's written-out tanh GELU: 0.5*x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), the
  // three uses of x being Mul(x, 0.5), Pow(x, 3) and the Add.
  std::vector<Node*> gelu_tanh(int x, std::string* act) {
    Node *half = nullptr, *pow = nullptr, *sum = nullptr;
    for (Node* n : consumers(x)) {
      if (is(n, "Mul") && is_scalar(other(*n, x), 0.5)) half = n;
      else if (is(n, "Pow") && n->inputs.size() == 2 && n->inputs[0] == x && is_scalar(n->inputs[1], 3.0)) pow = n;
      else if (is(n, "Add") && other(*n, x) >= 0) sum = n;
    }
    if (!half || !pow || !sum) return {};
    Node* cube = sole_consumer(pow->outputs[0]);
    if (!is(cube, "Mul") || !is_scalar(other(*cube, pow->outputs[0]), 0.044715) || other(*sum, x) != cube->outputs[0] ||
        sole_consumer(cube->outputs[0]) != sum)
      return {};
    Node* scale = sole_consumer(sum->outputs[0]);
    if (!is(scale, "Mul") || !is_scalar(other(*scale, sum->outputs[0]), std::sqrt(2.0 / M_PI))) return {};
    Node* tanh = sole_consumer(scale->outputs[0]);
    if (!is(tanh, "Tanh")) return {};
    Node* plus1 = sole_consumer(tanh->outputs[0]);
    if (!is(plus1, "Add") || !is_scalar(other(*plus1, tanh->outputs[0]), 1.0)) return {};
    Node* prod = sole_consumer(plus1->outputs[0]);
    if (!is(prod, "Mul") || other(*prod, plus1->outputs[0]) != half->outputs[0] || sole_consumer(half->outputs[0]) != prod) return {};
    *act = "gelu_tanh";
    return {half, pow, cube, sum, scale, tanh, plus1, prod};
  }

  // GELU applied to `x`: returns the nodes (last one produces the result) and the activation name.
  std::vector<Node*> gelu(int x, std::string* act) {
    if (Node* n = sole_consumer(x); n && n->domain.empty() && n->op_type == "Gelu" &&
                                        n->attrs.size() == n->attrs.count("approximate")) {
      auto approx = n->attrs.find("approximate");
      const std::string a = approx == n->attrs.end() ? "none" : approx->second.s;
      if (a != "none" && a != "tanh") return {};
      *act = a == "none" ? "gelu_erf" : "gelu_tanh";
      return {n};
    }
    if (uses_[x] == 3 && !is_graph_output(x)) return gelu_tanh(x, act);
    // x/sqrt2 (or x*(1/sqrt2)) -> Erf -> +1 -> then x*·*0.5 in either grouping.
    if (uses_[x] != 2 || is_graph_output(x)) return {};
    const auto cons = consumers(x);
    if (cons.size() != 2) return {};
    for (int first = 0; first < 2; ++first) {
      Node* scale = cons[first];
      Node* outer = cons[1 - first];
      const bool div_ok = is(scale, "Div") && scale->inputs.size() == 2 && scale->inputs[0] == x && is_scalar(scale->inputs[1], std::sqrt(2.0));
      const bool mul_ok = is(scale, "Mul") && is_scalar(other(*scale, x), 1.0 / std::sqrt(2.0));
      if (!div_ok && !mul_ok) continue;
      Node* erf = sole_consumer(scale->outputs[0]);
      if (!is(erf, "Erf")) continue;
      Node* plus1 = sole_consumer(erf->outputs[0]);
      if (!is(plus1, "Add") || !is_scalar(other(*plus1, erf->outputs[0]), 1.0)) continue;
      if (!is(outer, "Mul")) continue;
      const int outer_other = other(*outer, x);
      if (outer_other == plus1->outputs[0] && sole_consumer(plus1->outputs[0]) == outer) {
        // (x * (1 + erf)) * 0.5
        Node* half = sole_consumer(outer->outputs[0]);
        if (!is(half, "Mul") || !is_scalar(other(*half, outer->outputs[0]), 0.5)) continue;
        *act = "gelu_erf";
        return {scale, erf, plus1, outer, half};
      }
      if (is_scalar(outer_other, 0.5)) {
        // (x * 0.5) * (1 + erf)
        Node* prod = sole_consumer(outer->outputs[0]);
        if (!is(prod, "Mul") || other(*prod, outer->outputs[0]) != plus1->outputs[0] || sole_consumer(plus1->outputs[0]) != prod)
          continue;
        *act = "gelu_erf";
        return {scale, erf, plus1, outer, prod};
      }
    }
    return {};
  }

 private:
  Graph& g_;
  std::vector<int> uses_;
};

// `b` can be the bias of an output of rank `rank` with N columns: N floats along the last dim.
bool bias_like(const Graph& g, int b, int64_t N, size_t rank) {
  if (b < 0 || !g.values[b].is_constant()) return false;
  const Tensor& t = g.values[b].constant;
  const Shape& s = t.shape();
  return t.dtype() == DType::kFloat32 && t.numel() == N && static_cast<size_t>(s.rank()) <= rank && s.rank() >= 1 &&
         s[s.rank() - 1] == N;
}

Tensor transposed(const Tensor& w) {
  const int64_t R = w.shape()[0], C = w.shape()[1];
  Tensor t = Tensor::zeros(DType::kFloat32, Shape{C, R});
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) t.as<float>()[c * R + r] = w.as<float>()[r * C + c];
  return t;
}

// The start of a chain: MatMul(A, W const [K, N]) or Gemm(A, B const, C) with alpha = beta = 1 and
// no transA. Fills the fused node's A, W (transposed for transB) and the Gemm's C as bias.
bool match_root(Graph& g, Node& n, int* a, int* w, int* bias) {
  if (!n.domain.empty() || n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  *a = n.inputs[0];
  *w = n.inputs[1];
  *bias = -1;
  if (*a < 0 || *w < 0) return false;
  const Value& wv = g.values[*w];
  if (!wv.is_constant() || wv.constant.dtype() != DType::kFloat32 || wv.constant.shape().rank() != 2) return false;
  const SymShape* as = g.values[*a].shape ? &*g.values[*a].shape : nullptr;
  if (as && as->empty()) return false;
  // a_scale / w_scale: the int8 scales qdq_matmul_fusion found, carried to the FusedMatMul.
  auto int8_attr = [](const std::string& name) { return name == "a_scale" || name == "w_scale"; };
  if (n.op_type == "MatMul") {
    for (const auto& [name, attr] : n.attrs)
      if (!int8_attr(name)) return false;
    return n.inputs.size() == 2;
  }
  if (n.op_type != "Gemm" || !as) return false;
  // Anything else (opset-6 'broadcast') is left to the Gemm kernel, which rejects what it does not know.
  for (const auto& [name, attr] : n.attrs)
    if (name != "alpha" && name != "beta" && name != "transA" && name != "transB" && !int8_attr(name)) return false;
  auto attr = [&](const char* name, double def) {
    auto it = n.attrs.find(name);
    if (it == n.attrs.end()) return def;
    return it->second.kind == Attribute::Kind::kFloat ? static_cast<double>(it->second.f) : static_cast<double>(it->second.i);
  };
  if (attr("alpha", 1.0) != 1.0 || attr("transA", 0) != 0 || as->size() != 2) return false;
  const bool trans_b = attr("transB", 0) != 0;
  const int64_t N = wv.constant.shape()[trans_b ? 0 : 1];
  if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
    if (attr("beta", 1.0) != 1.0 || !bias_like(g, n.inputs[2], N, 2)) return false;
    *bias = n.inputs[2];
  }
  if (trans_b) *w = g.add_constant(wv.name + "_transposed", transposed(wv.constant));
  return true;
}

}  // namespace

Status matmul_epilogue_fusion(Graph& g, PassContext& ctx) {
  int fused = 0;
  for (size_t idx = 0; idx < g.nodes.size(); ++idx) {
    if (g.nodes[idx].removed || (g.nodes[idx].op_type != "MatMul" && g.nodes[idx].op_type != "Gemm")) continue;
    int a, w, bias;
    if (!match_root(g, g.nodes[idx], &a, &w, &bias)) continue;
    EpilogueMatcher m(g);
    const int64_t N = g.values[w].constant.shape()[1];
    // Bias [N] never changes the output's shape; a longer bias only when the output rank is known.
    const auto& out_shape = g.values[g.nodes[idx].outputs[0]].shape;
    const size_t out_rank = out_shape ? out_shape->size() : 1;
    std::vector<Node*> chain = {&g.nodes[idx]};
    int cur = g.nodes[idx].outputs[0];
    if (bias < 0)
      if (Node* add = m.sole_consumer(cur); EpilogueMatcher::is(add, "Add") && bias_like(g, EpilogueMatcher::other(*add, cur), N, out_rank)) {
        bias = EpilogueMatcher::other(*add, cur);
        chain.push_back(add);
        cur = add->outputs[0];
      }
    std::string act = "none";
    for (Node* n : m.gelu(cur, &act)) chain.push_back(n);
    if (act != "none") cur = chain.back()->outputs[0];
    int residual = -1;
    if (Node* add = m.sole_consumer(cur); EpilogueMatcher::is(add, "Add")) {
      if (const int r = EpilogueMatcher::other(*add, cur); r >= 0) {
        residual = r;
        chain.push_back(add);
        cur = add->outputs[0];
      }
    }
    Node f;
    f.name = g.nodes[idx].name;
    f.op_type = "FusedMatMul";
    f.domain = std::string(kKilnDomain);
    f.inputs = {a, w, bias};
    if (residual >= 0) f.inputs.push_back(residual);
    while (!f.inputs.empty() && f.inputs.back() < 0) f.inputs.pop_back();
    f.outputs = {cur};
    f.attrs["activation"] = Attribute::String(act);
    for (const char* q : {"a_scale", "w_scale"})
      if (auto it = g.nodes[idx].attrs.find(q); it != g.nodes[idx].attrs.end()) f.attrs[q] = it->second;
    for (Node* n : chain) {
      f.replaced_nodes.push_back(n->name);
      n->removed = true;
    }
    // The last node of the chain is where every input (the residual included) is available.
    Node* last = chain.back();
    const std::string summary = f.name + ": " + std::to_string(chain.size()) + " nodes -> FusedMatMul (activation " + act +
                                (bias >= 0 ? ", bias" : "") + (residual >= 0 ? ", residual" : "") + ")";
    *last = std::move(f);
    ctx.log.push_back("matmul_epilogue_fusion: " + summary);
    ++fused;
  }
  if (fused) ctx.log.push_back("matmul_epilogue_fusion: " + std::to_string(fused) + " MatMul/Gemm nodes fused");
  return Status::Ok();
}

}  // namespace kiln
