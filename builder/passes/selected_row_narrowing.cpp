// selected_row_narrowing: a model that reads ONE row of a value (the last token, x[:, -1], as the
// ControlTransformer's prediction head does; the class token, x[:, 0], as ViT's) exports it as a
// Gather with a constant scalar index, or a Slice of length one, at the end of a chain of row-wise
// nodes: elementwise ops, LayerNormalization, linear layers (MatMul/Gemm with a weight that does not
// depend on the row), Transposes, Reshapes that keep the dims before the row axis, and the fused
// attention's queries. Each of these computes a row of its output from the same row of its inputs, so the
// chain can compute that row only: the selection moves up to where the chain starts (a Slice of
// one row is inserted there) and every node in between works on one row instead of hundreds. In a transformer this drops most of the
// last layer's work (queries, attention, output projection, MLP); its K/V, which every token
// needs, are computed in full.
//
// A node is narrowed only when EVERY live reader of each of its narrowed outputs is narrowed (or
// is the selection itself) along the same axis, so nothing else ever sees a narrowed value; graph
// outputs are never narrowed. Attention with a causal or block-causal rule knows its queries as
// "the last Sq positions", so it is narrowed only when the selected row is the last one. Values
// keep their dims except the row axis, which becomes 1 (or the block of rows one row became
// through a Reshape merging the row axis with the next, see Rows); the selection then picks row 0.
#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "builder/passes/pass.h"

