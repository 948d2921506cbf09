// One benchmark run as the history keeps it: where it ran (machine fingerprint, load), what ran
// (kiln version and commit, config, hashes of config, model and engine) and what was measured per
// profile (every timed iteration, every paced streaming step, every layer of the profiled runs).
// engine-build's report JSON, `engine-perf import` and `engine-perf ab` all produce this; the
// SQLite store (history_store.h) keeps it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::history {

// Stable fields only (no clock speed, no load): a new fingerprint starts a new series.
struct MachineInfo {
  std::string cpu_model;
  std::vector<std::string> isa;  // the ISA extensions kiln's kernels care about, sorted
  int cores = 0;                 // logical CPUs online
  int64_t memory_bytes = 0;      // MemTotal rounded to GiB
  std::string fingerprint;       // 16 hex digits over the fields above
};

struct LoadAverage {
  double one = 0, five = 0, fifteen = 0;
  bool present = false;
};

// One paced streaming step, in ms from the start of the paced loop.
struct StreamingStep {
  double release_ms = 0;  // when the schedule released it
  double start_ms = 0;    // when it started (later than release when the previous step overran)
  double end_ms = 0;
  bool missed = false;    // end - release over the budget
};

// One layer (plan step) of the profiled runs; ms has one entry per profiled run.
struct LayerRecord {
  std::string name, op_type;
  std::vector<std::string> replaced;  // ONNX nodes a fused step replaced (attribution across fusions)
  std::vector<double> ms;
};

struct ProfileRecord {
  std::string name;
  std::string kind = "profile";  // "profile" (timed runs), "streaming" (paced steps), "microbenchmark"
  double budget_ms = 0;          // 0 = no deadline
  std::vector<double> samples_ms;         // every timed iteration (streaming: latency from release)
  std::vector<StreamingStep> steps;       // streaming only
  std::vector<LayerRecord> layers;        // every layer, plan order
  int layer_runs = 0;
  double gflop = 0, gflops_per_s = 0, peak_fraction = 0;
  std::string trace_path;                 // Chrome trace of a profiled run, if written
  int64_t id = 0;                         // store row id (0 until stored)
};

struct RunRecord {
  int64_t id = 0;                 // store row id (0 until stored)
  int report_schema = 0;          // the report's schema_version
  double unix_time = 0;
  std::string time;               // ISO 8601, UTC
  std::string label;
  std::string source = "engine-build";  // engine-build | import | ab | gbench
  std::string kiln_version, kiln_commit;
  bool kiln_dirty = false;
  std::string config_path;        // as given
  std::string series_key;         // the config within its repository (repo-relative path), or absolute
  std::string config_sha256, config_repo_commit;
  bool config_repo_dirty = false;
  std::string model_sha256, engine_sha256, engine_path;
  std::string precision;
  int threads = 0;
  MachineInfo machine;
  LoadAverage load_before, load_after;
  std::string report_path;
  std::vector<ProfileRecord> profiles;

  const ProfileRecord* find_profile(const std::string& name) const {
    for (const auto& p : profiles)
      if (p.name == name) return &p;
    return nullptr;
  }
};

}  // namespace kiln::history
