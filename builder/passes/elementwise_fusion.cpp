// elementwise_fusion: every tree of elementwise ops (unary math and activations, broadcasting
// binary arithmetic and comparisons, Where, Cast between float32 and bool, Pow, Clip) whose inner
// values nothing else reads becomes ONE kiln::FusedElementwise node (runtime/kernels/
// fused_elementwise.h): one pass over memory instead of one per op, evaluated block by block in
// vector lanes by a register program compiled here. Written-out GELUs (erf, or tanh with Pow(x, 3)
// or x * x * x), SiLU/SwiGLU and residual + bias chains become one step each.
//
// Normalisations written out op by op become the same node with a normalisation stage first:
//   LayerNorm  d = x - ReduceMean(x); Div(d, Sqrt(ReduceMean(d^2) + eps))
//   RMSNorm    Div(x, Sqrt(ReduceMean(x^2) + eps)), or x times Reciprocal / 1 / of the Sqrt
// over the last axis (d^2 as Pow(d, 2) or Mul(d, d)); the scale and shift after them (gamma, beta)
// and whatever elementwise ops follow join the program.
//
// Runs after the conv and matmul epilogue fusions, which take the activations they can compute in
// their own epilogues first.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "builder/passes/pass.h"
#include "runtime/kernels/fused_elementwise.h"
#include "runtime/kernels/vec_kernels.h"

