// The build half of engine-build: config -> ONNX import -> per-profile resolve, check and plan ->
// one engine file. Progress is reported through a callback so the CLI can print it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "builder/build_config.h"
#include "builder/profile_builder.h"
#include "runtime/plan.h"

namespace kiln {

struct BuiltProfile {
  ResolvedProfile profile;
  std::shared_ptr<Plan> plan;
  std::shared_ptr<Plan> fp32_plan;  // precision bf16 only: the same plan with fp32 kernels, for the error report
  std::vector<std::string> pass_log;
  std::vector<AttentionSite> attention_sites;  // every attention-like site, fused or with the reason not
};

struct BuildResult {
  std::string engine_path;
  uint64_t engine_bytes = 0;
  uint64_t model_bytes = 0;       // ONNX file plus external data files
  std::vector<BuiltProfile> profiles;
  std::map<std::string, DType> input_dtypes;
};

using ProgressFn = std::function<void(const std::string&)>;

StatusOr<BuildResult> build_engine(const BuildConfig& cfg, const ProgressFn& progress);

}  // namespace kiln
