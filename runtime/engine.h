// Engine: an immutable, thread-shareable engine loaded from a file (weights mmap'd, not copied) or
// from memory. It lists its optimization profiles and their bindings and creates execution
// contexts; any number of contexts, on any threads, may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/execution_context.h"
#include "runtime/plan.h"
#include "runtime/streaming_spec.h"

namespace kiln {

struct BindingInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape min, opt, max;         // inputs only; outputs have no range
  std::vector<std::string> dim_names;
};

struct ProfileInfo {
  std::string name;
  std::vector<BindingInfo> inputs;
  std::vector<BindingInfo> outputs;
};

struct EngineInfo {
  uint32_t format_version = 0;
  std::string producer;
  std::string source_model;
  std::string precision;
  uint64_t required_cpu_features = 0;
  uint64_t file_bytes = 0;
  uint64_t weight_bytes = 0;
  size_t weight_count = 0;
  std::vector<std::string> plugin_libraries;
  bool has_streaming = false;     // engine-build's `streaming` section, for StreamingSession
  StreamingSpec streaming;
};

// How an engine is loaded (docs/security.md says what is checked and what is trusted).
struct LoadOptions {
  // Plugin libraries the engine file may make kiln open. An engine records the libraries its
  // plugins came from; one is opened only if the caller has loaded it already
  // (PluginRegistry::load_library), lists it here (any path naming the same file), or it sits
  // directly in one of `plugin_dirs`. Anything else fails the load naming the library: an engine
  // file from elsewhere never makes kiln run code the caller did not choose.
  std::vector<std::string> allowed_plugins;
  std::vector<std::string> plugin_dirs;
  // When nonzero, sets the process's memory cap (runtime/memory_budget.h) before loading.
  uint64_t max_memory = 0;
  // Touch every page of the weights at load, so no run takes their page faults.
  bool prefault = true;
  // mlock the engine image, and lock later allocations too (mlockall MCL_FUTURE): no page of a
  // running model is swapped out. Failure (RLIMIT_MEMLOCK) is an error saying how to allow it.
  bool lock_memory = false;
};

class Engine {
 public:
  // `name` names the engine in errors (the path for files).
  static StatusOr<std::shared_ptr<Engine>> load_file(const std::string& path, const LoadOptions& options = {});
  static StatusOr<std::shared_ptr<Engine>> load_memory(const void* data, size_t size, const std::string& name = "<memory>",
                                                       const LoadOptions& options = {});

  const EngineInfo& info() const { return info_; }
  const std::vector<ProfileInfo>& profiles() const { return profiles_; }
  int find_profile(const std::string& name) const;  // -1 if absent
  std::shared_ptr<const Plan> plan(size_t profile) const { return plans_[profile]; }
  // A new context for `profile`; errors name the known profiles. With `prepare`, the context is run
  // once at the profile's max and opt shapes first (ExecutionContext::prepare_for_profile), so its
  // arena covers the whole range and the first real run at opt needs no preparation.
  StatusOr<std::unique_ptr<ExecutionContext>> create_context(const std::string& profile, bool prepare = false) const;

 private:
  friend Status load_engine_image(std::shared_ptr<const void> image, size_t size, const std::string& name, const LoadOptions& options,
                                  Engine& out);
  std::shared_ptr<const void> image_;  // keeps the memory charge of a mapped file
  EngineInfo info_;
  std::vector<ProfileInfo> profiles_;
  std::vector<std::shared_ptr<const Plan>> plans_;
};

}  // namespace kiln
