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
          auto it = p.dims.find(decl.sym_name());
          if (it != p.dims.end() && (it->second.min != dr.min || it->second.opt != dr.opt || it->second.max != dr.max))
            return InvalidArgument(dim_where + " ('" + decl.sym_name() + "'): shapes give " + std::to_string(dr.opt) + " but dims give " + std::to_string(it->second.opt));
          used_symbols.insert(decl.sym_name());
        }
      } else if (decl.is_known()) {
        dr = DimRange{decl.value, decl.value, decl.value};
      } else if (decl.is_symbol()) {
        auto it = p.dims.find(decl.sym_name());
        if (it == p.dims.end())
          return InvalidArgument(dim_where + " ('" + decl.sym_name() + "') is dynamic and the profile does not set it: add dims: {" + decl.sym_name() + ": ...}");
        dr = it->second;
        used_symbols.insert(decl.sym_name());
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
            if (!d.sym_name().empty()) known.insert(d.sym_name());
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return InvalidArgument(where + ": dim '" + sym + "' is not a dynamic dim of any model input (model dims: " + list + ")");
    }
  for (const auto& [name, sr] : p.shapes)
    if (!rp.inputs.count(name)) return InvalidArgument(where + ": shapes names input '" + name + "', which the model does not have");
  return rp;
}

}  // namespace kiln
