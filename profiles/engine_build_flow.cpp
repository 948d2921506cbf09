#include "profiles/engine_build_flow.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "builder/tactics/tactic_selection.h"
#include "profiles/matmul_peak.h"
#include "runtime/engine.h"

namespace kiln {

StatusOr<EngineBuildOutcome> run_engine_build(const EngineBuildRequest& request, const ProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  EngineBuildOutcome out;
  KILN_ASSIGN_OR_RETURN(out.config, load_build_config(request.config_path, request.overrides));
  BuildConfig& cfg = out.config;
  if (request.configure) KILN_RETURN_IF_ERROR(request.configure(cfg));
  if (!request.output.empty()) cfg.output = request.output;
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
  TimingCache cache;
  if (!cfg.timing_cache.empty()) {
    KILN_ASSIGN_OR_RETURN(cache, TimingCache::load(cfg.timing_cache));
    progress("timing cache " + cfg.timing_cache + ": " + std::to_string(cache.size()) + " entries");
  }
  TacticLog tactics;
  KILN_ASSIGN_OR_RETURN(out.built, build_engine(cfg, progress, cfg.select_tactics ? tactic_selection_hook(cfg, cache, progress, &tactics) : PlanHook{}));
  if (!cfg.timing_cache.empty()) KILN_RETURN_IF_ERROR(cache.save(cfg.timing_cache));
  out.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  progress("loading " + out.built.engine_path + " back through the runtime loader");
  KILN_ASSIGN_OR_RETURN(auto engine, Engine::load_file(out.built.engine_path));
  KILN_ASSIGN_OR_RETURN(out.checks, check_engine(*engine, out.built, cfg, request.benchmark, progress));
  for (const auto& c : out.checks) {
    std::string pts;
    for (const auto& p : c.points) pts += (pts.empty() ? "" : "/") + p;
    progress("profile '" + c.profile + "': loaded engine matches the built plan at " + pts + " shapes");
  }
  if (request.benchmark) {
    progress("measuring the f32 matmul peak (1024^3 sgemm through the oneDNN MatMul kernel, best of 20)");
    KILN_ASSIGN_OR_RETURN(MatmulPeak peak, measure_matmul_peak());
    out.peak_gflops = peak.gflops;
  }
  std::map<std::string, std::string> extra;
  if (cfg.select_tactics) extra["tactics"] = tactics_report_json(tactics);
  if (cfg.streaming.present) {
    KILN_ASSIGN_OR_RETURN(StreamingResult streaming, run_streaming_check(engine, cfg, request.benchmark, progress));
    char err[32];
    std::snprintf(err, sizeof err, "%.3g", streaming.equivalence_max_abs_err);
    progress(std::string("streaming: equivalence full(T) vs full(T-1) + step: max abs err ") + err + " (tolerance 1e-4)");
    extra["streaming"] = streaming_report_json(streaming);
    out.streaming = std::move(streaming);
  }

  out.report_path = request.report_path.empty() ? out.built.engine_path + ".report.json" : request.report_path;
  std::string machine_fields;
  if (request.before_report) KILN_RETURN_IF_ERROR(request.before_report(out, extra, machine_fields));
  out.report_json = build_report_json(out.built, cfg, out.checks, out.build_seconds, out.peak_gflops, extra, machine_fields);
  std::ofstream f(out.report_path);
  f << out.report_json;
  if (!f) return IoError("cannot write report '" + out.report_path + "'");
  return out;
}

}  // namespace kiln
