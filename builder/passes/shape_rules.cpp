// Per-op dtype and shape inference over symbolic dims. Ops with a rule here work with symbols;
// every other op is inferred by its kernel once its input shapes are concrete (and any inputs that
// describe shapes are constant).
#include <cctype>
#include <functional>
#include <map>
#include <set>

#include "builder/passes/pass.h"
#include "builder/passes/sym_linear.h"
#include "runtime/plugin_host/plugin_registry.h"
#include "runtime/kernel.h"

namespace kiln {

namespace {

using Dims = std::vector<Dim>;

const std::set<std::string> kSameShape = {
    "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
    "Asinh", "Acosh", "Atanh", "Ceil", "Floor", "Round", "Sign", "Erf", "Relu", "LeakyRelu", "Elu", "Selu", "Celu",
    "Sigmoid", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Tanh", "ThresholdedRelu", "Shrink", "Clip",
    "Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "Dropout", "Identity", "CumSum", "Trilu",
    "BatchNormalization", "InstanceNormalization", "LRN", "MeanVarianceNormalization", "IsNaN", "IsInf", "Not",
    "Gelu", "Mish", "FusedRotary"};
const std::set<std::string> kBroadcast = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal",
                                          "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Where", "Max",
                                          "Min", "Sum", "Mean", "PRelu", "BitShift"};
const std::set<std::string> kBoolOut = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or",
                                        "Xor", "Not", "IsNaN", "IsInf"};
// Ops whose kernel infer() reads no input data: safe to infer with shapes only.
const std::set<std::string> kDataIndependent = {
    "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "MatMul",
    "Gemm", "Flatten", "Transpose", "Concat", "Gather", "GatherElements", "GatherND", "Cast", "CastLike", "ArgMax",
    "ArgMin", "DepthToSpace", "SpaceToDepth", "ScatterElements", "ScatterND", "Einsum", "Size", "Shape",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearMatMul", "ConvInteger", "QLinearConv"};
// Ops whose shape-describing inputs are inputs 1.. (input 0 is data): safe when those are constant.
const std::set<std::string> kShapeInputsAfterFirst = {
    "Reshape", "Expand", "Slice", "Tile", "Unsqueeze", "Squeeze", "Pad", "Split", "ReduceSum", "ReduceMean",
    "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceSumSquare", "Resize", "TopK", "OneHot", "Upsample"};

Dim broadcast_dim(const Dim& a, const Dim& b) {
  if (a == b) return a;
  if (a.is_known() && a.value == 1) return b;
  if (b.is_known() && b.value == 1) return a;
  if (a.is_known() && !b.is_known()) return a;  // a symbol broadcast against a size must equal it
  if (b.is_known() && !a.is_known()) return b;
  return Dim{};
}

Dims broadcast(const Dims& a, const Dims& b) {
  const size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    const Dim da = i + a.size() >= r ? a[i + a.size() - r] : Dim::known(1);
    const Dim db = i + b.size() >= r ? b[i + b.size() - r] : Dim::known(1);
    out[i] = broadcast_dim(da, db);
  }
  return out;
}

Dim add_dims(const Dim& a, const Dim& b, char op) {
  if (a.is_known() && b.is_known()) {
    switch (op) {
      case '+': return Dim::known(a.value + b.value);
      case '-': return a.value >= b.value ? Dim::known(a.value - b.value) : Dim{};
      case '*': return Dim::known(a.value * b.value);
      case '/': return b.value ? Dim::known(a.value / b.value) : Dim{};
    }
  }
  if (a.str() == "?" || b.str() == "?") return Dim{};
  // Sums and differences are kept linear and canonical, so the exporter's Shape arithmetic names a
  // dim the way the shapes do (e.g. Range(past, seq+past) has seq elements).
  if (op == '+' || op == '-') return linear_add(a, b, op == '+' ? 1 : -1);
  if (op == '*' && (a.is_known() || b.is_known())) return a.is_known() ? linear_scale(b, a.value) : linear_scale(a, b.value);
  if (op == '/' && b.is_known() && b.value == 1) return a;
  return Dim::sym("(" + a.str() + op + b.str() + ")");
}

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

