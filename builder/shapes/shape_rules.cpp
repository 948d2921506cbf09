// Per-op dtype and shape inference over symbolic dims. Ops with a rule here work with symbols;
// every other op is inferred by its kernel once its input shapes are concrete (and any inputs that
// describe shapes are constant). Shape arithmetic on small integer tensors is sym_values.cpp;
// plugins are plugin_shapes.cpp.
#include <cctype>
#include <functional>
#include <map>
#include <set>

#include "builder/passes/pass.h"
#include "builder/shapes/shape_rules_common.h"
#include "runtime/kernel.h"

namespace kiln {
namespace shape_rules {

namespace {

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
  // The inferred dim is the input's element count over the other output dims' product, when the
  // quotient is exact (e.g. [T, 274, D] -> [1, -1, D] gives 274*T; [B, S, D] -> [-1, D] gives B*S).
  std::vector<Dim> den;
  for (size_t i = 0; i < out.size(); ++i)
    if (static_cast<int>(i) != infer_at) den.push_back(out[i]);
  if (auto q = dim_product_ratio(Dim::known(1), in, den)) out[infer_at] = *q;
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

}  // namespace

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
      o[axis] = dim_add(o[axis], (*v->shape)[axis]);
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
    for (int64_t sz : *sizes)  // the model's own numbers: negative or overflowing sizes infer nothing
      if (sz < 0 || __builtin_add_overflow(total, sz, &total)) return false;
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


// Generic inference by the kernel itself, for concrete input shapes. Returns the kernel's error
// when it rejects the shapes; OK when it inferred them or could not be asked.
Status kernel_rule(Graph& g, Node& n) {
  if (!is_kernel_domain(n.domain)) return plugin_rule(g, n);
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
    int64_t count = 0;
    if (shape.checked_numel(&count) && count <= 64) {
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

// kiln's FusedElementwise (builder/passes/elementwise_fusion.cpp): float32, of its inputs'
// broadcast shape (symbolic dims included).
bool fused_elementwise_rule(Graph& g, Node& n) {
  if (n.domain != kKilnDomain || n.op_type != "FusedElementwise" || n.outputs.size() != 1) return false;
  std::optional<Dims> shape = Dims{};
  for (int v : n.inputs) {
    if (v < 0 || !g.values[v].shape) {
      shape.reset();
      break;
    }
    shape = broadcast(*shape, *g.values[v].shape);
  }
  set_out(g, n, 0, DType::kFloat32, shape);
  return true;
}

}  // namespace shape_rules

using namespace shape_rules;


// Ops over [N, C, spatial...] whose output batch is the input batch and whose other output dims
// do not depend on it: with only N symbolic, the kernel infers the rest at N = 1.
const std::set<std::string> kBatchwise = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
                                          "GlobalMaxPool", "LpPool"};

// Returns false when the op is not in that case (the kernel infers it as usual).
bool batch_probe(Graph& g, Node& n) {
  if (!is_kernel_domain(n.domain) || !kBatchwise.count(n.op_type) || n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty())
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
  if (fused_elementwise_rule(g, n)) return;
  if (is_kernel_domain(n.domain) && symbolic_rule(g, n, ranges)) {
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
  if (is_kernel_domain(n.domain)) symbolic_rule(g, n, DimRanges{});
  return kernel_rule(g, n);
}

}  // namespace kiln