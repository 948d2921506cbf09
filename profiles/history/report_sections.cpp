#include "profiles/history/report_sections.h"

#include <filesystem>
#include <fstream>

#include "profiles/history/provenance.h"
#include "profiles/history/recorder.h"
#include "profiles/history/report_json.h"
#include "profiles/layer_profile.h"

namespace kiln::history {

RunStart run_start_now() { return RunStart{unix_time_now(), read_load_average()}; }

StatusOr<RunRecord> add_run_sections(EngineBuildOutcome& outcome, const RunStart& start, bool write_traces,
                                     std::map<std::string, std::string>& extra, std::string& machine_fields) {
  const BuildConfig& cfg = outcome.config;
  KILN_ASSIGN_OR_RETURN(RunRecord prov, describe_run(cfg, outcome.built.engine_path, cfg.history.label, start.unix_time, start.load));
  if (write_traces) {
    // A Chrome trace of each profile's last profiled run, linked from the dashboard.
    for (auto& c : outcome.checks) {
      if (!c.benchmarked) continue;
      const std::string trace = outcome.report_path + "." + c.profile + ".trace.json";
      std::ofstream tf(trace);
      tf << chrome_trace_json(c.layers, {{"model", cfg.model}, {"profile", c.profile}, {"run", prov.time}});
      if (!tf) return IoError("cannot write trace '" + trace + "'");
      c.trace_path = std::filesystem::absolute(trace).lexically_normal().string();
    }
  }
  extra["schema_version"] = std::to_string(kReportSchemaVersion);
  extra["run"] = run_section_json(prov);
  machine_fields = machine_fields_json(prov.machine);
  return prov;
}

}  // namespace kiln::history