// One element of a small integer vector: a number (negative ones too, which Dims cannot hold) or
// a symbolic dim.
struct Elem {
  std::optional<int64_t> num;
  Dim sym;
};

std::optional<Elem> elem_of(const Graph& g, int v, size_t i, int depth = 0) {
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
  if (op == "Shape" && n.inputs[0] >= 0 && g.values[n.inputs[0]].shape) {
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
    if (!st || !en || st->size() != 1 || en->size() != 1 || n.inputs.size() > 4) return;
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

// Resolves a Reshape target (0 copies, the element at infer_at is the -1 to infer) against a
// symbolic input shape. Unknown target elements stay unknown dims: the rank is still known.
std::optional<Dims> reshape_target(const Dims& in, const Dims& target, bool allowzero, int infer_at) {
  Dims out = target;
  bool partial = false;
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int>(i) == infer_at) continue;
    if (out[i].is_known() && out[i].value == 0 && !allowzero) {
      if (i >= in.size()) return std::nullopt;
      out[i] = in[i];
    }
    partial |= !out[i].is_known() && !out[i].is_symbol();
  }
  if (infer_at < 0) return out;
  out[infer_at] = Dim{};
  if (partial) return out;
  // Cancel equal factors of input and output; what is left of the input is the inferred dim.
  std::multiset<std::string> num;
  int64_t known_in = 1, known_out = 1;
  for (const auto& d : in) {
    if (d.is_known()) known_in *= d.value;
    else if (d.symbol.empty()) return out;
    else num.insert(d.symbol);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int>(i) == infer_at) continue;
    if (out[i].is_known()) {
      known_out *= out[i].value;
    } else {
      auto it = num.find(out[i].symbol);
      if (it == num.end()) return out;
      num.erase(it);
    }
  }
  if (known_out == 0 || known_in % known_out) return out;
  const int64_t k = known_in / known_out;
  if (num.empty()) out[infer_at] = Dim::known(k);
  else if (num.size() == 1) out[infer_at] = linear_scale(Dim::sym(*num.begin()), k);  // e.g. [T, 274, D] -> [1, 274*T, D]
  return out;
}

// Slice with unit steps whose bounds may be symbolic (e.g. GPT-2's causal buffer sliced at
// [past : past+seq]). Unsliced axes keep their dims; a sliced axis is end - start when
// 0 <= start <= end <= dim holds for every value of the ranges (no clamping), else unknown.
std::optional<Dims> symbolic_slice(Graph& g, Node& n, const Dims& xs, const DimRanges& ranges) {
  // Each operand's elements, negative numbers included.
  auto elems = [&](size_t k) -> std::optional<std::vector<Elem>> {
    if (k >= n.inputs.size() || n.inputs[k] < 0) return std::nullopt;
    Value& v = g.values[n.inputs[k]];
    seed_sym_value(v);
    const size_t len = v.is_constant() ? static_cast<size_t>(v.constant.numel()) : v.sym_value ? v.sym_value->size() : 0;
    if (!len || len > 8) return std::nullopt;
    std::vector<Elem> r;
    for (size_t i = 0; i < len; ++i) {
      auto e = elem_of(g, n.inputs[k], i);
      if (!e) return std::nullopt;
      r.push_back(*e);
    }
    return r;
  };
  const int64_t r = static_cast<int64_t>(xs.size());
  auto st = elems(1), en = elems(2), ax = elems(3), steps = elems(4);
  if (n.inputs.size() > 3 && n.inputs[3] >= 0 && !ax) return std::nullopt;
  if (n.inputs.size() > 4 && n.inputs[4] >= 0 && !steps) return std::nullopt;
  if (!st || !en || st->size() != en->size() || (ax && ax->size() != st->size()) || (steps && steps->size() != st->size()))
    return std::nullopt;
  auto lo = [&](const Dim& d) {
    auto b = dim_bounds(d, ranges);
    return b ? b->first : -kUnbounded;
  };
  Dims out = xs;
  for (size_t i = 0; i < st->size(); ++i) {
    int64_t a = static_cast<int64_t>(i);
    if (ax) {
      if (!(*ax)[i].num) return std::nullopt;
      a = *(*ax)[i].num;
    }
    if (a < 0) a += r;
    if (a < 0 || a >= r) return std::nullopt;
    out[a] = Dim{};
    if (steps && (*steps)[i].num != int64_t{1}) continue;
    const Dim dim = xs[a];
    auto resolve = [&](const Elem& e) -> Dim {  // offsets from the end; "to the end" (INT64_MAX, or past the dim's max)
      if (!e.num) return e.sym;
      const int64_t v = *e.num;
      if (v < 0) {
        if (dim.is_known()) return Dim::known(std::max<int64_t>(0, v + dim.value));
        const Dim from_end = linear_add(dim, Dim::known(-v), -1);
        return lo(from_end) >= 0 ? from_end : Dim{};
      }
      auto b = dim_bounds(dim, ranges);
      if (v >= (int64_t{1} << 62) || (b && b->second != kUnbounded && v >= b->second))
        return dim.is_known() ? Dim::known(std::min(v, dim.value)) : dim;
      return Dim::known(v);
    };
    const Dim s = resolve((*st)[i]), e = resolve((*en)[i]);
    if (s.is_known() && e.is_known() && dim.is_known()) {
      const int64_t b = std::min(s.value, dim.value), f = std::min(e.value, dim.value);
      out[a] = Dim::known(std::max<int64_t>(0, f - b));
      continue;
    }
    const Dim len = linear_add(e, s, -1);
    if (lo(s) >= 0 && lo(len) >= 0 && lo(linear_add(dim, e, -1)) >= 0) out[a] = len;
  }
  return out;
}

