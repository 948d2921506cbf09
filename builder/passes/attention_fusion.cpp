// attention_fusion: finds the attention subgraphs PyTorch's exporter writes and replaces each with
// one kiln::Attention node (plugins/attention/CONTRACT.md). Matching starts at every Softmax whose
// input comes from a MatMul, walks the chain back to QKᵀ and forward to ·V, and accepts it only
// when every operand is proven: single consumers on the replaced chain, permutations, reshape
// targets consistent with H and Dh, softmax over the last axis, scalar scales, mask fills. Nodes
// that only fed the replaced chain (mask Not/Cast, shape arithmetic for scales and slices) are left
// to dead_node_elimination. Three layouts are recognized:
//   bsd:  q/k/v [B,S,D] split by Reshape [B,S,H,Dh] + Transpose (ControlTransformer), K/V caches
//         Concat'ed on axis 1 before the split;
//   bhsd: q/k/v already [B,H,S,Dh] (GPT-2), K/V caches Concat'ed on axis 2;
//   sbd:  nn.MultiheadAttention's [S,B,D] -> [S,B·H,Dh] head split (torchvision ViT); the plugin
//         reads [S,B,D] q/k/v in place (layout sbd), so no Transposes are needed at any batch.
// This file is the pass driver: it finds the Softmax sites, runs the matchers
// (attention_patterns.cpp, over the graph view in attention_shape_helpers.cpp), rewrites each
// match, keeps the nodes in topological order and reports every site (attention_required).
#include <algorithm>
#include <queue>
#include <set>

#include "builder/passes/attention_patterns.h"
#include "builder/passes/pass.h"

