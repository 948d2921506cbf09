// A Plan is what the builder produces and the runtime executes: an ordered list of steps over
// numbered values, plus the constant tensors (weights) they read. It is immutable once built and
// shared by every ExecutionContext created from it.
#pragma once

#include <string>
#include <vector>

#include "runtime/attributes.h"
#include "runtime/tensor.h"

namespace kiln {

struct PlanValue {
  std::string name;
  DType dtype = DType::kUndefined;
  int constant = -1;                 // index into Plan::constants, or -1
  // For graph inputs: the declared dims, -1 where dynamic, and the dim names ("" if unnamed).
  std::vector<int64_t> dims;
  std::vector<std::string> dim_names;
  bool has_declared_shape = false;
};

struct PlanStep {
  std::string name;
  std::string op_type;
  std::string domain;
  std::string impl;                  // kernel implementation to use; empty = best available
  AttrMap attrs;
  std::vector<int> inputs;           // value ids, -1 = absent
  std::vector<int> outputs;
  std::vector<std::string> replaced_nodes;  // for fused steps, the ONNX nodes they stand for
};

struct Plan {
  int opset = 17;
  std::vector<PlanValue> values;
  std::vector<Tensor> constants;
  std::vector<PlanStep> steps;
  std::vector<int> inputs;
  std::vector<int> outputs;

  int find_value(const std::string& name) const {
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i].name == name) return static_cast<int>(i);
    return -1;
  }
};

}  // namespace kiln
