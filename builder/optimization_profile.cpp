#include "builder/optimization_profile.h"

#include <algorithm>

#include "builder/plan/build_plan.h"
#include "builder/passes/pass.h"

namespace kiln {

std::map<std::string, Shape> ResolvedProfile::shapes_at(Point p) const {
  std::map<std::string, Shape> out;
  for (const auto& [name, r] : inputs) out[name] = p == Point::kMin ? r.min : p == Point::kOpt ? r.opt : r.max;
  return out;
}

StatusOr<ResolvedProfile> resolve_profile(const Graph& g, const ProfileConfig& p) {
  ResolvedProfile rp;
  rp.name = p.name;
  rp.dims = p.dims;
  const std::string where = "profile '" + p.name + "'";
  std::set<std::string> used_symbols;
  for (int id : g.inputs) {
    const Value& v = g.values[id];
    rp.input_order.push_back(v.name);
    if (!v.shape) {
      if (!p.shapes.count(v.name)) return InvalidArgument(where + ": input '" + v.name + "' has no declared shape; give it under shapes:");
    }
    InputRange r;
    auto explicit_shape = p.shapes.find(v.name);
    const size_t rank = v.shape ? v.shape->size() : explicit_shape->second.min.size();
    for (size_t d = 0; d < rank; ++d) {
      const std::string dim_where = where + ": input '" + v.name + "' dim " + std::to_string(d);
      DimRange dr;
      const Dim decl = v.shape ? (*v.shape)[d] : Dim{};
      if (explicit_shape != p.shapes.end()) {
        const ShapeRange& sr = explicit_shape->second;
        if (sr.min.size() != rank || sr.opt.size() != rank || sr.max.size() != rank)
          return InvalidArgument(where + ": shapes of input '" + v.name + "' must have rank " + std::to_string(rank));
        dr = DimRange{sr.min[d], sr.opt[d], sr.max[d]};
        if (decl.is_known() && (dr.min != decl.value || dr.max != decl.value))
          return InvalidArgument(dim_where + " is fixed at " + std::to_string(decl.value) + " by the model, profile gives [" +
                                 std::to_string(dr.min) + ", " + std::to_string(dr.max) + "]");
        if (decl.is_symbol()) {
          auto it = p.dims.find(decl.symbol);
          if (it != p.dims.end() && (it->second.min != dr.min || it->second.opt != dr.opt || it->second.max != dr.max))
            return InvalidArgument(dim_where + " ('" + decl.symbol + "'): shapes give " + std::to_string(dr.opt) + " but dims give " + std::to_string(it->second.opt));
          used_symbols.insert(decl.symbol);
        }
      } else if (decl.is_known()) {
        dr = DimRange{decl.value, decl.value, decl.value};
      } else if (decl.is_symbol()) {
        auto it = p.dims.find(decl.symbol);
        if (it == p.dims.end())
          return InvalidArgument(dim_where + " ('" + decl.symbol + "') is dynamic and the profile does not set it: add dims: {" + decl.symbol + ": ...}");
        dr = it->second;
        used_symbols.insert(decl.symbol);
      } else {
        return InvalidArgument(dim_where + " is dynamic and unnamed: give the input's shapes: {min, opt, max} in the profile");
      }
      if (dr.min < 0 || dr.min > dr.opt || dr.opt > dr.max)
        return InvalidArgument(dim_where + ": range must satisfy 0 <= min <= opt <= max, got {" + std::to_string(dr.min) + ", " +
                               std::to_string(dr.opt) + ", " + std::to_string(dr.max) + "}");
      r.min.push_back(dr.min);
      r.opt.push_back(dr.opt);
      r.max.push_back(dr.max);
    }
    rp.inputs[v.name] = r;
  }
  for (const auto& [sym, range] : p.dims)
    if (!used_symbols.count(sym)) {
      std::set<std::string> known;
      for (int id : g.inputs)
        if (g.values[id].shape)
          for (const auto& d : *g.values[id].shape)
            if (d.is_symbol()) known.insert(d.symbol);
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return InvalidArgument(where + ": dim '" + sym + "' is not a dynamic dim of any model input (model dims: " + list + ")");
    }
  for (const auto& [name, sr] : p.shapes)
    if (!rp.inputs.count(name)) return InvalidArgument(where + ": shapes names input '" + name + "', which the model does not have");
  return rp;
}

Status check_profile_against_graph(const Graph& g, const ResolvedProfile& p) {
  const std::pair<ResolvedProfile::Point, const char*> points[] = {
      {ResolvedProfile::Point::kMin, "min"}, {ResolvedProfile::Point::kOpt, "opt"}, {ResolvedProfile::Point::kMax, "max"}};
  for (const auto& [point, label] : points) {
    Graph copy = g;
    std::string dims_text;
    for (const auto& [sym, r] : p.dims)
      dims_text += (dims_text.empty() ? "" : ", ") + sym + "=" + std::to_string(point == ResolvedProfile::Point::kMin ? r.min : point == ResolvedProfile::Point::kOpt ? r.opt : r.max);
    const std::string where = "profile '" + p.name + "' at " + label + " {" + dims_text + "}";
    Status st = specialize_inputs(copy, p.shapes_at(point));
    if (!st.ok()) return st.with_context(where);
    PassContext ctx;
    ctx.disabled = {"dead_node_elimination"};
    st = run_pass_pipeline(copy, ctx);
    if (!st.ok()) return st.with_context(where);
    for (auto& n : copy.nodes) {
      if (n.removed) continue;
      st = check_node_shapes(copy, n);
      if (!st.ok()) return st.with_context(where + ": the profile's dims contradict the graph");
    }
  }
  return Status::Ok();
}

StatusOr<std::shared_ptr<Plan>> build_profile_plan(const Graph& g, const ResolvedProfile& p,
                                                   const std::set<std::string>& disabled_passes, std::vector<std::string>* log,
                                                   bool attention_required, std::vector<AttentionSite>* sites) {
  Graph copy = g;
  // Fix what the profile fixes; ranged dims keep their symbols.
  std::map<std::string, Shape> fixed;
  for (int id : copy.inputs) {
    Value& v = copy.values[id];
    const InputRange& r = p.inputs.at(v.name);
    if (r.min == r.max) {
      fixed[v.name] = r.min;
    } else if (v.shape) {
      for (int d = 0; d < r.min.rank(); ++d)
        if (r.min[d] == r.max[d]) (*v.shape)[d] = Dim::known(r.min[d]);
    }
  }
  KILN_RETURN_IF_ERROR(specialize_inputs(copy, fixed));
  std::map<std::string, int64_t> fixed_symbols;
  for (const auto& [sym, r] : p.dims)
    if (r.fixed()) fixed_symbols[sym] = r.min;
  for (auto& v : copy.values)
    if (v.shape)
      for (auto& d : *v.shape)
        if (d.is_symbol() && fixed_symbols.count(d.symbol)) d = Dim::known(fixed_symbols[d.symbol]);
  PassContext ctx;
  ctx.disabled = disabled_passes;
  ctx.attention_required = attention_required;
  // Each ranged symbol's range, from the inputs that carry it (dims: or shapes:).
  for (int id : g.inputs) {
    const Value& v = g.values[id];
    const InputRange& r = p.inputs.at(v.name);
    for (size_t d = 0; v.shape && d < v.shape->size() && static_cast<int>(d) < r.min.rank(); ++d) {
      const Dim& decl = (*v.shape)[d];
      if (!decl.is_symbol() || r.min[d] == r.max[d]) continue;
      auto [it, fresh] = ctx.dim_ranges.try_emplace(decl.symbol, r.min[d], r.max[d]);
      if (!fresh) it->second = {std::max(it->second.first, r.min[d]), std::min(it->second.second, r.max[d])};
    }
  }
  KILN_RETURN_IF_ERROR(run_pass_pipeline(copy, ctx).with_context("profile '" + p.name + "'"));
  if (log) *log = ctx.log;
  if (sites) *sites = ctx.attention_sites;
  KILN_ASSIGN_OR_RETURN(auto plan, lower_to_plan(copy));
  plan->profile = p.name;
  for (int v : plan->inputs) {
    PlanValue& pv = plan->values[v];
    const InputRange& r = p.inputs.at(pv.name);
    pv.range_min = r.min.vec();
    pv.range_opt = r.opt.vec();
    pv.range_max = r.max.vec();
  }
  return plan;
}

}  // namespace kiln
