// OpenMP wait policy for the command-line tools.
//
// libgomp's default lets idle worker threads spin between parallel regions. On a machine shared
// with other work (every machine kiln targets: a robot's computer runs more than the model) a
// spinning thread whose partner was descheduled turns a 1.5 ms inference into 400 ms, measured on
// this project's 2-core machine under load (small ControlTransformer: p50 1.56 ms passive vs 440 ms
// active). libgomp reads OMP_WAIT_POLICY only when it is loaded, so the tools re-execute themselves
// once with OMP_WAIT_POLICY=PASSIVE unless the user has set the variable (set it to ACTIVE to
// measure the spinning policy on an idle machine).
#pragma once

#include <unistd.h>

#include <cstdlib>

namespace kiln {

inline void use_passive_omp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);
  // execv only returns on failure: carry on with the default policy.
}

}  // namespace kiln
