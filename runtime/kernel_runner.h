// Runs one kernel outside an execution plan: infer, allocate fresh outputs, prepare, run.
// Used by constant folding in the builder and by kernel tests; not for the hot path.
#pragma once

#include <vector>

#include "runtime/kernel.h"

namespace kiln {

StatusOr<std::vector<Tensor>> run_kernel_once(Kernel& kernel, std::span<const TensorView> inputs, int num_outputs);

// Creates the kernel for `op_type` from the builtin registry (impl empty = best) and runs it once.
StatusOr<std::vector<Tensor>> run_op_once(const std::string& op_type, const AttrMap& attrs,
                                          const std::vector<Tensor>& inputs, int num_outputs,
                                          const std::string& impl = {}, int opset = 17);

}  // namespace kiln
