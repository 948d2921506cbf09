// kiln::build (include/kiln/builder.h) over the engine-build flow.
#include "kiln/builder.h"

#include "profiles/engine_build_flow.h"
#include "runtime/log.h"

namespace kiln {

StatusOr<BuildOutcome> build(const BuildRequest& request) {
  EngineBuildRequest r{request.config_path, request.overrides, request.output, request.report_path, request.benchmark};
  auto progress = [](const std::string& line) { log_message(line.find("warning: ") != std::string::npos ? LogLevel::kWarn : LogLevel::kInfo, line); };
  KILN_ASSIGN_OR_RETURN(EngineBuildOutcome out, run_engine_build(r, progress));
  return BuildOutcome{out.built.engine_path, out.report_path, std::move(out.report_json)};
}

}  // namespace kiln
