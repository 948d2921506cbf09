// A practical f32 compute peak of this machine: an n x n x n sgemm through the project's own oneDNN
// MatMul kernel, at the current OpenMP thread count. The build report divides each profile's
// GFLOP/s by it, so "fraction of peak" means "of what our best kernel reaches on a large square
// matmul here", not a datasheet figure.
#pragma once

#include "runtime/status.h"

namespace kiln {

struct MatmulPeak {
  double gflops = 0;  // best run
  int n = 0;
  int runs = 0;
};

// One warm-up, then the best of `runs` timed runs (best, not median: the machine may be shared,
// and interference only ever slows a run down; under sustained load even the best run is low, so
// the peak is a lower bound and a fraction of it an upper bound).
StatusOr<MatmulPeak> measure_matmul_peak(int n = 1024, int runs = 20);

}  // namespace kiln
