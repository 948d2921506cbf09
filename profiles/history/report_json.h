// The history's view of report files, both ways: the keys engine-build adds to its report for the
// history ("schema_version", "run", the machine fingerprint; per profile "samples_ms" and
// "all_layers"; streaming "steps_detail"), and reading a report, or a Google benchmark JSON file
// (--benchmark_out / --benchmark_format=json), back into a RunRecord for `engine-perf import`.
#pragma once

#include <string>

#include "profiles/history/run_record.h"
#include "runtime/status.h"

namespace kiln::history {

// The report's top-level "run" object (time, label, kiln version/commit, config and its
// repository, hashes, precision, threads, load averages) from the fields of `run`.
std::string run_section_json(const RunRecord& run);
// `, "cpu_model": .., "isa": [..], "cores": .., "memory_bytes": .., "fingerprint": ..` for the
// report's "machine" object.
std::string machine_fields_json(const MachineInfo& m);

// engine-build's report (schema_version >= 1). `path` names the file in errors and is recorded.
StatusOr<RunRecord> run_from_report_json(const std::string& text, const std::string& path);
// A Google benchmark JSON file: each benchmark (run_name) becomes a "microbenchmark" profile whose
// samples are its repetitions' real times. Machine and load are this machine's, read now.
StatusOr<RunRecord> run_from_gbench_json(const std::string& text, const std::string& path);
// Reads `path` and picks the format from its keys.
StatusOr<RunRecord> read_run_file(const std::string& path);

}  // namespace kiln::history