namespace kiln {

namespace {

// Ops that compute each output element from the elements at the same (broadcast) position of
// their inputs, without attributes that change that (opset < 7 broadcast/axis attributes).
const std::set<std::string> kElementwise = {
    "Add",  "Sub",  "Mul",     "Div",     "Pow",      "Max",        "Min",       "Where", "Equal",   "Less",
    "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not",   "Relu",    "Erf",     "Tanh",
    "Sigmoid", "Neg", "Exp",   "Log",     "Sqrt",     "Abs",        "Cast",      "Reciprocal", "Gelu", "Clip",
    "LeakyRelu", "Elu", "Softplus", "HardSigmoid", "HardSwish", "Mish", "Sin", "Cos", "PRelu", "Sign", "Floor",
    "Ceil", "Round", "IsNaN", "Identity"};

// The selected row: index along the axis of the value it was taken from (-1 = the last row).
struct Selection {
  int64_t index = 0;
  int gather_node = -1;  // the Gather/Slice that selects the row
  int source = -1;       // the value it selects from
  int axis = 0;          // in that value
};

// Which rows of a value a narrowed node needs: along `axis`, rows [index·block, (index+1)·block)
// for the selection's index (the last `block` rows for index -1). block is 1 except behind a
// Reshape that merges the row axis with the dims after it (ViT's [S, B, E] -> [S·B, E] around
// its output projection keeps, for the class token, the block of B rows of token 0). Under a
// profile with a ranged batch that block is the batch symbol: values between two such Reshapes
// have a symbolic block, which the Reshapes' targets express as -1 (no Slice can take it).
struct Rows {
  int axis = 0;
  Dim block = Dim::known(1);
  bool operator==(const Rows&) const = default;
};

struct Demand {
  size_t slot;         // input position
  int axis;            // row axis of that input
  Dim block = Dim::known(1);  // rows per selected block of that input (Rows)
};

const SymShape* shape_of(const Graph& g, int v) { return v >= 0 && g.values[v].shape ? &*g.values[v].shape : nullptr; }

int64_t int_attr(const Node& n, const char* name, int64_t def) {
  auto it = n.attrs.find(name);
  return it == n.attrs.end() ? def : it->second.i;
}

// The row `n` selects when it keeps one row of its data input: Gather(x, scalar constant) or a
// Slice with constant one-element starts/ends/axes (step 1) keeping exactly one row.
std::optional<Selection> selection_of(const Graph& g, const Node& n, int idx, const DimRanges& ranges) {
  if (!n.domain.empty() || n.inputs.empty() || n.inputs[0] < 0) return std::nullopt;
  const SymShape* xs = shape_of(g, n.inputs[0]);
  if (!xs || xs->empty()) return std::nullopt;
  const int rank = static_cast<int>(xs->size());
  Selection s;
  s.gather_node = idx;
  s.source = n.inputs[0];
  int64_t axis = 0;
  if (n.op_type == "Gather" && n.inputs.size() == 2) {
    const Value& iv = g.values[n.inputs[1]];
    auto i = g.scalar_int(n.inputs[1]);
    if (!i || iv.constant.shape().rank() != 0) return std::nullopt;
    s.index = *i;
    axis = int_attr(n, "axis", 0);
  } else if (n.op_type == "Slice" && n.inputs.size() >= 4) {
    auto start = g.scalar_int(n.inputs[1]), end = g.scalar_int(n.inputs[2]), ax = g.scalar_int(n.inputs[3]);
    const auto step = n.inputs.size() > 4 ? g.scalar_int(n.inputs[4]) : std::optional<int64_t>(1);
    if (!start || !end || !ax || step != 1) return std::nullopt;
    axis = *ax;
    const bool to_end = *end >= std::numeric_limits<int32_t>::max();
    if (*start == -1 && (to_end || *end == 0)) {
      s.index = -1;
    } else if (*start >= 0 && *end == *start + 1) {
      s.index = *start;
    } else {
      return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return std::nullopt;
  s.axis = static_cast<int>(axis);
  // The row must exist for every shape of the profile (an index out of range stays the Gather's
  // own error), and an axis that may be 1 long gains nothing.
  auto b = dim_bounds((*xs)[s.axis], ranges);
  if (!b || b->first < 2 || s.index < -1 || s.index >= b->first) return std::nullopt;
  return s;
}

// Whether block `index` (of `block` rows) along an axis of dim `d` ends at its last row.
bool is_last_block(int64_t index, const Dim& block, const Dim& d) {
  return index == -1 || (d.is_known() && block.is_known() && (index + 1) * block.value == d.value);
}

class Narrowing {
 public:
  Narrowing(Graph& g, const Selection& sel, const DimRanges& ranges)
      : g_(g), sel_(sel), ranges_(ranges), gather_name_(g.nodes[sel.gather_node].name) {
    live_ = g.live_nodes();
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (!live_[i]) continue;
      for (size_t s = 0; s < g.nodes[i].inputs.size(); ++s)
        if (g.nodes[i].inputs[s] >= 0) readers_[g.nodes[i].inputs[s]].push_back({static_cast<int>(i), s});
    }
    for (int o : g.outputs) graph_output_.insert(o);
  }

  // Decides which nodes compute only the selected row (walking from the selection back to the
  // graph's inputs); returns how many. A symbolic block cannot be sliced out of a whole value (its
  // bounds would be run-time values): when the first plan needs that, the plan is made again with
  // Reshapes that would create a symbolic block left whole.
  int plan() {
    plan_once();
    if (!needs_symbolic_slice()) return planned();
    narrowed_.clear();
    value_rows_.clear();
    symbolic_blocks_ = false;
    plan_once();
    return planned();
  }

  void plan_once() {
    for (int i = sel_.gather_node - 1; i >= 0; --i) {
      if (!live_[i]) continue;
      const Node& n = g_.nodes[i];
      auto outs = narrowed_outputs(n);
      if (outs.empty()) continue;
      // Every narrowed output must be read only by narrowed nodes, all along one axis.
      std::optional<Rows> rows;
      bool ok = true;
      for (size_t o : outs) {
        auto r = demanded_rows(n.outputs[o]);
        if (!r || (rows && !(*rows == *r))) ok = false;
        if (r) rows = r;
      }
      if (!ok || !rows) continue;
      auto demands = input_demands(n, *rows);
      if (!demands) continue;
      narrowed_[i] = std::move(*demands);
      for (size_t o : outs) value_rows_[n.outputs[o]] = *rows;
    }
  }

  // Demand starts at the selected value: without its producer nothing else is narrowed.
  int planned() const { return value_rows_.count(sel_.source) ? static_cast<int>(narrowed_.size()) : 0; }

  // Whether a narrowed node reads a symbolic block of a value that is not narrowed.
  bool needs_symbolic_slice() const {
    for (const auto& [i, demands] : narrowed_)
      for (const Demand& d : demands)
        if (!d.block.is_known() && !value_rows_.count(g_.nodes[i].inputs[d.slot])) return true;
    return false;
  }

  // Rewrites the graph: one-row Slices where narrowed nodes read full values, new shapes for the
  // narrowed values, and the selection reading row 0 of its (now one-row) source.
  void rewrite(PassContext& ctx) {
    std::map<std::tuple<int, int, int64_t>, int> slices;  // (value, axis, block) -> its Slice (known blocks only)
    std::vector<Node> order;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      auto it = narrowed_.find(static_cast<int>(i));
      if (it != narrowed_.end()) {
        for (const Demand& d : it->second) {
          const int u = g_.nodes[i].inputs[d.slot];
          if (value_rows_.count(u)) continue;  // produced by a narrowed node
          auto key = std::make_tuple(u, d.axis, d.block.value);
          if (!slices.count(key)) {
            auto [node, out] = row_slice(u, Rows{d.axis, d.block});
            order.push_back(std::move(node));
            slices[key] = out;
          }
          g_.nodes[i].inputs[d.slot] = slices[key];
        }
      }
      if (it != narrowed_.end() && g_.nodes[i].op_type == "Reshape") {
        const Rows rows = value_rows_.at(g_.nodes[i].outputs[0]);
        Tensor target = *narrowed_target(g_.nodes[i], rows);  // checked by reshape_demands
        g_.nodes[i].inputs[1] = g_.add_constant(g_.unique_name(g_.nodes[i].name + "/row_target"), std::move(target));
      }
      order.push_back(std::move(g_.nodes[i]));
    }
    g_.nodes = std::move(order);
    for (const auto& [v, rows] : value_rows_) (*g_.values[v].shape)[rows.axis] = rows.block;
    (*g_.values[sel_.source].shape)[sel_.axis] = Dim::known(1);
    // The selection now takes row 0 of a one-row value.
    for (Node& n : g_.nodes)
      if (n.name == gather_name_) {
        if (n.op_type == "Gather") {
          n.inputs[1] = g_.add_constant(g_.unique_name(n.name + "/row0"), Tensor::from_vector<int64_t>({0}, Shape{}));
        } else {
          n.inputs[1] = g_.add_constant(g_.unique_name(n.name + "/start0"), Tensor::from_vector<int64_t>({0}, Shape{1}));
          n.inputs[2] = g_.add_constant(g_.unique_name(n.name + "/end1"), Tensor::from_vector<int64_t>({1}, Shape{1}));
        }
      }
    ctx.log.push_back("selected_row_narrowing: " + std::to_string(narrowed_.size()) + " nodes before '" + gather_name_ +
                      "' compute only row " + std::to_string(sel_.index) + " of axis " + std::to_string(sel_.axis) + " (" +
                      std::to_string(slices.size()) + " row slices inserted)");
  }

 private:
  struct Reader {
    int node;
    size_t slot;
  };

  // The rows all readers of `v` need it narrowed to, or nullopt when some reader needs it whole.
  std::optional<Rows> demanded_rows(int v) const {
    if (graph_output_.count(v)) return std::nullopt;
    auto it = readers_.find(v);
    if (it == readers_.end() || it->second.empty()) return std::nullopt;
    std::optional<Rows> rows;
    for (const Reader& r : it->second) {
      Rows a{-1, Dim::known(1)};
      if (r.node == sel_.gather_node && v == sel_.source && r.slot == 0) {
        a.axis = sel_.axis;
      } else if (auto n = narrowed_.find(r.node); n != narrowed_.end()) {
        for (const Demand& d : n->second)
          if (d.slot == r.slot) a = Rows{d.axis, d.block};
      }
      if (a.axis < 0 || (rows && !(*rows == a))) return std::nullopt;
      rows = a;
    }
    return rows;
  }

  // The outputs of `n` that narrowing makes one row (empty: `n` is not row-wise).
  std::vector<size_t> narrowed_outputs(const Node& n) const {
    if (n.outputs.empty()) return {};
    if (n.domain == "kiln" && n.op_type == "Attention") return {0};
    if (!n.domain.empty()) return {};
    if (n.op_type == "LayerNormalization") {
      for (size_t o = 1; o < n.outputs.size(); ++o)
        if (readers_.count(n.outputs[o]) || graph_output_.count(n.outputs[o])) return {};
      return {0};
    }
    if (n.outputs.size() != 1) return {};
    return {0};
  }

  // Which inputs a node needs narrowed, and to which rows, to compute the selected rows of its
  // narrowed outputs; nullopt when it cannot. Only a Reshape changes the block (reshape_demands);
  // every other rule is row-wise, so its inputs' blocks are the output's.
  std::optional<std::vector<Demand>> input_demands(const Node& n, const Rows& rows) const {
    if (n.domain.empty() && n.op_type == "Reshape") return reshape_demands(n, rows);
    auto d = rowwise_demands(n, rows);
    if (d)
      for (Demand& x : *d) x.block = rows.block;
    return d;
  }

  std::optional<std::vector<Demand>> rowwise_demands(const Node& n, const Rows& rows) const {
    const int axis = rows.axis;
    const SymShape* ys = shape_of(g_, n.outputs[0]);
    if (!ys || axis >= static_cast<int>(ys->size())) return std::nullopt;
    const int rank = static_cast<int>(ys->size());
    if (n.domain == "kiln" && n.op_type == "Attention") return attention_demands(n, rows);
    if (!n.domain.empty()) return std::nullopt;
    const std::string& op = n.op_type;
    if (kElementwise.count(op)) {
      if (n.attrs.count("broadcast") || n.attrs.count("axis")) return std::nullopt;
      return broadcast_demands(n, axis, rank, n.inputs.size());
    }
    if (op == "LayerNormalization") {
      int64_t norm = int_attr(n, "axis", -1);
      if (norm < 0) norm += rank;
      if (axis >= norm) return std::nullopt;
      return broadcast_demands(n, axis, rank, 1);  // scale and bias cover the normalized dims only
    }
    if (op == "Softmax" || op == "LogSoftmax") {
      int64_t sm = int_attr(n, "axis", g_.opset >= 13 ? -1 : 1);
      if (sm < 0) sm += rank;
      if (g_.opset >= 13 ? axis == sm : axis >= sm) return std::nullopt;
      return broadcast_demands(n, axis, rank, 1);
    }
    if (op == "Transpose") {
      auto it = n.attrs.find("perm");
      if (it == n.attrs.end() || static_cast<int>(it->second.ints.size()) != rank) return std::nullopt;
      return std::vector<Demand>{{0, static_cast<int>(it->second.ints[axis])}};
    }
    if (op == "MatMul") {
      // Row `axis` of A x W, with W 2-D and not read per row: row `axis` of A.
      const SymShape* as = shape_of(g_, n.inputs[0]);
      const SymShape* ws = shape_of(g_, n.inputs[1]);
      if (!as || !ws || ws->size() != 2 || static_cast<int>(as->size()) != rank || axis > rank - 2) return std::nullopt;
      return std::vector<Demand>{{0, axis}};
    }
    if (op == "Gemm") {
      if (axis != 0 || int_attr(n, "transA", 0) != 0 || rank != 2) return std::nullopt;
      std::vector<Demand> d{{0, 0}};
      if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
        const SymShape* cs = shape_of(g_, n.inputs[2]);
        if (!cs) return std::nullopt;
        if (cs->size() == 2 && !((*cs)[0].is_known() && (*cs)[0].value == 1)) d.push_back({2, 0});
      }
      return d;
    }
    return std::nullopt;
  }

