#include "builder/shapes/shape_points.h"

#include "builder/shapes/shape_rules_common.h"
#include "plugins/plugin_api.h"
#include "runtime/plugin_host/plugin_registry.h"

namespace kiln {

using shape_rules::Dims;

struct ShapeEvaluator::NodeInfer {
  const Node* node = nullptr;
  std::unique_ptr<Kernel> kernel;       // a built-in op
  std::unique_ptr<PluginBuild> plugin;  // a plugin
  std::string where;                    // "node 'x' (Op)" (and what a fused node stands for)
  enum class Data { kNone, kAfterFirst, kAll } data = Data::kAll;  // the inputs whose data infer() reads
};

namespace {

// Ops whose kernel infer() reads no input data (the families of shape_rules_common.h).
bool data_independent(const std::string& op) {
  using namespace shape_rules;
  return kDataIndependent.count(op) > 0 || kBroadcast.count(op) > 0 ||
         (kSameShape.count(op) > 0 && op != "CumSum" && op != "Trilu" && op != "Clip" && op != "Dropout");
}

std::string describe(const Graph& g, const Node& n) {
  std::string s = g.describe_node(n);
  if (!n.replaced_nodes.empty()) {
    std::string list;
    for (size_t i = 0; i < n.replaced_nodes.size() && i < 6; ++i) list += (i ? ", " : "") + n.replaced_nodes[i];
    if (n.replaced_nodes.size() > 6) list += ", ...";
    s += " (fused from " + list + ")";
  }
  return s;
}

std::optional<Shape> evaluate_shape(const SymShape& s, const SymbolValues& symbols) {
  if (!Shape::fits_rank(s.size())) return std::nullopt;
  Shape out;
  for (const Dim& d : s) {
    auto v = dim_evaluate(d, symbols);
    if (!v || *v < 0) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

std::string shapes_text(const std::vector<std::optional<TensorDesc>>& descs, const Node& n) {
  std::string s;
  for (int v : n.inputs) s += (s.empty() ? "" : ", ") + (v < 0 || !descs[v] ? std::string("-") : descs[v]->shape.str());
  return "[" + s + "]";
}

}  // namespace

ShapeEvaluator::ShapeEvaluator(const Graph& g) : g_(&g) {}
ShapeEvaluator::ShapeEvaluator(ShapeEvaluator&&) noexcept = default;
ShapeEvaluator& ShapeEvaluator::operator=(ShapeEvaluator&&) noexcept = default;
ShapeEvaluator::~ShapeEvaluator() = default;

StatusOr<ShapeEvaluator> ShapeEvaluator::create(const Graph& g) {
  ShapeEvaluator e(g);
  for (const Node& n : g.nodes) {
    if (n.removed) continue;
    auto info = std::make_unique<NodeInfer>();
    info->node = &n;
    info->where = describe(g, n);
    if (is_kernel_domain(n.domain)) {
      auto k = KernelRegistry::builtin().create(KernelArgs::of(n, g.opset), n.attrs);
      if (k.ok()) info->kernel = std::move(k).value();  // unsupported ops are reported when the plan is lowered
      info->data = data_independent(n.op_type) ? NodeInfer::Data::kNone
                   : shape_rules::kShapeInputsAfterFirst.count(n.op_type) ? NodeInfer::Data::kAfterFirst
                                                                          : NodeInfer::Data::kAll;
    } else if (const PluginEntry* entry = PluginRegistry::global().find(n.domain, n.op_type)) {
      auto b = entry->creator->create(n.attrs);
      if (b.ok()) info->plugin = std::move(b).value();
    }
    e.nodes_.push_back(std::move(info));
  }
  return e;
}

StatusOr<std::vector<std::optional<TensorDesc>>> ShapeEvaluator::at(const std::map<std::string, Shape>& inputs) const {
  const Graph& g = *g_;
  // The symbols the given input shapes bind.
  SymbolValues symbols;
  std::map<std::string, std::string> bound_by;
  for (int id : g.inputs) {
    const Value& v = g.values[id];
    auto it = inputs.find(v.name);
    if (it == inputs.end() || !v.shape || v.shape->size() != static_cast<size_t>(it->second.rank())) continue;
    for (size_t d = 0; d < v.shape->size(); ++d) {
      const std::string& sym = (*v.shape)[d].sym_name();
      if (sym.empty()) continue;
      const std::string where = "input '" + v.name + "' dim " + std::to_string(d);
      auto [at, fresh] = symbols.emplace(sym, it->second[static_cast<int>(d)]);
      if (fresh) bound_by[sym] = where;
      else if (at->second != it->second[static_cast<int>(d)])
        return InvalidArgument(where + " ('" + sym + "') is " + std::to_string(it->second[static_cast<int>(d)]) + " but " + bound_by[sym] +
                               " binds it to " + std::to_string(at->second));
    }
  }
  std::vector<std::optional<TensorDesc>> descs(g.values.size());
  auto from_symbols = [&](int v) -> std::optional<TensorDesc> {
    const Value& val = g.values[v];
    if (!val.shape || !dtype_is_known(val.dtype)) return std::nullopt;
    auto s = evaluate_shape(*val.shape, symbols);
    if (!s) return std::nullopt;
    return TensorDesc{val.dtype, *s};
  };
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].is_constant()) descs[v] = g.values[v].constant.view().desc();
  for (int id : g.inputs) {
    auto it = inputs.find(g.values[id].name);
    descs[id] = it != inputs.end() ? std::optional<TensorDesc>(TensorDesc{g.values[id].dtype, it->second}) : from_symbols(id);
  }

