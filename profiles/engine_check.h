// The check half of engine-build: the engine loaded back through the runtime is run at each
// profile's min, opt and max shapes and compared with the plans that were serialized, then each
// profile is benchmarked at its opt shapes against the control-loop budget.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "builder/engine_build_job.h"
#include "profiles/benchmark.h"
#include "profiles/layer_profile.h"
#include "profiles/matmul_peak.h"
#include "runtime/engine.h"

namespace kiln {

struct ProfileCheck {
  std::string profile;
  std::vector<std::string> points;     // "min", "opt", "max" (distinct ones)
  double max_abs_diff = 0;             // loaded engine vs in-memory plan
  bool benchmarked = false;
  BenchmarkResult bench;
  double first_run_ms = 0;             // first run of a context prepared for the profile
  std::map<std::string, Shape> opt_shapes;
  LayerProfile layers;                 // separate profiling runs after the benchmark (benchmarked only)
  std::string trace_path;              // a Chrome trace of the profiled run, when one was written
  // Counted FLOPs at opt over the p50 latency (0 if not benchmarked).
  double gflops_per_s() const;
  // The roofline fraction: the time the counted FLOPs take at each one's own precision's peak,
  // over the p50 latency (0 if not benchmarked or a used precision has no peak).
  double peak_fraction(const MatmulPeaks& peaks) const;
  // precision bf16 / int8 ("lowp"): per output, the largest |lowp - fp32| over the validation
  // points (and for int8 the held-out batches), the largest |fp32| (the scale the tolerance is
  // relative to), and whether every output is within tolerance.
  std::string lowp;  // "bf16", "int8" or "" (fp32 engine)
  double lowp_tolerance = 0;
  std::map<std::string, double> lowp_max_abs_err, fp32_max_abs;
  bool lowp_within_tolerance = true;
  int holdout_batches = 0;  // int8: held-out batches compared beyond the validation points
};

// bf16 outputs may differ from fp32 by this fraction of max(1, max |fp32 output|) (README: bf16).
constexpr double kBf16Tolerance = 0.02;

// Generates the inputs of `profile` at `shapes`, with the config's generators.
StatusOr<std::vector<std::pair<std::string, Tensor>>> generate_profile_inputs(
    const ExecutionContext& ctx, const std::map<std::string, Shape>& shapes, const std::map<std::string, InputGenerator>& gens);

StatusOr<std::vector<ProfileCheck>> check_engine(const Engine& engine, const BuildResult& built, const BuildConfig& cfg,
                                                 bool benchmark, const std::function<void(const std::string&)>& progress);

// The precisions the benchmarked profiles' counted FLOPs ran in (what measure_matmul_peaks needs).
std::set<FlopPrecision> used_precisions(const std::vector<ProfileCheck>& checks);

// engine-build's REPORT.json. peaks null: not measured (no peak fractions). `extra` maps further
// top-level keys to JSON values (e.g. "streaming"); `machine_fields` is appended to the "machine"
// object (", \"key\": value, ..."). A benchmarked profile lists every timed iteration
// ("samples_ms") and every step of the profiled runs ("all_layers").
std::string build_report_json(const BuildResult& built, const BuildConfig& cfg, const std::vector<ProfileCheck>& checks,
                              double build_seconds, const MatmulPeaks* peaks = nullptr,
                              const std::map<std::string, std::string>& extra = {}, const std::string& machine_fields = "");

}  // namespace kiln
