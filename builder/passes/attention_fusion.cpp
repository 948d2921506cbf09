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
//   sbd:  nn.MultiheadAttention's [S,B,D] -> [S,B·H,Dh] head split (torchvision ViT); emitted as
//         bsd between Transposes, since the plugin has no sequence-first layout.
#include <algorithm>
#include <cmath>
#include <queue>
#include <set>
#include <map>
#include <set>

#include "builder/passes/pass.h"

namespace kiln {

namespace {

using Ints = std::vector<int64_t>;

// A masked-out score is at or below this: exp() of it relative to any visible score is 0 in float.
constexpr double kMaskFillMax = -1e4;

struct Fused {
  std::string layout;
  int64_t heads = 0, head_dim = 0;
  double scale = 1.0;
  std::string mask = "none";
  int mask_value = -1;          // bool/additive mask input
  bool mask_negate = false;     // the graph has the inverse of the mask: insert a Not
  bool kv_cache = false;
  int q = -1, k = -1, v = -1, k_cache = -1, v_cache = -1;
  int out = -1, k_all = -1, v_all = -1;  // values the fused node produces (taken over)
  bool seq_first = false;       // sbd: q/k/v need a Transpose, out a Transpose + Reshape
  std::vector<int> core;        // nodes replaced
};

class Matcher {
 public:
  explicit Matcher(Graph& g) : g_(g) { refresh(); }

