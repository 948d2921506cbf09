#include "builder/passes/pass.h"

namespace kiln {

// y = Identity(x): readers of y read x instead (Graph::bypass keeps a graph output's name). Pads
// by zeros and copying Dropouts go in noop_elimination, once folding has made their operands
// constants.
Status identity_elimination(Graph& g, PassContext& ctx) {
  for (auto& n : g.nodes) {
    if (n.removed || n.op_type != "Identity" || !n.domain.empty() || n.inputs.size() != 1 || n.outputs.size() != 1) continue;
    if (n.inputs[0] < 0) continue;
    if (g.bypass(n, n.inputs[0], n.outputs[0])) ctx.log.push_back("identity_elimination: removed " + g.describe_node(n));
  }
  return Status::Ok();
}

}  // namespace kiln
