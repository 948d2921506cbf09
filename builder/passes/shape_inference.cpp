#include "builder/passes/pass.h"

namespace kiln {
namespace {

// A model's shape tensors (ConstantOfShape, Reshape, Expand, Tile...) can ask for any size; an
// output whose byte count does not fit int64 is a one-line error here, before any later pass or
// the planner multiplies its dims.
Status check_output_sizes(const Graph& g, const Node& n) {
  for (int o : n.outputs) {
    const Value& v = g.values[o];
    if (!v.shape) continue;
    int64_t bytes = dtype_is_known(v.dtype) ? static_cast<int64_t>(dtype_size(v.dtype)) : 1;
    bool fits = true;
    for (const Dim& d : *v.shape)
      if (d.is_known() && (d.value < 0 || __builtin_mul_overflow(bytes, d.value, &bytes))) fits = false;
    if (fits) continue;
    std::string dims;
    for (const Dim& d : *v.shape) dims += (dims.empty() ? "" : ", ") + d.str();
    return InvalidArgument(g.describe_node(n) + ": output '" + v.name + "' would have shape [" + dims +
                           "], more bytes than a tensor can hold");
  }
  return Status::Ok();
}

}  // namespace

Status shape_inference(Graph& g, PassContext& ctx) {
  for (auto& n : g.nodes) {
    if (n.removed) continue;
    infer_node(g, n, ctx.dim_ranges);
    KILN_RETURN_IF_ERROR(check_output_sizes(g, n));
  }
  return Status::Ok();
}

}  // namespace kiln