// Einsum without ellipsis (e.g. torch.outer's "i,j->ij" for rotary angles over symbolic positions):
// each output letter takes the dim its inputs give it. Letters whose dims disagree (a 1 against
// another size broadcasts in some runtimes) leave the rule to the kernel.
std::optional<Dims> symbolic_einsum(Graph& g, const Node& n) {
  std::string eq;
  for (char c : n.attrs.at("equation").s)
    if (c != ' ') eq += c;
  if (eq.find('.') != std::string::npos) return std::nullopt;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms(1);
  for (char c : lhs) {
    if (c == ',') terms.emplace_back();
    else terms.back() += c;
  }
  if (terms.size() != n.inputs.size()) return std::nullopt;
  std::map<char, Dim> dim_of;
  std::map<char, int> count;
  for (size_t t = 0; t < terms.size(); ++t) {
    const Value* v = n.inputs[t] >= 0 ? &g.values[n.inputs[t]] : nullptr;
    if (!v || !v->shape || v->shape->size() != terms[t].size()) return std::nullopt;
    for (size_t i = 0; i < terms[t].size(); ++i) {
      const char c = terms[t][i];
      if (!std::isalpha(static_cast<unsigned char>(c))) return std::nullopt;
      const Dim& d = (*v->shape)[i];
      ++count[c];
      auto [it, fresh] = dim_of.try_emplace(c, d);
      if (!fresh && !(it->second == d)) return std::nullopt;
    }
  }
  std::string out_letters;
  if (arrow != std::string::npos) {
    out_letters = eq.substr(arrow + 2);
  } else {
    for (const auto& [c, k] : count)  // implicit output: letters seen once, in alphabetical order
      if (k == 1) out_letters += c;
  }
  Dims out;
  for (char c : out_letters) {
    auto it = dim_of.find(c);
    if (it == dim_of.end()) return std::nullopt;
    out.push_back(it->second);
  }
  return out;
}

