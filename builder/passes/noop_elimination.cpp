#include "builder/passes/pass.h"

namespace kiln {

namespace {

// Whether value v is a constant whose elements are all zero (any numeric dtype).
bool all_zero(const Graph& g, int v) {
  if (v < 0 || !g.values[v].is_constant()) return false;
  const Tensor& t = g.values[v].constant;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (read_double(t.view(), i) != 0.0) return false;
  return true;
}

// Whether value v is a constant bool false.
bool constant_false(const Graph& g, int v) {
  if (v < 0 || !g.values[v].is_constant()) return false;
  const Tensor& t = g.values[v].constant;
  return t.dtype() == DType::kBool && t.numel() == 1 && !*t.as<bool>();
}

// A Dropout that passes its input through: inference (training_mode absent or constant false;
// before opset 12 there is no training input) or a constant ratio of 0 (torchvision's Swin exports
// Dropout(p=0.0) with training_mode true), and nobody reads its mask.
bool noop_dropout(const Graph& g, const Node& n, const std::vector<int>& uses) {
  if (n.op_type != "Dropout" || n.inputs.empty() || n.outputs.empty()) return false;
  if (n.outputs.size() > 1 && n.outputs[1] >= 0 && uses[n.outputs[1]] > 0) return false;
  if (auto a = n.attrs.find("is_test"); a != n.attrs.end() && a->second.i == 0) return false;  // opset < 7 training
  const int ratio = n.inputs.size() > 1 ? n.inputs[1] : -1, training = n.inputs.size() > 2 ? n.inputs[2] : -1;
  return training < 0 || constant_false(g, training) || all_zero(g, ratio);
}

// A Pad by zeros on every side (its `pads` attribute before opset 11, its constant input 1 since):
// a copy whatever its mode. Swin pads each stage's input to a multiple of its window with pads
// computed from the shape, zeros at the sizes that are multiples already (224x224).
bool noop_pad(const Graph& g, const Node& n) {
  if (n.op_type != "Pad" || n.inputs.empty() || n.outputs.size() != 1) return false;
  if (auto a = n.attrs.find("pads"); a != n.attrs.end()) {
    for (int64_t p : a->second.ints)
      if (p != 0) return false;
    return n.inputs.size() == 1;
  }
  return n.inputs.size() > 1 && all_zero(g, n.inputs[1]);
}

}  // namespace

// Dropouts and Pads that copy their input unchanged, once constant folding has made their ratio,
// training mode and pads constants: readers of the output read the input instead.
Status noop_elimination(Graph& g, PassContext& ctx) {
  const std::vector<int> uses = g.use_counts();
  for (auto& n : g.nodes) {
    if (n.removed || !n.domain.empty() || n.inputs.empty() || n.inputs[0] < 0) continue;
    if (!noop_dropout(g, n, uses) && !noop_pad(g, n)) continue;
    // A mask output nobody reads goes with the node.
    if (g.bypass(n, n.inputs[0], n.outputs[0])) ctx.log.push_back("noop_elimination: removed " + g.describe_node(n));
  }
  return Status::Ok();
}

}  // namespace kiln
