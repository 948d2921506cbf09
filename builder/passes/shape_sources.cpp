// shape_sources: a Shape of a computed value whose dims are symbolic reads the graph inputs those
// dims come from instead. Exporters write x.shape of whatever value is at hand: `b, h, s, d =
// out.shape` of an attention's ·V product to merge its heads, k.shape[-2] of the KV-cache Concat to
// build a causal mask. Under a ranged profile such a Shape stays a node (its symbolic dims are read
// at run time) and is one more reader of that value, so attention_fusion cannot take the value in
// (it has "other readers"), or would compute the mask from its own output. When every dim the Shape
// returns is a known size or a sum of graph-input dims plus a constant, it becomes
//   Concat(known sizes, Slice(Shape(input), axis) [+ Slice(Shape(input'), axis') ...] [+ c])
// over the graph inputs, which are there before any node runs: same elements, no reader of the
// computed value. Only Shapes of the values an attention fusion would take inside its node are
// rewritten (see attention_inner_values): elsewhere a Shape is one step where the rewrite makes
// several. Shapes of graph inputs and of values whose shape is fully known (those fold) are left
// alone, and so is a Shape with a dim this cannot express.
#include <algorithm>
#include <map>
#include <set>

#include "builder/passes/pass.h"

namespace kiln {

namespace {

struct DimSource {
  int value;     // a graph input
  int64_t axis;  // whose dim `axis` is the bare symbol
};

// Builds the replacement nodes of one Shape; false (nothing added) when some dim is not expressible.
class ShapeRewriter {
 public:
  ShapeRewriter(Graph& g, const std::map<std::string, DimSource>& sources) : g_(g), sources_(sources) {}

  bool rewrite(const Node& shape, const SymShape& dims, std::vector<Node>* out) {
    base_ = shape.name + "/from_inputs";
    std::vector<std::vector<std::pair<const DimSource*, int64_t>>> plans;  // per dim: (source, sign), + constant
    std::vector<int64_t> constants;
    for (const Dim& d : dims) {
      std::vector<std::pair<const DimSource*, int64_t>> terms;
      int64_t c = 0;
      if (!d.is_known() && !decompose(d, &terms, &c)) return false;
      if (d.is_known()) c = d.value;
      plans.push_back(std::move(terms));
      constants.push_back(c);
    }
    std::vector<int> parts;
    for (size_t i = 0; i < dims.size(); ++i) {
      int v = -1;
      for (const auto& [src, sign] : plans[i]) {
        const int dim = read_dim(*src, out);
        v = v < 0 ? dim : binary(sign > 0 ? "Add" : "Sub", v, dim, out);
      }
      if (v < 0) {
        v = constant(constants[i]);
      } else if (constants[i] != 0) {
        v = binary(constants[i] > 0 ? "Add" : "Sub", v, constant(constants[i] > 0 ? constants[i] : -constants[i]), out);
      }
      parts.push_back(v);
    }
    Node concat = make("Concat", parts, shape.outputs[0]);
    concat.attrs["axis"] = Attribute::Int(0);
    out->push_back(std::move(concat));
    return true;
  }

 private:
  // d = Σ ±symbol + c with every symbol a graph-input dim: checked by rebuilding the interned form.
  bool decompose(const Dim& d, std::vector<std::pair<const DimSource*, int64_t>>* terms, int64_t* c) {
    SymbolValues zero;
    for (const std::string& s : dim_symbols(d)) zero[s] = 0;
    auto c0 = dim_evaluate(d, zero);
    if (!c0) return false;
    Dim rebuilt = Dim::known(0);
    for (const std::string& s : dim_symbols(d)) {
      auto it = sources_.find(s);
      if (it == sources_.end()) return false;
      SymbolValues one = zero;
      one[s] = 1;
      auto c1 = dim_evaluate(d, one);
      if (!c1 || (*c1 - *c0 != 1 && *c1 - *c0 != -1)) return false;
      const int64_t sign = *c1 - *c0;
      rebuilt = linear_add(rebuilt, Dim::sym(s), sign);
      terms->emplace_back(&it->second, sign);
    }
    rebuilt = linear_add(rebuilt, Dim::known(*c0 < 0 ? -*c0 : *c0), *c0 < 0 ? -1 : 1);
    *c = *c0;
    return rebuilt == d && !terms->empty();
  }

