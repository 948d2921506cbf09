#include "builder/passes/pass.h"

namespace kiln {

// Walks nodes backwards so a chain of dead nodes disappears in one sweep.
Status dead_node_elimination(Graph& g, PassContext& ctx) {
  std::vector<int> uses = g.use_counts();
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    Node& n = *it;
    if (n.removed) continue;
    bool used = false;
    for (int o : n.outputs)
      if (o >= 0 && uses[o] > 0) used = true;
    if (used) continue;
    n.removed = true;
    for (int i : n.inputs)
      if (i >= 0) --uses[i];
    ctx.log.push_back("dead_node_elimination: removed " + g.describe_node(n));
  }
  return Status::Ok();
}

}  // namespace kiln
