// attention_shape_helpers.cpp: the Matcher's reading of the graph for attention_fusion: value
// shapes derived from producers where shape inference left them unknown, dims referenced through
// Shape/Gather/Slice, scalars computed from constants and known dims, small integer operands.
#include <algorithm>
#include <cmath>
#include <set>

#include "builder/passes/attention_patterns.h"
#include "builder/shapes/dim.h"

namespace kiln {
namespace attention_fusion_detail {

void Matcher::refresh() {
  derived_.clear();
  consumers_.assign(g_.values.size(), {});
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    if (g_.nodes[i].removed) continue;
    for (int v : g_.nodes[i].inputs)
      if (v >= 0) consumers_[v].push_back(static_cast<int>(i));
  }
  is_output_.assign(g_.values.size(), false);
  for (int o : g_.outputs) is_output_[o] = true;
}

// The value's shape; where shape inference left it unknown (symbolic slices, positions from
// Range, ...), derived here from the producers' operands, with unknown dims where needed.
const std::optional<SymShape>& Matcher::shape(int v) {
  const auto& own = g_.values[v].shape;
  if (own && std::all_of(own->begin(), own->end(), [](const Dim& d) { return d.is_known() || d.is_symbol(); }))
    return own;
  auto it = derived_.find(v);
  if (it != derived_.end()) return it->second;
  derived_[v] = own;  // cuts cycles through malformed graphs
  auto s = derive(v);
  if (own && s && s->size() == own->size())  // fill the dims inference left unknown
    for (size_t i = 0; i < s->size(); ++i)
      if ((*own)[i].is_known() || (*own)[i].is_symbol()) (*s)[i] = (*own)[i];
  if (own && (!s || s->size() != own->size())) s = own;
  return derived_[v] = s;
}

Dim Matcher::merge_broadcast(const std::vector<Dim>& ds) {
  for (const auto& d : ds)
    if (d.is_known() && d.value != 1) return d;
  bool all_one = true;
  for (const auto& d : ds) all_one &= d.is_known() && d.value == 1;
  if (all_one) return Dim::known(1);
  std::vector<Dim> rest;
  for (const auto& d : ds)
    if (!(d.is_known() && d.value == 1)) rest.push_back(d);
  for (const auto& d : rest)
    if (!(d == rest[0])) return Dim{};
  return rest.empty() ? Dim{} : rest[0];
}

std::optional<SymShape> Matcher::broadcast_of(const std::vector<int>& vs) {
  std::vector<SymShape> ss;
  size_t r = 0;
  for (int v : vs) {
    if (v < 0) continue;
    auto s = shape(v);
    if (!s) return std::nullopt;
    ss.push_back(*s);
    r = std::max(r, s->size());
  }
  SymShape out(r);
  for (size_t i = 0; i < r; ++i) {
    std::vector<Dim> ds;
    for (const auto& s : ss)
      if (i + s.size() >= r) ds.push_back(s[i + s.size() - r]);
    out[i] = merge_broadcast(ds);
  }
  return out;
}

std::optional<SymShape> Matcher::derive(int v) {
  Node* n = producer(v);
  if (!n || !n->domain.empty() || n->inputs.empty() || n->inputs[0] < 0) return std::nullopt;
  static const std::set<std::string> kSame = {"LayerNormalization", "Softmax", "Relu", "Gelu", "Erf", "Tanh",
                                              "Sigmoid", "Neg", "Sqrt", "Exp", "Cast", "Not", "Identity"};
  static const std::set<std::string> kBroadcast = {"Add", "Sub", "Mul", "Div", "Pow", "Where"};
  const std::string& op = n->op_type;
  if (kSame.count(op)) return shape(n->inputs[0]);
  if (kBroadcast.count(op)) return broadcast_of(n->inputs);
  auto x = shape(n->inputs[0]);
  if (!x && op == "Concat")  // e.g. an Expand'ed class token first: any operand gives the rank
    for (size_t i = 1; i < n->inputs.size() && !x; ++i)
      if (n->inputs[i] >= 0) x = shape(n->inputs[i]);
  if (!x) return std::nullopt;
  const int64_t r = static_cast<int64_t>(x->size());
  if (op == "MatMul" && n->inputs.size() == 2 && n->inputs[1] >= 0) {
    auto y = shape(n->inputs[1]);
    if (!y || x->size() < 2 || y->size() < 2) return std::nullopt;
    SymShape a(x->begin(), x->end() - 2), b(y->begin(), y->end() - 2);
    SymShape out;
    const size_t br = std::max(a.size(), b.size());
    for (size_t i = 0; i < br; ++i) {
      std::vector<Dim> ds;
      if (i + a.size() >= br) ds.push_back(a[i + a.size() - br]);
      if (i + b.size() >= br) ds.push_back(b[i + b.size() - br]);
      out.push_back(merge_broadcast(ds));
    }
    out.push_back((*x)[x->size() - 2]);
    out.push_back(y->back());
    return out;
  }
  if (op == "Transpose") {
    auto p = perm(*n);
    if (!p || static_cast<int64_t>(p->size()) != r) return std::nullopt;
    SymShape out;
    for (int64_t i : *p) {
      if (i < 0 || i >= r) return std::nullopt;
      out.push_back((*x)[i]);
    }
    return out;
  }
  if (op == "Concat" && n->attrs.count("axis")) {
    int64_t a = n->attrs.at("axis").i;
    if (a < 0) a += r;
    if (a < 0 || a >= r) return std::nullopt;
    SymShape out = *x;
    out[a] = Dim{};
    return out;
  }
  if (op == "Split" && n->attrs.count("axis") && n->inputs.size() > 1) {
    int64_t a = n->attrs.at("axis").i;
    if (a < 0) a += r;
    auto sizes = dims_value(n->inputs[1]);
    if (a < 0 || a >= r || !sizes || sizes->size() != n->outputs.size()) return std::nullopt;
    SymShape out = *x;
    for (size_t i = 0; i < n->outputs.size(); ++i)
      if (n->outputs[i] == v) out[a] = (*sizes)[i];
    return out;
  }
  if (op == "Reshape" && n->inputs.size() > 1) {
    auto t = dims_value(n->inputs[1]);
    if (!t) return std::nullopt;
    const bool allowzero = n->attrs.count("allowzero") && n->attrs.at("allowzero").i;
    SymShape out = *t;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].is_known() && out[i].value == 0 && !allowzero) out[i] = i < x->size() ? (*x)[i] : Dim{};
      else if (out[i].is_known() && out[i].value < 0) out[i] = Dim{};
    }
    return out;
  }
  if (op == "Slice" && n->inputs.size() >= 4) {
    SymShape s = *x;
    auto st = dims_value(n->inputs[1]), en = dims_value(n->inputs[2]), ax = dims_value(n->inputs[3]);
    if (!ax) return std::nullopt;
    bool unit_steps = true;
    if (n->inputs.size() > 4 && n->inputs[4] >= 0) {
      auto steps = dims_value(n->inputs[4]);
      if (!steps) unit_steps = false;
      else
        for (const auto& d : *steps) unit_steps &= d.is_known() && d.value == 1;
    }
    for (size_t i = 0; i < ax->size(); ++i) {
      if (!(*ax)[i].is_known()) return std::nullopt;
      const int64_t a = (*ax)[i].value < 0 ? (*ax)[i].value + r : (*ax)[i].value;
      if (a < 0 || a >= r) return std::nullopt;
      s[a] = Dim{};
    }
    // Sliced axes whose bounds and input dim are known get their size.
    for (size_t i = 0; unit_steps && st && en && i < ax->size() && st->size() == ax->size() && en->size() == ax->size(); ++i) {
      const int64_t a = (*ax)[i].value < 0 ? (*ax)[i].value + r : (*ax)[i].value;
      if (!(*x)[a].is_known() || !(*st)[i].is_known() || !(*en)[i].is_known()) continue;
      const int64_t n_a = (*x)[a].value;
      int64_t b = (*st)[i].value, e = (*en)[i].value;
      if (b < 0) b += n_a;
      if (e < 0) e += n_a;
      b = std::clamp<int64_t>(b, 0, n_a);
      e = std::clamp<int64_t>(e, 0, n_a);
      s[a] = Dim::known(std::max<int64_t>(0, e - b));
    }
    return s;
  }
  return std::nullopt;
}

