// Writes an engine file (format in runtime/engine_format.h): one plan per profile, weights stored
// once across profiles (deduplicated by storage and then by content), 64-byte aligned.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/engine_info.h"
#include "kiln/entry_spec.h"
#include "runtime/plan.h"
#include "runtime/streaming_spec.h"

namespace kiln {

struct EngineWriteInput {
  std::vector<std::shared_ptr<const Plan>> plans;   // one per profile, named by Plan::profile
  std::string source_model;
  std::string precision = "fp32";
  uint64_t required_cpu_features = 0;
  std::vector<PluginLibraryInfo> plugin_libraries;
  bool has_streaming = false;
  StreamingSpec streaming;
  int tactic_threads = 0;                              // threads the tactics were timed at; 0 = none timed
  std::map<std::string, InputGenerator> input_generators;
  std::vector<std::string> plan_entries;   // per plan, its entry (empty list = a single-model engine)
  std::vector<StateBufferSpec> state;
};

// Serializes to bytes (deterministic: the same input gives the same bytes).
StatusOr<std::string> serialize_engine(const EngineWriteInput& in);
// Writes atomically (temporary file + rename) so a failed build never leaves a half-written engine.
Status write_engine_file(const std::string& path, const EngineWriteInput& in, uint64_t* bytes_written = nullptr);

}  // namespace kiln
