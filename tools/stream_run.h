// engine-run --stream: runs an engine's streaming session (the `streaming` section engine-build
// recorded) over per-step input folders, as the user's control loop would.
#pragma once

#include <string>

#include "runtime/engine.h"
#include "runtime/status.h"

namespace kiln {

// DIR holds one folder per step, run in name order (step_000 = the cold start, step_001, ...), each
// with NAME.npy for every per-step input (not the state inputs, not a session-generated mask).
// Writes OUT/<step>/<output>.npy for every output, state outputs included (their full contents
// after the step), and prints one line per step.
Status run_stream(const std::string& engine_path, const std::string& dir, const std::string& out_dir, const LoadOptions& load);

}  // namespace kiln
