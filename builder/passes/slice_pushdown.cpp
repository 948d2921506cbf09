// slice_pushdown: a Slice that keeps part of one axis of an elementwise Add/Sub/Mul/Div's output,
// where nothing else reads that output, moves onto the Add's inputs, so the Add computes only the
// kept part. The ControlTransformer's incremental step adds the position table to all 1644
// embeddings of its window, cached ones included, and keeps the last 274
// (`(projected + pos[:total])[:, cached_len:]`): here the Add computes those 274 rows only.
//
// Only single-axis Slices with constant axes and unit (or absent) steps; their starts and ends may
// be run-time values (here they come from the cache's Shape). An input is sliced along the axis
// when its matching dim is provably larger than 1 over the profile's ranges, left alone when it is
// 1 (it broadcasts); anything unknown leaves the graph as it is. Both Slices take the same starts
// and ends, and equal dims clamp them alike, so the kept elements are the same.
#include <set>

#include "builder/passes/pass.h"

namespace kiln {

namespace {

const std::set<std::string> kBinaryElementwise = {"Add", "Sub", "Mul", "Div"};

// Whether `d` is provably 1 (false), provably more than 1 (true), or neither (nullopt).
std::optional<bool> longer_than_one(const Dim& d, const DimRanges& ranges) {
  const auto b = dim_bounds(d, ranges);
  if (!b) return std::nullopt;
  if (b->first > 1) return true;
  if (b->first == 1 && b->second == 1) return false;
  return std::nullopt;
}

// The rewrite of Slice node `s` reading elementwise node `e`: per input of `e`, the axis to slice
// it along (-1: leave it); nullopt when the rewrite does not apply.
std::optional<std::vector<int>> plan_pushdown(const Graph& g, const Node& s, const Node& e, const std::vector<int>& uses,
                                              const DimRanges& ranges) {
  if (!e.domain.empty() || !kBinaryElementwise.count(e.op_type) || e.inputs.size() != 2 || e.outputs.size() != 1) return std::nullopt;
  if (e.inputs[0] < 0 || e.inputs[1] < 0) return std::nullopt;
  if (uses[e.outputs[0]] != 1) return std::nullopt;  // read elsewhere too, or a graph output
  if (s.inputs.size() < 4 || s.inputs[3] < 0) return std::nullopt;
  const std::optional<int64_t> axis = g.scalar_int(s.inputs[3]);
  if (!axis) return std::nullopt;
  if (s.inputs.size() > 4 && s.inputs[4] >= 0 && g.scalar_int(s.inputs[4]) != std::optional<int64_t>(1)) return std::nullopt;
  const auto& ys = g.values[e.outputs[0]].shape;
  if (!ys) return std::nullopt;
  const int rank = static_cast<int>(ys->size());
  const int64_t a = *axis < 0 ? *axis + rank : *axis;
  if (a < 0 || a >= rank) return std::nullopt;
  std::vector<int> plan(2, -1);
  for (int i = 0; i < 2; ++i) {
    const auto& xs = g.values[e.inputs[i]].shape;
    if (!xs) return std::nullopt;
    const int ai = static_cast<int>(a) - (rank - static_cast<int>(xs->size()));
    if (ai < 0) continue;  // the input has no such axis: it broadcasts along it
    const std::optional<bool> longer = longer_than_one((*xs)[ai], ranges);
    if (!longer) return std::nullopt;
    if (*longer) plan[i] = ai;
  }
  if (plan[0] < 0 && plan[1] < 0) return std::nullopt;
  return plan;
}

}  // namespace

Status slice_pushdown(Graph& g, PassContext& ctx) {
  // One rewrite at a time: each moves nodes.
  for (bool changed = true; changed;) {
    changed = false;
    const std::vector<int> uses = g.use_counts();
    for (size_t si = 0; si < g.nodes.size() && !changed; ++si) {
      const Node& s = g.nodes[si];
      if (s.removed || !s.domain.empty() || s.op_type != "Slice" || s.inputs.empty() || s.inputs[0] < 0) continue;
      const int ei = g.values[s.inputs[0]].producer;
      if (ei < 0 || g.nodes[ei].removed) continue;
      const auto plan = plan_pushdown(g, s, g.nodes[ei], uses, ctx.dim_ranges);
      if (!plan) continue;
      // The Slices of the inputs and the elementwise node go where the Slice was: its bounds are
      // computed by then, and the elementwise node's inputs long before.
      Node e = g.nodes[ei];
      std::vector<Node> inserted;
      for (int i = 0; i < 2; ++i) {
        if ((*plan)[i] < 0) continue;
        const int x = e.inputs[i];
        Node slice;
        slice.name = g.unique_name(e.name + "/pushed_slice_" + std::to_string(i));
        slice.op_type = "Slice";
        slice.inputs = {x, s.inputs[1], s.inputs[2],
                        g.add_constant(g.unique_name(slice.name + "_axis"), Tensor::from_vector<int64_t>({(*plan)[i]}, Shape{1}))};
        if (s.inputs.size() > 4 && s.inputs[4] >= 0) slice.inputs.push_back(s.inputs[4]);
        const int out = g.add_value(g.unique_name(slice.name));
        g.values[out].dtype = g.values[x].dtype;
        slice.outputs = {out};
        e.inputs[i] = out;
        inserted.push_back(std::move(slice));
      }
      e.outputs = {s.outputs[0]};
      const std::string slice_name = s.name, e_name = e.name;
      std::vector<Node> order;
      for (size_t i = 0; i < g.nodes.size(); ++i) {
        if (static_cast<int>(i) == ei) continue;
        if (i == si) {
          for (Node& n : inserted) order.push_back(std::move(n));
          order.push_back(std::move(e));
          continue;
        }
        order.push_back(std::move(g.nodes[i]));
      }
      g.nodes = std::move(order);
      g.compact();  // producers follow the new order
      // Shapes of the new Slices, then of the elementwise node (in node order).
      for (Node& n : g.nodes)
        if (n.name == e_name || n.name.find(e_name + "/pushed_slice_") == 0) infer_node(g, n, ctx.dim_ranges);
      ctx.log.push_back("slice_pushdown: '" + slice_name + "' moved onto the inputs of '" + e_name + "'");
      changed = true;
    }
  }
  return Status::Ok();
}

}  // namespace kiln