  // Whether `d` is 1, or cannot be 1, for every shape of the profile (neither: nullopt).
  std::optional<bool> is_one(const Dim& d) const {
    auto b = dim_bounds(d, ranges_);
    if (!b) return std::nullopt;
    if (b->first == 1 && b->second == 1) return true;
    if (b->first >= 2 || b->second <= 0) return false;
    return std::nullopt;
  }

  // How an operand whose dim `dim` broadcasts against the output's `out` reads the row axis:
  // whole (it is 1: broadcast), narrowed (it is the output's dim: equal, or provably not 1, which
  // broadcasting then forces to equal the output's), or unknown.
  enum class Read { kWhole, kRow, kUnknown };
  Read broadcast_read(const Dim& dim, const Dim& out) const {
    const auto one = is_one(dim);
    if (one == true) return is_one(out) == true ? Read::kRow : Read::kWhole;
    // Two unknown dims are not known to be equal.
    if ((dim == out && (dim.is_known() || dim.is_symbol())) || one == false) return Read::kRow;
    return Read::kUnknown;
  }

  // Numpy broadcasting over the first `count` inputs: an input whose dim at the row axis is 1 (or
  // that has no such axis) is read whole; one whose dim is the output's is narrowed.
  std::optional<std::vector<Demand>> broadcast_demands(const Node& n, int axis, int rank, size_t count) const {
    const Dim& out_dim = (*shape_of(g_, n.outputs[0]))[axis];
    std::vector<Demand> d;
    for (size_t s = 0; s < std::min(count, n.inputs.size()); ++s) {
      if (n.inputs[s] < 0) continue;
      const SymShape* is = shape_of(g_, n.inputs[s]);
      if (!is) return std::nullopt;
      const int a = axis - (rank - static_cast<int>(is->size()));
      if (a < 0) continue;
      const Read r = broadcast_read((*is)[a], out_dim);
      if (r == Read::kUnknown) return std::nullopt;
      if (r == Read::kRow) d.push_back({s, a});
    }
    return d;
  }

