// Where and from what a run was made, for the report and the history: the machine's stable
// fingerprint (CPU model, ISA features, core count, memory), the load average, kiln's version and
// commit (compiled in), the config repository's commit and dirty flag, SHA-256 of files, the time.
#pragma once

#include <string>

#include "profiles/history/run_record.h"
#include "runtime/status.h"

namespace kiln::history {

// The report JSON's schema version (the report's "schema_version" key).
constexpr int kReportSchemaVersion = 1;

MachineInfo read_machine_info();
LoadAverage read_load_average();

struct BuildInfo {
  std::string version, commit;
  bool dirty = false;
};
BuildInfo kiln_build_info();

struct RepoState {
  bool present = false;
  std::string root, commit;
  bool dirty = false;  // tracked files modified
};
// The git repository holding `file`, if any (asks the git command line; absent without git).
RepoState repo_state(const std::string& file);

StatusOr<std::string> sha256_file(const std::string& path);
std::string sha256_hex(const std::string& bytes);

double unix_time_now();
std::string iso8601_utc(double unix_time);

// The series a config's runs belong to: its path inside its repository, else its absolute path.
std::string series_key_of(const std::string& config_path, const RepoState& repo);

}  // namespace kiln::history
