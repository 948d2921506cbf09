#include "builder/passes/pass.h"

namespace kiln {

namespace {

// A Pad whose pads are all zero (an attribute, or a constant input 1) copies its input whatever its
// mode: exporters write one before DenseNet's transition pools (AvgPool2d exported with explicit
// zero padding), and a Pad step there costs a full copy and cuts the convolutions' layout apart.
bool is_zero_pad(const Graph& g, const Node& n) {
  if (n.op_type != "Pad" || !n.domain.empty() || n.inputs.empty() || n.outputs.size() != 1) return false;
  if (auto a = n.attrs.find("pads"); a != n.attrs.end()) {
    if (n.inputs.size() > 1) return false;
    for (int64_t p : a->second.ints)
      if (p != 0) return false;
    return true;
  }
  if (n.inputs.size() < 2 || n.inputs[1] < 0) return false;
  const Value& pads = g.values[n.inputs[1]];
  if (!pads.is_constant() || pads.constant.dtype() != DType::kInt64) return false;
  for (int64_t i = 0; i < pads.constant.numel(); ++i)
    if (pads.constant.as<int64_t>()[i] != 0) return false;
  return true;
}

}  // namespace

// y = Identity(x), or a Pad by zero: readers of y read x instead. When y is a graph output its name must survive, so
// then x's producer is made to write y directly (possible only when x is not itself a graph input,
// constant or output).
Status identity_elimination(Graph& g, PassContext& ctx) {
  std::vector<bool> is_output(g.values.size(), false);
  for (int o : g.outputs) is_output[o] = true;
  for (auto& n : g.nodes) {
    if (n.removed) continue;
    const bool identity = n.op_type == "Identity" && n.domain.empty() && n.inputs.size() == 1 && n.outputs.size() == 1;
    if (!identity && !is_zero_pad(g, n)) continue;
    const int x = n.inputs[0], y = n.outputs[0];
    if (x < 0) continue;
    if (!is_output[y]) {
      g.replace_uses(y, x);
      n.removed = true;
    } else if (g.values[x].producer >= 0 && !is_output[x] && !g.values[x].is_constant()) {
      Node& p = g.nodes[g.values[x].producer];
      for (int& o : p.outputs)
        if (o == x) o = y;
      g.replace_uses(x, y);
      g.values[y].producer = g.values[x].producer;
      n.removed = true;
    } else {
      continue;
    }
    ctx.log.push_back("identity_elimination: removed " + g.describe_node(n));
  }
  return Status::Ok();
}

}  // namespace kiln
