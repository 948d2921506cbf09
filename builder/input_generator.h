// Deterministic benchmark/validation inputs from the config's generators (uniform, randint, zeros,
// ones, causal, block_causal). Defaults: uniform [0, 1) for floats, zeros for integers, all-true
// for bool.
#pragma once

#include <string>

#include "builder/build_config.h"
#include "runtime/tensor.h"

namespace kiln {

// `gen` may be null (defaults). The same (name, spec, shape) always gives the same tensor.
StatusOr<Tensor> generate_input(const std::string& name, DType dtype, const Shape& shape, const InputGenerator* gen);

// Writes a [new, total] bool mask: query i (absolute position total - new + i) may attend key j
// iff j's block <= i's block (block = 0: plain causal, j <= position).
Status fill_block_causal_mask(const TensorView& mask, int64_t block);

}  // namespace kiln
