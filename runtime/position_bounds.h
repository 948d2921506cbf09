// Position inputs of a step entry: a scalar input that a ScatterND uses as the row it writes in a
// fixed-size state (a decoder step's `cur_pos` into its cache [layers, batch, heads, max_len,
// d_kv], PyTorch's index_put / StaticCache). A position at or past the cache length is the caller
// running past the end (seed 001's "stop at max length"): Session checks it before the step runs,
// so the error names the position and the cache length instead of the ScatterND's index.
#pragma once

#include <string>
#include <vector>

#include "runtime/plan.h"

namespace kiln {

struct PositionBound {
  std::string position;  // the plan input holding the position (one integer)
  std::string data;      // the plan input the ScatterND chain updates
  int axis = 0;          // the axis of `data` the position indexes
  int64_t limit = 0;     // that axis' length
};

// Every (position, data, axis) of the plan's ScatterND updates whose indices are a Concat along
// the last axis of constant and one-column parts, one of which is a plan input through Unsqueeze /
// Expand / Reshape / Squeeze / Cast / Identity. Found at session creation, not per run.
std::vector<PositionBound> find_position_bounds(const Plan& plan);

}  // namespace kiln