// (value, axis) when `v` is one dim of a value's shape: Shape(x)[i] via Gather or a one-element
// Slice, through Squeeze/Unsqueeze/Cast.
std::optional<std::pair<int, int>> Matcher::dim_ref(int v, int depth) {
  Node* n = producer(v);
  if (!n || !n->domain.empty() || n->inputs.empty() || depth > 6) return std::nullopt;
  const std::string& op = n->op_type;
  if (op == "Squeeze" || op == "Unsqueeze" || op == "Cast") return dim_ref(n->inputs[0], depth + 1);
  if (op != "Slice" && op != "Gather") return std::nullopt;
  Node* sh = producer_op(n->inputs[0], "Shape");
  if (!sh || sh->attrs.count("start") || sh->attrs.count("end") || sh->inputs.empty()) return std::nullopt;
  const int x = sh->inputs[0];
  const int r = rank(x);
  if (r < 0) return std::nullopt;
  int64_t i = 0;
  if (op == "Gather") {
    auto idx = dims_value(n->inputs[1]);
    if (!idx || idx->size() != 1 || !(*idx)[0].is_known() || (n->attrs.count("axis") && n->attrs.at("axis").i != 0))
      return std::nullopt;
    i = (*idx)[0].value;
  } else {
    if (n->inputs.size() < 3) return std::nullopt;
    auto st = dims_value(n->inputs[1]), en = dims_value(n->inputs[2]);
    if (!st || !en || st->size() != 1 || en->size() != 1 || !(*st)[0].is_known() || !(*en)[0].is_known())
      return std::nullopt;
    if (n->inputs.size() > 4 && n->inputs[4] >= 0) return std::nullopt;
    int64_t b = (*st)[0].value, e = (*en)[0].value;
    if (b < 0) b += r;
    if (e < 0) e += r;
    e = std::min<int64_t>(e, r);
    if (e != b + 1) return std::nullopt;
    i = b;
  }
  if (i < 0) i += r;
  if (i < 0 || i >= r) return std::nullopt;
  return std::make_pair(x, static_cast<int>(i));
}