  // A Reshape that keeps every dim before the row axis and regroups the row axis with the dims
  // after it. Per index of the leading dims, the output's rows [i·b, (i+1)·b) are the flat
  // elements [i·b·T_out, (i+1)·b·T_out) (T: the product of the dims after the axis), which are the
  // input's rows [i·b', (i+1)·b') with b' = b·T_out / T_in when that divides: equal tails keep the
  // block ([S, B*E] <-> [S, B, E]); [S·B, E] -> [S, B, E] takes a block of B input rows per output
  // row, and [S, B·H, Dh] -> [S·B, E] one input row per block of B output rows. The target then
  // gets the block at the row axis (a positive target dim there would not match the narrowed input).
  std::optional<std::vector<Demand>> reshape_demands(const Node& n, const Rows& rows) const {
    const int axis = rows.axis;
    if (n.inputs.size() != 2 || n.inputs[1] < 0) return std::nullopt;
    const SymShape* xs = shape_of(g_, n.inputs[0]);
    const SymShape* ys = shape_of(g_, n.outputs[0]);
    if (!xs || !ys || static_cast<int>(xs->size()) <= axis || static_cast<int>(ys->size()) <= axis) return std::nullopt;
    for (int d = 0; d < axis; ++d)
      if (!((*xs)[d] == (*ys)[d]) || (!(*xs)[d].is_known() && !(*xs)[d].is_symbol())) return std::nullopt;
    Dim block = rows.block;
    const bool same_tail = std::equal(xs->begin() + axis + 1, xs->end(), ys->begin() + axis + 1, ys->end());
    if (same_tail) {
      // Row i of the output is row i of the input only when the axis itself is the same dim.
      if (!((*xs)[axis] == (*ys)[axis]) || (!(*xs)[axis].is_known() && !(*xs)[axis].is_symbol())) return std::nullopt;
    } else {
      // b' = b·T_out / T_in, with symbolic dims in the tails (a batch) as factors: [S·B, E] ->
      // [S, B, E] takes B input rows per output row.
      auto b = dim_product_ratio(rows.block, SymShape(ys->begin() + axis + 1, ys->end()),
                                 SymShape(xs->begin() + axis + 1, xs->end()));
      if (!b || (!b->is_known() && !symbolic_blocks_) || (b->is_known() && b->value <= 0)) return std::nullopt;
      block = *b;
    }
    auto target = narrowed_target(n, rows);
    if (!target) return std::nullopt;
    // A 0 at the row axis copies the input's (narrowed) dim: right only when the blocks agree.
    if (target->as<int64_t>()[axis] == 0 && !(block == rows.block)) return std::nullopt;
    return std::vector<Demand>{{0, axis, block}};
  }