namespace kiln {

namespace {

using vec::Binary;
using vec::Unary;

bool is(const Node* n, const char* op) { return n && !n->removed && n->domain.empty() && n->op_type == op; }
bool is_fused(const Node& n) { return !n.removed && n.domain == kKilnDomain && n.op_type == "FusedElementwise"; }
bool is_norm_seed(const Node& n) {
  auto it = n.attrs.find("norm");
  auto pr = n.attrs.find("program");
  return is_fused(n) && it != n.attrs.end() && it->second.s != "none" && (pr == n.attrs.end() || pr->second.ints.empty());
}

bool float_or_bool(DType t) { return t == DType::kFloat32 || t == DType::kBool; }

// The one-element float32/bool constant `v`, as a float.
std::optional<float> scalar_const(const Graph& g, int v) {
  if (v < 0) return std::nullopt;
  const Value& c = g.values[v];
  if (!c.is_constant() || c.constant.numel() != 1) return std::nullopt;
  if (c.constant.dtype() == DType::kFloat32) return c.constant.as<float>()[0];
  if (c.constant.dtype() == DType::kBool) return c.constant.as<bool>()[0] ? 1.0f : 0.0f;
  return std::nullopt;
}

const std::map<std::string, Unary>& unary_ops() {
  static const std::map<std::string, Unary> m = {
      {"Exp", Unary::kExp},         {"Log", Unary::kLog},       {"Tanh", Unary::kTanh},     {"Erf", Unary::kErf},
      {"Sigmoid", Unary::kSigmoid}, {"Softplus", Unary::kSoftplus}, {"Sqrt", Unary::kSqrt}, {"Reciprocal", Unary::kReciprocal},
      {"Relu", Unary::kRelu},       {"HardSwish", Unary::kHardSwish}, {"HardSigmoid", Unary::kHardSigmoid},
      {"Neg", Unary::kNeg},         {"Abs", Unary::kAbs},       {"LeakyRelu", Unary::kLeakyRelu}};
  return m;
}
const std::map<std::string, Binary>& binary_ops() {
  static const std::map<std::string, Binary> m = {
      {"Add", Binary::kAdd},   {"Sub", Binary::kSub},   {"Mul", Binary::kMul},        {"Div", Binary::kDiv},
      {"Max", Binary::kMax},   {"Min", Binary::kMin},   {"Less", Binary::kLess},      {"LessOrEqual", Binary::kLessEq},
      {"Greater", Binary::kGreater}, {"GreaterOrEqual", Binary::kGreaterEq}, {"Equal", Binary::kEqual},
      {"And", Binary::kMul},   {"Or", Binary::kMax}};  // on bools held as 1.0f / 0.0f
  return m;
}

// Pow(x, k) by a constant k the vector loops compute exactly: small integers and +-1/2.
bool pow_by_constant(const Graph& g, const Node& n, Unary* op, float* k) {
  const auto e = scalar_const(g, n.inputs[1]);
  if (!e) return false;
  *k = *e;
  if (*e == std::nearbyint(*e) && std::fabs(*e) <= 16) *op = Unary::kPowInt;
  else if (*e == 0.5f || *e == -0.5f) *op = Unary::kPowHalf;
  else return false;
  return true;
}

// Only the attributes the program reads: a node with any other (the legacy 'broadcast' or
// 'consumed_inputs' of opset-6 exports) stays for its kernel to accept or reject, never guessed.
bool known_attributes(const Node& n) {
  static const std::map<std::string, std::set<std::string>> allowed = {
      {"LeakyRelu", {"alpha"}}, {"HardSigmoid", {"alpha", "beta"}}, {"Gelu", {"approximate"}},
      {"Cast", {"to", "saturate"}}, {"Clip", {"min", "max"}}};
  auto it = allowed.find(n.op_type);
  for (const auto& [name, _] : n.attrs)
    if (it == allowed.end() || !it->second.count(name)) return false;
  return true;
}

// Whether the vector program can compute node `n` (all values float32 or bool as 1.0f/0.0f).
bool fusible(const Graph& g, const Node& n) {
  if (n.removed || n.outputs.size() != 1) return false;
  if (is_norm_seed(n)) return true;
  if (!n.domain.empty() || !known_attributes(n)) return false;
  if (!float_or_bool(g.values[n.outputs[0]].dtype)) return false;
  for (int v : n.inputs)
    if (v >= 0 && !float_or_bool(g.values[v].dtype)) return false;
  const std::string& op = n.op_type;
  const size_t ni = n.inputs.size();
  auto present = [&](size_t i) { return i < ni && n.inputs[i] >= 0; };
  if (unary_ops().count(op) || op == "Identity" || op == "Not") return ni == 1 && present(0);
  if (op == "Gelu") return ni == 1 && present(0);
  if (binary_ops().count(op)) {
    if (ni != 2 || !present(0) || !present(1)) return false;
    // Comparisons of bools and arithmetic on bools are not valid ONNX; And/Or need bools.
    const bool logic = op == "And" || op == "Or";
    for (int v : n.inputs)
      if ((g.values[v].dtype == DType::kBool) != logic) return false;
    return true;
  }
  if (op == "Pow") return ni == 2 && present(0) && present(1) && g.values[n.inputs[0]].dtype == DType::kFloat32 &&
                          g.values[n.inputs[1]].dtype == DType::kFloat32;
  if (op == "Where") return ni == 3 && present(0) && present(1) && present(2);
  if (op == "Clip") {
    if (ni > 3 || !present(0) || g.values[n.inputs[0]].dtype != DType::kFloat32) return false;
    for (size_t i = 1; i < ni; ++i)
      if (present(i) && !scalar_const(g, n.inputs[i])) return false;
    return true;
  }
  if (op == "Cast") {  // float32 <- float32 / bool, bool <- bool: no change of the held values
    const DType from = g.values[n.inputs[0]].dtype, to = g.values[n.outputs[0]].dtype;
    return ni == 1 && (to == DType::kFloat32 || from == DType::kBool);
  }
  return false;
}

// ---- the normalisation patterns ---------------------------------------------------------------

bool last_axis_mean(const Graph& g, const Node* n, int x) {
  if (!is(n, "ReduceMean") || n->inputs.empty() || n->inputs[0] != x || n->outputs.size() != 1) return false;
  const Value& xv = g.values[x];
  if (xv.dtype != DType::kFloat32 || !xv.shape || xv.shape->empty()) return false;
  const int64_t rank = static_cast<int64_t>(xv.shape->size());
  auto kd = n->attrs.find("keepdims");
  if (kd != n->attrs.end() && kd->second.i == 0) return false;
  std::vector<int64_t> axes;
  if (auto a = n->attrs.find("axes"); a != n->attrs.end()) axes = a->second.ints;
  else if (n->inputs.size() > 1 && n->inputs[1] >= 0 && g.values[n->inputs[1]].is_constant()) {
    const Tensor& t = g.values[n->inputs[1]].constant;
    if (t.dtype() != DType::kInt64) return false;
    axes.assign(t.as<int64_t>(), t.as<int64_t>() + t.numel());
  }
  return axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
}

// Pow(z, 2) or Mul(z, z): returns z, or -1.
int square_of(const Graph& g, const Node* n) {
  if (!n || n->outputs.size() != 1) return -1;
  if (is(n, "Mul") && n->inputs.size() == 2 && n->inputs[0] == n->inputs[1]) return n->inputs[0];
  if (is(n, "Pow") && n->inputs.size() == 2 && scalar_const(g, n->inputs[1]) == 2.0f) return n->inputs[0];
  return -1;
}

struct Index {
  std::vector<int> producer;                // value -> node index
  std::vector<std::vector<int>> consumers;  // value -> node indices (once per use)
  std::vector<int> uses;
};
Index build_index(const Graph& g) {
  Index ix;
  ix.producer.assign(g.values.size(), -1);
  ix.consumers.assign(g.values.size(), {});
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.removed) continue;
    for (int o : n.outputs) ix.producer[o] = static_cast<int>(i);
    for (int v : n.inputs)
      if (v >= 0) ix.consumers[v].push_back(static_cast<int>(i));
  }
  ix.uses = g.use_counts();
  return ix;
}
Node* producer(Graph& g, const Index& ix, int v) { return v >= 0 && ix.producer[v] >= 0 ? &g.nodes[ix.producer[v]] : nullptr; }
bool single_use(const Index& ix, int v) { return ix.uses[v] == 1; }

