// sym_values: the elements of small integer tensors (shape arithmetic) as dims, so Reshape and
// Expand see through the exporter's Shape -> Gather -> Concat chains while dims are still symbolic.
#include <algorithm>

#include "builder/shapes/shape_rules_common.h"
#include "runtime/tensor.h"

namespace kiln::shape_rules {

namespace {

// Shape arithmetic on dims (the exporter's Shape -> Gather -> Add/Mul/Div chains), kept in the
// canonical expression form so it names a dim the way the shapes do (e.g. Range(past, seq+past)
// has seq elements). Integer Div truncates; on dims (never negative) that is the floor.
Dim add_dims(const Dim& a, const Dim& b, char op) {
  switch (op) {
    case '+': return dim_add(a, b);
    case '-': return dim_sub(a, b);
    case '*': return dim_mul(a, b);
    case '/': return dim_floordiv(a, b);
  }
  return Dim{};
}

}  // namespace

std::optional<std::vector<int64_t>> const_ints(const Graph& g, int v) {
  if (v < 0 || !g.values[v].is_constant()) return std::nullopt;
  auto r = read_int_vector(g.values[v].constant.view(), "constant");
  if (!r.ok()) return std::nullopt;
  return r.value();
}

void set_out(Graph& g, const Node& n, size_t i, DType dt, std::optional<Dims> shape) {
  if (i >= n.outputs.size()) return;
  Value& v = g.values[n.outputs[i]];
  if (dt != DType::kUndefined) v.dtype = dt;
  if (shape) v.shape = std::move(shape);
}

// sym_value of small integer constants.
void seed_sym_value(Value& v) {
  if (v.sym_value || !v.is_constant() || !dtype_is_integer(v.dtype) || v.constant.shape().rank() > 1 ||
      v.constant.numel() > 16)
    return;
  Dims d;
  for (int64_t i = 0; i < v.constant.numel(); ++i) d.push_back(Dim::known(read_int(v.constant.view(), i)));
  v.sym_value = d;
}

bool nonneg(const Dim& d) {
  auto b = dim_bounds(d, DimRanges{});
  return b && b->first >= 0;
}

std::optional<Elem> elem_of(const Graph& g, int v, size_t i, int depth) {
  if (v < 0 || depth > 8) return std::nullopt;
  const Value& val = g.values[v];
  if (val.is_constant()) {
    if (!dtype_is_integer(val.dtype) || static_cast<int64_t>(i) >= val.constant.numel()) return std::nullopt;
    return Elem{read_int(val.constant.view(), static_cast<int64_t>(i)), {}};
  }
  if (val.sym_value && i < val.sym_value->size()) {
    const Dim& d = (*val.sym_value)[i];
    if (d.is_known()) return Elem{d.value, {}};
    if (d.is_symbol()) return Elem{std::nullopt, d};
  }
  if (val.producer < 0 || static_cast<size_t>(val.producer) >= g.nodes.size()) return std::nullopt;
  const Node& p = g.nodes[val.producer];
  if (p.removed || !p.domain.empty() || p.inputs.empty()) return std::nullopt;
  if (p.op_type == "Reshape" || p.op_type == "Identity" || p.op_type == "Cast" || p.op_type == "Unsqueeze" ||
      p.op_type == "Squeeze")
    return elem_of(g, p.inputs[0], i, depth + 1);
  if (p.op_type == "Concat") {
    for (int in : p.inputs) {
      if (in < 0) return std::nullopt;
      const Value& iv = g.values[in];
      const size_t len = iv.is_constant() ? static_cast<size_t>(iv.constant.numel()) : iv.sym_value ? iv.sym_value->size() : SIZE_MAX;
      if (len == SIZE_MAX) return std::nullopt;
      if (i < len) return elem_of(g, in, i, depth + 1);
      i -= len;
    }
  }
  return std::nullopt;
}

// Rules for shape-arithmetic ops on sym_values.
void infer_sym_value(Graph& g, Node& n) {
  auto sv = [&](size_t i) -> const std::optional<Dims>* {
    if (i >= n.inputs.size() || n.inputs[i] < 0) return nullptr;
    Value& v = g.values[n.inputs[i]];
    seed_sym_value(v);
    return v.sym_value ? &v.sym_value : nullptr;
  };
  if (n.outputs.empty()) return;
  Value& out = g.values[n.outputs[0]];
  const std::string& op = n.op_type;
  if (op == "Shape" && !n.inputs.empty() && n.inputs[0] >= 0 && g.values[n.inputs[0]].shape) {
    Dims s = *g.values[n.inputs[0]].shape;
    int64_t r = static_cast<int64_t>(s.size());
    int64_t start = n.attrs.count("start") ? n.attrs.at("start").i : 0;
    int64_t end = n.attrs.count("end") ? n.attrs.at("end").i : r;
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = std::clamp<int64_t>(start, 0, r);
    end = std::clamp<int64_t>(end, start, r);
    out.sym_value = Dims(s.begin() + start, s.begin() + end);
  } else if (op == "Cast" && sv(0)) {
    // Only to an integer type: the arithmetic rules below compute integer results (Div
    // truncates), which a float value computed from the cast would not have.
    auto to = n.attrs.find("to");
    if (to != n.attrs.end() && dtype_is_integer(static_cast<DType>(to->second.i))) out.sym_value = **sv(0);
  } else if ((op == "Identity" || op == "Squeeze" || op == "Unsqueeze") && sv(0)) {
    out.sym_value = **sv(0);
  } else if (op == "Gather" && sv(0)) {
    auto idx = const_ints(g, n.inputs.size() > 1 ? n.inputs[1] : -1);
    const Dims& data = **sv(0);
    if (!idx) return;
    Dims r;
    for (int64_t i : *idx) {
      if (i < 0) i += static_cast<int64_t>(data.size());
      if (i < 0 || i >= static_cast<int64_t>(data.size())) return;
      r.push_back(data[i]);
    }
    out.sym_value = r;
  } else if (op == "Concat") {
    Dims r;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (!sv(i)) return;
      r.insert(r.end(), (**sv(i)).begin(), (**sv(i)).end());
    }
    out.sym_value = r;
  } else if (op == "Slice" && sv(0)) {
    auto st = const_ints(g, n.inputs.size() > 1 ? n.inputs[1] : -1);
    auto en = const_ints(g, n.inputs.size() > 2 ? n.inputs[2] : -1);
    if (!st || !en || st->size() != 1 || en->size() != 1) return;
    // Axes, when given, can only name the one axis of a 1-D value; steps only be 1 (x.shape[-1:]
    // exports both).
    auto only = [&](size_t i, std::initializer_list<int64_t> ok) {
      if (i >= n.inputs.size() || n.inputs[i] < 0) return true;
      auto c = const_ints(g, n.inputs[i]);
      return c && c->size() == 1 && std::find(ok.begin(), ok.end(), (*c)[0]) != ok.end();
    };
    if (!only(3, {0, -1}) || !only(4, {1})) return;
    if (n.inputs.size() > 5) return;
    const Dims& d = **sv(0);
    const int64_t sz = static_cast<int64_t>(d.size());
    int64_t s = (*st)[0], e = (*en)[0];
    if (s < 0) s += sz;
    if (e < 0) e += sz;
    s = std::clamp<int64_t>(s, 0, sz);
    e = std::clamp<int64_t>(e, s, sz);
    out.sym_value = Dims(d.begin() + s, d.begin() + e);
  } else if (op == "Reshape" && sv(0) && n.inputs.size() > 1) {
    // A shape vector reshaped to 1-D (expand(n, -1, -1) exports Reshape(shape, [-1])).
    auto t = const_ints(g, n.inputs[1]);
    if (t && t->size() == 1 && ((*t)[0] == -1 || (*t)[0] == static_cast<int64_t>((**sv(0)).size()))) out.sym_value = **sv(0);
  } else if (op == "Equal" && sv(0) && sv(1)) {
    // Elements as 0/1. A symbol that is provably >= 0 (a dim, a sum of dims) differs from a negative
    // constant (the -1 "keep this dim" marker expand() compares against).
    const size_t na = (**sv(0)).size(), nb = (**sv(1)).size();
    if (na != nb && na != 1 && nb != 1) return;
    Dims r;
    for (size_t i = 0; i < std::max(na, nb); ++i) {
      auto x = elem_of(g, n.inputs[0], na == 1 ? 0 : i), y = elem_of(g, n.inputs[1], nb == 1 ? 0 : i);
      if (!x || !y) return;
      if (x->num && y->num) r.push_back(Dim::known(*x->num == *y->num));
      else if (!x->num && !y->num && x->sym == y->sym) r.push_back(Dim::known(1));
      else if ((x->num && *x->num < 0 && nonneg(y->sym)) || (y->num && *y->num < 0 && nonneg(x->sym))) r.push_back(Dim::known(0));
      else return;
    }
    out.sym_value = r;
  } else if (op == "Where" && sv(0) && sv(1) && sv(2)) {
    const Dims &c = **sv(0), &a = **sv(1), &b = **sv(2);
    const size_t len = std::max({c.size(), a.size(), b.size()});
    for (const Dims* d : {&c, &a, &b})
      if (d->size() != len && d->size() != 1) return;
    Dims r;
    for (size_t i = 0; i < len; ++i) {
      const Dim& ci = c[c.size() == 1 ? 0 : i];
      if (!ci.is_known()) return;
      r.push_back(ci.value ? a[a.size() == 1 ? 0 : i] : b[b.size() == 1 ? 0 : i]);
    }
    out.sym_value = r;
  } else if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div") && sv(0) && sv(1)) {
    const Dims &a = **sv(0), &b = **sv(1);
    if (a.size() != b.size() && a.size() != 1 && b.size() != 1) return;
    const size_t len = std::max(a.size(), b.size());
    Dims r;
    const char c = op == "Add" ? '+' : op == "Sub" ? '-' : op == "Mul" ? '*' : '/';
    for (size_t i = 0; i < len; ++i) r.push_back(add_dims(a[a.size() == 1 ? 0 : i], b[b.size() == 1 ? 0 : i], c));
    out.sym_value = r;
  }
}


}  // namespace kiln::shape_rules