namespace kiln {

using namespace attention_fusion_detail;

namespace {

// A Softmax whose input comes (through scale/mask ops) from a MatMul.
bool attention_like(Matcher& m, const Node& sm) {
  std::vector<std::pair<int, int>> stack;
  if (!sm.inputs.empty()) stack.push_back({sm.inputs[0], 0});
  while (!stack.empty()) {
    auto [v, d] = stack.back();
    stack.pop_back();
    Node* n = m.producer(v);
    if (!n || !n->domain.empty()) continue;
    if (n->op_type == "MatMul") return true;
    static const std::set<std::string> kThrough = {"Where", "Add", "Sub", "Mul", "Div"};
    if (d >= 4 || !kThrough.count(n->op_type)) continue;
    for (int i : n->inputs)
      if (i >= 0) stack.push_back({i, d + 1});
  }
  return false;
}

std::string fused_name(const Graph& g, const std::string& softmax) {
  const size_t slash = softmax.rfind('/');
  const std::string base = (slash == std::string::npos ? softmax + "/" : softmax.substr(0, slash + 1)) + "Attention";
  std::set<std::string> names;
  for (const auto& n : g.nodes) names.insert(n.name);
  std::string name = base;
  for (int i = 1; names.count(name); ++i) name = base + "_" + std::to_string(i);
  return name;
}

int add_node(Graph& g, Node n) {
  g.nodes.push_back(std::move(n));
  const int idx = static_cast<int>(g.nodes.size()) - 1;
  for (int o : g.nodes[idx].outputs) g.values[o].producer = idx;
  return idx;
}

int new_value(Graph& g, const std::string& base, DType dt, std::optional<SymShape> shape) {
  const int v = g.add_value(g.unique_name(base));
  g.values[v].dtype = dt;
  g.values[v].shape = std::move(shape);
  return v;
}

// The int64 live length pos + offset (CONTRACT.md input 6), computed once per position value: the
// layers of a decoder step share it.
int live_length(Graph& g, int pos, int64_t offset) {
  int v = pos;
  if (g.values[pos].dtype != DType::kInt64) {
    const std::string name = g.values[pos].name + "/int64";
    for (const Node& n : g.nodes)
      if (!n.removed && n.name == name) return live_length(g, n.outputs[0], offset);
    v = new_value(g, name, DType::kInt64, g.values[pos].shape);
    Node c;
    c.name = name;
    c.op_type = "Cast";
    c.attrs["to"] = Attribute::Int(static_cast<int64_t>(DType::kInt64));
    c.inputs = {pos};
    c.outputs = {v};
    add_node(g, std::move(c));
  }
  if (offset == 0) return v;
  const std::string name = g.values[v].name + "/live_length";
  for (const Node& n : g.nodes)
    if (!n.removed && n.name == name) return n.outputs[0];
  const int out = new_value(g, name, DType::kInt64, g.values[v].shape);
  Node add;
  add.name = name;
  add.op_type = "Add";
  add.inputs = {v, g.add_constant(name + "/offset", Tensor::from_vector<int64_t>({offset}, Shape{}))};
  add.outputs = {out};
  add_node(g, std::move(add));
  return out;
}

// Rewrites the graph for one match; returns the fused node's name.
std::string emit(Graph& g, const std::string& softmax, Fused& f) {
  const std::string name = fused_name(g, softmax);
  Node node;
  node.name = name;
  node.domain = "kiln";
  node.op_type = "Attention";
  node.attrs["num_heads"] = Attribute::Int(f.heads);
  node.attrs["scale"] = Attribute::Float(static_cast<float>(f.scale));
  node.attrs["layout"] = Attribute::String(f.layout);
  node.attrs["mask"] = Attribute::String(f.mask);
  node.attrs["kv_cache"] = Attribute::Int(f.kv_cache ? 1 : 0);
  if (f.live_pos >= 0) node.attrs["live_length"] = Attribute::Int(1);
  std::sort(f.core.begin(), f.core.end());
  f.core.erase(std::unique(f.core.begin(), f.core.end()), f.core.end());
  for (int i : f.core) {
    node.replaced_nodes.push_back(g.nodes[i].name);
    g.nodes[i].removed = true;
  }
  int mask = f.mask_value;
  if (mask >= 0 && f.mask_negate) {
    const int nv = new_value(g, g.values[mask].name + "/attend", DType::kBool, g.values[mask].shape);
    Node nn;
    nn.name = name + "/mask_not";
    nn.op_type = "Not";
    nn.inputs = {mask};
    nn.outputs = {nv};
    add_node(g, std::move(nn));
    mask = nv;
  }
  node.inputs = {f.q, f.k, f.v};
  if (mask >= 0 || f.kv_cache || f.live_pos >= 0) node.inputs.push_back(mask);
  if (f.kv_cache || f.live_pos >= 0) {
    node.inputs.push_back(f.kv_cache ? f.k_cache : -1);
    node.inputs.push_back(f.kv_cache ? f.v_cache : -1);
  }
  if (f.live_pos >= 0) node.inputs.push_back(live_length(g, f.live_pos, f.live_offset));
  int out = f.out;
  if (f.seq_first) {
    // out [S,B,D] -> [S,B·H,Dh]: exactly the value the merged-heads Transpose produced (a view).
    out = new_value(g, name + "/out_sbd", DType::kFloat32, g.values[f.q].shape);
    const int target = g.add_constant(name + "/heads_shape", Tensor::from_vector<int64_t>({0, -1, f.head_dim}, Shape{3}));
    Node rn;
    rn.name = name + "/split_heads";
    rn.op_type = "Reshape";
    rn.inputs = {out, target};
    rn.outputs = {f.out};
    node.outputs = {out};
    add_node(g, std::move(node));
    add_node(g, std::move(rn));
    return name;
  }
  node.outputs = {out};
  if (f.kv_cache) {
    node.outputs.push_back(f.k_all);
    node.outputs.push_back(f.v_all);
  }
  add_node(g, std::move(node));
  return name;
}

// Each dim of `a`, or `b`'s where `a`'s is unknown (same rank; otherwise whichever is known).
std::optional<SymShape> merge_dims(const std::optional<SymShape>& a, const std::optional<SymShape>& b) {
  if (!a || !b || a->size() != b->size()) return a ? a : b;
  SymShape m = *a;
  for (size_t i = 0; i < m.size(); ++i)
    if (!m[i].is_known() && !m[i].is_symbol()) m[i] = (*b)[i];
  return m;
}

// Shape inference again, now that kiln::Attention nodes stand where the chains were: a fused
// node's output has its q input's shape (CONTRACT.md, every layout), which keeps dims the replaced
// chain's Reshapes lost (a sequence length such as 274*timesteps: the plugin's own inference needs
// concrete shapes), and later nodes' shapes follow from it.
void refresh_shapes(Graph& g, PassContext& ctx) {
  for (Node& n : g.nodes) {
    if (n.removed) continue;
    if (n.domain == "kiln" && n.op_type == "Attention" && !n.inputs.empty() && !n.outputs.empty()) {
      Value& out = g.values[n.outputs[0]];
      out.shape = merge_dims(out.shape, g.values[n.inputs[0]].shape);
    } else {
      infer_node(g, n, ctx.dim_ranges);
    }
  }
}

// Stable topological order: each node as early as its inputs allow, ties in the current order.
Status topo_sort(Graph& g) {
  std::vector<int> prod(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!g.nodes[i].removed)
      for (int o : g.nodes[i].outputs)
        if (o >= 0) prod[o] = static_cast<int>(i);
  std::vector<int> pending(g.nodes.size(), 0);
  std::vector<std::vector<int>> users(g.nodes.size());
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].removed) continue;
    std::set<int> deps;
    for (int v : g.nodes[i].inputs)
      if (v >= 0 && prod[v] >= 0) deps.insert(prod[v]);
    pending[i] = static_cast<int>(deps.size());
    for (int d : deps) users[d].push_back(static_cast<int>(i));
    if (!pending[i]) ready.push(static_cast<int>(i));
  }
  std::vector<Node> order;
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(g.nodes[i]);
    for (int u : users[i])
      if (--pending[u] == 0) ready.push(u);
  }
  size_t live = 0;
  for (const auto& n : g.nodes) live += !n.removed;
  if (order.size() != live) return Internal("attention_fusion: the rewritten graph has a cycle");
  g.nodes = std::move(order);
  g.compact();
  return Status::Ok();
}

}  // namespace