  Node make(const char* op, std::vector<int> inputs, int output = -1) {
    Node n;
    n.name = g_.unique_name(base_ + "/" + op);
    n.op_type = op;
    n.inputs = std::move(inputs);
    if (output < 0) {
      output = g_.add_value(g_.unique_name(n.name));
      g_.values[output].dtype = DType::kInt64;
    }
    n.outputs = {output};
    return n;
  }

  int binary(const char* op, int a, int b, std::vector<Node>* out) {
    out->push_back(make(op, {a, b}));
    return out->back().outputs[0];
  }

  int constant(int64_t v) { return g_.add_constant(g_.unique_name(base_ + "/c"), Tensor::from_vector<int64_t>({v}, Shape{1})); }

  // Slice(Shape(input), [axis], [axis + 1]) as a [1] value; Shape(input) once per rewrite.
  int read_dim(const DimSource& src, std::vector<Node>* out) {
    auto it = input_shapes_.find(src.value);
    if (it == input_shapes_.end()) {
      out->push_back(make("Shape", {src.value}));
      it = input_shapes_.emplace(src.value, out->back().outputs[0]).first;
    }
    out->push_back(make("Slice", {it->second, constant(src.axis), constant(src.axis + 1)}));
    return out->back().outputs[0];
  }

  Graph& g_;
  const std::map<std::string, DimSource>& sources_;
  std::string base_;
  std::map<int, int> input_shapes_;
};

// The dims Shape(x) returns (its start/end attributes applied), or nullopt.
std::optional<SymShape> returned_dims(const Node& n, const Value& x) {
  if (!x.shape) return std::nullopt;
  const auto r = static_cast<int64_t>(x.shape->size());
  int64_t start = n.attrs.count("start") ? n.attrs.at("start").i : 0;
  int64_t end = n.attrs.count("end") ? n.attrs.at("end").i : r;
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  return SymShape(x.shape->begin() + start, x.shape->begin() + end);
}

bool is_op(const Graph& g, int v, std::initializer_list<const char*> ops) {
  if (v < 0 || g.values[v].producer < 0) return false;
  const Node& p = g.nodes[g.values[v].producer];
  if (p.removed || !p.domain.empty()) return false;
  for (const char* op : ops)
    if (p.op_type == op) return true;
  return false;
}

// The values around each Softmax that attention_fusion takes inside its node: the heads of q, k
// and v back through the head split (Transpose, Reshape, the KV-cache Concat, scalar Mul/Div,
// repeat_kv's Unsqueeze/Expand), and the ·V product forward through the head merge. Their sources
// (projections, caches, masks) stay the node's inputs and may keep other readers.
std::vector<bool> attention_inner_values(const Graph& g) {
  std::vector<bool> inner(g.values.size(), false);
  std::vector<std::vector<int>> readers(g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!g.nodes[i].removed)
      for (int v : g.nodes[i].inputs)
        if (v >= 0) readers[v].push_back(static_cast<int>(i));
  auto walk_up = [&](int start) {
    std::vector<std::pair<int, int>> todo{{start, 0}};
    while (!todo.empty()) {
      auto [v, depth] = todo.back();
      todo.pop_back();
      if (v < 0 || inner[v] || depth > 8 ||
          !is_op(g, v, {"Transpose", "Reshape", "Concat", "Mul", "Div", "Unsqueeze", "Squeeze", "Expand"}))
        continue;
      inner[v] = true;
      for (int i : g.nodes[g.values[v].producer].inputs) todo.push_back({i, depth + 1});
    }
  };
  for (const Node& sm : g.nodes) {
    if (sm.removed || !sm.domain.empty() || sm.op_type != "Softmax" || sm.inputs.empty() || sm.outputs.size() != 1) continue;
    // QKᵀ: the first MatMul up the scale/mask chain.
    int s = sm.inputs[0];
    const Node* qk = nullptr;
    for (int d = 0; d < 4 && s >= 0 && g.values[s].producer >= 0 && !qk; ++d) {
      const Node& p = g.nodes[g.values[s].producer];
      if (p.removed || !p.domain.empty()) break;
      if (p.op_type == "MatMul") {
        qk = &p;
      } else if (p.inputs.size() >= 2 && (p.op_type == "Add" || p.op_type == "Sub" || p.op_type == "Mul" ||
                                           p.op_type == "Div" || p.op_type == "Where" || p.op_type == "Cast")) {
        const int a = p.op_type == "Where" ? p.inputs[1] : p.inputs[0], b = p.op_type == "Where" ? p.inputs[2] : p.inputs[1];
        s = is_op(g, a, {"MatMul", "Add", "Sub", "Mul", "Div", "Where", "Cast"}) ? a : b;
      } else if (p.op_type == "Cast") {
        s = p.inputs[0];
      } else {
        break;
      }
    }
    if (qk)
      for (int i : qk->inputs) walk_up(i);
    for (int pv : readers[sm.outputs[0]]) {
      const Node& n = g.nodes[pv];
      if (n.op_type != "MatMul" || !n.domain.empty() || n.inputs.size() != 2 || n.inputs[0] != sm.outputs[0]) continue;
      walk_up(n.inputs[1]);
      // Forward: the ·V product and its head merge.
      for (int v = n.outputs[0], d = 0; v >= 0 && d < 3; ++d) {
        inner[v] = true;
        if (readers[v].empty()) break;
        int next = -1;
        for (int r : readers[v])
          if (g.nodes[r].op_type == "Transpose" || g.nodes[r].op_type == "Reshape") next = g.nodes[r].outputs[0];
        v = next;
      }
    }
  }
  return inner;
}

}  // namespace

Status shape_sources(Graph& g, PassContext& ctx) {
  if (ctx.disabled.count("attention_fusion")) return Status::Ok();  // nothing to make room for
  const std::vector<bool> inner = attention_inner_values(g);
  std::map<std::string, DimSource> sources;
  for (int in : g.inputs) {
    const Value& v = g.values[in];
    if (!v.shape) continue;
    for (size_t a = 0; a < v.shape->size(); ++a) {
      const std::string& s = (*v.shape)[a].sym_name();
      if (!s.empty() && !sources.count(s)) sources[s] = DimSource{in, static_cast<int64_t>(a)};
    }
  }
  std::map<size_t, std::vector<Node>> replacements;  // node index -> nodes in its place
  std::vector<int> freed;                            // the values those Shapes read
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.removed || !n.domain.empty() || n.op_type != "Shape" || n.inputs.size() != 1 || n.outputs.size() != 1 ||
        n.inputs[0] < 0)
      continue;
    const Value& x = g.values[n.inputs[0]];
    if (x.producer < 0) continue;  // a graph input (or constant): already what this would read
    // Inner values, and copies of one made only for their size (q.transpose(1, 2).size(-2)).
    const Node& xp = g.nodes[x.producer];
    const bool copy_of_inner = (xp.op_type == "Transpose" || xp.op_type == "Reshape" || xp.op_type == "Identity") &&
                               !xp.inputs.empty() && xp.inputs[0] >= 0 && inner[xp.inputs[0]];
    if (!inner[n.inputs[0]] && !copy_of_inner) continue;
    auto dims = returned_dims(n, x);
    if (!dims || dims->empty() || sym_shape_concrete(*dims)) continue;
    std::vector<Node> nodes;
    if (!ShapeRewriter(g, sources).rewrite(n, *dims, &nodes)) continue;
    ctx.log.push_back("shape_sources: " + g.describe_node(n) + " reads the graph inputs its dims come from");
    replacements[i] = std::move(nodes);
    freed.push_back(n.inputs[0]);
  }
  if (replacements.empty()) return Status::Ok();
  std::vector<Node> order;
  std::vector<std::string> added;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto it = replacements.find(i);
    if (it == replacements.end()) {
      order.push_back(std::move(g.nodes[i]));
      continue;
    }
    for (Node& n : it->second) {
      added.push_back(n.name);
      order.push_back(std::move(n));
    }
  }
  g.nodes = std::move(order);
  g.compact();
  // What computed a value only for its Shape (x.transpose(1, 2) read for its size) goes too.
  for (const std::string& r : g.remove_unread_producers(std::move(freed)))
    ctx.log.push_back("shape_sources: removed " + r + " (only its Shape read it)");
  g.compact();
  const std::set<std::string> is_added(added.begin(), added.end());
  for (Node& n : g.nodes)
    if (is_added.count(n.name)) infer_node(g, n, ctx.dim_ranges);
  return Status::Ok();
}

}  // namespace kiln
