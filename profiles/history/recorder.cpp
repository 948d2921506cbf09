#include "profiles/history/recorder.h"

#include <omp.h>

#include "profiles/history/history_db.h"
#include "profiles/history/provenance.h"
#include "profiles/history/report_json.h"
#include "profiles/history/run_store.h"

namespace kiln::history {

StatusOr<RunRecord> describe_run(const BuildConfig& cfg, const std::string& engine_path, const std::string& label, double start_unix_time,
                                 const LoadAverage& load_before) {
  RunRecord r;
  r.report_schema = kReportSchemaVersion;
  r.unix_time = start_unix_time;
  r.time = iso8601_utc(start_unix_time);
  r.label = label;
  const BuildInfo bi = kiln_build_info();
  r.kiln_version = bi.version;
  r.kiln_commit = bi.commit;
  r.kiln_dirty = bi.dirty;
  r.config_path = cfg.config_path;
  const RepoState repo = repo_state(cfg.config_path);
  r.series_key = series_key_of(cfg.config_path, repo);
  r.config_repo_commit = repo.commit;
  r.config_repo_dirty = repo.dirty;
  KILN_ASSIGN_OR_RETURN(r.config_sha256, sha256_file(cfg.config_path));
  KILN_ASSIGN_OR_RETURN(r.model_sha256, sha256_file(cfg.model));
  KILN_ASSIGN_OR_RETURN(r.engine_sha256, sha256_file(engine_path));
  r.engine_path = engine_path;
  r.precision = cfg.precision;
  r.threads = omp_get_max_threads();
  r.machine = read_machine_info();
  r.load_before = load_before;
  r.load_after = read_load_average();
  return r;
}

StatusOr<int64_t> record_report(const std::string& db_path, const std::string& report_text, const std::string& report_path) {
  KILN_ASSIGN_OR_RETURN(RunRecord run, run_from_report_json(report_text, report_path));
  run.source = "engine-build";
  KILN_ASSIGN_OR_RETURN(auto db, HistoryDb::open(db_path, HistoryDb::Mode::kCreate));
  KILN_RETURN_IF_ERROR(insert_run(*db, run));
  return run.id;
}

}  // namespace kiln::history