Status attention_fusion(Graph& g, PassContext& ctx) {
  Matcher m(g, ctx.dim_ranges);
  bool changed = false;
  const size_t original = g.nodes.size();
  for (size_t i = 0; i < original; ++i) {
    if (g.nodes[i].removed || g.nodes[i].op_type != "Softmax" || !g.nodes[i].domain.empty()) continue;
    if (!attention_like(m, g.nodes[i])) continue;
    const std::string softmax = g.nodes[i].name;
    Fused f;
    std::string reason = match_site(m, g.nodes[i], f);
    if (!reason.empty()) {
      ctx.attention_sites.push_back({softmax, "", reason});
      ctx.log.push_back("attention_fusion: Softmax '" + softmax + "' not fused: " + reason);
      continue;
    }
    // Taken-over values keep a shape for later passes even where inference left it unknown.
    for (int v : {f.out, f.k_all, f.v_all})
      if (v >= 0 && !g.values[v].shape) g.values[v].shape = m.shape(v);
    const std::string fused = emit(g, softmax, f);
    m.refresh();
    changed = true;
    ctx.attention_sites.push_back({softmax, fused, ""});
    ctx.log.push_back("attention_fusion: fused Softmax '" + softmax + "' into node '" + fused + "' (kiln::Attention, layout " +
                      f.layout + ", mask " + f.mask + ", kv_cache " + std::to_string(f.kv_cache ? 1 : 0) + (f.live_pos >= 0 ? ", live length" : "") + ", " +
                      std::to_string(f.heads) + " heads)");
  }
  if (changed) {
    KILN_RETURN_IF_ERROR(topo_sort(g));
    refresh_shapes(g, ctx);
  }
  if (ctx.attention_required)
    for (const auto& s : ctx.attention_sites)
      if (!s.reason.empty())
        return InvalidArgument("attention is required but Softmax node '" + s.softmax + "' was not fused: " + s.reason);
  return Status::Ok();
}

}  // namespace kiln