// Finds LayerNorm / RMSNorm written out op by op and replaces each with a FusedElementwise node
// that has a normalisation stage and no program yet (a "seed" the grouping below extends).
int fuse_normalisations(Graph& g, PassContext& ctx) {
  int found = 0;
  for (size_t si = 0; si < g.nodes.size(); ++si) {
    Node& sqrt = g.nodes[si];
    if (!is(&sqrt, "Sqrt") || sqrt.inputs.size() != 1 || sqrt.outputs.size() != 1) continue;
    const Index ix = build_index(g);
    const int s = sqrt.outputs[0];
    Node* add = producer(g, ix, sqrt.inputs[0]);
    if (!is(add, "Add") || add->inputs.size() != 2 || !single_use(ix, add->outputs[0])) continue;
    const int eps_side = scalar_const(g, add->inputs[1]) ? 1 : scalar_const(g, add->inputs[0]) ? 0 : -1;
    if (eps_side < 0) continue;
    const float eps = *scalar_const(g, add->inputs[eps_side]);
    Node* var = producer(g, ix, add->inputs[1 - eps_side]);
    if (!var || !single_use(ix, var->outputs[0]) || var->inputs.empty()) continue;
    Node* sq = producer(g, ix, var->inputs[0]);
    const int z = square_of(g, sq);
    if (z < 0 || !single_use(ix, sq->outputs[0]) || !last_axis_mean(g, var, sq->outputs[0])) continue;
    // Layer: z = Sub(x, ReduceMean(x)); RMS: z is x.
    Node* sub = producer(g, ix, z);
    int x = z;
    bool layer = false;
    if (is(sub, "Sub") && sub->inputs.size() == 2) {
      Node* mean = producer(g, ix, sub->inputs[1]);
      if (last_axis_mean(g, mean, sub->inputs[0]) && single_use(ix, mean->outputs[0])) {
        layer = true;
        x = sub->inputs[0];
      }
    }
    const Value& xv = g.values[x];
    if (xv.dtype != DType::kFloat32 || !xv.shape || xv.shape->empty()) continue;
    // The consumer: Div(z, s), or Mul(z, Reciprocal(s) | Div(1, s)).
    if (ix.consumers[s].size() != 1 || ix.uses[s] != 1) continue;
    Node* c = &g.nodes[ix.consumers[s][0]];
    std::vector<Node*> dead = {&sqrt, add, var, sq};
    Node* out = nullptr;
    if (is(c, "Div") && c->inputs.size() == 2 && c->inputs[0] == z && c->inputs[1] == s) {
      out = c;
    } else if ((is(c, "Reciprocal") || (is(c, "Div") && c->inputs.size() == 2 && c->inputs[1] == s && scalar_const(g, c->inputs[0]) == 1.0f)) &&
               ix.uses[c->outputs[0]] == 1 && ix.consumers[c->outputs[0]].size() == 1) {
      Node* m = &g.nodes[ix.consumers[c->outputs[0]][0]];
      if (is(m, "Mul") && m->inputs.size() == 2 &&
          ((m->inputs[0] == z && m->inputs[1] == c->outputs[0]) || (m->inputs[1] == z && m->inputs[0] == c->outputs[0]))) {
        dead.push_back(c);
        out = m;
      }
    }
    if (!out) continue;
    // LayerNorm's d is read by the square and the output node (twice by a Mul(d, d)) and by nothing
    // else; RMSNorm's x may have other readers (the residual stream), it stays.
    const int z_uses = (sq->op_type == "Mul" ? 2 : 1) + 1;
    if (layer && ix.uses[z] != z_uses) continue;
    if (layer) {
      dead.push_back(sub);
      dead.push_back(producer(g, ix, sub->inputs[1]));
    }
    bool plain = known_attributes(*out);
    for (Node* d : dead) plain &= d->op_type == "ReduceMean" || known_attributes(*d);
    if (!plain) continue;
    Node f;
    f.name = out->name;
    f.domain = std::string(kKilnDomain);
    f.op_type = "FusedElementwise";
    f.inputs = {x};
    f.outputs = out->outputs;
    f.attrs["norm"] = Attribute::String(layer ? "layer" : "rms");
    f.attrs["epsilon"] = Attribute::Float(eps);
    f.attrs["program"] = Attribute::Ints({});
    f.attrs["immediates"] = Attribute::Floats({});
    for (Node* d : dead) {
      f.replaced_nodes.push_back(d->name);
      d->removed = true;
    }
    f.replaced_nodes.push_back(out->name);
    ctx.log.push_back("elementwise_fusion: " + f.name + ": written-out " + (layer ? "LayerNorm" : "RMSNorm") + " (" +
                      std::to_string(f.replaced_nodes.size()) + " nodes) -> kiln::FusedElementwise");
    *out = std::move(f);
    ++found;
  }
  return found;
}

