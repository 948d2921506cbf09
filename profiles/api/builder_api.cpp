// kiln::build (include/kiln/builder.h) over the engine-build flow: the same report engine-build
// writes (history provenance included; no history recording, no traces). Compiled into
// libkiln_builder and the Python module (cmake/embedding.cmake), which link kiln_history.
#include "kiln/builder.h"

#include "profiles/engine_build_flow.h"
#include "profiles/history/report_sections.h"
#include "runtime/log.h"

namespace kiln {

StatusOr<BuildOutcome> build(const BuildRequest& request) {
  const history::RunStart start = history::run_start_now();
  EngineBuildRequest r;
  r.config_path = request.config_path;
  r.overrides = request.overrides;
  r.output = request.output;
  r.report_path = request.report_path;
  r.benchmark = request.benchmark;
  r.before_report = [&](EngineBuildOutcome& out, std::map<std::string, std::string>& extra, std::string& machine) {
    return history::add_run_sections(out, start, false, extra, machine).status();
  };
  auto progress = [](const std::string& line) { log_message(line.find("warning: ") != std::string::npos ? LogLevel::kWarn : LogLevel::kInfo, line); };
  KILN_ASSIGN_OR_RETURN(EngineBuildOutcome out, run_engine_build(r, progress));
  return BuildOutcome{out.built.engine_path, out.report_path, std::move(out.report_json)};
}

}  // namespace kiln