bool symbolic_rule(Graph& g, Node& n, const DimRanges& ranges) {
  const std::string& op = n.op_type;
  auto in = [&](size_t i) -> Value* { return i < n.inputs.size() && n.inputs[i] >= 0 ? &g.values[n.inputs[i]] : nullptr; };
  Value* x = in(0);
  if (!x) return false;
  if (kSameShape.count(op)) {
    DType dt = kBoolOut.count(op) ? DType::kBool : x->dtype;
    set_out(g, n, 0, dt, x->shape);
    return true;
  }
  if (kBroadcast.count(op)) {
    std::optional<Dims> s = x->shape;
    for (size_t i = 1; i < n.inputs.size() && s; ++i) {
      if (!in(i) || !in(i)->shape) s.reset();
      else s = broadcast(*s, *in(i)->shape);
    }
    DType dt = kBoolOut.count(op) ? DType::kBool : (op == "Where" && in(1) ? in(1)->dtype : x->dtype);
    set_out(g, n, 0, dt, s);
    return true;
  }
  if (op == "Cast") {
    auto it = n.attrs.find("to");
    set_out(g, n, 0, it != n.attrs.end() ? static_cast<DType>(it->second.i) : DType::kUndefined, x->shape);
    return true;
  }
  if (op == "Shape") {
    int64_t len = x->shape ? static_cast<int64_t>(g.values[n.outputs[0]].sym_value ? g.values[n.outputs[0]].sym_value->size() : x->shape->size()) : -1;
    set_out(g, n, 0, DType::kInt64, len >= 0 ? std::optional<Dims>(Dims{Dim::known(len)}) : std::nullopt);
    return true;
  }
  if (op == "Range" && in(1) && in(2)) {
    // Positions arange(past, past + seq): seq elements. Only a length that cannot be negative is
    // named (a negative difference would be an empty range, not a dim of that name).
    for (size_t i = 0; i < 3; ++i) seed_sym_value(*in(i));
    const auto &s0 = in(0)->sym_value, &s1 = in(1)->sym_value, &s2 = in(2)->sym_value;
    if (!s0 || !s1 || !s2 || s0->size() != 1 || s1->size() != 1 || s2->size() != 1) return false;
    if (!(*s2)[0].is_known() || (*s2)[0].value != 1) return false;
    const Dim len = linear_add((*s1)[0], (*s0)[0], -1);
    auto b = dim_bounds(len, DimRanges{});
    if (!b || b->first < 0) return false;
    set_out(g, n, 0, x->dtype, Dims{len});
    return true;
  }
  if (!x->shape) return false;
  const Dims& xs = *x->shape;
  if (op == "MatMul" && in(1) && in(1)->shape) {
    Dims a = xs, b = *in(1)->shape;
    if (a.size() < 2 || b.size() < 2) return false;
    Dims batch = broadcast(Dims(a.begin(), a.end() - 2), Dims(b.begin(), b.end() - 2));
    batch.push_back(a[a.size() - 2]);
    batch.push_back(b.back());
    set_out(g, n, 0, x->dtype, batch);
    return true;
  }
  if (op == "Transpose") {
    std::vector<int64_t> perm;
    if (n.attrs.count("perm")) perm = n.attrs.at("perm").ints;
    else for (int64_t i = static_cast<int64_t>(xs.size()) - 1; i >= 0; --i) perm.push_back(i);
    if (perm.size() != xs.size()) return false;
    Dims o;
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(xs.size())) return false;
      o.push_back(xs[p]);
    }
    set_out(g, n, 0, x->dtype, o);
    return true;
  }
  if (op == "Reshape" && in(1)) {
    seed_sym_value(*in(1));
    const Value& t = *in(1);
    // The target's length: from its elements, else from its own shape [k] (elements then unknown).
    const bool vec_shape = t.shape && t.shape->size() == 1 && (*t.shape)[0].is_known();
    const size_t len = t.is_constant() ? static_cast<size_t>(t.constant.numel())
                       : t.sym_value   ? t.sym_value->size()
                       : vec_shape     ? static_cast<size_t>((*t.shape)[0].value)
                                       : 0;
    if ((!len && !(vec_shape && (*t.shape)[0].value == 0)) || len > 8) return false;
    Dims target;
    int infer_at = -1;
    for (size_t i = 0; i < len; ++i) {
      auto e = elem_of(g, n.inputs[1], i);
      if (e && e->num && *e->num == -1 && infer_at < 0) {
        infer_at = static_cast<int>(i);
        target.push_back(Dim{});
      } else if (e && e->num && *e->num < 0) {
        return false;
      } else {
        target.push_back(!e ? Dim{} : e->num ? Dim::known(*e->num) : e->sym);
      }
    }
    const bool allowzero = n.attrs.count("allowzero") && n.attrs.at("allowzero").i;
    auto o = reshape_target(xs, target, allowzero, infer_at);
    if (!o) return false;
    set_out(g, n, 0, x->dtype, o);
    return true;
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    std::optional<std::vector<int64_t>> axes = n.attrs.count("axes") ? std::optional(n.attrs.at("axes").ints) : const_ints(g, n.inputs.size() > 1 ? n.inputs[1] : -1);
    if (!axes) {
      if (op == "Squeeze" && n.inputs.size() == 1) {
        Dims o;
        for (const auto& d : xs) {
          if (!d.is_known()) return false;
          if (d.value != 1) o.push_back(d);
        }
        set_out(g, n, 0, x->dtype, o);
        return true;
      }
      return false;
    }
    const int64_t r = static_cast<int64_t>(xs.size()) + (op == "Unsqueeze" ? static_cast<int64_t>(axes->size()) : 0);
    std::set<int64_t> ax;
    for (int64_t a : *axes) ax.insert(a < 0 ? a + r : a);
    Dims o;
    if (op == "Unsqueeze") {
      size_t j = 0;
      for (int64_t i = 0; i < r; ++i) o.push_back(ax.count(i) ? Dim::known(1) : (j < xs.size() ? xs[j++] : Dim{}));
    } else {
      for (int64_t i = 0; i < static_cast<int64_t>(xs.size()); ++i)
        if (!ax.count(i)) o.push_back(xs[i]);
    }
    set_out(g, n, 0, x->dtype, o);
    return true;
  }
  if (op == "Concat" && n.attrs.count("axis")) {
    int64_t axis = n.attrs.at("axis").i;
    if (axis < 0) axis += static_cast<int64_t>(xs.size());
    if (axis < 0 || axis >= static_cast<int64_t>(xs.size())) return false;
    Dims o = xs;
    bool first = true;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      Value* v = in(i);
      if (!v || !v->shape || v->shape->size() != xs.size()) return false;
      if (first) { first = false; continue; }
      // An empty operand (e.g. a zero-length cache) does not change the sum.
      o[axis] = add_dims(o[axis], (*v->shape)[axis], '+');
      for (size_t d = 0; d < xs.size(); ++d)
        if (static_cast<int64_t>(d) != axis) o[d] = broadcast_dim(o[d], (*v->shape)[d]);
    }
    set_out(g, n, 0, x->dtype, o);
    return true;
  }
  if (op == "Split") {
    // Sizes from the split input (or attribute), or equal parts of a known dim; other axes keep
    // their (possibly symbolic) dims, e.g. GPT-2's fused QKV [1, seq, 3D] -> three [1, seq, D].
    int64_t axis = n.attrs.count("axis") ? n.attrs.at("axis").i : 0;
    if (axis < 0) axis += static_cast<int64_t>(xs.size());
    if (axis < 0 || axis >= static_cast<int64_t>(xs.size())) return false;
    std::optional<std::vector<int64_t>> sizes =
        n.attrs.count("split") ? std::optional(n.attrs.at("split").ints) : const_ints(g, n.inputs.size() > 1 ? n.inputs[1] : -1);
    const int64_t parts = static_cast<int64_t>(n.outputs.size());
    if (!sizes && xs[axis].is_known() && parts > 0 && xs[axis].value % parts == 0)
      sizes = std::vector<int64_t>(parts, xs[axis].value / parts);
    if (!sizes || static_cast<int64_t>(sizes->size()) != parts) return false;
    int64_t total = 0;
    for (int64_t sz : *sizes) total += sz;
    if (xs[axis].is_known() && total != xs[axis].value) return false;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      Dims o = xs;
      o[axis] = Dim::known((*sizes)[i]);
      set_out(g, n, i, x->dtype, o);
    }
    return true;
  }
  if (op == "Einsum" && n.attrs.count("equation")) {
    auto o = symbolic_einsum(g, n);
    if (!o) return false;
    set_out(g, n, 0, x->dtype, o);
    return true;
  }
  if (op == "Slice" && n.inputs.size() >= 3) {
    auto o = symbolic_slice(g, n, xs, ranges);
    if (!o) return false;
    set_out(g, n, 0, x->dtype, o);
    return true;
  }
  if (op == "Gather" && in(1) && in(1)->shape) {
    int64_t axis = n.attrs.count("axis") ? n.attrs.at("axis").i : 0;
    if (axis < 0) axis += static_cast<int64_t>(xs.size());
    if (axis < 0 || axis >= static_cast<int64_t>(xs.size())) return false;
    Dims o(xs.begin(), xs.begin() + axis);
    o.insert(o.end(), in(1)->shape->begin(), in(1)->shape->end());
    o.insert(o.end(), xs.begin() + axis + 1, xs.end());
    set_out(g, n, 0, x->dtype, o);
    return true;
  }
  if (op == "Expand" && in(1)) {
    seed_sym_value(*in(1));
    if (!in(1)->sym_value) return false;
    set_out(g, n, 0, x->dtype, broadcast(xs, *in(1)->sym_value));
    return true;
  }
  if (op == "ConstantOfShape") {
    seed_sym_value(*x);
    if (!x->sym_value) return false;
    DType dt = n.attrs.count("value") ? n.attrs.at("value").tensor.dtype() : DType::kFloat32;
    set_out(g, n, 0, dt, *x->sym_value);
    return true;
  }
  if (op == "Gemm" && in(1) && in(1)->shape && xs.size() == 2 && in(1)->shape->size() == 2) {
    const bool ta = n.attrs.count("transA") && n.attrs.at("transA").i, tb = n.attrs.count("transB") && n.attrs.at("transB").i;
    set_out(g, n, 0, x->dtype, Dims{xs[ta ? 1 : 0], (*in(1)->shape)[tb ? 0 : 1]});
    return true;
  }
  return false;
}