// ---- grouping and the program ---------------------------------------------------------------

// Operands while a program is being built: inputs, immediates and temporaries are numbered in
// their own spaces and mapped to registers once all are known.
constexpr int kInputTag = 1 << 20, kImmTag = 2 << 20, kTempTag = 3 << 20;

struct Builder {
  const Graph& g;
  int root_rank;  // the group output's rank, or -1 when unknown
  std::vector<int> inputs = {};  // external values, in order (a normalisation's x first)
  std::vector<float> imms = {};
  std::vector<std::array<int, 5>> code = {};  // tagged operands
  std::map<int, int> reg_of = {};             // value -> tagged operand
  int temps = 0;
  bool ok = true;

  int imm(float v) {
    for (size_t i = 0; i < imms.size(); ++i)
      if (std::memcmp(&imms[i], &v, sizeof v) == 0) return kImmTag + static_cast<int>(i);
    imms.push_back(v);
    return kImmTag + static_cast<int>(imms.size()) - 1;
  }
  int operand(int v) {
    if (auto it = reg_of.find(v); it != reg_of.end()) return it->second;
    // A one-element constant is an immediate unless its rank would raise the output's (broadcasting
    // [5] with a [1, 1] constant gives [1, 5]; an immediate broadcasts without a shape).
    const int crank = g.values[v].is_constant() ? g.values[v].constant.shape().rank() : 0;
    if (auto c = scalar_const(g, v); c && (crank == 0 || crank <= root_rank)) return reg_of[v] = imm(*c);
    inputs.push_back(v);
    return reg_of[v] = kInputTag + static_cast<int>(inputs.size()) - 1;
  }
  int emit(int op, int a, int b = -1, int c = -1) {
    code.push_back({op, kTempTag + temps, a, b, c});
    return kTempTag + temps++;
  }
  int unary(Unary u, int a, int alpha = -1, int beta = -1) { return emit(fused::kUnaryBase + static_cast<int>(u), a, alpha, beta); }
  int binary(Binary b, int x, int y) { return emit(fused::kBinaryBase + static_cast<int>(b), x, y); }

