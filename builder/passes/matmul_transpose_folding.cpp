// matmul_transpose_folding: a float32 MatMul of two activations (an attention that did not fuse:
// Q x K^T, P x V) with the Transposes that split and merge its heads and a constant scalar scale
// becomes one kiln::StridedMatMul (runtime/kernels/strided_matmul_kernels.cpp):
//   Transpose(MatMul(Transpose(q) / c, Transpose(k)), perm_y)
//     -> StridedMatMul(q, k; perm_a, perm_b, perm_y, alpha = 1 / c)
// Each Transpose was a pass over a tensor that the MatMul then read again; folded, the kernel reads
// and writes through strides. The scale, a pass of its own, is applied to the packed K^T panel.
//
// Folded around the MatMul, from it outwards, while each holds:
//   - operand side: a Mul or Div (the operand as numerator) by a one-element float32 constant that
//     does not raise the rank, then Transposes (composed into one permutation), then another scale;
//   - output side: such a scale, then a Transpose;
// every folded node's output has this one reader and is not a graph output. A Transpose folds only
// where the strided kernel keeps its fast path: the permuted A's last axis and the product's last
// axis stay the stored last axes, and B's K or N axis is its stored last. A Div becomes a multiply
// by 1 / c: within one rounding of the division, as ONNX Runtime's MatMulScaleFusion does it.
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "builder/passes/pass.h"

namespace kiln {

namespace {

struct Folding {
  const Graph& g;
  const std::vector<int>& uses;
  const std::set<int>& outputs;

  bool single_use(int v) const { return v >= 0 && uses[v] == 1 && !outputs.count(v); }
  Node* producer(Graph& gm, int v) const {
    if (v < 0 || g.values[v].producer < 0) return nullptr;
    Node* n = &gm.nodes[g.values[v].producer];
    return n->removed || !n->domain.empty() ? nullptr : n;
  }
  int rank(int v) const { return v >= 0 && g.values[v].shape ? static_cast<int>(g.values[v].shape->size()) : -1; }

  // n = Mul(x, c) / Mul(c, x) / Div(x, c) with c a finite, non-zero one-element float32 constant of
  // rank <= x's: sets *x and multiplies *alpha.
  bool scale(const Node* n, int* x, float* alpha) const {
    if (!n || n->inputs.size() != 2 || !n->attrs.empty() || (n->op_type != "Mul" && n->op_type != "Div")) return false;
    for (int side = 0; side < 2; ++side) {
      if (n->op_type == "Div" && side == 0) continue;  // c / x is no scale
      const int c = n->inputs[side], other = n->inputs[1 - side];
      if (c < 0 || other < 0 || !g.values[c].is_constant()) continue;
      const Tensor& t = g.values[c].constant;
      if (t.dtype() != DType::kFloat32 || t.numel() != 1 || rank(other) < t.shape().rank()) continue;
      const float v = t.as<float>()[0];
      if (!std::isfinite(v) || v == 0.0f) continue;
      const float f = n->op_type == "Div" ? 1.0f / v : v;
      if (!std::isfinite(f)) continue;
      *x = other;
      *alpha *= f;
      return true;
    }
    return false;
  }

