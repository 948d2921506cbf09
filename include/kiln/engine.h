// kiln::Engine: an engine file loaded into memory (weights mmap'd, not copied). Immutable and
// shareable across threads: it lists its optimization profiles and their bindings and creates
// execution contexts, any number of which may run concurrently.
//
//   auto engine = kiln::Engine::load_file("model.engine");
//   if (!engine.ok()) { fprintf(stderr, "%s\n", engine.status().message().c_str()); return 1; }
//   auto ctx = (*engine)->create_context("incremental");
//
// A Status carries one line naming what went wrong (file, profile, input, dim and value).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kiln/engine_info.h"
#include "kiln/execution_context.h"
#include "kiln/export.h"
#include "kiln/status.h"

namespace kiln::api {

class KILN_API Engine {
 public:
  // `name` names the engine in errors (the path for files). The engine's plugin libraries are
  // found on the search path of `options`, KILN_PLUGIN_PATH and the engine's folder.
  static StatusOr<std::shared_ptr<Engine>> load_file(const std::string& path, const LoadOptions& options = {});
  static StatusOr<std::shared_ptr<Engine>> load_memory(const void* data, size_t size, const std::string& name = "<memory>",
                                                       const LoadOptions& options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineInfo& info() const;
  const std::vector<ProfileInfo>& profiles() const;
  int find_profile(const std::string& name) const;   // -1 if absent
  // A new context for `profile` (errors name the known profiles). With `prepare`, the context runs
  // once at the profile's max and opt shapes first (ExecutionContext::prepare_for_profile).
  StatusOr<std::unique_ptr<ExecutionContext>> create_context(const std::string& profile, bool prepare = false) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::api

#ifndef KILN_INTERNAL_BUILD
namespace kiln {
using api::Engine;
}
#endif
