// Multi-entry builds (engine-build's `entries:` and `state:`, docs/multi_entry.md): checking that
// every binding of a state buffer agrees on one fixed dtype and shape.
#pragma once

#include <string>
#include <vector>

#include "builder/build_config.h"
#include "builder/build_profile.h"
#include "runtime/entry_spec.h"

namespace kiln {

// `profiles[i]` was built for entry `plan_entries[i]`. Each bound input or output must exist in
// every profile of its entry with one fixed shape (min = opt = max), and all bindings of a buffer
// must agree on dtype, rank and every dim. Errors are one line naming the config line, the state,
// the entry, the tensor and the dim, e.g.
//   seq2seq.yaml:40: state 'cache_k': entry 'step' input 'cache_k' dim 3 is 64, but entry 'prefill' output 'cache_k' has 128
StatusOr<std::vector<StateBufferSpec>> check_state_bindings(const BuildConfig& cfg, const std::vector<BuiltProfile>& profiles,
                                                            const std::vector<std::string>& plan_entries);

}  // namespace kiln
