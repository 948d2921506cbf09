// In-context refinement of tactic choices.
//
// Tactic selection times each candidate kernel alone on one step's inputs, best of 5 runs: its
// weights, inputs and scratch stay in cache between runs. Inside a whole run they do not (ResNet-18
// reads ~47 MB of weights per image on a CPU with a few MB of L2 per core), and kernels trade
// multiplies for memory traffic differently: oneDNN's Winograd convolution reads 1.8x (F(2x2,3x3))
// to 4x (F(4x4,3x3)) the weights of the direct one. So on ResNet-18 at batch 2 the isolated timing
// can put layer3's 3x3 convolutions on Winograd while inside the network the direct convolution,
// whose weights stay in cache, is the faster.
//
// So the steps whose isolated runner-up came within kContestedRatio of the best (and whose cache
// key, all the steps sharing it together, takes at least kContestedMinShare of a run: whole runs
// cannot resolve less, and cost seconds on a large transformer) are decided again inside the network: the plan runs with every contested step on
// its isolated best (A) and on its runner-up (B), alternating, with per-step timing, and each
// contested key takes the candidate with the smaller summed per-step median. That mix is then
// judged by whole runs against A, B and the plans with every contested key on one thread system
// (whole_run_picks), and kept unless one of them has the smaller median run time. Per-step times
// cannot judge these: a step's time depends on its neighbours' choices (the layout a value is kept
// in follows both ends' kernels), and a step on kiln's pool between oneDNN steps makes the next
// oneDNN step wake OpenMP's sleeping worker (and the other way round), a cost charged to whichever
// step comes next, often one not contested (mnasnet0_5: its per-step mix of pool and oneDNN
// convolutions ran 1.2x the time of the all-oneDNN and all-pool plans).
#pragma once

#include <string>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/plan.h"
#include "runtime/tensor.h"

namespace kiln {

// Isolated times within this ratio of the best are re-judged in context, for keys whose best
// isolated time, times the steps sharing the key, is at least this share of a whole run. The share
// admits DenseNet's 1x1 convolutions (each its own key, 0.5-1 % of a run), whose isolated choice
// between im2col_panel and oneDNN flips with the machine's load; a step of 0.3 % of a run is still
// timed well above the clock's resolution.
constexpr double kContestedRatio = 2.0;
constexpr double kContestedMinShare = 0.003;

// The steps sharing one timing-cache key (they take one choice, as the cache can hold only one).
struct ContestedKey {
  std::vector<size_t> steps;
  std::string first, second;            // the isolated best and runner-up
  double first_ms = 0, second_ms = 0;   // filled: summed per-step medians inside whole runs
  std::string chosen;                   // filled
};

// The plans whole runs judge, as one choice per contested key: A (every `first`), B (every
// `second`), `mix`, and `mix` with every key whose sides run on different thread systems
// (impl_runs_on_openmp_team) put on OpenMP's team, then on kiln's pool; without repeats.
std::vector<std::vector<std::string>> whole_run_picks(const std::vector<ContestedKey>& contested, const std::vector<std::string>& mix);

// Decides every entry of `contested` by whole runs of variants of `plan` on `inputs` (by plan
// input index) and sets the steps' impls in `plan` to the choices. Each variant gets the layout
// rewrite of builder/plan/plan_winograd_layout.h before it runs, as the final plan will.
Status refine_in_context(Plan& plan, std::vector<ContestedKey>& contested, const std::vector<Tensor>& inputs,
                         const KernelRegistry& registry = KernelRegistry::builtin(), int rounds = 7);

}  // namespace kiln