  void refresh() {
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

  Node* producer(int v) {
    if (v < 0) return nullptr;
    const int p = g_.values[v].producer;
    if (p < 0 || g_.nodes[p].removed) return nullptr;
    return &g_.nodes[p];
  }
  int index_of(const Node* n) const { return static_cast<int>(n - g_.nodes.data()); }
  Node* producer_op(int v, const char* op) {
    Node* n = producer(v);
    return n && n->domain.empty() && n->op_type == op ? n : nullptr;
  }
  // Exactly one reader, which is not a graph output: the value may disappear with the chain.
  bool single_use(int v) const { return v >= 0 && consumers_[v].size() == 1 && !is_output_[v]; }

  // The value's shape; where shape inference left it unknown (symbolic slices, positions from
  // Range, ...), derived here from the producers' operands, with unknown dims where needed.
  const std::optional<SymShape>& shape(int v) {
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

  static Dim merge_broadcast(const std::vector<Dim>& ds) {
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

  std::optional<SymShape> broadcast_of(const std::vector<int>& vs) {
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

  std::optional<SymShape> derive(int v) {
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

  int rank(int v) { return shape(v) ? static_cast<int>(shape(v)->size()) : -1; }
  Dim dim(int v, int axis) {
    const int r = rank(v);
    if (r < 0) return Dim{};
    if (axis < 0) axis += r;
    return axis >= 0 && axis < r ? (*shape(v))[axis] : Dim{};
  }

  static std::optional<Ints> perm(const Node& n) {
    auto it = n.attrs.find("perm");
    if (it == n.attrs.end()) return std::nullopt;
    return it->second.ints;
  }
  Node* transpose_of(int v, const Ints& p) {
    Node* t = producer_op(v, "Transpose");
    return t && perm(*t) == p ? t : nullptr;
  }

  // (value, axis) when `v` is one dim of a value's shape: Shape(x)[i] via Gather or a one-element
  // Slice, through Squeeze/Unsqueeze/Cast.
  std::optional<std::pair<int, int>> dim_ref(int v, int depth = 0) {
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
  std::optional<double> scalar(int v, int depth = 0) {
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

  // Elements of a small integer operand (a reshape target, slice bounds), possibly symbolic.
  std::optional<std::vector<Dim>> dims_value(int v) {
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

  Graph& g_;
  std::map<int, std::optional<SymShape>> derived_;
  std::vector<std::vector<int>> consumers_;
  std::vector<bool> is_output_;
};

bool same_dim(const Dim& a, const Dim& b) { return (a.is_known() || a.is_symbol()) && a == b; }

// Mirrors shape inference's naming of a symbolic difference, so a slice start computed by the
// exporter's Shape arithmetic compares equal to key_len - query_len.
Dim sub_dim(const Dim& a, const Dim& b) {
  if (a.is_known() && b.is_known()) return a.value >= b.value ? Dim::known(a.value - b.value) : Dim{};
  if (a.str() == "?" || b.str() == "?") return Dim{};
  if (b.is_known() && b.value == 0) return a;
  return Dim::sym("(" + a.str() + "-" + b.str() + ")");
}

struct Fail {
  std::string reason;
};

class SiteMatcher {
 public:
  SiteMatcher(Matcher& m, Node& softmax) : m_(m), g_(m.g_), sm_(softmax) {}

  // Returns an empty string on success (result in `f`), else why the site does not match.
  std::string run(Fused& f) {
    try {
      match(f);
      return {};
    } catch (const Fail& e) {
      return e.reason;
    }
  }

 private:
  [[noreturn]] static void fail(const std::string& r) { throw Fail{r}; }
  std::string vname(int v) const { return "'" + g_.values[v].name + "'"; }
  // Unknown dtypes pass: shape inference leaves some unset, and the plugin checks at build time.
  bool is_f32(int v) const { return !dtype_is_known(g_.values[v].dtype) || g_.values[v].dtype == DType::kFloat32; }
  void need_single(int v, const char* what) {
    if (!m_.single_use(v)) fail(std::string(what) + " " + vname(v) + " has other readers");
  }
  void take(Fused& f, Node* n) { f.core.push_back(m_.index_of(n)); }

  void match(Fused& f) {
    const int x = sm_.inputs.empty() ? -1 : sm_.inputs[0];
    if (x < 0 || sm_.outputs.size() != 1) fail("malformed Softmax");
    const int64_t axis = sm_.attrs.count("axis") ? sm_.attrs.at("axis").i : (g_.opset >= 13 ? -1 : 1);
    if (axis != -1 && !(m_.rank(x) > 0 && axis == m_.rank(x) - 1))
      fail("Softmax axis " + std::to_string(axis) + " is not the last axis");
    if (!is_f32(x)) fail("scores are not float32");
    take(f, &sm_);

    // Softmax -> MatMul with V.
    const int p = sm_.outputs[0];
    Node* pvp = nullptr;
    for (int c : m_.consumers_[p]) {
      Node& n = g_.nodes[c];
      if (n.op_type == "MatMul" && n.domain.empty() && n.inputs.size() == 2 && n.inputs[0] == p) pvp = &n;
    }
    if (!pvp) fail("Softmax output is not the left operand of a MatMul (no ·V)");
    if (!m_.single_use(p)) fail("Softmax output is also read by other nodes (or is a graph output)");
    Node& pv = *pvp;
    take(f, &pv);

    // Softmax input back to QKᵀ: mask (Where/Add) after scale (Div/Mul), each applied once.
    int s = x;
    bool seen_mask = false, seen_scale = false;  // walking up: what is applied later is seen first
    Node* qk = nullptr;
    for (int step = 0; step < 4 && !qk; ++step) {
      need_single(s, "score value");
      Node* n = m_.producer(s);
      if (!n || !n->domain.empty()) fail("scores " + vname(s) + " are not computed by an ONNX op");
      const std::string& op = n->op_type;
      if (op == "MatMul") {
        qk = n;
      } else if (op == "Where" && n->inputs.size() == 3) {
        if (seen_mask) fail("two masks on the scores");
        if (seen_scale) fail("the scores are scaled after the mask is applied");
        auto a = m_.scalar(n->inputs[1]), b = m_.scalar(n->inputs[2]);
        int cond = n->inputs[0];
        if (a && *a <= kMaskFillMax && !b) {
          f.mask_negate = true;
          s = n->inputs[2];
        } else if (b && *b <= kMaskFillMax && !a) {
          s = n->inputs[1];
        } else {
          fail("Where on the scores does not fill with -inf or a very negative constant");
        }
        if (dtype_is_known(g_.values[cond].dtype) && g_.values[cond].dtype != DType::kBool) fail("Where condition is not bool");
        f.mask = "bool";
        f.mask_value = cond;
        seen_mask = true;
        take(f, n);
      } else if (op == "Add" && n->inputs.size() == 2) {
        if (seen_mask) fail("two masks on the scores");
        if (seen_scale) fail("the scores are scaled after the mask is applied");
        const int a = n->inputs[0], b = n->inputs[1];
        const bool a_scores = leads_to_matmul(a), b_scores = leads_to_matmul(b);
        if (a_scores == b_scores) fail("cannot tell the scores from the mask in " + g_.describe_node(*n));
        const int mask = a_scores ? b : a;
        if (m_.scalar(mask)) fail("Add of a scalar to the scores is not a mask");
        if (!is_f32(mask)) fail("additive mask is not float32");
        f.mask = "additive";
        f.mask_value = mask;
        s = a_scores ? a : b;
        seen_mask = true;
        take(f, n);
      } else if (op == "Div" || op == "Mul") {
        seen_scale = true;
        s = peel_scale_node(f, n, s);
      } else {
        fail(g_.describe_node(*n) + " between the scores MatMul and the Softmax is not a scale or a mask");
      }
    }
    if (!qk) fail("no QK^T MatMul within the scale/mask chain");
    if (qk->inputs.size() != 2) fail("malformed MatMul");
    take(f, qk);
    int a = peel_scales(f, qk->inputs[0]);
    int b = peel_scales(f, qk->inputs[1]);
    const int vh = pv.inputs[1];

    // q split into heads by Reshape+Transpose suggests bsd (or sequence-first); GPT-2 splits q
    // that way too but concatenates K/V caches per head, so [B,H,S,Dh] is tried next.
    const Fused before = f;
    std::string first;
    auto attempt = [&](auto&& fn) {
      try {
        fn();
        return true;
      } catch (const Fail& e) {
        first = e.reason;
        f = before;
        return false;
      }
    };
    bool done = false;
    if (Node* tq = m_.transpose_of(a, {0, 2, 1, 3}); tq && m_.producer_op(tq->inputs[0], "Reshape"))
      done = attempt([&] { match_bsd(f, a, b, vh, pv); });
    else if (Node* tq3 = m_.transpose_of(a, {1, 0, 2}); tq3 && m_.producer_op(tq3->inputs[0], "Reshape"))
      done = attempt([&] { match_sbd(f, a, b, vh, pv); });
    if (!done) {
      try {
        match_bhsd(f, a, b, vh, pv);
      } catch (const Fail& e) {
        fail(first.empty() ? e.reason : first + " (as [B,H,S,Dh]: " + e.reason + ")");
      }
    }
    if (f.mask == "bool") resolve_bool_mask(f);
    check_mask_shape(f, x);
    if (!std::isfinite(f.scale) || f.scale == 0) fail("scale is not a finite non-zero number");
    check_no_cycle(f);
  }

  // Whether `v` is (a scaled) MatMul output: tells the scores operand of an Add from the mask.
  bool leads_to_matmul(int v) {
    for (int d = 0; d < 3; ++d) {
      Node* n = m_.producer(v);
      if (!n || !n->domain.empty()) return false;
      if (n->op_type == "MatMul") return true;
      if ((n->op_type != "Div" && n->op_type != "Mul") || n->inputs.size() != 2) return false;
      v = m_.scalar(n->inputs[1]) ? n->inputs[0] : n->inputs[1];
    }
    return false;
  }

  // Div(s, c) or Mul(s, c)/Mul(c, s) with a scalar c: folds c into the scale, returns s.
  int peel_scale_node(Fused& f, Node* n, int out) {
    if (n->inputs.size() != 2) fail("malformed " + g_.describe_node(*n));
    auto c1 = m_.scalar(n->inputs[1]);
    if (n->op_type == "Div") {
      if (!c1 || *c1 == 0) fail(g_.describe_node(*n) + " does not divide by a constant scalar");
      f.scale /= *c1;
      take(f, n);
      return n->inputs[0];
    }
    auto c0 = m_.scalar(n->inputs[0]);
    if (c1 && !c0) {
      f.scale *= *c1;
      take(f, n);
      return n->inputs[0];
    }
    if (c0 && !c1) {
      f.scale *= *c0;
      take(f, n);
      return n->inputs[1];
    }
    fail(g_.describe_node(*n) + " does not multiply by a constant scalar");
  }

  // q or k scaled before the MatMul (nn.MultiheadAttention divides q).
  int peel_scales(Fused& f, int v) {
    for (int d = 0; d < 2; ++d) {
      Node* n = m_.producer(v);
      if (!n || !n->domain.empty() || (n->op_type != "Div" && n->op_type != "Mul")) return v;
      const bool scalar_operand = m_.scalar(n->inputs[1]) || (n->op_type == "Mul" && m_.scalar(n->inputs[0]));
      if (!scalar_operand) return v;
      need_single(v, "scaled operand");
      v = peel_scale_node(f, n, v);
    }
    return v;
  }

  // Whether reshape target element `t` provably equals input dim `in` (0 copies it).
  static bool target_matches(const Dim& t, const Dim& in, bool allowzero) {
    if (t.is_known() && t.value == 0 && !allowzero) return true;
    if (t.is_known() && t.value < 0) return false;
    return same_dim(t, in);
  }

  // Reshape [B,S,D] -> [B,S,H,Dh] (rank 4) or [S,B,D] -> [S,B·H,Dh] (rank 3); returns the source
  // value and sets heads/head_dim. One leading dim must provably be kept; the other follows from
  // the element count.
  int head_split(Fused& f, Node* r, int rank, const char* what) {
    if (!r) fail(std::string(what) + ": no head-split Reshape");
    const int src = r->inputs[0];
    need_single(r->outputs[0], "head-split value");
    const bool allowzero = r->attrs.count("allowzero") && r->attrs.at("allowzero").i;
    auto t = m_.dims_value(r->inputs.size() > 1 ? r->inputs[1] : -1);
    if (m_.rank(src) != 3) fail(std::string(what) + " " + vname(src) + " is not rank 3");
    const Dim d = m_.dim(src, 2);
    if (!d.is_known()) fail(std::string(what) + " " + vname(src) + " has an unknown model dim");
    if (!t || static_cast<int>(t->size()) != rank) fail(std::string(what) + ": head-split target is not known");
    int64_t heads = 0, head_dim = 0;
    if (rank == 4) {
      if (!(*t)[2].is_known() || !(*t)[3].is_known() || (*t)[2].value <= 0 || (*t)[3].value <= 0 ||
          (*t)[2].value * (*t)[3].value != d.value)
        fail(std::string(what) + ": head-split target " + sym_shape_str(*t) + " does not split " + d.str() + " into H x Dh");
      if (!target_matches((*t)[0], m_.dim(src, 0), allowzero) && !target_matches((*t)[1], m_.dim(src, 1), allowzero))
        fail(std::string(what) + ": head-split target " + sym_shape_str(*t) + " does not keep batch or sequence");
      heads = (*t)[2].value;
      head_dim = (*t)[3].value;
    } else {
      if (!(*t)[2].is_known() || (*t)[2].value <= 0 || d.value % (*t)[2].value)
        fail(std::string(what) + ": head-split target " + sym_shape_str(*t) + " does not split " + d.str() + " into heads");
      if (!target_matches((*t)[0], m_.dim(src, 0), allowzero))
        fail(std::string(what) + ": head-split target " + sym_shape_str(*t) + " does not keep the sequence dim");
      head_dim = (*t)[2].value;
      heads = d.value / head_dim;
    }
    if (f.heads && (f.heads != heads || f.head_dim != head_dim))
      fail(std::string(what) + ": head split into " + std::to_string(heads) + " x " + std::to_string(head_dim) +
           " differs from q's " + std::to_string(f.heads) + " x " + std::to_string(f.head_dim));
    f.heads = heads;
    f.head_dim = head_dim;
    take(f, r);
    return src;
  }

  // K or V [.., S, ..] = Concat(cache, new) along the sequence axis.
  Node* cache_concat(int v, int seq_axis) {
    Node* c = m_.producer_op(v, "Concat");
    if (!c || c->inputs.size() != 2 || !c->attrs.count("axis")) return nullptr;
    int64_t axis = c->attrs.at("axis").i;
    if (axis < 0) axis += m_.rank(v);
    return axis == seq_axis ? c : nullptr;
  }

  void set_kv(Fused& f, int k_src, int v_src, int seq_axis) {
    Node* ck = cache_concat(k_src, seq_axis);
    Node* cv = cache_concat(v_src, seq_axis);
    if (ck && cv && ck != cv) {
      f.kv_cache = true;
      f.k_cache = ck->inputs[0];
      f.k = ck->inputs[1];
      f.v_cache = cv->inputs[0];
      f.v = cv->inputs[1];
      f.k_all = k_src;
      f.v_all = v_src;
      take(f, ck);
      take(f, cv);
    } else {
      f.k = k_src;
      f.v = v_src;
    }
  }

  void match_bsd(Fused& f, int a, int b, int vh, Node& pv) {
    f.layout = "bsd";
    Node* tq = m_.transpose_of(a, {0, 2, 1, 3});
    need_single(a, "q heads");
    take(f, tq);
    f.q = head_split(f, m_.producer_op(tq->inputs[0], "Reshape"), 4, "q");

    need_single(b, "k heads");
    Node* rk = nullptr;
    if (Node* tk = m_.transpose_of(b, {0, 2, 3, 1})) {
      take(f, tk);
      rk = m_.producer_op(tk->inputs[0], "Reshape");
    } else if (Node* tk2 = m_.transpose_of(b, {0, 1, 3, 2})) {
      Node* tk1 = m_.transpose_of(tk2->inputs[0], {0, 2, 1, 3});
      if (!tk1) fail("k is not split into heads like q");
      need_single(tk2->inputs[0], "k heads");
      take(f, tk2);
      take(f, tk1);
      rk = m_.producer_op(tk1->inputs[0], "Reshape");
    } else {
      fail("k is not transposed to [B,H,Dh,S] for QK^T");
    }
    const int k_src = head_split(f, rk, 4, "k");

    Node* tv = m_.transpose_of(vh, {0, 2, 1, 3});
    if (!tv) fail("v is not split into heads like q");
    need_single(vh, "v heads");
    take(f, tv);
    const int v_src = head_split(f, m_.producer_op(tv->inputs[0], "Reshape"), 4, "v");

    // ·V -> Transpose back to [B,S,H,Dh] -> Reshape [B,S,D].
    const int o = pv.outputs[0];
    need_single(o, "attention output");
    Node* to = &g_.nodes[m_.consumers_[o][0]];
    if (to->op_type != "Transpose" || Matcher::perm(*to) != Ints{0, 2, 1, 3}) fail("heads are not merged back by Transpose");
    need_single(to->outputs[0], "merged heads");
    Node* rm = &g_.nodes[m_.consumers_[to->outputs[0]][0]];
    if (rm->op_type != "Reshape" || rm->inputs.size() < 2) fail("heads are not merged back by Reshape");
    auto t = m_.dims_value(rm->inputs[1]);
    const bool allowzero = rm->attrs.count("allowzero") && rm->attrs.at("allowzero").i;
    const int64_t d = f.heads * f.head_dim;
    if (!t || t->size() != 3 || !(*t)[2].is_known() || (*t)[2].value != d ||
        !(target_matches((*t)[0], m_.dim(f.q, 0), allowzero) || target_matches((*t)[1], m_.dim(f.q, 1), allowzero)))
      fail("head-merge Reshape target is not [B, S, " + std::to_string(d) + "]");
    take(f, to);
    take(f, rm);
    f.out = rm->outputs[0];
    set_kv(f, k_src, v_src, 1);
    for (int v : {f.q, f.k, f.v})
      if (!is_f32(v)) fail("q/k/v are not float32");
  }

  void match_sbd(Fused& f, int a, int b, int vh, Node& pv) {
    f.layout = "bsd";
    f.seq_first = true;
    Node* tq = m_.transpose_of(a, {1, 0, 2});
    need_single(a, "q heads");
    take(f, tq);
    f.q = head_split(f, m_.producer_op(tq->inputs[0], "Reshape"), 3, "q");

    need_single(b, "k heads");
    Node* rk = nullptr;
    if (Node* tk = m_.transpose_of(b, {1, 2, 0})) {
      take(f, tk);
      rk = m_.producer_op(tk->inputs[0], "Reshape");
    } else if (Node* tk2 = m_.transpose_of(b, {0, 2, 1})) {
      Node* tk1 = m_.transpose_of(tk2->inputs[0], {1, 0, 2});
      if (!tk1) fail("k is not split into heads like q");
      need_single(tk2->inputs[0], "k heads");
      take(f, tk2);
      take(f, tk1);
      rk = m_.producer_op(tk1->inputs[0], "Reshape");
    } else {
      fail("k is not transposed to [B*H,Dh,S] for QK^T");
    }
    f.k = head_split(f, rk, 3, "k");
    Node* tv = m_.transpose_of(vh, {1, 0, 2});
    if (!tv) fail("v is not split into heads like q");
    need_single(vh, "v heads");
    take(f, tv);
    f.v = head_split(f, m_.producer_op(tv->inputs[0], "Reshape"), 3, "v");
    // Batch is dim 1 of [S,B,D]: q, k and v must agree on it.
    if (!same_dim(m_.dim(f.q, 1), m_.dim(f.k, 1)) || !same_dim(m_.dim(f.q, 1), m_.dim(f.v, 1)))
      fail("q, k and v batch dims are not provably equal");

    const int o = pv.outputs[0];
    need_single(o, "attention output");
    Node* to = &g_.nodes[m_.consumers_[o][0]];
    if (to->op_type != "Transpose" || Matcher::perm(*to) != Ints{1, 0, 2}) fail("heads are not merged back by Transpose");
    take(f, to);
    f.out = to->outputs[0];
    for (int v : {f.q, f.k, f.v})
      if (!is_f32(v)) fail("q/k/v are not float32");
  }

  void match_bhsd(Fused& f, int a, int b, int vh, Node& pv) {
    f.layout = "bhsd";
    if (m_.rank(a) != 4) fail("q is neither split into heads by Reshape+Transpose nor rank 4 [B,H,S,Dh]");
    const Dim h = m_.dim(a, 1), dh = m_.dim(a, 3);
    if (!h.is_known() || !dh.is_known()) fail("q [B,H,S,Dh] has unknown H or Dh");
    f.heads = h.value;
    f.head_dim = dh.value;
    f.q = a;
    Node* tk = m_.transpose_of(b, {0, 1, 3, 2});
    if (!tk) fail("k is not transposed [B,H,S,Dh] -> [B,H,Dh,S] for QK^T");
    need_single(b, "transposed k");
    take(f, tk);
    const int k4 = tk->inputs[0];
    for (int v : {k4, vh}) {
      if (m_.rank(v) != 4 || !same_dim(m_.dim(v, 1), h) || !same_dim(m_.dim(v, 3), dh))
        fail(vname(v) + " is not [B, " + h.str() + ", S, " + dh.str() + "] like q");
      if (!same_dim(m_.dim(v, 0), m_.dim(a, 0))) fail("q, k and v batch dims are not provably equal");
    }
    f.out = pv.outputs[0];
    set_kv(f, k4, vh, 2);
    for (int v : {f.q, f.k, f.v})
      if (!is_f32(v)) fail("q/k/v are not float32");
    if (f.kv_cache)
      for (int v : {f.k, f.v, f.k_cache, f.v_cache})
        if (m_.rank(v) != 4) fail("K/V cache operands are not rank 4");
  }

  // Sq and Sk_total of the scores, in the graph's own dims.
  std::pair<Dim, Dim> score_dims() {
    if (f_layout_bhsd_) return {m_.dim(q4_, 2), m_.dim(k_total_, 2)};
    return {m_.dim(q3_, seq_first_ ? 0 : 1), m_.dim(k_total_, seq_first_ ? 0 : 1)};
  }

  // Peels Not / Cast(bool) off the Where condition; prefers a value that means "may attend" so the
  // inverted chain dies. Then checks whether it is provably the standard causal mask.
  void resolve_bool_mask(Fused& f) {
    int v = f.mask_value;
    bool neg = f.mask_negate;
    int best = neg ? -1 : v;
    for (int d = 0; d < 4; ++d) {
      Node* n = m_.producer(v);
      if (!n || !n->domain.empty() || n->inputs.empty()) break;
      if (n->op_type == "Not") {
        neg = !neg;
      } else if (n->op_type == "Cast" && n->attrs.count("to") && n->attrs.at("to").i == static_cast<int64_t>(DType::kBool) &&
                 g_.values[n->inputs[0]].dtype == DType::kBool) {
      } else {
        break;
      }
      v = n->inputs[0];
      if (!neg) best = v;
    }
    if (best >= 0) {
      f.mask_value = best;
      f.mask_negate = false;
    } else {
      f.mask_value = v;
      f.mask_negate = true;
      return;  // an inverted mask is never the causal one
    }
    f_layout_bhsd_ = f.layout == "bhsd";
    seq_first_ = f.seq_first;
    q4_ = q3_ = f.q;
    k_total_ = f.kv_cache ? f.k_all : f.k;
    v_total_ = f.kv_cache ? f.v_all : f.v;
    if (is_causal(f.mask_value)) {
      f.mask = "causal";
      f.mask_value = -1;
    }
  }

  bool is_tril_ones(const Value& c) {
    const Shape& s = c.constant.shape();
    if (s.rank() < 2) return false;
    const int64_t rows = s[s.rank() - 2], cols = s[s.rank() - 1];
    if (c.constant.numel() != rows * cols) return false;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        if ((read_double(c.constant.view(), i * cols + j) != 0) != (j <= i)) return false;
    return true;
  }

  bool is_causal(int m) {
    auto [sq, sk] = score_dims();
    const Value& mv = g_.values[m];
    if (mv.is_constant()) {
      // Folded: mask[i][j] == (j <= Sk - Sq + i) with leading dims 1.
      const Shape& s = mv.constant.shape();
      if (s.rank() < 2 || !sq.is_known() || !sk.is_known()) return false;
      for (int i = 0; i < s.rank() - 2; ++i)
        if (s[i] != 1) return false;
      const int64_t q = s[s.rank() - 2], k = s[s.rank() - 1];
      if (q != sq.value || k != sk.value) return false;
      for (int64_t i = 0; i < q; ++i)
        for (int64_t j = 0; j < k; ++j)
          if ((read_int(mv.constant.view(), i * k + j) != 0) != (j <= k - q + i)) return false;
      return true;
    }
    // bias[..., Sk-Sq:Sk, :Sk] of a lower-triangular ones buffer, as one or two Slices.
    std::map<int64_t, std::pair<int, int>> bounds;  // axis -> (start, end) values
    int v = m;
    for (int d = 0; d < 2 && !g_.values[v].is_constant(); ++d) {
      Node* n = m_.producer_op(v, "Slice");
      if (!n || n->inputs.size() < 4) return false;
      auto ax = m_.dims_value(n->inputs[3]);
      if (!ax || ax->size() != 1) return false;  // one axis per Slice, as the exporter writes it
      if (n->inputs.size() > 4 && n->inputs[4] >= 0) {
        auto steps = m_.dims_value(n->inputs[4]);
        if (!steps) return false;
        for (const auto& s : *steps)
          if (!s.is_known() || s.value != 1) return false;
      }
      const int r = m_.rank(n->inputs[0]);
      for (size_t i = 0; i < ax->size(); ++i) {
        if (!(*ax)[i].is_known() || r < 0) return false;
        int64_t a = (*ax)[i].value < 0 ? (*ax)[i].value + r : (*ax)[i].value;
        if (bounds.count(a)) return false;
        bounds[a] = {n->inputs[1], n->inputs[2]};
      }
      v = n->inputs[0];
    }
    const Value& bias = g_.values[v];
    if (!bias.is_constant() || bias.constant.shape().rank() != 4 || bounds.size() != 2) return false;
    const Shape& bs = bias.constant.shape();
    if (bs[0] != 1 || bs[1] != 1 || !bounds.count(2) || !bounds.count(3) || !is_tril_ones(bias)) return false;
    auto [rs, re] = bounds[2];
    auto [cs, ce] = bounds[3];
    auto zero = m_.dims_value(cs);
    return is_len(rs, sub_dim(sk, sq), -1) && is_len(re, sk, 1) && zero && zero->size() == 1 &&
           (*zero)[0].is_known() && (*zero)[0].value == 0 && is_len(ce, sk, 1);
  }

  // Whether one-element `v` is `expect` (by value, or symbolically as the exporter computes it:
  // which = 1 key length, 0 query length, -1 key length - query length).
  bool is_len(int v, const Dim& expect, int which) {
    if (auto d = m_.dims_value(v); d && d->size() == 1 && same_dim((*d)[0], expect)) return true;
    if (which < 0) {
      Node* n = m_.producer(v);
      while (n && n->domain.empty() && (n->op_type == "Unsqueeze" || n->op_type == "Squeeze" || n->op_type == "Cast"))
        n = m_.producer(n->inputs[0]);
      return n && n->domain.empty() && n->op_type == "Sub" && n->inputs.size() == 2 && is_len(n->inputs[0], Dim{}, 1) &&
             is_len(n->inputs[1], Dim{}, 0);
    }
    auto ref = m_.dim_ref(v);
    if (!ref) return false;
    const int seq_axis = f_layout_bhsd_ ? 2 : (seq_first_ ? 0 : 1);
    if (ref->second != seq_axis) return false;
    if (which == 1) return ref->first == k_total_ || ref->first == v_total_;
    return ref->first == q4_;
  }

  // The mask broadcasts into the scores without enlarging them.
  void check_mask_shape(Fused& f, int scores) {
    if (f.mask_value < 0) return;
    const int mr = m_.rank(f.mask_value), sr = m_.rank(scores);
    if (mr < 0 || sr < 0) fail("mask rank is unknown");
    const int max_rank = f.seq_first ? 2 : 4;  // [B·H,Sq,Sk] scores: a batch-wise mask would not map to [B,H,...]
    if (mr > sr || mr > max_rank) fail("mask " + vname(f.mask_value) + " has more dims than the scores");
    for (int i = 0; i < mr; ++i) {
      const Dim md = m_.dim(f.mask_value, i), sd = m_.dim(scores, sr - mr + i);
      const bool ok = (md.is_known() && md.value == 1) || md == sd || !(sd.is_known() && sd.value == 1);
      if (!ok || (md.is_known() && sd.is_known() && md.value != 1 && md.value != sd.value))
        fail("mask " + vname(f.mask_value) + " " + sym_shape_str(*m_.shape(f.mask_value)) + " would broadcast the scores " +
             sym_shape_str(*m_.shape(scores)));
    }
  }

  // The fused node's inputs must not be computed from what it replaces (e.g. a bool mask sliced
  // with Shape(present_key) would read the node's own output).
  void check_no_cycle(const Fused& f) {
    std::set<int> core(f.core.begin(), f.core.end());
    std::vector<int> stack;
    for (int v : {f.q, f.k, f.v, f.mask_value, f.k_cache, f.v_cache})
      if (v >= 0) stack.push_back(v);
    std::set<int> seen;
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      if (!seen.insert(v).second) continue;
      Node* n = m_.producer(v);
      if (!n) continue;
      if (core.count(m_.index_of(n))) fail("an input of the attention is computed from the attention itself (" + vname(v) + ")");
      for (int i : n->inputs)
        if (i >= 0) stack.push_back(i);
    }
  }

  Matcher& m_;
  Graph& g_;
  Node& sm_;
  bool f_layout_bhsd_ = false, seq_first_ = false;
  int q4_ = -1, q3_ = -1, k_total_ = -1, v_total_ = -1;
};

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

std::optional<SymShape> swap01(const std::optional<SymShape>& s) {
  if (!s || s->size() != 3) return std::nullopt;
  return SymShape{(*s)[1], (*s)[0], (*s)[2]};
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
  std::sort(f.core.begin(), f.core.end());
  f.core.erase(std::unique(f.core.begin(), f.core.end()), f.core.end());
  for (int i : f.core) {
    node.replaced_nodes.push_back(g.nodes[i].name);
    g.nodes[i].removed = true;
  }
  auto to_bsd = [&](int v) {
    // [S,B,D] -> [B,S,D] for the sequence-first (nn.MultiheadAttention) layout.
    const int t = new_value(g, g.values[v].name + "/bsd", DType::kFloat32, swap01(g.values[v].shape));
    Node tn;
    tn.name = name + "/to_bsd_" + g.values[v].name;
    tn.op_type = "Transpose";
    tn.attrs["perm"] = Attribute::Ints({1, 0, 2});
    tn.inputs = {v};
    tn.outputs = {t};
    add_node(g, std::move(tn));
    return t;
  };
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
  if (f.seq_first) {
    node.inputs = {to_bsd(f.q), to_bsd(f.k), to_bsd(f.v)};
  } else {
    node.inputs = {f.q, f.k, f.v};
  }
  if (mask >= 0 || f.kv_cache) node.inputs.push_back(mask);
  if (f.kv_cache) {
    node.inputs.push_back(f.k_cache);
    node.inputs.push_back(f.v_cache);
  }
  int out = f.out;
  if (f.seq_first) {
    // [B,S,D] -> [S,B,D] -> [S,B·H,Dh]: exactly the value the merged-heads Transpose produced.
    std::optional<SymShape> bsd_shape = swap01(g.values[f.q].shape);
    out = new_value(g, name + "/out_bsd", DType::kFloat32, bsd_shape);
    const int sbd = new_value(g, name + "/out_sbd", DType::kFloat32, g.values[f.q].shape);
    Node tn;
    tn.name = name + "/to_sbd";
    tn.op_type = "Transpose";
    tn.attrs["perm"] = Attribute::Ints({1, 0, 2});
    tn.inputs = {out};
    tn.outputs = {sbd};
    const int target = g.add_constant(name + "/heads_shape", Tensor::from_vector<int64_t>({0, -1, f.head_dim}, Shape{3}));
    Node rn;
    rn.name = name + "/split_heads";
    rn.op_type = "Reshape";
    rn.inputs = {sbd, target};
    rn.outputs = {f.out};
    node.outputs = {out};
    add_node(g, std::move(node));
    add_node(g, std::move(tn));
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
  Matcher m(g);
  bool changed = false;
  const size_t original = g.nodes.size();
  for (size_t i = 0; i < original; ++i) {
    if (g.nodes[i].removed || g.nodes[i].op_type != "Softmax" || !g.nodes[i].domain.empty()) continue;
    if (!attention_like(m, g.nodes[i])) continue;
    const std::string softmax = g.nodes[i].name;
    Fused f;
    std::string reason = SiteMatcher(m, g.nodes[i]).run(f);
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
                      f.layout + ", mask " + f.mask + ", kv_cache " + std::to_string(f.kv_cache ? 1 : 0) + ", " +
                      std::to_string(f.heads) + " heads)");
  }
  if (changed) KILN_RETURN_IF_ERROR(topo_sort(g));
  if (ctx.attention_required)
    for (const auto& s : ctx.attention_sites)
      if (!s.reason.empty())
        return InvalidArgument("attention is required but Softmax node '" + s.softmax + "' was not fused: " + s.reason);
  return Status::Ok();
}

}  // namespace kiln