// The value of a scalar computed from constants and known dims (e.g. GPT-2's
// Pow(Cast(Shape(v)[-1]), 0.5)); nullopt when it is not provably one number.
std::optional<double> Matcher::scalar(int v, int depth) {
  if (v < 0 || depth > 12) return std::nullopt;
  const Value& val = g_.values[v];
  if (val.is_constant()) {
    if (val.constant.numel() != 1) return std::nullopt;
    return read_double(val.constant.view(), 0);
  }
  if (val.sym_value && val.sym_value->size() == 1 && (*val.sym_value)[0].is_known())
    return static_cast<double>((*val.sym_value)[0].value);
  Node* n = producer(v);
  if (!n || !n->domain.empty() || n->inputs.empty()) return std::nullopt;
  const std::string& op = n->op_type;
  if (op == "Cast" || op == "Squeeze" || op == "Unsqueeze" || op == "Identity" || op == "Reshape") {
    auto x = scalar(n->inputs[0], depth + 1);
    if (!x) return std::nullopt;
    if (op == "Cast") {
      const DType to = static_cast<DType>(n->attrs.count("to") ? n->attrs.at("to").i : 0);
      if (to != DType::kFloat32 && to != DType::kFloat64 && *x != std::floor(*x)) return std::nullopt;
    }
    return x;
  }
  if ((op == "Slice" || op == "Gather") && n->inputs.size() >= 2) {
    if (auto d = dim_ref(v); d && dim(d->first, d->second).is_known())
      return static_cast<double>(dim(d->first, d->second).value);
    return std::nullopt;
  }
  if (op == "Sqrt") {
    auto x = scalar(n->inputs[0], depth + 1);
    return x && *x >= 0 ? std::optional(std::sqrt(*x)) : std::nullopt;
  }
  if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow") && n->inputs.size() == 2) {
    auto a = scalar(n->inputs[0], depth + 1), b = scalar(n->inputs[1], depth + 1);
    if (!a || !b) return std::nullopt;
    // Integer Div truncates; only float division is exact here.
    if (op == "Div" && (*b == 0 || dtype_is_integer(g_.values[v].dtype))) return std::nullopt;
    if (op == "Add") return *a + *b;
    if (op == "Sub") return *a - *b;
    if (op == "Mul") return *a * *b;
    if (op == "Div") return *a / *b;
    return std::pow(*a, *b);
  }
  return std::nullopt;
}

// Why scalar(v) is not one number, for the report: the first operand on the way that is not.
std::string Matcher::scalar_blocker(int v, int depth) {
  if (v < 0) return "an absent input";
  const Value& val = g_.values[v];
  const std::string name = "'" + val.name + "'";
  if (scalar(v, depth)) return name + " is a number";
  if (depth > 12) return name + " is computed by too long a chain";
  if (val.is_constant()) return name + " has " + std::to_string(val.constant.numel()) + " elements";
  Node* n = producer(v);
  if (!n) return name + " is a graph input";
  const std::string& op = n->op_type;
  if (!n->domain.empty()) return name + " is computed by " + g_.describe_node(*n);
  if (op == "Cast" || op == "Squeeze" || op == "Unsqueeze" || op == "Identity" || op == "Reshape" || op == "Sqrt")
    return n->inputs.empty() ? name + " is malformed" : scalar_blocker(n->inputs[0], depth + 1);
  if (op == "Slice" || op == "Gather") {
    auto d = dim_ref(v);
    if (!d) return name + " is not one dim of a Shape";
    return name + " is dim " + std::to_string(d->second) + " (" + dim(d->first, d->second).str() + ") of '" +
           g_.values[d->first].name + "', which is not one size in this profile";
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow")
    for (int i : n->inputs)
      if (!scalar(i, depth + 1)) return scalar_blocker(i, depth + 1);
  return name + " is computed by " + g_.describe_node(*n);
}

// Elements of a small integer operand (a reshape target, slice bounds), possibly symbolic.
std::optional<std::vector<Dim>> Matcher::dims_value(int v) {
  if (v < 0) return std::nullopt;
  Value& val = g_.values[v];
  if (val.sym_value) return val.sym_value;
  if (val.is_constant() && dtype_is_integer(val.dtype) && val.constant.shape().rank() <= 1) {
    std::vector<Dim> d;
    for (int64_t i = 0; i < val.constant.numel(); ++i) d.push_back(Dim::known(read_int(val.constant.view(), i)));
    return d;
  }
  return std::nullopt;
}

bool same_dim(const Dim& a, const Dim& b) { return (a.is_known() || a.is_symbol()) && a == b; }

// The exporter's Shape arithmetic names the difference the way shape inference does (builder/shapes/dim.h).
Dim sub_dim(const Dim& a, const Dim& b) { return linear_add(a, b, -1); }

}  // namespace attention_fusion_detail
}  // namespace kiln