  // The target of Reshape `n` narrowed to `rows` at its row axis: the block there (a 0 copies the
  // input's dim, which reshape_demands allows only when it is the block; a -1 infers it). A target
  // computed at run time (the exporter's Shape arithmetic over a ranged batch) is read from its
  // elements; a symbolic block or element becomes the target's one -1, which the Reshape infers
  // from its input's size. nullopt when that would need two.
  std::optional<Tensor> narrowed_target(const Node& n, const Rows& rows) const {
    const Value& t = g_.values[n.inputs[1]];
    const SymShape* ys = shape_of(g_, n.outputs[0]);
    std::vector<int64_t> out;
    if (t.is_constant()) {
      if (t.constant.dtype() != DType::kInt64 || t.constant.numel() != static_cast<int64_t>(ys->size())) return std::nullopt;
      out.assign(t.constant.as<int64_t>(), t.constant.as<int64_t>() + t.constant.numel());
    } else {
      // -1 and 0 need the data: a run-time target must hold sizes (-1 reads as an unknown dim).
      if (!t.sym_value || t.sym_value->size() != ys->size() || int_attr(n, "allowzero", 0)) return std::nullopt;
      for (const Dim& d : *t.sym_value) {
        if (d.is_known() && d.value > 0) out.push_back(d.value);
        else if (d.is_symbol()) out.push_back(-1);
        else return std::nullopt;
      }
    }
    int64_t& a = out[rows.axis];
    if (a != 0) a = rows.block.is_known() ? rows.block.value : -1;
    if (std::count(out.begin(), out.end(), int64_t{-1}) > 1) return std::nullopt;
    return Tensor::from_vector<int64_t>(out, Shape{static_cast<int64_t>(out.size())});
  }

