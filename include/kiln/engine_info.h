// What an engine file says about itself: its profiles and their bindings, the plugin libraries it
// needs, its streaming section, and how its inputs may be generated. Plain data, filled by the
// loader (kiln::Engine::info(), profiles()).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/entry_spec.h"
#include "kiln/shape.h"
#include "kiln/streaming_spec.h"

namespace kiln {

struct BindingInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape min, opt, max;         // inputs only; outputs have no range
  std::vector<std::string> dim_names;
};

struct ProfileInfo {
  std::string name;
  std::string entry;           // "" in a single-model engine; else name is "<entry>/<profile>"
  std::vector<BindingInfo> inputs;
  std::vector<BindingInfo> outputs;
};

// How benchmark and validation inputs are generated (the build config's `inputs:` section; engines
// record it so `engine-run ENGINE --profile P` can make inputs without files).
struct InputGenerator {
  std::string kind;        // "uniform" (floats, [low, high)), "randint" (ints, [low, high)), "zeros", "ones",
                           // "block_causal" (bool mask [new, total], True = may attend), "causal"
  double low = 0, high = 1;
  int64_t block = 0;       // block_causal: tokens per block (timestep)
  uint64_t seed = 0;       // 0 = derived from the input name
};

// A plugin library an engine needs: found again at load by file name on the plugin search path
// (kiln::LoadOptions, KILN_PLUGIN_PATH, the engine's folder), then checked by name and version.
struct PluginLibraryInfo {
  std::string name;        // KilnPluginLibrary::library_name
  std::string version;     // KilnPluginLibrary::library_version
  std::string file_name;   // e.g. "libacme_layers.so"
  std::string built_from;  // the path it was loaded from at build time (a hint for error messages)
  std::vector<std::string> plugins;   // namespace::name@version used by the plans
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
  std::vector<PluginLibraryInfo> plugin_libraries;
  // OpenMP threads the build ran with, at which its tactics (kernel choices) were timed; 0 = not
  // recorded (format 1) or no tactics were timed.
  int tactic_threads = 0;
  std::map<std::string, InputGenerator> input_generators;   // by input name
  bool has_streaming = false;     // engine-build's `streaming` section, for StreamingSession
  StreamingSpec streaming;
  std::vector<StateBufferSpec> state;   // engine-build's `state:` section, for Session
};

// How to load an engine.
// docs/security.md says what is checked and what is trusted.
struct LoadOptions {
  // Folders searched for the engine's plugin libraries, in order, before the folders of the
  // KILN_PLUGIN_PATH environment variable (':'-separated) and the engine file's own folder. A
  // library is found by the file name the engine recorded and must report the recorded name and
  // version; nothing off the search path is ever opened.
  std::vector<std::string> plugin_dirs;
  // Library files the caller chose (engine-run --plugin): their folders are searched first.
  std::vector<std::string> allowed_plugins;
  // When nonzero, sets the process's memory cap (runtime/memory_budget.h) before loading.
  uint64_t max_memory = 0;
  // Touch every page of the weights at load, so no run takes their page faults.
  bool prefault = true;
  // mlock the engine image, and lock later allocations too (mlockall MCL_FUTURE): no page of a
  // running model is swapped out. Failure (RLIMIT_MEMLOCK) is an error saying how to allow it.
  bool lock_memory = false;
};

}  // namespace kiln