  // Appends the instructions computing node `n`'s output.
  void node(const Node& n) {
    const std::string& op = n.op_type;
    auto in = [&](size_t i) { return operand(n.inputs[i]); };
    auto attr_f = [&](const char* name, float def) {
      auto it = n.attrs.find(name);
      return it == n.attrs.end() ? def : it->second.f;
    };
    int r = -1;
    if (op == "Identity" || op == "Cast") {
      r = in(0);
    } else if (op == "Not") {
      r = binary(Binary::kSub, imm(1.0f), in(0));
    } else if (op == "LeakyRelu") {
      r = unary(Unary::kLeakyRelu, in(0), imm(attr_f("alpha", 0.01f)));
    } else if (op == "HardSigmoid") {
      r = unary(Unary::kHardSigmoid, in(0), imm(attr_f("alpha", 0.2f)), imm(attr_f("beta", 0.5f)));
    } else if (auto u = unary_ops().find(op); u != unary_ops().end()) {
      r = unary(u->second, in(0));
    } else if (op == "Gelu") {
      auto it = n.attrs.find("approximate");
      r = unary(it != n.attrs.end() && it->second.s == "tanh" ? Unary::kGeluTanh : Unary::kGeluErf, in(0));
    } else if (auto b = binary_ops().find(op); b != binary_ops().end()) {
      r = binary(b->second, in(0), in(1));
    } else if (op == "Pow") {
      Unary u;
      float k;
      if (pow_by_constant(g, n, &u, &k)) r = unary(u, in(0), imm(k), imm(k));
      else r = binary(Binary::kPow, in(0), in(1));
    } else if (op == "Where") {
      r = emit(fused::kSelect, in(0), in(1), in(2));
    } else if (op == "Clip") {
      // Bounds as inputs (opset 11+) or, before, as attributes min/max.
      float lo = n.inputs.size() > 1 && n.inputs[1] >= 0 ? *scalar_const(g, n.inputs[1]) : attr_f("min", -INFINITY);
      float hi = n.inputs.size() > 2 && n.inputs[2] >= 0 ? *scalar_const(g, n.inputs[2]) : attr_f("max", INFINITY);
      if (n.inputs.size() > 1) lo = n.inputs[1] >= 0 ? lo : -INFINITY;
      if (n.inputs.size() > 2) hi = n.inputs[2] >= 0 ? hi : INFINITY;
      r = unary(Unary::kClip, in(0), imm(lo), imm(hi));
    } else {
      ok = false;
      return;
    }
    reg_of[n.outputs[0]] = r;
  }
};

// The fused node for the group `members` (node indices in topological order) ending in `root`.
// `a` (an input's shape) broadcasts into `x` without enlarging it.
bool fits_in(const std::optional<SymShape>& a, const std::optional<SymShape>& x) {
  if (!a || !x || a->size() > x->size()) return false;
  for (size_t i = 0; i < a->size(); ++i) {
    const Dim& d = (*a)[i];
    const Dim& e = (*x)[i + x->size() - a->size()];
    if (!(d.is_known() && d.value == 1) && !(d == e && (d.is_known() || d.is_symbol()))) return false;
  }
  return true;
}

std::optional<Node> compile_group(const Graph& g, const std::vector<int>& members, int root) {
  const auto& root_shape = g.values[g.nodes[root].outputs[0]].shape;
  Builder b{g, root_shape ? static_cast<int>(root_shape->size()) : -1};
  const Node* seed = nullptr;
  for (int m : members)
    if (is_norm_seed(g.nodes[m])) seed = &g.nodes[m];
  if (seed) {
    b.operand(seed->inputs[0]);  // x is input 0
    b.reg_of[seed->outputs[0]] = kTempTag + b.temps++;  // the normalised values: the first temporary
  }
  for (int m : members)
    if (&g.nodes[m] != seed) b.node(g.nodes[m]);
  const int out = b.reg_of.count(g.nodes[root].outputs[0]) ? b.reg_of[g.nodes[root].outputs[0]] : -1;
  if (!b.ok || out < kTempTag) return std::nullopt;  // e.g. a chain of Identity/Cast only
  const int ni = static_cast<int>(b.inputs.size()), nimm = static_cast<int>(b.imms.size());
  // The normalised x must be of the output's shape: every other input broadcasts into it.
  if (seed)
    for (int i = 1; i < ni; ++i)
      if (!fits_in(g.values[b.inputs[i]].shape, g.values[b.inputs[0]].shape)) return std::nullopt;
  if (ni > fused::kMaxInputs || ni + nimm + b.temps > fused::kMaxRegisters) return std::nullopt;
  auto reg = [&](int tagged) -> int64_t {
    if (tagged < 0) return -1;
    if (tagged >= kTempTag) return ni + nimm + (tagged - kTempTag);
    if (tagged >= kImmTag) return ni + (tagged - kImmTag);
    return tagged - kInputTag;
  };
  std::vector<int64_t> program;
  for (const auto& ins : b.code) {
    program.push_back(ins[0]);
    for (int k = 1; k < 5; ++k) program.push_back(reg(ins[k]));
  }
  // The output must be the last instruction's destination.
  if (!b.code.empty() && b.code.back()[1] != out) return std::nullopt;
  Node f;
  f.name = g.nodes[root].name;
  f.domain = std::string(kKilnDomain);
  f.op_type = "FusedElementwise";
  f.inputs = b.inputs;
  f.outputs = g.nodes[root].outputs;
  f.attrs["program"] = Attribute::Ints(program);
  f.attrs["immediates"] = Attribute::Floats(b.imms);
  f.attrs["norm"] = Attribute::String(seed ? seed->attrs.at("norm").s : "none");
  if (seed) f.attrs["epsilon"] = seed->attrs.at("epsilon");
  for (int m : members) {
    const Node& n = g.nodes[m];
    if (!n.replaced_nodes.empty()) f.replaced_nodes.insert(f.replaced_nodes.end(), n.replaced_nodes.begin(), n.replaced_nodes.end());
    else f.replaced_nodes.push_back(n.name);
  }
  return f;
}

