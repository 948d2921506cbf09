// engine-run's in-memory build (build_plan: the one build path, builder/build_profile.h, at the
// input shapes given), and the steps of that path that bind shapes and lower a graph to a Plan.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>

#include "builder/graph.h"
#include "builder/passes/pass.h"
#include "builder/plan/plan_passes.h"
#include "runtime/plan.h"

namespace kiln {

struct BuildOptions {
  // Concrete shapes for graph inputs (engine-run builds for the shapes it was given). Inputs not
  // listed keep their declared (possibly symbolic) shapes.
  std::map<std::string, Shape> input_shapes;
  std::set<std::string> disabled_passes;  // graph and plan pass names
  PlanHook tactics;                       // tactic selection; none = best-ranked kernels
};

// Binds input shapes: checks rank and static dims, binds each dim_param symbol to one value across
// all inputs (a conflict names both inputs), and substitutes the bound symbols everywhere.
Status specialize_inputs(Graph& g, const std::map<std::string, Shape>& shapes);

StatusOr<std::shared_ptr<Plan>> lower_to_plan(const Graph& g);

// build_profile() with the inputs fixed at `options.input_shapes`; `log` (optional) receives the
// passes' rewrite log.
StatusOr<std::shared_ptr<Plan>> build_plan(Graph g, const BuildOptions& options, std::vector<std::string>* log = nullptr);

}  // namespace kiln
