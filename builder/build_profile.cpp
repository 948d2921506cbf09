#include "builder/build_profile.h"

#include <algorithm>
#include <array>

#include "builder/plan/build_plan.h"
#include "builder/shapes/shape_points.h"
#include "runtime/kernel.h"

namespace kiln {

namespace {

using Point = ResolvedProfile::Point;

// The graph with what the profile fixes (min == max) specialized: whole inputs become concrete,
// single dims of ranged inputs become sizes, and so do fixed dim symbols wherever they appear.
StatusOr<Graph> specialize_fixed(const Graph& g, const ResolvedProfile& p) {
  Graph copy = g;
  std::map<std::string, Shape> fixed;
  for (int id : copy.inputs) {
    Value& v = copy.values[id];
    auto it = p.inputs.find(v.name);
    if (it == p.inputs.end()) continue;
    const InputRange& r = it->second;
    if (r.min == r.max) {
      fixed[v.name] = r.min;
    } else if (v.shape) {
      for (int d = 0; d < r.min.rank(); ++d)
        if (r.min[d] == r.max[d]) (*v.shape)[d] = Dim::known(r.min[d]);
    }
  }
  KILN_RETURN_IF_ERROR(specialize_inputs(copy, fixed));
  SymbolValues fixed_symbols;
  for (const auto& [sym, r] : p.dims)
    if (r.fixed()) fixed_symbols[sym] = r.min;
  if (!fixed_symbols.empty())
    for (auto& v : copy.values)
      if (v.shape)
        for (auto& d : *v.shape) d = dim_substitute(d, fixed_symbols);
  return copy;
}

// Each ranged symbol's range, from the inputs that carry it (dims: or shapes:).
DimRanges ranged_symbols(const Graph& g, const ResolvedProfile& p) {
  DimRanges ranges;
  for (int id : g.inputs) {
    const Value& v = g.values[id];
    auto it = p.inputs.find(v.name);
    if (it == p.inputs.end()) continue;
    const InputRange& r = it->second;
    for (size_t d = 0; v.shape && d < v.shape->size() && static_cast<int>(d) < r.min.rank(); ++d) {
      const std::string& sym = (*v.shape)[d].sym_name();
      if (sym.empty() || r.min[d] == r.max[d]) continue;
      auto [at, fresh] = ranges.try_emplace(sym, r.min[d], r.max[d]);
      if (!fresh) at->second = {std::max(at->second.first, r.min[d]), std::min(at->second.second, r.max[d])};
    }
  }
  return ranges;
}

// "at min {cached_seq=274, new_seq=274}"
std::string point_text(const ResolvedProfile& p, Point point) {
  std::string dims;
  for (const auto& [sym, r] : p.dims)
    dims += (dims.empty() ? "" : ", ") + sym + "=" + std::to_string(point == Point::kMin ? r.min : point == Point::kOpt ? r.opt : r.max);
  return std::string(point == Point::kMin ? "min" : point == Point::kOpt ? "opt" : "max") + " {" + dims + "}";
}

// The graph after the pass pipeline ran once on it with what the profile fixes specialized.
struct ProfileGraph {
  Graph graph;
  PassContext ctx;
};

StatusOr<ProfileGraph> run_profile_pipeline(const Graph& g, const ResolvedProfile& p, const std::set<std::string>& disabled,
                                            bool attention_required) {
  ProfileGraph out;
  KILN_ASSIGN_OR_RETURN(out.graph, specialize_fixed(g, p));
  out.ctx.disabled = disabled;
  out.ctx.attention_required = attention_required;
  out.ctx.dim_ranges = ranged_symbols(g, p);
  KILN_RETURN_IF_ERROR(run_pass_pipeline(out.graph, out.ctx).with_context("profile '" + p.name + "'"));
  return out;
}

// Every value's shape at the profile's min, opt and max, read off the built graph: a point whose
// dims contradict the graph fails, naming the profile, the point and the node.
using PointDescs = std::vector<std::optional<TensorDesc>>;
StatusOr<std::array<PointDescs, 3>> shapes_at_points(const Graph& built, const ResolvedProfile& p) {
  KILN_ASSIGN_OR_RETURN(ShapeEvaluator eval, ShapeEvaluator::create(built));
  std::array<PointDescs, 3> out;
  std::vector<std::map<std::string, Shape>> seen;
  for (Point point : {Point::kMin, Point::kOpt, Point::kMax}) {
    auto shapes = p.shapes_at(point);
    const size_t i = static_cast<size_t>(point);
    // A fixed profile's three points are one.
    auto same = std::find(seen.begin(), seen.end(), shapes);
    if (same != seen.end()) {
      out[i] = out[static_cast<size_t>(same - seen.begin())];
      seen.push_back(std::move(shapes));
      continue;
    }
    auto descs = eval.at(shapes);
    if (!descs.ok())
      return descs.status().with_context("profile '" + p.name + "' at " + point_text(p, point) + ": the profile's dims contradict the graph");
    out[i] = std::move(descs).value();
    seen.push_back(std::move(shapes));
  }
  return out;
}

// Each plugin step's input ranges over the three points (steps whose inputs are not all known
// at the three points are left out, and not configured).
std::map<std::string, std::vector<PluginInputRange>> plugin_input_ranges(const Graph& built, const std::array<PointDescs, 3>& at) {
  std::map<std::string, std::vector<PluginInputRange>> out;
  for (const Node& n : built.nodes) {
    if (n.removed || is_kernel_domain(n.domain)) continue;
    std::vector<PluginInputRange> ranges;
    bool known = true;
    for (int v : n.inputs) {
      if (v < 0) {
        ranges.push_back(PluginInputRange{});
        continue;
      }
      const auto &lo = at[0][v], &mid = at[1][v], &hi = at[2][v];
      known = lo && mid && hi && lo->dtype == hi->dtype;
      if (!known) break;
      ranges.push_back(PluginInputRange{lo->dtype, lo->shape, mid->shape, hi->shape});
    }
    if (known) out[n.name] = std::move(ranges);
  }
  return out;
}

}  // namespace

StatusOr<std::shared_ptr<Plan>> build_profile_plan(const Graph& g, const ResolvedProfile& p, const std::set<std::string>& disabled_passes,
                                                   std::vector<std::string>* log, bool attention_required, std::vector<AttentionSite>* sites) {
  ProfileBuildOptions options;
  options.disabled_passes = disabled_passes;
  options.attention_required = attention_required;
  KILN_ASSIGN_OR_RETURN(BuiltProfile built, build_profile(g, p, options));
  if (log) *log = built.pass_log;
  if (sites) *sites = built.attention_sites;
  return built.plan;
}

Status check_profile_against_graph(const Graph& g, const ResolvedProfile& p) {
  KILN_ASSIGN_OR_RETURN(ProfileGraph pg, run_profile_pipeline(g, p, {}, false));
  return shapes_at_points(pg.graph, p).status();
}

std::vector<std::string> all_pass_names() {
  std::vector<std::string> names = pass_names();
  for (const auto& n : plan_pass_names()) names.push_back(n);
  return names;
}

StatusOr<BuiltProfile> build_profile(const Graph& g, const ResolvedProfile& p, const ProfileBuildOptions& options) {
  const std::string where = "profile '" + p.name + "'";
  const std::vector<std::string> plan_names = plan_pass_names();
  std::set<std::string> graph_disabled, plan_disabled;
  for (const auto& name : options.disabled_passes) {
    if (std::find(plan_names.begin(), plan_names.end(), name) != plan_names.end()) plan_disabled.insert(name);
    else graph_disabled.insert(name);  // run_pass_pipeline rejects a name that is neither
  }
  KILN_ASSIGN_OR_RETURN(ProfileGraph pg, run_profile_pipeline(g, p, graph_disabled, options.attention_required));
  KILN_ASSIGN_OR_RETURN(auto at_points, shapes_at_points(pg.graph, p));

  BuiltProfile out;
  out.profile = p;
  out.pass_log = pg.ctx.log;
  out.attention_sites = pg.ctx.attention_sites;
  KILN_ASSIGN_OR_RETURN(out.plan, lower_to_plan(pg.graph));
  out.plan->profile = p.name;
  for (int v : out.plan->inputs) {
    PlanValue& pv = out.plan->values[v];
    auto it = p.inputs.find(pv.name);
    if (it == p.inputs.end()) continue;
    pv.range_min = it->second.min.vec();
    pv.range_opt = it->second.opt.vec();
    pv.range_max = it->second.max.vec();
  }

  PlanPassContext pctx;
  pctx.profile = &p;
  pctx.disabled = plan_disabled;
  pctx.bf16 = options.bf16;
  pctx.tactics = options.tactics;
  pctx.int8_scales = options.int8_scales;
  pctx.precision_overrides = &options.precision_overrides;
  pctx.plugin_inputs = plugin_input_ranges(pg.graph, at_points);
  KILN_RETURN_IF_ERROR(run_plan_passes(*out.plan, pctx).with_context(where));
  out.fp32_plan = pctx.fp32_plan;
  out.fp32_ops = pctx.fp32_ops;
  out.pass_log.insert(out.pass_log.end(), pctx.log.begin(), pctx.log.end());
  return out;
}

}  // namespace kiln