// A custom-domain node is a plugin: PluginBuild::infer gives its outputs once every input's dtype
// and shape are concrete. With symbolic dims only the output dtypes are taken, from a probe with
// each symbolic dim at 1 (a plugin that rejects the probe leaves them unknown until run time).
// Unregistered plugins and bad fields are reported when the plan is built.
Status plugin_rule(Graph& g, Node& n) {
  std::vector<TensorDesc> inputs;
  bool concrete = true;
  for (int v : n.inputs) {
    if (v < 0) { inputs.emplace_back(); continue; }
    const Value& val = g.values[v];
    if (val.is_constant()) { inputs.push_back(val.constant.view().desc()); continue; }
    if (!val.shape || !dtype_is_known(val.dtype)) return Status::Ok();
    Shape s;
    for (const Dim& d : *val.shape) s.push_back(d.is_known() ? d.value : 1);
    concrete &= sym_shape_concrete(*val.shape);
    inputs.push_back(TensorDesc{val.dtype, s});
  }
  const PluginEntry* entry = PluginRegistry::global().find(n.domain, n.op_type);
  if (!entry) return Status::Ok();
  auto build = entry->creator->create(n.attrs);
  if (!build.ok() || !build.value()) return Status::Ok();
  std::vector<TensorDesc> descs(n.outputs.size());
  Status st = build.value()->infer(inputs, descs);
  if (!st.ok()) return concrete ? st.with_context(g.describe_node(n) + " (plugin " + entry->id() + ")") : Status::Ok();
  for (size_t o = 0; o < n.outputs.size(); ++o)
    if (dtype_is_known(descs[o].dtype)) set_out(g, n, o, descs[o].dtype, concrete ? std::optional<Dims>(from_shape(descs[o].shape)) : std::nullopt);
  return Status::Ok();
}

