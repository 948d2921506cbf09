// The build half of engine-build: config -> ONNX import -> per-profile resolve, check and plan ->
// one engine file. Progress is reported through a callback so the CLI can print it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "builder/build_config.h"
#include "builder/build_profile.h"
#include "runtime/plan.h"
#include "runtime/streaming_spec.h"

namespace kiln {

struct BuildResult {
  std::string engine_path;
  uint64_t engine_bytes = 0;
  uint64_t model_bytes = 0;       // ONNX file plus external data files
  std::vector<BuiltProfile> profiles;
  std::map<std::string, DType> input_dtypes;
};

using ProgressFn = std::function<void(const std::string&)>;

// The streaming session spec of the config's `streaming` section (the session generates the mask
// input whose generator is block_causal).
StreamingSpec streaming_spec(const BuildConfig& cfg);

// `tune` runs as the tactic_selection plan pass of every profile (builder/plan/plan_passes.h).
// precision: int8: `calibrate` gives the activation scale of each int8 candidate step (by name),
// measured on the fp32 plan of the calibration profile (profiles/calibration.h does it for
// engine-build).
using CalibrateHook = std::function<StatusOr<std::map<std::string, float>>(const Plan& fp32_plan, const ResolvedProfile& profile)>;

// The precision the build uses: the config's, lowered where this CPU lacks it (bf16 without
// AVX512_BF16 builds fp32; int8 runs its non-quantized steps in bf16 only where bf16 runs).
bool host_has_bf16();

StatusOr<BuildResult> build_engine(const BuildConfig& cfg, const ProgressFn& progress, const PlanHook& tune = {},
                                   const CalibrateHook& calibrate = {});

}  // namespace kiln
