// unit_reshape_unwrap: an elementwise op with a constant operand between two Reshapes that only add
// leading 1-dims and then drop them again runs on the unreshaped value, with the constant's leading
// 1-dims dropped. Swin's shifted-window attention adds its mask that way:
//   scores [64, 3, 49, 49] -> Reshape [1, 64, 3, 49, 49] -> Add mask [1, 64, 1, 49, 49] -> Reshape [64, 3, 49, 49]
// becomes scores + mask [64, 1, 49, 49], which elementwise_fusion joins with the relative-position
// bias Add before it and softmax_prologue_fusion with the Softmax after it: one pass over the
// scores instead of three (and two Reshape steps fewer).
//
// Exact: with the leading dims 1 on both sides the broadcast pairs the same elements, and the
// constant's broadcast must not grow the value (its shape stays the unreshaped one).
#include "builder/passes/pass.h"

namespace kiln {

namespace {

bool is_elementwise_binary(const Node& n) {
  static const char* kOps[] = {"Add", "Sub", "Mul", "Div"};
  if (n.removed || !n.domain.empty() || n.inputs.size() != 2 || n.outputs.size() != 1) return false;
  for (const char* op : kOps)
    if (n.op_type == op) return true;
  return false;
}

bool is_reshape(const Node& n) { return !n.removed && n.domain.empty() && n.op_type == "Reshape" && !n.inputs.empty() && n.outputs.size() == 1; }

std::optional<Shape> static_shape(const Value& v) {
  if (!v.shape || !sym_shape_concrete(*v.shape)) return std::nullopt;
  return to_shape(*v.shape);
}

// `wide` is `narrow` with k >= 1 leading 1-dims in front.
int leading_ones_added(const Shape& narrow, const Shape& wide) {
  const int k = wide.rank() - narrow.rank();
  if (k < 1) return 0;
  for (int d = 0; d < k; ++d)
    if (wide[d] != 1) return 0;
  for (int d = 0; d < narrow.rank(); ++d)
    if (wide[k + d] != narrow[d]) return 0;
  return k;
}

}  // namespace

Status unit_reshape_unwrap(Graph& g, PassContext& ctx) {
  const std::vector<int> uses = g.use_counts();
  std::vector<bool> is_output(g.values.size(), false);
  for (int v : g.outputs) is_output[static_cast<size_t>(v)] = true;
  // value -> its single reader (valid where uses == 1)
  std::vector<int> reader(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!g.nodes[i].removed)
      for (int v : g.nodes[i].inputs)
        if (v >= 0) reader[static_cast<size_t>(v)] = static_cast<int>(i);
  int unwrapped = 0;
  for (size_t r1 = 0; r1 < g.nodes.size(); ++r1) {
    Node& up = g.nodes[r1];
    if (!is_reshape(up)) continue;
    const int a = up.inputs[0], b = up.outputs[0];
    if (a < 0 || uses[b] != 1 || is_output[b] || reader[b] < 0) continue;
    const auto sa = static_shape(g.values[a]), sb = static_shape(g.values[b]);
    if (!sa || !sb) continue;
    const int k = leading_ones_added(*sa, *sb);
    if (k == 0) continue;
    Node& op = g.nodes[reader[b]];
    if (!is_elementwise_binary(op)) continue;
    const int side = op.inputs[0] == b ? 0 : 1;
    if (op.inputs[side] != b || op.inputs[1 - side] == b) continue;
    const int c = op.inputs[1 - side], e = op.outputs[0];
    const Value& cv = g.values[c];
    if (!cv.is_constant() || cv.dtype != g.values[a].dtype) continue;
    const auto se = static_shape(g.values[e]);
    if (!se || *se != *sb || uses[e] != 1 || is_output[e] || reader[e] < 0) continue;
    Node& down = g.nodes[reader[e]];
    if (!is_reshape(down) || down.inputs[0] != e) continue;
    const auto sd = static_shape(g.values[down.outputs[0]]);
    if (!sd || *sd != *sa) continue;
    // The constant, right-aligned against the wide shape: its dims in the k leading positions must
    // be 1 (they are dropped), and the rest must broadcast into the narrow shape without growing it.
    const Shape cs = cv.constant.shape();
    const int lead = cs.rank() - sa->rank();  // dims of c in front of the narrow shape's
    bool ok = lead <= k;
    Shape narrow_c;
    for (int d = 0; ok && d < cs.rank(); ++d) {
      if (d < lead) {
        ok = cs[d] == 1;
        continue;
      }
      const int64_t want = (*sa)[d - lead];
      ok = cs[d] == 1 || cs[d] == want;
      narrow_c.push_back(cs[d]);
    }
    if (!ok) continue;
    // A new constant sharing the data (the old one may have other readers).
    const int c2 = lead > 0 ? g.add_constant(g.unique_name(cv.name + "_unwrapped"), cv.constant.reshaped(narrow_c)) : c;
    const int y = down.outputs[0];
    Node& op2 = g.nodes[reader[b]];
    op2.inputs[side] = a;
    op2.inputs[1 - side] = c2;
    op2.outputs[0] = y;
    g.nodes[r1].removed = true;
    g.nodes[reader[e]].removed = true;
    ctx.log.push_back("unit_reshape_unwrap: " + op2.name + " runs on " + g.values[a].name + " " + sa->str() +
                      " without the Reshapes around it");
    ++unwrapped;
  }
  if (unwrapped) {
    g.compact();
    ctx.log.push_back("unit_reshape_unwrap: " + std::to_string(unwrapped) + " elementwise ops taken out of leading-1 Reshapes");
  }
  return Status::Ok();
}

}  // namespace kiln