  std::vector<Tensor> scratch;
  std::vector<TensorView> views;
  std::vector<TensorDesc> in_descs, out_descs;
  for (const auto& info : nodes_) {
    const Node& n = *info->node;
    bool have_all = info->kernel || info->plugin;
    for (int v : n.inputs) have_all = have_all && (v < 0 || descs[v].has_value());
    bool inferred = false;
    if (have_all) {
      scratch.clear();
      views.clear();
      in_descs.clear();
      bool data_ok = true;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const int v = n.inputs[i];
        if (v < 0) {
          views.emplace_back();
          in_descs.emplace_back();
          continue;
        }
        const Value& val = g.values[v];
        in_descs.push_back(*descs[v]);
        if (val.is_constant()) {
          views.push_back(val.constant.view());
          continue;
        }
        const bool needs_data = info->plugin ? false
                                : info->data == NodeInfer::Data::kAll ? true
                                : info->data == NodeInfer::Data::kAfterFirst ? i > 0
                                                                             : false;
        // A small shape tensor whose elements are known symbolically: its values at this point.
        std::optional<Tensor> known;
        if (val.sym_value && dtype_is_integer(val.dtype) && descs[v]->shape.numel() == static_cast<int64_t>(val.sym_value->size())) {
          std::vector<int64_t> elems;
          for (const Dim& d : *val.sym_value) {
            auto x = dim_evaluate(d, symbols);
            if (!x) break;
            elems.push_back(*x);
          }
          if (elems.size() == val.sym_value->size()) {
            Tensor t = Tensor::zeros(val.dtype, descs[v]->shape);
            for (size_t k = 0; k < elems.size(); ++k) {
              if (val.dtype == DType::kInt64) t.as<int64_t>()[k] = elems[k];
              else if (val.dtype == DType::kInt32) t.as<int32_t>()[k] = static_cast<int32_t>(elems[k]);
            }
            if (val.dtype == DType::kInt64 || val.dtype == DType::kInt32) known = std::move(t);
          }
        }
        if (known) {
          scratch.push_back(std::move(*known));
          views.push_back(scratch.back().view());
        } else if (needs_data) {
          data_ok = false;
          break;
        } else if (descs[v]->shape.numel() <= 64) {
          // A kernel that peeks at a small input (a scalar flag) never reads a null pointer.
          scratch.push_back(Tensor::zeros(descs[v]->dtype, descs[v]->shape));
          views.push_back(scratch.back().view());
        } else {
          views.push_back(TensorView{nullptr, descs[v]->dtype, descs[v]->shape});
        }
      }
      if (data_ok) {
        out_descs.assign(n.outputs.size(), TensorDesc{});
        Status st = info->plugin ? info->plugin->infer(in_descs, out_descs) : info->kernel->infer(views, out_descs);
        if (!st.ok()) return Status(st.code(), info->where + " with input shapes " + shapes_text(descs, n) + ": " + st.message());
        for (size_t o = 0; o < n.outputs.size(); ++o)
          if (dtype_is_known(out_descs[o].dtype)) descs[n.outputs[o]] = out_descs[o];
        inferred = true;
      }
    }
    if (!inferred)
      for (int o : n.outputs) descs[o] = from_symbols(o);
  }
  return descs;
}

}  // namespace kiln
