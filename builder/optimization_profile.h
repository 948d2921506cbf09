// Optimization profiles on the graph: resolving a profile's dims/shapes into per-input
// min/opt/max shapes, checking them against the graph, and building the profile's plan.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "builder/build_config.h"
#include "builder/graph.h"
#include "builder/passes/pass.h"
#include "runtime/plan.h"

namespace kiln {

struct InputRange {
  Shape min, opt, max;
};

struct ResolvedProfile {
  std::string name;
  std::vector<std::string> input_order;           // graph input order
  std::map<std::string, InputRange> inputs;
  std::map<std::string, DimRange> dims;           // symbol -> range, as resolved

  // Shapes of every input at one point of the range.
  enum class Point { kMin, kOpt, kMax };
  std::map<std::string, Shape> shapes_at(Point p) const;
};

// Every dynamic dim of every input must be set by `dims` (by dim_param name) or `shapes` (by
// input); errors name the profile, input, dim and value.
StatusOr<ResolvedProfile> resolve_profile(const Graph& g, const ProfileConfig& p);

// Specializes a copy of the graph at the profile's min, opt and max shapes and infers every node:
// dims that contradict the graph (e.g. total_seq != cached_seq + new_seq) fail here, naming the
// profile, the point, the node and the shapes.
Status check_profile_against_graph(const Graph& g, const ResolvedProfile& p);

// Builds the profile's plan: dims fixed by the profile (min == max) become constants, so their
// shape subgraphs fold; ranged dims stay symbolic and are resolved at run time.
// `attention_required`: an attention-like site the fusion pass cannot fuse fails the build.
// `sites` (optional) receives every attention-like site, fused or not (with the reason).
StatusOr<std::shared_ptr<Plan>> build_profile_plan(const Graph& g, const ResolvedProfile& p,
                                                   const std::set<std::string>& disabled_passes,
                                                   std::vector<std::string>* log = nullptr, bool attention_required = false,
                                                   std::vector<AttentionSite>* sites = nullptr);

}  // namespace kiln
