// How many threads the next OpenMP region (a oneDNN primitive) gets.
//
// oneDNN (Debian's build) runs its primitives on OpenMP, whose regions split the work statically
// and end in a barrier: every thread of the team must be running for a region to finish. When
// another process holds the second core, each region waits for the sleeping OpenMP worker to be
// scheduled there, and the scheduler takes its time: on a 2-core EPYC with two compiler jobs
// beside it, mnasnet0_5 ran p50 114 ms with 2 OpenMP threads and 7 ms with 1. kiln's own pool hands
// a late thread's chunks to the others (runtime/thread_pool.h); OpenMP cannot, so kiln asks before
// each primitive instead: every few milliseconds an empty region measures how long the team's
// workers take to join, and while that is longer than a region can afford, primitives run on the
// calling thread alone (backing off from 1 to 64 ms between probes, as the pool benches a late
// worker). On an idle machine the probe costs one short region per interval.
//
// KILN_OPENMP_TEAM=fixed keeps OpenMP's own team size (for A/B measurements in one binary);
// KILN_OPENMP_TEAM=solo runs every region on the calling thread (tests of the one-thread path).
#pragma once

#include <cstdint>
#include <string_view>

namespace kiln {

// The scope of one OpenMP region (a oneDNN primitive's execution): while the team is late, the
// calling thread's OpenMP team is 1 inside it. Outside, the team keeps its default size, so
// primitives are always created for the full team: a primitive may run on fewer threads than it
// was created for (oneDNN sizes per-thread scratch at creation), never on more.
class OpenmpRegionScope {
 public:
  OpenmpRegionScope();
  ~OpenmpRegionScope();
  OpenmpRegionScope(const OpenmpRegionScope&) = delete;
  OpenmpRegionScope& operator=(const OpenmpRegionScope&) = delete;
  // Whether the region runs on the calling thread alone (oneDNN kernels then run their one-thread
  // primitive: a primitive keeps the thread count it was made with).
  bool solo() const { return restore_ > 0; }

 private:
  int restore_ = 0;  // the team size to put back, 0 when unchanged
};

struct OpenmpTeamStats {
  uint64_t probes = 0;        // empty regions run to time the workers
  uint64_t late_probes = 0;   // probes whose workers joined too late (the team then shrank)
  uint64_t solo_regions = 0;  // regions sized to 1 thread (oneDNN) or sent to kiln's workers (the pool) because the team was late
};
OpenmpTeamStats openmp_team_stats();

// A region just waited far too long for a worker (kiln's pool on OpenMP's team): the following
// regions run solo, as after a late probe.
void report_late_openmp_team();

// Whether kernels of implementation `impl` run their work in OpenMP regions (oneDNN primitives for
// the team) rather than on kiln's pool or inline. A run that switches between the two pays a
// wake-up at each switch (the other system's worker went to sleep meanwhile), which no isolated
// timing of one step sees; tactic refinement tries whole runs on one system (tactic_refinement.h).
// By name: every oneDNN kernel's impl starts with "onednn"; "onednn_split" runs one-thread
// primitives as chunks of kiln's pool.
bool impl_runs_on_openmp_team(std::string_view impl);

}  // namespace kiln
