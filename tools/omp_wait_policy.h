// OpenMP wait policy for the command-line tools.
//
// libgomp's default lets idle worker threads spin for ~300k iterations between parallel regions
// (and forever with OMP_WAIT_POLICY=ACTIVE). On a machine shared with other work (every machine
// kiln targets: a robot's computer runs more than the model) a spinning thread whose partner was
// descheduled takes the core its partner needs, and a millisecond's inference can take hundreds
// under load. Sleeping at once costs a wake-up per parallel region instead, which a model of many
// short regions (resnet18) pays on every run. So the tools wait passively after a short spin
// (bench/RESULTS.md has the measurements). libgomp reads these variables only when it is
// loaded, so the tools re-execute themselves once with OMP_WAIT_POLICY=PASSIVE and
// GOMP_SPINCOUNT=10000 unless the user has set either variable (set OMP_WAIT_POLICY=ACTIVE to
// measure the spinning policy).
#pragma once

#include <unistd.h>

#include <cstdlib>

namespace kiln {

inline void use_passive_omp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::setenv("GOMP_SPINCOUNT", "10000", 1);
  ::execv("/proc/self/exe", argv);
  // execv only returns on failure: carry on with the default policy.
}

}  // namespace kiln
