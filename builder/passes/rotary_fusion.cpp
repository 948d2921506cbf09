// rotary_fusion: Llama-style rotary position embeddings, q * cos + rotate_half(q) * sin with
// rotate_half(x) = torch.cat((-x[..., D/2:], x[..., :D/2]), dim=-1), export as seven nodes per q or
// k: Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, D/2:D)), Slice(x, 0:D/2)), sin)). Each is a pass over
// the tensor and a parallel region; at 128 tokens they are small enough that waking the second
// thread costs more than the arithmetic, and on a shared machine a thread that is not running makes
// each of them wait. The Add becomes one FusedRotary(x, cos, sin) node
// (runtime/kernels/nn_rotary_kernels.cpp); dead_node_elimination drops the rest where nothing else
// reads it. Requires x's last dim D known and even, and cos and sin shaped [S, D] with leading 1s,
// S being x's second-to-last dim, so the kernel indexes them by row.
#include <optional>

#include "builder/passes/pass.h"

namespace kiln {
namespace {

const Node* producer(const Graph& g, int v, const char* op) {
  if (v < 0 || g.values[v].producer < 0) return nullptr;
  const Node& n = g.nodes[g.values[v].producer];
  return !n.removed && n.domain.empty() && n.op_type == op ? &n : nullptr;
}

// x[..., begin:end] on the last axis (of length D) with step 1: returns x.
int last_axis_slice(const Graph& g, int v, int64_t D, int64_t begin, int64_t end) {
  const Node* s = producer(g, v, "Slice");
  if (!s || s->inputs.empty() || s->inputs[0] < 0) return -1;
  const Value& x = g.values[s->inputs[0]];
  if (!x.shape) return -1;
  const auto cols = last_axis_columns(g, *s, static_cast<int>(x.shape->size()), D);
  return cols && cols->first == begin && cols->second == end ? s->inputs[0] : -1;
}

// rotate_half(x) for the value `v`: returns x, or -1.
int rotate_half_of(const Graph& g, int v, int64_t D) {
  const Node* cat = producer(g, v, "Concat");
  if (!cat || cat->inputs.size() != 2) return -1;
  auto axis = cat->attrs.find("axis");
  const Value& out = g.values[v];
  if (axis == cat->attrs.end() || !out.shape) return -1;
  const int64_t rank = static_cast<int64_t>(out.shape->size());
  if (axis->second.i != -1 && axis->second.i != rank - 1) return -1;
  const Node* neg = producer(g, cat->inputs[0], "Neg");
  if (!neg) return -1;
  const int hi = last_axis_slice(g, neg->inputs[0], D, D / 2, D), lo = last_axis_slice(g, cat->inputs[1], D, 0, D / 2);
  return hi >= 0 && hi == lo ? hi : -1;
}

// cos/sin: float32 [S, D] with leading 1s.
bool table_shape(const Graph& g, int v, const Dim& S, int64_t D) {
  const Value& t = g.values[v];
  if (t.dtype != DType::kFloat32 || !t.shape || t.shape->size() < 2) return false;
  const auto& s = *t.shape;
  for (size_t i = 0; i + 2 < s.size(); ++i)
    if (!s[i].is_known() || s[i].value != 1) return false;
  return s[s.size() - 2] == S && s.back().is_known() && s.back().value == D;
}

}  // namespace

Status rotary_fusion(Graph& g, PassContext& ctx) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& add = g.nodes[i];
    if (add.removed || !add.domain.empty() || add.op_type != "Add" || add.inputs.size() != 2) continue;
    // Either operand order, and either operand order inside each Mul.
    for (int first = 0; first < 2; ++first) {
      const Node* mc = producer(g, add.inputs[first], "Mul");
      const Node* ms = producer(g, add.inputs[1 - first], "Mul");
      if (!mc || !ms || mc->inputs.size() != 2 || ms->inputs.size() != 2) continue;
      bool done = false;
      for (int a = 0; a < 2 && !done; ++a)
        for (int b = 0; b < 2 && !done; ++b) {
          const int x = mc->inputs[a], cos = mc->inputs[1 - a], rot = ms->inputs[b], sin = ms->inputs[1 - b];
          if (x < 0 || cos < 0 || rot < 0 || sin < 0) continue;
          const Value& xv = g.values[x];
          if (xv.dtype != DType::kFloat32 || !xv.shape || xv.shape->size() < 2) continue;
          const Dim& Dd = xv.shape->back();
          if (!Dd.is_known() || Dd.value <= 0 || Dd.value % 2 != 0) continue;
          const int64_t D = Dd.value;
          const Dim& S = (*xv.shape)[xv.shape->size() - 2];
          if (rotate_half_of(g, rot, D) != x || !table_shape(g, cos, S, D) || !table_shape(g, sin, S, D)) continue;
          // The Add's output keeps x's shape (no broadcast beyond x).
          const Value& yv = g.values[add.outputs[0]];
          if (!yv.shape || *yv.shape != *xv.shape) continue;
          ctx.log.push_back("rotary_fusion: " + g.describe_node(add) + " = " + g.values[x].name +
                            " * cos + rotate_half(" + g.values[x].name + ") * sin -> FusedRotary");
          add.op_type = "FusedRotary";
          add.domain = std::string(kKilnDomain);
          add.inputs = {x, cos, sin};
          add.attrs.clear();
          done = true;
        }
      if (done) break;
    }
  }
  return Status::Ok();
}

}  // namespace kiln