// Generic inference by the kernel itself, for concrete input shapes. Returns the kernel's error
// when it rejects the shapes; OK when it inferred them or could not be asked.
Status kernel_rule(Graph& g, Node& n) {
  if (!n.domain.empty()) return plugin_rule(g, n);
  // Broadcasting and unary ops never read input data to infer shapes (CumSum, Trilu and Clip have
  // scalar inputs their kernels may read, so they stay out).
  const bool independent = kDataIndependent.count(n.op_type) > 0 || kBroadcast.count(n.op_type) > 0 ||
                           (kSameShape.count(n.op_type) > 0 && n.op_type != "CumSum" && n.op_type != "Trilu" && n.op_type != "Clip" &&
                            n.op_type != "Dropout");
  const bool after_first = kShapeInputsAfterFirst.count(n.op_type) > 0;
  std::vector<TensorView> views;
  std::vector<Tensor> scratch;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const int v = n.inputs[i];
    if (v < 0) { views.emplace_back(); continue; }
    const Value& val = g.values[v];
    if (val.is_constant()) { views.push_back(val.constant.view()); continue; }
    if (!val.shape || !sym_shape_concrete(*val.shape) || !dtype_is_known(val.dtype)) return Status::Ok();
    if (!independent && !(after_first && i == 0)) return Status::Ok();
    // Small runtime inputs (scalars such as a ratio or a flag) get zero-filled stand-ins so a
    // kernel that peeks at them never reads a null pointer; large ones carry no data.
    const Shape shape = to_shape(*val.shape);
    if (shape.numel() <= 64) {
      scratch.push_back(Tensor::zeros(val.dtype, shape));
      views.push_back(scratch.back().view());
    } else {
      views.push_back(TensorView{nullptr, val.dtype, shape});
    }
  }
  const KernelArgs args = KernelArgs::of(n, g.opset);
  auto kernel = KernelRegistry::builtin().create(args, n.attrs);
  if (!kernel.ok()) return Status::Ok();  // unsupported ops are reported when the plan is built
  std::vector<TensorDesc> descs(n.outputs.size());
  Status st = (*kernel)->infer(views, descs);
  if (!st.ok()) return st.with_context(g.describe_node(n));
  for (size_t o = 0; o < n.outputs.size(); ++o)
    if (dtype_is_known(descs[o].dtype)) set_out(g, n, o, descs[o].dtype, from_shape(descs[o].shape));
  return Status::Ok();
}

}  // namespace

