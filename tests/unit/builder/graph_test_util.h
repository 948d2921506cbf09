// Helpers shared by the pass tests.
#pragma once

#include <string>

#include "builder/graph.h"

namespace kiln::testing {

// Live (not removed) nodes of `op` in `g`.
inline int count_op(const Graph& g, const std::string& op) {
  int c = 0;
  for (const auto& n : g.nodes) c += !n.removed && n.op_type == op;
  return c;
}

}  // namespace kiln::testing
