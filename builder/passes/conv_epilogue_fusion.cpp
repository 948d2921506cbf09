// conv_epilogue_fusion: CNNs such as ResNet follow each Conv (BatchNorm already folded in by the
// exporter) with Relu, or with a residual Add and then Relu. Each Conv with a constant float32
// weight becomes one FusedConv node (runtime/kernels/onednn_conv_kernels.cpp) computing
//   act(Conv(X, W, B) + residual)
// in one oneDNN convolution with post-ops and a weight prepacked once, instead of a convolution
// plus up to two elementwise passes over its output. A Conv with nothing to fuse still becomes a
// FusedConv: the constant weight is what lets the kernel pack it once instead of on every run.
// Every intermediate value must have a single consumer and must not be a graph output; the residual
// Add is fused only when shape inference proved the residual has the convolution output's exact
// shape (the kernel does not broadcast). The fused node takes the Conv's name and lists every node
// it replaced.
#include <cmath>
#include <optional>

#include "builder/passes/pass.h"

namespace kiln {

namespace {

// The only live consumer of `v` (a default-domain node), when it has exactly one use and is not a
// graph output.
Node* sole_consumer(Graph& g, const std::vector<int>& uses, int v) {
  if (uses[v] != 1) return nullptr;
  for (auto& n : g.nodes)
    if (!n.removed)
      for (int i : n.inputs)
        if (i == v) return n.domain.empty() ? &n : nullptr;
  return nullptr;
}

bool is(const Node* n, const char* op) { return n && n->domain.empty() && n->op_type == op; }

// Conv(X, W const float32 [, B]) with every input present except possibly B.
bool match_conv(const Graph& g, const Node& n) {
  if (!is(&n, "Conv") || n.inputs.size() < 2 || n.inputs.size() > 3 || n.outputs.size() != 1) return false;
  if (n.inputs[0] < 0 || n.inputs[1] < 0) return false;
  const Value& w = g.values[n.inputs[1]];
  return w.is_constant() && w.constant.dtype() == DType::kFloat32 && w.constant.shape().rank() >= 3;
}

// `r` is known to be float32 with exactly the (fully known or symbolic) shape `like`.
bool same_shape(const Graph& g, int r, int like) {
  const Value& a = g.values[r];
  const Value& b = g.values[like];
  if (a.dtype != DType::kFloat32 || !a.shape || !b.shape || *a.shape != *b.shape) return false;
  for (const Dim& d : *a.shape)
    if (!d.is_known() && !d.is_symbol()) return false;
  return true;
}

// The one-element float32 constant `v` as a float, or `fallback` when `v` is absent (-1).
std::optional<float> scalar_or(const Graph& g, int v, float fallback) {
  if (v < 0) return fallback;
  const Value& c = g.values[v];
  if (!c.is_constant() || c.constant.dtype() != DType::kFloat32 || c.constant.numel() != 1) return std::nullopt;
  return c.constant.as<float>()[0];
}

// The activation applied to `v` (a convolution's output) that the FusedConv epilogue computes:
// Relu, HardSwish, Clip with constant bounds (ReLU6), Sigmoid, Mul(v, Sigmoid(v)) (SiLU, as
// exporters write nn.SiLU), or Gelu. Every intermediate value must be read by the pattern only.
struct Activation {
  std::string name = "none";
  float alpha = 0, beta = 0;
  std::vector<Node*> nodes;  // in order; the last one's output is the activation's
};
Activation match_activation(Graph& g, const std::vector<int>& uses, int v) {
  Activation a;
  auto unary = [](const Node* n) { return n && n->inputs.size() >= 1 && n->outputs.size() == 1; };
  if (uses[v] == 2 && g.values[v].dtype == DType::kFloat32) {  // SiLU: v feeds the Sigmoid and the Mul
    Node *sig = nullptr, *mul = nullptr;
    for (auto& n : g.nodes) {
      if (n.removed) continue;
      for (int i : n.inputs)
        if (i == v) {
          if (is(&n, "Sigmoid") && !sig) sig = &n;
          else if (is(&n, "Mul") && !mul) mul = &n;
        }
    }
    if (sig && mul && sig->outputs.size() == 1 && mul->inputs.size() == 2 && mul->outputs.size() == 1 &&
        sole_consumer(g, uses, sig->outputs[0]) == mul &&
        ((mul->inputs[0] == v && mul->inputs[1] == sig->outputs[0]) || (mul->inputs[1] == v && mul->inputs[0] == sig->outputs[0]))) {
      a.name = "silu";
      a.nodes = {sig, mul};
    }
    return a;
  }
  Node* n = sole_consumer(g, uses, v);
  if (!unary(n) || n->inputs[0] != v) return a;
  if (is(n, "Relu")) a.name = "relu";
  else if (is(n, "Sigmoid")) a.name = "sigmoid";
  else if (is(n, "HardSwish")) a.name = "hardswish";
  else if (is(n, "Gelu")) {
    auto it = n->attrs.find("approximate");
    a.name = it != n->attrs.end() && it->second.s == "tanh" ? "gelu_tanh" : "gelu_erf";
  } else if (is(n, "Clip")) {
    // Opset 11+: bounds as inputs; earlier: attributes min/max.
    const float lo_default = -INFINITY, hi_default = INFINITY;
    std::optional<float> lo, hi;
    if (n->inputs.size() > 1) {
      lo = scalar_or(g, n->inputs[1], lo_default);
      hi = n->inputs.size() > 2 ? scalar_or(g, n->inputs[2], hi_default) : std::optional<float>(hi_default);
    } else {
      auto mn = n->attrs.find("min"), mx = n->attrs.find("max");
      lo = mn != n->attrs.end() ? mn->second.f : lo_default;
      hi = mx != n->attrs.end() ? mx->second.f : hi_default;
    }
    if (!lo || !hi) return a;
    a.name = "clip";
    a.alpha = *lo;
    a.beta = *hi;
  }
  if (a.name != "none") a.nodes = {n};
  return a;
}

}  // namespace

Status conv_epilogue_fusion(Graph& g, PassContext& ctx) {
  int fused = 0, with_epilogue = 0;
  for (size_t idx = 0; idx < g.nodes.size(); ++idx) {
    if (g.nodes[idx].removed || !match_conv(g, g.nodes[idx])) continue;
    const std::vector<int> uses = g.use_counts();
    std::vector<Node*> chain = {&g.nodes[idx]};
    int cur = g.nodes[idx].outputs[0];
    int residual = -1;
    if (Node* add = sole_consumer(g, uses, cur); is(add, "Add") && add->inputs.size() == 2 && add->outputs.size() == 1) {
      const int r = add->inputs[0] == cur ? add->inputs[1] : add->inputs[0];
      if (r >= 0 && r != cur && same_shape(g, r, cur) && same_shape(g, add->outputs[0], cur)) {
        residual = r;
        chain.push_back(add);
        cur = add->outputs[0];
      }
    }
    const Activation a = match_activation(g, uses, cur);
    const std::string act = a.name;
    for (Node* n : a.nodes) chain.push_back(n);
    if (!a.nodes.empty()) cur = a.nodes.back()->outputs[0];
    Node f;
    f.name = g.nodes[idx].name;
    f.op_type = "FusedConv";
    f.domain = std::string(kKilnDomain);
    f.inputs = g.nodes[idx].inputs;
    f.inputs.resize(3, -1);
    f.inputs.push_back(residual);
    while (f.inputs.back() < 0) f.inputs.pop_back();
    f.outputs = {cur};
    f.attrs = g.nodes[idx].attrs;
    f.attrs["activation"] = Attribute::String(act);
    if (act == "clip") {
      f.attrs["activation_alpha"] = Attribute::Float(a.alpha);
      f.attrs["activation_beta"] = Attribute::Float(a.beta);
    }
    for (Node* n : chain) {
      f.replaced_nodes.push_back(n->name);
      n->removed = true;
    }
    // The last node of the chain is where every input (the residual included) is available.
    Node* last = chain.back();
    if (chain.size() > 1) {
      ctx.log.push_back("conv_epilogue_fusion: " + f.name + ": " + std::to_string(chain.size()) +
                        " nodes -> FusedConv (activation " + act + (residual >= 0 ? ", residual" : "") + ")");
      ++with_epilogue;
    }
    *last = std::move(f);
    ++fused;
  }
  if (fused)
    ctx.log.push_back("conv_epilogue_fusion: " + std::to_string(fused) + " Conv nodes -> FusedConv (" +
                      std::to_string(with_epilogue) + " with a fused Add/Relu)");
  return Status::Ok();
}

}  // namespace kiln
