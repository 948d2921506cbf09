// kiln::build: what `engine-build CONFIG.yaml` does, from a program (libkiln_builder.so, CMake
// target kiln::builder; it contains the runtime too, so link it instead of kiln::runtime).
//
//   auto outcome = kiln::build({.config_path = "configs/gpt2.yaml", .overrides = {{"benchmark.iterations", "20"}}});
//   if (!outcome.ok()) ...                       // one line naming the file, key, node or input
//   puts(outcome->report_json.c_str());          // the same report engine-build writes
//
// Progress goes to the kiln log (kiln/logging.h) at info level.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/export.h"
#include "kiln/status.h"

namespace kiln {

struct BuildRequest {
  std::string config_path;
  // Config keys by dotted path with YAML values, as engine-build's --set KEY=VALUE.
  std::vector<std::pair<std::string, std::string>> overrides;
  std::string output;        // engine path; empty: the config's `output`
  std::string report_path;   // empty: <engine>.report.json
  bool benchmark = true;     // false: build, load back and check only (engine-build --no-bench)
};

struct BuildOutcome {
  std::string engine_path;
  std::string report_path;
  std::string report_json;
};

KILN_API StatusOr<BuildOutcome> build(const BuildRequest& request);

}  // namespace kiln
