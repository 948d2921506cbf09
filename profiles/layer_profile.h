// Per-layer profile of one ExecutionContext: a separate run (or a few) with the context's per-step
// profiling on, so the timed benchmark runs stay free of clock reads. Feeds the Chrome trace of
// `engine-run --profile-layers` and the "layers" / "by_op_type" entries of the build report.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "profiles/flop_count.h"
#include "runtime/execution_context.h"

namespace kiln {

struct LayerTiming {
  std::string name;
  std::string op_type;                       // "Domain::Op" for plugin steps, e.g. "kiln::Attention"
  double begin_ms = 0;                       // from the start of the (last) profiled run
  double ms = 0;                             // mean over the profiled runs
  std::vector<double> run_ms;                // each profiled run's time
  std::vector<std::string> replaced;         // ONNX nodes a fused step replaced
  std::vector<std::string> inputs, outputs;  // "float32[1,274,384]"; "" for an absent input
  FlopCount flops;
  FlopPrecision precision = FlopPrecision::kF32;  // of the counted FLOPs (the kernel that ran)
};

struct LayerProfile {
  std::vector<LayerTiming> steps;  // plan order
  double run_ms = 0;               // mean wall time of a profiled run (clock reads included)
  FlopCount flops;                 // sum over the steps
};

// Runs `ctx` (inputs bound) `runs` times with per-step profiling on, then turns profiling off.
StatusOr<LayerProfile> profile_layers(ExecutionContext& ctx, int runs);

// Indices of the `n` slowest steps, slowest first.
std::vector<size_t> slowest_steps(const LayerProfile& p, size_t n);
// Total ms per op type, largest first.
std::vector<std::pair<std::string, double>> ms_by_op_type(const LayerProfile& p);
// Counted GFLOP per op type (only types with FLOPs), largest first.
std::vector<std::pair<std::string, double>> gflop_by_op_type(const LayerProfile& p);
// Counted GFLOP per precision (index: FlopPrecision).
std::array<double, kFlopPrecisions> gflop_by_precision(const LayerProfile& p);

// The roofline of compute: the ms the counted FLOPs of the steps of `op_type` (all steps when
// empty) would take at their own precision's peak (`peak_gflops` by FlopPrecision; a precision
// with FLOPs but no peak makes it 0, "unknown").
double ideal_ms(const LayerProfile& p, const std::array<double, kFlopPrecisions>& peak_gflops, const std::string& op_type = "");
// Per op type with FLOPs: the fraction of the roofline its profiled time reaches (ideal_ms / ms).
std::vector<std::pair<std::string, double>> peak_fraction_by_op_type(const LayerProfile& p,
                                                                     const std::array<double, kFlopPrecisions>& peak_gflops);

// The Chrome trace event format (one "X" event per step, times in µs), which Perfetto and
// chrome://tracing open. `other_data` goes to "otherData" as strings.
std::string chrome_trace_json(const LayerProfile& p, const std::vector<std::pair<std::string, std::string>>& other_data);

// `"layers": [{name, op_type, ms} of the top_n slowest], "by_op_type": {op: ms},
// "gflop_by_op_type": {op: gflop}, "gflop_by_precision": {f32: gflop, ...}` for a JSON object, and
// with peaks `"peak_fraction_by_op_type": {op: fraction}`.
std::string layer_summary_json(const LayerProfile& p, size_t top_n, const std::array<double, kFlopPrecisions>* peak_gflops = nullptr);
// `"layer_runs": N, "all_layers": [{name, op_type, replaced: [...], ms: [run 1, ..., run N]}]`:
// every step in plan order, for the history.
std::string all_layers_json(const LayerProfile& p);

}  // namespace kiln
