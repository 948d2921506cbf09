// What engine-build's report says about its run, for the history (schema version, provenance,
// machine fields) and, when the run is recorded, a Chrome trace of each profile's profiled run:
// shared by engine-build and kiln::build (profiles/engine_build_flow.h's before_report).
#pragma once

#include <map>
#include <string>

#include "profiles/engine_build_flow.h"
#include "profiles/history/run_record.h"

namespace kiln::history {

struct RunStart {
  double unix_time = 0;
  LoadAverage load;
};
RunStart run_start_now();

// Fills `extra` ("schema_version", "run") and `machine_fields`; with `write_traces`, writes
// <report>.<profile>.trace.json per benchmarked profile and points its check at it.
StatusOr<RunRecord> add_run_sections(EngineBuildOutcome& outcome, const RunStart& start, bool write_traces,
                                     std::map<std::string, std::string>& extra, std::string& machine_fields);

}  // namespace kiln::history
