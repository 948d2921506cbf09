// Optimization profiles on the graph: resolving a profile's dims/shapes into per-input
// min/opt/max shapes and checking them against the graph (builder/build_profile.h builds the
// profile's plan).
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

// Runs the pass pipeline once on the graph with the profile's ranged dims symbolic, then reads
// every node's shapes off it at the profile's min, opt and max (builder/shapes/shape_points.h):
// dims that contradict the graph (e.g. total_seq != cached_seq + new_seq) fail here, naming the
// profile, the point, the node and the shapes. build_profile() makes the same check on the graph
// it builds (defined in build_profile.cpp).
Status check_profile_against_graph(const Graph& g, const ResolvedProfile& p);

}  // namespace kiln
