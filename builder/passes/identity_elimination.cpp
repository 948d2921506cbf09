#include "builder/passes/pass.h"

namespace kiln {

// y = Identity(x): readers of y read x instead. When y is a graph output its name must survive, so
// then x's producer is made to write y directly (possible only when x is not itself a graph input,
// constant or output).
Status identity_elimination(Graph& g, PassContext& ctx) {
  std::vector<bool> is_output(g.values.size(), false);
  for (int o : g.outputs) is_output[o] = true;
  for (auto& n : g.nodes) {
    if (n.removed || n.op_type != "Identity" || !n.domain.empty() || n.inputs.size() != 1 || n.outputs.size() != 1) continue;
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
