// What engine-build does, as a library call (the tool, kiln::build and the Python kiln.build share
// it): load the config, build the engine, load it back through the runtime loader, check every
// profile against the built plans, benchmark, run the streaming checks, write the report. The engine
// is written beside its final name and moved there only once it has loaded back and passed every
// check: a failed build leaves the previous engine (if any) as it was, and no file.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "builder/build_config.h"
#include "builder/engine_build_job.h"
#include "profiles/engine_check.h"
#include "profiles/matmul_peak.h"
#include "profiles/sensitivity.h"
#include "profiles/streaming_check.h"

namespace kiln {

struct EngineBuildOutcome;

struct EngineBuildRequest {
  std::string config_path;
  std::vector<std::pair<std::string, std::string>> overrides;   // --set KEY=VALUE, applied before validation
  std::string output;        // engine path; empty: the config's
  std::string report_path;   // empty: <engine>.report.json
  bool benchmark = true;
  // precision int8: instead of checking and benchmarking, rank the int8 steps by the error each
  // causes and write ENGINE.sensitivity.json.
  bool sensitivity = false;
  LoadOptions load;          // how the built engine is loaded back (plugin search path, memory)
  // Called with the loaded config before anything is built (a tool applies its options there).
  std::function<Status(BuildConfig& config)> configure;
  // Called after the checks, before the report is written: adds report sections to `extra` and the
  // machine's fields (the history's provenance, profiles/history/report_sections.h).
  std::function<Status(EngineBuildOutcome& outcome, std::map<std::string, std::string>& extra, std::string& machine_fields)> before_report;
};

struct EngineBuildOutcome {
  BuildConfig config;
  BuildResult built;
  std::vector<ProfileCheck> checks;
  MatmulPeaks peaks{};                         // measured matmul peak per precision used (benchmark only)
  std::optional<SensitivityResult> sensitivity;  // request.sensitivity: the ranking, written to sensitivity_path
  std::string sensitivity_path;
  std::optional<StreamingResult> streaming;    // the config has a streaming section
  std::string report_path;
  std::string report_json;
  double build_seconds = 0;
};

// Progress lines go to `progress` (the tools and kiln::build pass them to the kiln log).
StatusOr<EngineBuildOutcome> run_engine_build(const EngineBuildRequest& request, const ProgressFn& progress);

}  // namespace kiln