// Ops over [N, C, spatial...] whose output batch is the input batch and whose other output dims
// do not depend on it: with only N symbolic, the kernel infers the rest at N = 1.
const std::set<std::string> kBatchwise = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
                                          "GlobalMaxPool", "LpPool"};

// Returns false when the op is not in that case (the kernel infers it as usual).
bool batch_probe(Graph& g, Node& n) {
  if (!n.domain.empty() || !kBatchwise.count(n.op_type) || n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty())
    return false;
  Value& x = g.values[n.inputs[0]];
  if (!x.shape || x.shape->size() < 3 || !(*x.shape)[0].is_symbol()) return false;
  for (size_t i = 1; i < x.shape->size(); ++i)
    if (!(*x.shape)[i].is_known()) return false;
  const Dim batch = (*x.shape)[0];
  (*x.shape)[0] = Dim::known(1);
  (void)kernel_rule(g, n);
  (*x.shape)[0] = batch;
  for (int o : n.outputs) {
    auto& s = g.values[o].shape;
    if (s && !s->empty() && (*s)[0].is_known() && (*s)[0].value == 1) (*s)[0] = batch;
    else s.reset();
  }
  return true;
}

void infer_node(Graph& g, Node& n, const DimRanges& ranges) {
  infer_sym_value(g, n);
  if (n.domain.empty() && symbolic_rule(g, n, ranges)) {
    // A rule may leave dims unknown that the kernel can fill in once everything is concrete.
    bool all_known = true;
    for (int o : n.outputs)
      if (!g.values[o].shape || !sym_shape_concrete(*g.values[o].shape)) all_known = false;
    if (all_known) return;
  }
  if (batch_probe(g, n)) return;
  (void)kernel_rule(g, n);  // what cannot be inferred stays unknown
}

Status check_node_shapes(Graph& g, Node& n) {
  infer_sym_value(g, n);
  if (n.domain.empty()) symbolic_rule(g, n, DimRanges{});
  return kernel_rule(g, n);
}

}  // namespace kiln
