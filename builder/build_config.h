// The YAML build config of engine-build (yaml-cpp). Relative paths resolve against the config
// file's folder. Unknown keys and wrong types are errors naming the key path and its line, e.g.
//   configs/x.yaml:12: 'profiles.full.dims.timesteps': expected an integer or {min, opt, max}, got 'six'
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/engine_info.h"
#include "runtime/status.h"

namespace kiln {

// A dim value: a number (min = opt = max) or {min, opt, max}.
struct DimRange {
  int64_t min = 0, opt = 0, max = 0;
  bool fixed() const { return min == max; }
};

// Per-input explicit shapes (instead of dims): shapes: {cached_kv: {min: [...], opt: [...], max: [...]}}.
struct ShapeRange {
  std::vector<int64_t> min, opt, max;
};

struct ProfileConfig {
  std::string name;
  std::map<std::string, DimRange> dims;        // dim_param name -> range
  std::map<std::string, ShapeRange> shapes;    // input name -> shapes
  int line = 0;                                // where the profile is declared (for errors)
};

// InputGenerator (the `inputs:` section) is in kiln/engine_info.h: engines record it.

struct BenchmarkConfig {
  double rate_hz = 10;
  double budget_ms = 100;  // defaults to 1000 / rate_hz when not given
  int warmup = 5;
  int iterations = 100;
  // With several profiles, their timed runs alternate in this many rounds (each round of a
  // profile after one untimed run), so every profile samples the same stretch of a shared host
  // whose speed drifts; 1 = each profile's runs back to back.
  int rounds = 5;
  // A profile whose p99 misses the budget fails the build (non-zero exit) instead of only being
  // reported; engine-build --enforce-budget sets it too.
  bool enforce_budget = false;
};

// history: {db: PATH, label: NAME}: record every benchmark run into that history file (see
// engine-perf); engine-build --record DB [--label NAME] does the same for one run.
struct HistoryConfig {
  std::string db;
  std::string label;
};

struct StateConfig {
  std::string output, input;
  int64_t axis = 0;
};

struct StreamingConfig {
  bool present = false;
  std::string cold_start, step;
  int steps = 100;
  std::vector<StateConfig> state;
  int64_t tokens_per_step = 0;
  int64_t max_steps = 0;
};

// entries: {NAME: {model, profiles}}: several models in one engine, each with its own profiles
// (docs/multi_entry.md). Their plans become the engine's profiles "<entry>/<profile>".
struct EntryConfig {
  std::string name;
  std::string model;
  std::vector<ProfileConfig> profiles;
  int line = 0;
};

// state: {NAME: [{entry, input, output}, ...]}: a buffer a Session keeps between calls, read in
// place where bound to an input and written in place where bound to an output.
struct StateBindingConfig {
  std::string entry, input, output;
  int line = 0;
};
struct StateBufferConfig {
  std::string name;
  std::vector<StateBindingConfig> bindings;
  int line = 0;
};

// precision: int8. Activation ranges come from running the fp32 plan of one profile on `batches`
// generated input batches (profiles/calibration.h); the calibration cache keeps the scales.
struct CalibrationConfig {
  std::string method = "entropy";  // minmax | percentile | entropy
  double percentile = 99.99;       // percentile: the |x| quantile the range clips at
  int batches = 8;                 // calibration batches (the config's generators, seeds per batch)
  int holdout = 2;                 // further batches, not calibrated on, for the int8 vs fp32 error report
  // inputs: DIR instead of the generators: the folder (resolved) and its batch subfolders, sorted by
  // name; the first `batches` calibrate, the last `holdout` are held out.
  std::string folder;              // "" = the generators
  std::vector<std::string> batch_folders;
  std::string cache;               // calibration cache file; "" = none
  std::string profile;             // whose opt shapes calibrate; "" = the first profile
  // Per output: max |int8 - fp32| over the held-out batches must stay within tolerance *
  // max(1, max |fp32|), else the build fails.
  double tolerance = 0.05;
};

// precision_overrides: {PATTERN: fp32 | bf16}: steps whose name (or an ONNX node they replaced)
// matches the glob keep that precision in an int8 or bf16 engine.
struct PrecisionOverride {
  std::string pattern, precision;
};

struct BuildConfig {
  std::string config_path;   // the YAML file itself
  std::string model;         // absolute or relative to the working directory after resolution
                             // (with entries: the first entry's model)
  std::string output;        // engine path
  std::string precision = "fp32";   // fp32 | bf16 | int8
  CalibrationConfig calibration;   // precision int8
  std::vector<PrecisionOverride> precision_overrides;  // in file order; the first match wins
  int threads = 0;           // 0 = all cores
  std::vector<ProfileConfig> profiles;   // in file order (empty with entries)
  std::vector<EntryConfig> entries;      // in file order (empty: the top-level model is the only one)
  std::vector<StateBufferConfig> state;
  std::map<std::string, InputGenerator> inputs;
  BenchmarkConfig benchmark;
  std::vector<std::string> plugin_libraries;   // plugins: {load: [path.so]}
  std::map<std::string, std::string> fusions;  // fusions: {attention: required|auto|off}
  std::vector<std::string> disabled_passes;    // passes: {disable: [name, ...]}
  StreamingConfig streaming;
  HistoryConfig history;
  // tactics: {select: true, timing_cache: path}. Where an op has several kernels, time them at each
  // profile's opt shapes and record the fastest; the cache file (read, then written) makes
  // rebuilds skip the timing and come out byte-identical.
  bool select_tactics = true;
  std::string timing_cache;
};

// Parses `path`. `overrides` are --set KEY=VALUE pairs applied before validation; KEY is a dotted
// path (benchmark.iterations, profiles.full.dims.timesteps, output) and VALUE is parsed as YAML
// (so "5", "{min: 1, opt: 6, max: 6}" and "[a.so]" all work).
StatusOr<BuildConfig> load_build_config(const std::string& path,
                                        const std::vector<std::pair<std::string, std::string>>& overrides = {});
// Same, from YAML text; `path` names it in errors and anchors relative paths.
StatusOr<BuildConfig> parse_build_config(const std::string& yaml_text, const std::string& path,
                                         const std::vector<std::pair<std::string, std::string>>& overrides = {});

}  // namespace kiln