  // A Transpose's permutation (ONNX's default reverses the axes), empty when unknown.
  std::vector<int64_t> perm(const Node* n) const {
    if (!n || n->op_type != "Transpose" || n->inputs.size() != 1) return {};
    auto it = n->attrs.find("perm");
    if (it != n->attrs.end()) return it->second.ints;
    const int r = rank(n->inputs[0]);
    std::vector<int64_t> p;
    for (int i = r - 1; i >= 0; --i) p.push_back(i);
    return p;
  }
};

// operand 0 keeps its last axis (K contiguous), operand 1 its K or N axis last, the product its N.
bool fast_perm(const std::vector<int64_t>& p, int operand) {
  const int64_t last = static_cast<int64_t>(p.size()) - 1;
  if (last < 1) return false;
  if (operand == 1) return p[last] == last || p[last - 1] == last;
  return p[last] == last;
}

bool identity(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

}  // namespace

Status matmul_transpose_folding(Graph& g, PassContext& ctx) {
  const std::vector<int> uses = g.use_counts();
  const std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  std::vector<Node*> reader(g.values.size(), nullptr);
  for (auto& n : g.nodes)
    if (!n.removed)
      for (int v : n.inputs)
        if (v >= 0) reader[v] = &n;
  const Folding f{g, uses, outputs};
  int fused = 0, transposes = 0, scales = 0;
  for (size_t idx = 0; idx < g.nodes.size(); ++idx) {
    Node& mm = g.nodes[idx];
    if (mm.removed || !mm.domain.empty() || mm.op_type != "MatMul" || mm.inputs.size() != 2 || mm.outputs.size() != 1) continue;
    const int y0 = mm.outputs[0];
    if (g.values[y0].dtype != DType::kFloat32 || f.rank(y0) < 2) continue;
    if (mm.inputs[0] < 0 || mm.inputs[1] < 0 || g.values[mm.inputs[0]].is_constant() || g.values[mm.inputs[1]].is_constant()) continue;
    if (f.rank(mm.inputs[0]) < 2 || f.rank(mm.inputs[1]) < 2) continue;
    float alpha = 1.0f;
    std::vector<Node*> folded;
    std::vector<int64_t> perms[3];
    int src[2] = {mm.inputs[0], mm.inputs[1]};
    for (int i = 0; i < 2; ++i) {
      // scale, Transpose, scale: walking from the MatMul towards the operand's source.
      for (int stage = 0; stage < 3; ++stage) {
        if (!f.single_use(src[i])) break;
        Node* p = f.producer(g, src[i]);
        if (stage == 1) {
          // Successive Transposes compose (the view's axis j is the inner input's axis
          // inner[outer[j]]), as long as the composition stays on the fast path.
          for (Node* t = p; t && f.single_use(src[i]); t = f.producer(g, src[i])) {
            const std::vector<int64_t> inner = f.perm(t);
            if (inner.empty() || (!perms[i].empty() && inner.size() != perms[i].size())) break;
            std::vector<int64_t> composed = inner;
            for (size_t j = 0; j < perms[i].size(); ++j) composed[j] = inner[static_cast<size_t>(perms[i][j])];
            if (!fast_perm(composed, i)) break;
            perms[i] = composed;
            src[i] = t->inputs[0];
            folded.push_back(t);
            ++transposes;
          }
        } else if (f.scale(p, &src[i], &alpha)) {
          folded.push_back(p);
          ++scales;
        }
      }
    }
    // The output side: scale, then Transpose.
    int y = y0;
    Node* last = &mm;
    Node* s = f.single_use(y) && reader[y] && reader[y]->domain.empty() ? reader[y] : nullptr;
    int unused = -1;
    if (s && s->outputs.size() == 1 && f.scale(s, &unused, &alpha)) {
      y = s->outputs[0];
      folded.push_back(s);
      last = s;
      ++scales;
    }
    if (f.single_use(y) && reader[y] && reader[y]->domain.empty()) {
      const std::vector<int64_t> pm = f.perm(reader[y]);
      if (!pm.empty() && fast_perm(pm, 2) && static_cast<int>(pm.size()) == f.rank(y)) {
        perms[2] = pm;
        last = reader[y];
        y = last->outputs[0];
        folded.push_back(last);
        ++transposes;
      }
    }
    if (folded.empty()) continue;
    Node fused_node;
    fused_node.name = mm.name;
    fused_node.op_type = "StridedMatMul";
    fused_node.domain = std::string(kKilnDomain);
    fused_node.inputs = {src[0], src[1]};
    fused_node.outputs = {y};
    const char* names[3] = {"perm_a", "perm_b", "perm_y"};
    for (int i = 0; i < 3; ++i)
      if (!perms[i].empty() && !identity(perms[i])) fused_node.attrs[names[i]] = Attribute::Ints(perms[i]);
    if (alpha != 1.0f) fused_node.attrs["alpha"] = Attribute::Float(alpha);
    fused_node.replaced_nodes.push_back(mm.name);
    for (Node* n : folded) fused_node.replaced_nodes.push_back(n->name);
    // The fused node takes the place of the last node it replaces: its inputs come before the
    // MatMul, its readers after that node.
    for (Node* n : folded) n->removed = true;
    mm.removed = true;
    *last = std::move(fused_node);
    ++fused;
  }
  if (fused)
    ctx.log.push_back("matmul_transpose_folding: " + std::to_string(fused) + " MatMuls of activations read or write " +
                      std::to_string(transposes) + " Transposes through strides and apply " + std::to_string(scales) +
                      " scalar scales as alpha (StridedMatMul)");
  return Status::Ok();
}

}  // namespace kiln
