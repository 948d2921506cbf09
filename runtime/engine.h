// Engine: an immutable, thread-shareable engine loaded from a file (weights mmap'd, not copied) or
// from memory. It lists its optimization profiles and their bindings and creates execution
// contexts; any number of contexts, on any threads, may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/engine_info.h"
#include "runtime/execution_context.h"
#include "runtime/plan.h"

namespace kiln {

class Engine {
 public:
  // `name` names the engine in errors (the path for files). Plugin libraries the engine needs are
  // found on the search path of `options` (see LoadOptions).
  static StatusOr<std::shared_ptr<Engine>> load_file(const std::string& path, const LoadOptions& options = {});
  static StatusOr<std::shared_ptr<Engine>> load_memory(const void* data, size_t size, const std::string& name = "<memory>",
                                                       const LoadOptions& options = {});

  const EngineInfo& info() const { return info_; }
  const std::vector<ProfileInfo>& profiles() const { return profiles_; }
  int find_profile(const std::string& name) const;  // -1 if absent
  // Entry names in profile order (one "" for a single-model engine).
  std::vector<std::string> entries() const;
  std::shared_ptr<const Plan> plan(size_t profile) const { return plans_[profile]; }
  // A new context for `profile`; errors name the known profiles. With `prepare`, the context is run
  // once at the profile's max and opt shapes first (ExecutionContext::prepare_for_profile), so its
  // arena covers the whole range and the first real run at opt needs no preparation.
  StatusOr<std::unique_ptr<ExecutionContext>> create_context(const std::string& profile, bool prepare = false) const;

 private:
  friend Status load_engine_image(std::shared_ptr<const void> image, size_t size, const std::string& name,
                                  const std::vector<std::string>& plugin_dirs, Engine& out);
  std::shared_ptr<const void> image_;  // keeps the memory charge of a mapped file
  EngineInfo info_;
  std::vector<ProfileInfo> profiles_;
  std::vector<std::shared_ptr<const Plan>> plans_;
};

// The folders searched for an engine's plugin libraries: `options`, then KILN_PLUGIN_PATH, then
// `engine_dir` (empty for engines loaded from memory).
std::vector<std::string> plugin_search_dirs(const LoadOptions& options, const std::string& engine_dir);

}  // namespace kiln
