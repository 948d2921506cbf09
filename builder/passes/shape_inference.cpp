#include "builder/passes/pass.h"

namespace kiln {

Status shape_inference(Graph& g, PassContext& ctx) {
  for (auto& n : g.nodes)
    if (!n.removed) infer_node(g, n, ctx.dim_ranges);
  return Status::Ok();
}

}  // namespace kiln
