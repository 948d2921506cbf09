// Options engine-build and engine-run share: which plugin libraries an engine may load, the memory
// cap and locking, and how kiln's threads are scheduled (team size, pinning, SCHED_FIFO).
#pragma once

#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/thread_pool.h"

namespace kiln {

struct RunOptions {
  LoadOptions load;
  ThreadPoolOptions pool;
  bool configure_pool = false;   // any scheduling option given
};

// The --help lines for these options.
extern const char* const kRunOptionsHelp;

// If argv[*i] is one of these options, consumes it (and its value, advancing *i) into `o` and
// returns true. Errors name the option and the value.
StatusOr<bool> parse_run_option(int argc, char** argv, int* i, RunOptions* o);

// Applies the memory cap (the option, else KILN_MAX_MEMORY, which is validated here) and the
// scheduling options. A scheduling request the system refuses (SCHED_FIFO without permission) is
// printed as a one-line warning and the run continues at normal priority.
Status apply_run_options(RunOptions* o, const char* tool);

}  // namespace kiln
