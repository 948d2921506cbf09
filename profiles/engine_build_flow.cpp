#include "profiles/engine_build_flow.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "builder/quantization/calibration.h"
#include "builder/tactics/tactic_selection.h"
#include "runtime/engine.h"

namespace kiln {

namespace {

// Removes the staged engine unless the build kept it.
struct RemoveUnlessKept {
  std::string path;
  ~RemoveUnlessKept() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

Status write_text(const std::string& path, const std::string& text, const char* what) {
  std::ofstream f(path);
  f << text;
  if (!f) return IoError(std::string("cannot write ") + what + " '" + path + "'");
  return Status::Ok();
}

// The calibration profile's int8 steps ranked by the error each costs (--sensitivity).
Status rank_sensitivity(const BuildConfig& cfg, const std::string& engine_name, EngineBuildOutcome& out, const ProgressFn& progress) {
  if (cfg.precision != "int8") return InvalidArgument(cfg.config_path + ": --sensitivity needs precision: int8 (got " + cfg.precision + ")");
  const std::string& want = cfg.calibration.profile.empty() ? cfg.profiles.front().name : cfg.calibration.profile;
  for (const auto& bp : out.built.profiles) {
    if (bp.profile.name != want || !bp.fp32_plan) continue;
    KILN_ASSIGN_OR_RETURN(SensitivityResult r, rank_int8_sensitivity(*bp.plan, *bp.fp32_plan, want, bp.profile.shapes_at(ResolvedProfile::Point::kOpt),
                                                                    cfg, progress));
    out.sensitivity_path = engine_name + ".sensitivity.json";
    KILN_RETURN_IF_ERROR(write_text(out.sensitivity_path, sensitivity_json(r), "the sensitivity ranking"));
    out.sensitivity = std::move(r);
    return Status::Ok();
  }
  return Internal("--sensitivity: no fp32 plan of the calibration profile '" + want + "'");
}

}  // namespace

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
  const std::string final_output = cfg.output;
  if (std::filesystem::is_directory(final_output)) return InvalidArgument("output '" + final_output + "' is a directory");
  for (const std::string& theirs : {cfg.model, request.config_path}) {
    std::error_code same_ec;
    if (std::filesystem::equivalent(theirs, final_output, same_ec))
      return InvalidArgument("output '" + final_output + "' is '" + theirs + "' itself; refusing to overwrite it");
  }
  const std::filesystem::path out_path(final_output);
  cfg.output = (out_path.parent_path() / ("." + out_path.filename().string() + ".building-" + std::to_string(::getpid()))).string();
  RemoveUnlessKept staging{cfg.output};
  const CalibrateHook calibrate_hook = [&](const Plan& fp32_plan, const ResolvedProfile& rp) -> StatusOr<std::map<std::string, float>> {
    KILN_ASSIGN_OR_RETURN(CalibrationResult r, calibrate(fp32_plan, rp.name, rp.shapes_at(ResolvedProfile::Point::kOpt), cfg, progress));
    return r.a_scale;
  };
  KILN_ASSIGN_OR_RETURN(out.built, build_engine(cfg, progress, cfg.select_tactics ? tactic_selection_hook(cfg, cache, progress, &tactics) : PlanHook{},
                                                calibrate_hook));
  if (!cfg.timing_cache.empty()) KILN_RETURN_IF_ERROR(cache.save(cfg.timing_cache));
  out.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (request.sensitivity) {
    KILN_RETURN_IF_ERROR(rank_sensitivity(cfg, final_output, out, progress));
    cfg.output = final_output;
    return out;
  }

  progress("loading " + out.built.engine_path + " back through the runtime loader");
  KILN_ASSIGN_OR_RETURN(auto engine, Engine::load_file(out.built.engine_path, request.load));
  KILN_ASSIGN_OR_RETURN(out.checks, check_engine(*engine, out.built, cfg, request.benchmark, progress));
  for (const auto& c : out.checks) {
    std::string pts;
    for (const auto& p : c.points) pts += (pts.empty() ? "" : "/") + p;
    progress("profile '" + c.profile + "': loaded engine matches the built plan at " + pts + " shapes");
  }
  if (request.benchmark) {
    std::set<FlopPrecision> used = used_precisions(out.checks);
    used.insert(FlopPrecision::kF32);
    std::string names;
    for (FlopPrecision p : used) names += std::string(names.empty() ? "" : ", ") + flop_precision_name(p);
    progress("measuring the matmul peak of each precision the engine's FLOPs run in (" + names +
             "): 1024^3 through kiln's matmul kernel of that precision, best of 20");
    KILN_ASSIGN_OR_RETURN(out.peaks, measure_matmul_peaks(used));
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

  std::error_code ec;
  std::filesystem::rename(out.built.engine_path, final_output, ec);
  if (ec) return IoError("cannot move the engine to '" + final_output + "': " + ec.message());
  staging.path.clear();
  out.built.engine_path = final_output;
  cfg.output = final_output;
  out.report_path = request.report_path.empty() ? out.built.engine_path + ".report.json" : request.report_path;
  std::string machine_fields;
  if (request.before_report) KILN_RETURN_IF_ERROR(request.before_report(out, extra, machine_fields));
  out.report_json = build_report_json(out.built, cfg, out.checks, out.build_seconds, request.benchmark ? &out.peaks : nullptr, extra, machine_fields);
  KILN_RETURN_IF_ERROR(write_text(out.report_path, out.report_json, "report"));
  return out;
}

}  // namespace kiln
