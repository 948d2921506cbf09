// `engine-perf ab`: two engine files run interleaved on one machine, so the host's drift lands on
// both sides alike. Rounds go A B B A (each block after one untimed run, which gives the engine
// back the caches the other one took), on the same inputs. When the comparison is inconclusive,
// more rounds are run, up to a cap (as Chromium's Pinpoint does), before the verdict is given.
// Then each side's layers are profiled (alternating) for the attribution.
#pragma once

#include <functional>
#include <string>

#include "profiles/history/compare.h"
#include "profiles/history/run_record.h"
#include "runtime/status.h"

namespace kiln::history {

struct AbOptions {
  std::string profile;
  int rounds = 6;              // ABBA rounds before the first verdict
  int max_rounds = 18;         // cap, including the first
  int iterations = 8;          // timed runs per side per round (two blocks of half)
  int warmup = 3;
  int layer_runs = 3;
  double budget_ms = 100;
  std::string config;          // a build config whose input generators to use (optional)
  std::string label_a, label_b;
  CompareOptions compare;
};

struct AbResult {
  RunRecord a, b;
  Comparison comparison;
  int rounds_run = 0;
};

// How many times run_ab looks at the data: after the first `rounds`, then after each further batch
// of `rounds` up to `max_rounds`. The significance level is divided among them.
int ab_looks(int rounds, int max_rounds);

StatusOr<AbResult> run_ab(const std::string& engine_a, const std::string& engine_b, const AbOptions& opts,
                          const std::function<void(const std::string&)>& progress);

}  // namespace kiln::history
