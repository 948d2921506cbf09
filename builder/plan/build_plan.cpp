#include "builder/plan/build_plan.h"
#include "builder/plan/int8_lowering.h"

#include "builder/build_profile.h"

#include "runtime/plugin_host/plugin_kernel.h"
#include "runtime/plugin_host/plugin_registry.h"
#include "runtime/kernel.h"

namespace kiln {

Status specialize_inputs(Graph& g, const std::map<std::string, Shape>& shapes) {
  std::map<std::string, std::pair<int64_t, std::string>> bound;  // symbol -> (value, "input 'x' dim d")
  for (const auto& [name, shape] : shapes) {
    const int id = g.find_value(name);
    bool is_input = false;
    for (int i : g.inputs) is_input |= i == id;
    if (id < 0 || !is_input) return NotFound("the model has no input named '" + name + "'");
    Value& v = g.values[id];
    if (v.shape) {
      if (v.shape->size() != static_cast<size_t>(shape.rank()))
        return InvalidArgument("input '" + name + "' must have rank " + std::to_string(v.shape->size()) + " (declared " +
                               sym_shape_str(*v.shape) + "), got shape " + shape.str());
      for (int d = 0; d < shape.rank(); ++d) {
        const Dim& decl = (*v.shape)[d];
        const std::string where = "input '" + name + "' dim " + std::to_string(d);
        if (decl.is_known() && decl.value != shape[d])
          return InvalidArgument(where + " must be " + std::to_string(decl.value) + " (declared " + sym_shape_str(*v.shape) +
                                 "), got " + std::to_string(shape[d]));
        if (decl.is_symbol()) {
          auto [it, inserted] = bound.emplace(decl.sym_name(), std::make_pair(shape[d], where));
          if (!inserted && it->second.first != shape[d])
            return InvalidArgument(where + " ('" + decl.sym_name() + "') is " + std::to_string(shape[d]) + " but " +
                                   it->second.second + " binds '" + decl.sym_name() + "' to " + std::to_string(it->second.first));
        }
      }
    }
    v.shape = from_shape(shape);
  }
  SymbolValues values;
  for (const auto& [sym, b] : bound) values[sym] = b.first;
  if (!values.empty())
    for (auto& v : g.values) {
      if (!v.shape) continue;
      for (auto& d : *v.shape) d = dim_substitute(d, values);
    }
  return Status::Ok();
}

// A node of a custom domain becomes a plugin step: its attributes are the plugin's fields, checked
// by creating the plugin; the step saves the fields the plugin reports (defaults included) and the
// version it resolved to, so the engine recreates exactly this plugin.
static Status lower_plugin_node(const Graph& g, const Node& n, PlanStep& step) {
  const PluginEntry* entry = PluginRegistry::global().find(n.domain, n.op_type);
  if (!entry)
    return Unimplemented(g.describe_node(n) + ": no plugin is registered for custom op '" + n.domain + "::" + n.op_type +
                         "'; load its library with plugins: {load: [...]}");
  const std::string where = g.describe_node(n) + " (plugin " + entry->id() + " from " + entry->library + ")";
  auto build = entry->creator->create(n.attrs);
  if (!build.ok()) return build.status().with_context(where);
  if (!build.value()) return Internal(where + ": creator returned no plugin");
  const PluginBuild& pb = *build.value();
  if (pb.num_outputs() < static_cast<int>(n.outputs.size()))
    return InvalidArgument(where + ": the node has " + std::to_string(n.outputs.size()) + " outputs but the plugin produces " +
                           std::to_string(pb.num_outputs()));
  std::vector<DType> dtypes;
  std::vector<TensorDesc> descs;
  bool all_known = true, all_concrete = true;
  for (int i : n.inputs) {
    const Value* v = i >= 0 ? &g.values[i] : nullptr;
    dtypes.push_back(v ? v->dtype : DType::kUndefined);
    if (v && !dtype_is_known(v->dtype)) all_known = false;
    if (v && (!v->shape || !sym_shape_concrete(*v->shape))) all_concrete = false;
    descs.push_back(v && all_concrete ? TensorDesc{v->dtype, to_shape(*v->shape)} : TensorDesc{});
  }
  if (all_known && !pb.supports(dtypes)) {
    std::string list;
    for (DType d : dtypes) list += (list.empty() ? "" : ", ") + (d == DType::kUndefined ? std::string("absent") : dtype_name(d));
    return Unimplemented(where + ": the plugin does not support input dtypes (" + list + ")");
  }
  // Shapes fixed at build time are checked now rather than at the first run.
  if (all_known && all_concrete) {
    std::vector<TensorDesc> outs(static_cast<size_t>(pb.num_outputs()));
    KILN_RETURN_IF_ERROR(pb.infer(descs, outs).with_context(where));
  }
  step.attrs = pb.fields();
  step.impl = plugin_impl_for_version(entry->version);
  return Status::Ok();
}

StatusOr<std::shared_ptr<Plan>> lower_to_plan(const Graph& g) {
  auto plan = std::make_shared<Plan>();
  plan->opset = g.opset;
  std::vector<int> remap(g.values.size(), -1);
  auto map_value = [&](int v) -> int {
    if (v < 0) return -1;
    if (remap[v] >= 0) return remap[v];
    const Value& val = g.values[v];
    PlanValue pv;
    pv.name = val.name;
    pv.dtype = val.dtype;
    if (val.is_constant()) {
      pv.constant = static_cast<int>(plan->constants.size());
      plan->constants.push_back(val.constant);
    }
    plan->values.push_back(std::move(pv));
    remap[v] = static_cast<int>(plan->values.size()) - 1;
    return remap[v];
  };
  for (int v : g.inputs) {
    const int pv = map_value(v);
    const Value& val = g.values[v];
    if (val.shape) {
      plan->values[pv].has_declared_shape = true;
      for (const auto& d : *val.shape) {
        plan->values[pv].dims.push_back(d.is_known() ? d.value : -1);
        plan->values[pv].dim_names.push_back(d.sym_name());
      }
    }
    plan->inputs.push_back(pv);
  }
  const KernelRegistry& reg = KernelRegistry::builtin();
  for (const auto& n : g.nodes) {
    if (n.removed) continue;
    if (is_kernel_domain(n.domain) && !reg.supports(n.domain, n.op_type))
      return Unimplemented(g.describe_node(n) + ": unsupported op type '" + n.op_type + "'");
    PlanStep step;
    step.name = n.name;
    step.op_type = n.op_type;
    step.domain = n.domain;
    step.attrs = n.attrs;
    if (!is_kernel_domain(n.domain)) KILN_RETURN_IF_ERROR(lower_plugin_node(g, n, step));
    step.impl = explicit_int8_impl(step);  // a QDQ model's quantized matmuls (qdq_matmul_fusion)
    step.replaced_nodes = n.replaced_nodes;
    for (int i : n.inputs) step.inputs.push_back(map_value(i));
    for (int o : n.outputs) step.outputs.push_back(map_value(o));
    plan->steps.push_back(std::move(step));
  }
  for (int v : g.outputs) {
    if (remap[v] < 0 && !g.values[v].is_constant() && g.values[v].producer < 0) {
      bool is_input = false;
      for (int i : g.inputs) is_input |= i == v;
      if (!is_input) return InvalidArgument("graph output '" + g.values[v].name + "' is not computed by any node");
    }
    plan->outputs.push_back(map_value(v));
  }
  return plan;
}

StatusOr<std::shared_ptr<Plan>> build_plan(Graph g, const BuildOptions& options, std::vector<std::string>* log) {
  // A profile fixed at the given shapes; inputs not given keep their declared shapes.
  ResolvedProfile profile;
  for (int id : g.inputs) profile.input_order.push_back(g.values[id].name);
  for (const auto& [name, shape] : options.input_shapes) profile.inputs[name] = InputRange{shape, shape, shape};
  ProfileBuildOptions build;
  build.disabled_passes = options.disabled_passes;
  build.tactics = options.tactics;
  KILN_ASSIGN_OR_RETURN(BuiltProfile built, build_profile(g, profile, build));
  if (log) *log = built.pass_log;
  return built.plan;
}

}  // namespace kiln