// True when v's one reader is a float32 Softmax over the last axis and v is no graph output:
// softmax_prologue_fusion (when on) joins that Softmax to the FusedElementwise computing v, so a
// lone op there (a window attention's relative-position-bias Add) is worth a node of its own.
bool feeds_prologue_softmax(const Graph& g, const Index& ix, const PassContext& ctx, int v) {
  if (ctx.disabled.count("softmax_prologue_fusion") || ix.uses[v] != 1 || ix.consumers[v].size() != 1) return false;
  for (int o : g.outputs)
    if (o == v) return false;
  return softmax_over_last_axis(g, g.nodes[ix.consumers[v][0]]);
}

}  // namespace

Status elementwise_fusion(Graph& g, PassContext& ctx) {
  const int norms = fuse_normalisations(g, ctx);
  const Index ix = build_index(g);
  std::vector<bool> taken(g.nodes.size(), false);
  int groups = 0, nodes_in = 0;
  // Roots from the last node up: a group grows towards its producers while a producer's output is
  // read by the group alone (and is no graph output), so only the root's value leaves it.
  for (int r = static_cast<int>(g.nodes.size()) - 1; r >= 0; --r) {
    const Node& root = g.nodes[r];
    if (taken[r] || !fusible(g, root) || g.values[root.outputs[0]].dtype != DType::kFloat32) continue;
    std::vector<int> members = {r};
    std::set<int> in_group = {r};
    int norm_x = is_norm_seed(root) ? root.inputs[0] : -1;
    for (bool grew = true; grew;) {
      grew = false;
      for (size_t k = 0; k < members.size(); ++k) {
        const Node& m = g.nodes[members[k]];
        if (is_norm_seed(m)) continue;  // its x stays an input
        for (int v : m.inputs) {
          if (v < 0 || v == norm_x) continue;
          const int p = ix.producer[v];
          if (p < 0 || in_group.count(p) || taken[p] || !fusible(g, g.nodes[p])) continue;
          const bool seed = is_norm_seed(g.nodes[p]);
          if (seed && norm_x >= 0) continue;  // one normalisation per group
          int inside = 0;
          for (int c : ix.consumers[v]) inside += in_group.count(c) ? 1 : 0;
          if (inside != ix.uses[v]) continue;
          if (seed) {
            // x must stay outside the group: no member may compute it.
            const int x = g.nodes[p].inputs[0];
            if (ix.producer[x] >= 0 && in_group.count(ix.producer[x])) continue;
            norm_x = x;
          }
          members.push_back(p);
          in_group.insert(p);
          grew = true;
        }
      }
    }
    if (members.size() < 2 && !is_norm_seed(root) && !feeds_prologue_softmax(g, ix, ctx, root.outputs[0])) continue;
    std::sort(members.begin(), members.end());
    std::optional<Node> f = compile_group(g, members, r);
    if (!f) continue;
    for (int m : members) taken[m] = true;
    nodes_in += static_cast<int>(f->replaced_nodes.size());
    ++groups;
    if (members.size() > 1)
      ctx.log.push_back("elementwise_fusion: " + f->name + ": " + std::to_string(f->replaced_nodes.size()) +
                        " nodes -> kiln::FusedElementwise");
    for (int m : members) g.nodes[m].removed = true;
    g.nodes[r] = std::move(*f);
  }
  if (groups)
    ctx.log.push_back("elementwise_fusion: " + std::to_string(nodes_in) + " nodes -> " + std::to_string(groups) +
                      " kiln::FusedElementwise (" + std::to_string(norms) + " written-out normalisations)");
  return Status::Ok();
}

}  // namespace kiln
