#include "builder/passes/pass.h"

namespace kiln {

Status shape_inference(Graph& g, PassContext& ctx) {
  (void)ctx;
  for (auto& n : g.nodes)
    if (!n.removed) infer_node(g, n);
  return Status::Ok();
}

}  // namespace kiln
