// The practical compute peak of each precision on this machine: an n x n x n matmul through the
// project's own kernel of that precision (f32: the oneDNN MatMul kernel; bf16: its bf16 variant,
// A converted per run as in an engine; int8: the int8 FusedMatMul kernel, A quantized per run), at
// the current OpenMP thread count. The build report divides each step's FLOPs by the peak of the
// precision it ran in, so "fraction of peak" means "of what our best kernel of that precision
// reaches on a large square matmul here", not a datasheet figure.
#pragma once

#include <array>
#include <set>

#include "profiles/flop_count.h"
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
StatusOr<MatmulPeak> measure_matmul_peak(FlopPrecision precision = FlopPrecision::kF32, int n = 1024, int runs = 20);

// GFLOP/s by FlopPrecision; 0 where not measured.
using MatmulPeaks = std::array<double, kFlopPrecisions>;
// f32 always, and every precision in `used`.
StatusOr<MatmulPeaks> measure_matmul_peaks(const std::set<FlopPrecision>& used, int n = 1024, int runs = 20);

}  // namespace kiln