  // kiln::Attention computes query row i from q row i (and mask row i): only output 0 narrows.
  std::optional<std::vector<Demand>> attention_demands(const Node& n, const Rows& rows) const {
    const int axis = rows.axis;
    // The query (sequence) axis: bsd [B, S, D] 1, bhsd [B, H, S, Dh] 2, sbd [S, B, D] 0.
    auto layout = n.attrs.find("layout");
    const std::string lay = layout == n.attrs.end() ? "bsd" : layout->second.s;
    const int seq_axis = lay == "bhsd" ? 2 : lay == "sbd" ? 0 : lay == "bsd" ? 1 : -1;
    if (axis != seq_axis) return std::nullopt;
    const SymShape* qs = shape_of(g_, n.inputs[0]);
    if (!qs || static_cast<int>(qs->size()) <= axis) return std::nullopt;
    auto mask = n.attrs.find("mask");
    const std::string kind = mask == n.attrs.end() ? "none" : mask->second.s;
    // Causal rules place the queries at the last Sq positions: the kept queries keep their places
    // only if they are the last.
    if ((kind == "causal" || kind == "block_causal") && !is_last_block(sel_.index, rows.block, (*qs)[axis]))
      return std::nullopt;
    std::vector<Demand> d{{0, axis}};
    if ((kind == "bool" || kind == "additive") && n.inputs.size() > 3 && n.inputs[3] >= 0) {
      const SymShape* ms = shape_of(g_, n.inputs[3]);
      if (!ms || ms->size() < 2) return std::nullopt;
      const int ma = static_cast<int>(ms->size()) - 2;  // the mask's query axis: Sq, or 1
      const Read r = broadcast_read((*ms)[ma], (*qs)[axis]);
      if (r == Read::kUnknown) return std::nullopt;
      if (r == Read::kRow) d.push_back({3, ma});
    }
    return d;
  }

  // Slice(v, [index·block], [(index + 1)·block], [axis]) as a new node and value (the last block
  // rows for index -1).
  std::pair<Node, int> row_slice(int v, const Rows& rows) {
    const int axis = rows.axis;
    const int64_t block = rows.block.value;  // known: plan() never slices a symbolic block
    const int64_t start = sel_.index == -1 ? -block : sel_.index * block;
    const int64_t end = sel_.index == -1 ? std::numeric_limits<int64_t>::max() : (sel_.index + 1) * block;
    const std::string base = g_.values[v].name + "/row";
    Node n;
    n.name = g_.unique_name(base);
    n.op_type = "Slice";
    n.inputs = {v, g_.add_constant(g_.unique_name(base + "_start"), Tensor::from_vector<int64_t>({start}, Shape{1})),
                g_.add_constant(g_.unique_name(base + "_end"), Tensor::from_vector<int64_t>({end}, Shape{1})),
                g_.add_constant(g_.unique_name(base + "_axis"), Tensor::from_vector<int64_t>({axis}, Shape{1}))};
    const int out = g_.add_value(g_.unique_name(base));
    g_.values[out].dtype = g_.values[v].dtype;
    g_.values[out].shape = g_.values[v].shape;
    (*g_.values[out].shape)[axis] = rows.block;
    n.outputs = {out};
    return {std::move(n), out};
  }

  Graph& g_;
  Selection sel_;
  const DimRanges& ranges_;
  std::string gather_name_;
  std::vector<bool> live_;
  std::map<int, std::vector<Reader>> readers_;
  std::set<int> graph_output_;
  std::map<int, std::vector<Demand>> narrowed_;  // node index -> the inputs it needs narrowed
  std::map<int, Rows> value_rows_;               // narrowed value -> its selected rows
  bool symbolic_blocks_ = true;                  // whether a Reshape may make a block symbolic (plan)
};

}  // namespace

Status selected_row_narrowing(Graph& g, PassContext& ctx) {
  // One selection at a time: each rewrite changes node positions and readers. Selections are
  // remembered by their output value (ids are stable).
  std::set<int> done;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
      const Node& n = g.nodes[i];
      if (n.removed || n.outputs.empty() || done.count(n.outputs[0])) continue;
      auto sel = selection_of(g, n, static_cast<int>(i), ctx.dim_ranges);
      if (!sel) continue;
      done.insert(n.outputs[0]);
      Narrowing narrowing(g, *sel, ctx.dim_ranges);
      if (narrowing.plan() == 0) continue;
      narrowing.rewrite(ctx);
      changed = true;
    }
  }
  return Status::Ok();
}

}  // namespace kiln
