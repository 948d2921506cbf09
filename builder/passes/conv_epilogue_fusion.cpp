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
    std::string act = "none";
    if (Node* relu = sole_consumer(g, uses, cur); is(relu, "Relu") && relu->inputs.size() == 1 && relu->outputs.size() == 1) {
      act = "relu";
      chain.push_back(relu);
      cur = relu->outputs[0];
    }
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
