// Unfused kiln::Attention for tests: the plain formula with every score materialized, in double.
#pragma once

#include <span>

#include "plugins/attention/attention_common.h"

namespace kiln::attention {

// Writes every output (out, and k_all / v_all with a cache). The inputs must have passed
// validate_inputs(); outputs must not alias inputs.
Status reference_attention(const Params& p, std::span<const TensorView> inputs, std::span<const TensorView> outputs);

}  // namespace kiln::attention
