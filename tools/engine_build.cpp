// engine-build: YAML config -> engine file, loaded back, validated and benchmarked per profile.
//   engine-build CONFIG.yaml [--output ENGINE] [--report REPORT.json] [--no-bench] [--sensitivity] [--set KEY=VALUE ...]
//                [--record DB [--label NAME]] [--enforce-budget]
#include <omp.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "builder/build_config.h"
#include "builder/engine_build_job.h"
#include "builder/quantization/calibration.h"
#include "profiles/engine_check.h"
#include "profiles/history/provenance.h"
#include "profiles/history/recorder.h"
#include "profiles/history/report_json.h"
#include "profiles/matmul_peak.h"
#include "profiles/sensitivity.h"
#include "profiles/streaming_check.h"
#include "builder/tactics/tactic_selection.h"
#include "runtime/engine.h"
#include "tools/omp_wait_policy.h"
#include "tools/run_options.h"

namespace kiln {
namespace {

constexpr const char* kUsage =
    "usage: engine-build CONFIG.yaml [--output ENGINE] [--report REPORT.json] [--no-bench] [--sensitivity] [--set KEY=VALUE ...]\n"
    "                    [--record DB [--label NAME]] [--enforce-budget]\n"
    "  CONFIG.yaml         the build config (see README.md); relative paths in it are relative to its folder\n"
    "  --output ENGINE     the engine file to write (default: the config's `output`)\n"
    "  --report FILE       the report to write (default: ENGINE.report.json)\n"
    "  --no-bench          build, load back and validate only; no benchmark\n"
    "  --sensitivity       precision int8 only: build, then rank the int8 steps by the output error each causes alone\n"
    "                      (and left out alone) on held-out inputs of the calibration profile, print the ranking and\n"
    "                      write it to ENGINE.sensitivity.json instead of checking and benchmarking the engine\n"
    "  --set KEY=VALUE     override a config key by dotted path (VALUE is YAML), e.g. --set benchmark.iterations=20 (repeatable)\n"
    "  --record DB         store the benchmark run in the history file DB (engine-perf reads it); also history.db\n"
    "  --label NAME        label the recorded run (engine-perf compare takes labels); also history.label\n"
    "  --enforce-budget    exit non-zero when a profile's p99 misses its budget; also benchmark.enforce_budget\n"
    "  environment: KILN_MAX_CPU_ISA=avx2|avx512_core|avx512_core_vnni|avx512_core_bf16|avx512_core_amx caps kiln's kernels\n"
    "  (and oneDNN's unless DNNL_MAX_CPU_ISA is set, which alone caps both) to the instruction sets of a smaller CPU\n";

struct Args {
  std::string config, output, report, record_db, label;
  bool bench = true;
  bool enforce_budget = false;
  bool sensitivity = false;
  std::vector<std::pair<std::string, std::string>> overrides;
  RunOptions run;   // memory cap and scheduling; plugins come from the config's plugins: {load}
};

StatusOr<Args> parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    KILN_ASSIGN_OR_RETURN(bool consumed, parse_run_option(argc, argv, &i, &a.run));
    if (consumed) continue;
    std::string s = argv[i];
    auto value = [&]() -> StatusOr<std::string> {
      if (i + 1 >= argc) return InvalidArgument(s + " needs a value");
      return std::string(argv[++i]);
    };
    if (s == "--output") { KILN_ASSIGN_OR_RETURN(a.output, value()); }
    else if (s == "--report") { KILN_ASSIGN_OR_RETURN(a.report, value()); }
    else if (s == "--no-bench") a.bench = false;
    else if (s == "--record") { KILN_ASSIGN_OR_RETURN(a.record_db, value()); }
    else if (s == "--label") { KILN_ASSIGN_OR_RETURN(a.label, value()); }
    else if (s == "--enforce-budget") a.enforce_budget = true;
    else if (s == "--sensitivity") a.sensitivity = true;
    else if (s == "--set") {
      KILN_ASSIGN_OR_RETURN(std::string kv, value());
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) return InvalidArgument("--set expects KEY=VALUE, got '" + kv + "'");
      a.overrides.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    } else if (s == "-h" || s == "--help") {
      std::cout << kUsage << kRunOptionsHelp;
      std::exit(0);
    } else if (!s.empty() && s[0] == '-') {
      return InvalidArgument("unknown option '" + s + "'");
    } else if (a.config.empty()) {
      a.config = s;
    } else {
      return InvalidArgument("unexpected argument '" + s + "'");
    }
  }
  if (a.config.empty()) return InvalidArgument("no config given");
  if (!a.label.empty() && a.record_db.empty()) return InvalidArgument("--label needs --record DB");
  return a;
}

void progress(const std::string& line) {
  std::fprintf(stderr, "[engine-build] %s\n", line.c_str());
  std::fflush(stderr);
}

// "f32 360, bf16 880" for the measured peaks.
std::string peaks_text(const MatmulPeaks& peaks) {
  std::string s;
  for (int i = 0; i < kFlopPrecisions; ++i)
    if (peaks[i] > 0) {
      char buf[48];
      std::snprintf(buf, sizeof buf, "%s%s %.0f", s.empty() ? "" : ", ", flop_precision_name(static_cast<FlopPrecision>(i)), peaks[i]);
      s += buf;
    }
  return s;
}

// Per profile: the compute rate against the peak of each step's own precision, and the slowest
// layers.
void print_layer_summary(const std::vector<ProfileCheck>& checks, const MatmulPeaks& peaks) {
  for (const auto& c : checks) {
    if (!c.benchmarked) continue;
    std::string split;
    const auto by_precision = gflop_by_precision(c.layers);
    int used = 0;
    for (int i = 0; i < kFlopPrecisions; ++i) used += by_precision[i] > 0;
    for (int i = 0; i < kFlopPrecisions && used > 1; ++i)
      if (by_precision[i] > 0) {
        char buf[48];
        std::snprintf(buf, sizeof buf, "%s%.3g %s", split.empty() ? " (" : ", ", by_precision[i], flop_precision_name(static_cast<FlopPrecision>(i)));
        split += buf;
      }
    if (!split.empty()) split += ")";
    std::printf("\nprofile '%s': %.2f GFLOP at opt%s%s, GFLOP/s %.1f, %.0f%% of the peak of each FLOP's precision (GFLOP/s: %s); "
                "slowest layers of a profiled run (%.1f ms):\n",
                c.profile.c_str(), c.layers.flops.flops / 1e9, c.layers.flops.upper_bound ? " (upper bound)" : "", split.c_str(),
                c.gflops_per_s(), 100.0 * c.peak_fraction(peaks), peaks_text(peaks).c_str(), c.layers.run_ms);
    for (size_t i : slowest_steps(c.layers, 5)) {
      const LayerTiming& t = c.layers.steps[i];
      std::printf("  %8.2f ms  %-16s %s\n", t.ms, t.op_type.c_str(), t.name.c_str());
    }
    std::string ops;
    size_t k = 0;
    for (const auto& [op, ms] : ms_by_op_type(c.layers)) {
      if (k++ == 6) break;
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s%s %.1f ms", ops.empty() ? "" : ", ", op.c_str(), ms);
      ops += buf;
    }
    std::printf("  by op type: %s\n", ops.c_str());
    std::string rates;
    for (const auto& [op, gflop] : gflop_by_op_type(c.layers)) {
      if (gflop < 0.05 * c.layers.flops.flops / 1e9 / 100) continue;  // under 0.05% of the total: noise
      double ms = 0;
      for (const auto& t : c.layers.steps) ms += t.op_type == op ? t.ms : 0;
      char buf[160];
      const double ideal = ideal_ms(c.layers, peaks, op);
      std::snprintf(buf, sizeof buf, "%s%s %.3g GFLOP in %.3g ms = %.3g GFLOP/s (%.0f%% of peak)", rates.empty() ? "" : ", ", op.c_str(), gflop,
                    ms, ms > 0 ? gflop / ms * 1e3 : 0.0, ms > 0 ? 100.0 * ideal / ms : 0.0);
      rates += buf;
    }
    std::printf("  compute rate in the profiled run: %s\n", rates.c_str());
  }
}

void print_table(const std::vector<ProfileCheck>& checks) {
  std::printf("\n%-14s %6s %10s %10s %10s %10s %10s %10s %10s  %s\n", "profile", "iters", "first ms", "p50 ms", "p90 ms", "p99 ms",
              "max ms", "mean ms", "budget ms", "p99 within budget");
  for (const auto& c : checks) {
    if (!c.benchmarked) continue;
    const auto& l = c.bench.latency;
    std::printf("%-14s %6d %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.1f  %s (%d of %d runs over budget)\n", c.profile.c_str(),
                l.iterations, c.first_run_ms, l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms, l.mean_ms, c.bench.budget_ms, c.bench.within_budget ? "YES" : "NO",
                c.bench.deadline_misses, l.iterations);
  }
}

void print_streaming(const StreamingResult& s, const std::vector<ProfileCheck>& checks) {
  const auto& l = s.latency;
  std::printf("\nstreaming: cold start %.2f ms, then %d steps: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f ms; %d over the %.1f ms budget\n",
              s.cold_start_ms, s.steps, l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms, s.deadline_misses, s.budget_ms);
  std::printf("state: %.2f MB copied per step on average (max %.2f MB), %.2f MB appended in place per step, %d of %d steps fully in place; "
              "buffers %.1f MB; profile switch %.2f ms\n",
              s.state_bytes_copied_per_step / 1e6, static_cast<double>(s.state_bytes_copied_max) / 1e6, s.state_bytes_appended_per_step / 1e6,
              s.in_place_steps, s.steps, static_cast<double>(s.state_buffer_bytes) / 1e6, s.profile_switch_ms);
  // The seed's yardstick: how much cheaper a step is than a cold start, in this run.
  const ProfileCheck* full = nullptr;
  const ProfileCheck* step = nullptr;
  for (const auto& c : checks) {
    if (!c.benchmarked) continue;
    if (!full || c.bench.latency.p50_ms > full->bench.latency.p50_ms) full = &c;
    if (!step || c.bench.latency.p50_ms < step->bench.latency.p50_ms) step = &c;
  }
  if (full && step && full != step && step->bench.latency.p50_ms > 0)
    std::printf("profile '%s' p50 is %.2fx faster than profile '%s' p50\n", step->profile.c_str(),
                full->bench.latency.p50_ms / step->bench.latency.p50_ms, full->profile.c_str());
}

// --sensitivity: the int8 steps of the calibration profile ranked by the error each costs.
Status run_sensitivity(const BuildConfig& cfg, const BuildResult& built, const std::string& engine_name) {
  if (cfg.precision != "int8") return InvalidArgument(cfg.config_path + ": --sensitivity needs precision: int8 (got " + cfg.precision + ")");
  const std::string& want = cfg.calibration.profile.empty() ? cfg.profiles.front().name : cfg.calibration.profile;
  for (const auto& bp : built.profiles) {
    if (bp.profile.name != want || !bp.fp32_plan) continue;
    KILN_ASSIGN_OR_RETURN(SensitivityResult r, rank_int8_sensitivity(*bp.plan, *bp.fp32_plan, want, bp.profile.shapes_at(ResolvedProfile::Point::kOpt),
                                                                    cfg, progress));
    std::printf("\nint8 sensitivity, profile '%s' (error = max over outputs of max |x - fp32| / max(1, max |fp32|), %d held-out batch(es)):\n"
                "all steps int8: %.4g\n%4s  %-48s %12s %12s\n", want.c_str(), r.batches, r.all_int8, "rank", "step", "alone int8", "all but it");
    for (size_t i = 0; i < r.layers.size(); ++i)
      std::printf("%4zu  %-48s %12.4g %12.4g\n", i + 1, r.layers[i].step.c_str(), r.layers[i].alone, r.layers[i].all_but);
    const std::string path = engine_name + ".sensitivity.json";
    std::ofstream f(path);
    f << sensitivity_json(r);
    if (!f) return IoError("cannot write '" + path + "'");
    std::printf("\nsensitivity: %s (keep the top steps out of int8 with precision_overrides: {STEP: bf16})\n", path.c_str());
    return Status::Ok();
  }
  return Internal("--sensitivity: no fp32 plan of the calibration profile '" + want + "'");
}

// The budget gate: one line per profile (and the streaming loop) whose p99 misses its budget.
Status check_budgets(const std::vector<ProfileCheck>& checks, const StreamingResult* streaming) {
  std::string missed;
  char buf[160];
  for (const auto& c : checks)
    if (c.benchmarked && !c.bench.within_budget) {
      std::snprintf(buf, sizeof buf, "%sprofile '%s' p99 %.2f ms", missed.empty() ? "" : ", ", c.profile.c_str(), c.bench.latency.p99_ms);
      missed += buf;
    }
  if (streaming && streaming->steps > 0 && streaming->latency.p99_ms > streaming->budget_ms) {
    std::snprintf(buf, sizeof buf, "%sstreaming p99 %.2f ms", missed.empty() ? "" : ", ", streaming->latency.p99_ms);
    missed += buf;
  }
  if (missed.empty()) return Status::Ok();
  const double budget = checks.empty() ? 0 : checks.front().bench.budget_ms;
  std::snprintf(buf, sizeof buf, " over the %.4g ms budget (benchmark.enforce_budget)", budget);
  return FailedPrecondition(missed + buf);
}

Status run(Args& args) {
  const auto t0 = std::chrono::steady_clock::now();
  const double start_time = history::unix_time_now();
  const history::LoadAverage load_before = history::read_load_average();
  KILN_ASSIGN_OR_RETURN(BuildConfig cfg, load_build_config(args.config, args.overrides));
  if (!args.record_db.empty()) cfg.history = {args.record_db, args.label};
  if (args.enforce_budget) cfg.benchmark.enforce_budget = true;
  if (!cfg.history.db.empty() && !args.bench) return InvalidArgument("recording into a history needs the benchmark (drop --no-bench)");
  if (!args.output.empty()) cfg.output = args.output;
  if (cfg.threads > 0 && args.run.pool.threads == 0) {
    args.run.pool.threads = cfg.threads;
    args.run.configure_pool = true;
  }
  KILN_RETURN_IF_ERROR(apply_run_options(&args.run, "engine-build"));
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
  TimingCache cache;
  if (!cfg.timing_cache.empty()) {
    KILN_ASSIGN_OR_RETURN(cache, TimingCache::load(cfg.timing_cache));
    progress("timing cache " + cfg.timing_cache + ": " + std::to_string(cache.size()) + " entries");
  }
  TacticLog tactics;
  // The engine is written beside its final name and moved there only once it has loaded back and
  // passed every check: a failed build leaves the previous engine (if any) as it was, and no file.
  const std::string final_output = cfg.output;
  const std::filesystem::path out_path(final_output);
  cfg.output = (out_path.parent_path() / ("." + out_path.filename().string() + ".building-" + std::to_string(::getpid()))).string();
  struct RemoveUnlessKept {
    std::string path;
    ~RemoveUnlessKept() {
      if (!path.empty()) ::unlink(path.c_str());
    }
  } staging{cfg.output};
  if (std::filesystem::is_directory(final_output)) return InvalidArgument("output '" + final_output + "' is a directory");
  for (const std::string& theirs : {cfg.model, args.config}) {
    std::error_code same_ec;
    if (std::filesystem::equivalent(theirs, final_output, same_ec))
      return InvalidArgument("output '" + final_output + "' is '" + theirs + "' itself; refusing to overwrite it");
  }
  const CalibrateHook calibrate_hook = [&](const Plan& fp32_plan, const ResolvedProfile& rp) -> StatusOr<std::map<std::string, float>> {
    KILN_ASSIGN_OR_RETURN(CalibrationResult r, calibrate(fp32_plan, rp.name, rp.shapes_at(ResolvedProfile::Point::kOpt), cfg, progress));
    return r.a_scale;
  };
  KILN_ASSIGN_OR_RETURN(BuildResult built, build_engine(cfg, progress, cfg.select_tactics ? tactic_selection_hook(cfg, cache, progress, &tactics) : PlanHook{},
                                                        calibrate_hook));
  if (!cfg.timing_cache.empty()) KILN_RETURN_IF_ERROR(cache.save(cfg.timing_cache));
  const double build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (args.sensitivity) return run_sensitivity(cfg, built, final_output);

  progress("loading " + built.engine_path + " back through the runtime loader");
  KILN_ASSIGN_OR_RETURN(auto engine, Engine::load_file(built.engine_path, args.run.load));
  KILN_ASSIGN_OR_RETURN(auto checks, check_engine(*engine, built, cfg, args.bench, progress));
  for (const auto& c : checks) {
    std::string pts;
    for (const auto& p : c.points) pts += (pts.empty() ? "" : "/") + p;
    progress("profile '" + c.profile + "': loaded engine matches the built plan at " + pts + " shapes");
  }
  MatmulPeaks peaks{};
  if (args.bench) {
    std::set<FlopPrecision> used = used_precisions(checks);
    used.insert(FlopPrecision::kF32);
    std::string names;
    for (FlopPrecision p : used) names += std::string(names.empty() ? "" : ", ") + flop_precision_name(p);
    progress("measuring the matmul peak of each precision the engine's FLOPs run in (" + names +
             "): 1024^3 through kiln's matmul kernel of that precision, best of 20");
    KILN_ASSIGN_OR_RETURN(peaks, measure_matmul_peaks(used));
    print_table(checks);
    print_layer_summary(checks, peaks);
  }
  std::map<std::string, std::string> extra;
  if (cfg.select_tactics) extra["tactics"] = tactics_report_json(tactics);
  StreamingResult streaming_result;
  if (cfg.streaming.present) {
    KILN_ASSIGN_OR_RETURN(StreamingResult streaming, run_streaming_check(engine, cfg, args.bench, progress));
    char err[32];
    std::snprintf(err, sizeof err, "%.3g", streaming.equivalence_max_abs_err);
    progress(std::string("streaming: equivalence full(T) vs full(T-1) + step: max abs err ") + err + " (tolerance 1e-4)");
    if (args.bench) print_streaming(streaming, checks);
    extra["streaming"] = streaming_report_json(streaming);
    streaming_result = streaming;
  }

  std::error_code ec;
  std::filesystem::rename(built.engine_path, final_output, ec);
  if (ec) return IoError("cannot move the engine to '" + final_output + "': " + ec.message());
  staging.path.clear();
  built.engine_path = final_output;
  const std::string report = args.report.empty() ? built.engine_path + ".report.json" : args.report;
  // What the report gains for the history: when, from what and where (history/provenance.h).
  const auto prov_t0 = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(history::RunRecord prov, history::describe_run(cfg, built.engine_path, cfg.history.label, start_time, load_before));
  const bool recording = !cfg.history.db.empty();
  if (recording && args.bench) {
    // A Chrome trace of each profile's last profiled run, linked from the dashboard.
    for (auto& c : checks) {
      if (!c.benchmarked) continue;
      const std::string trace = report + "." + c.profile + ".trace.json";
      std::ofstream tf(trace);
      tf << chrome_trace_json(c.layers, {{"model", cfg.model}, {"profile", c.profile}, {"run", prov.time}});
      if (!tf) return IoError("cannot write trace '" + trace + "'");
      c.trace_path = std::filesystem::absolute(trace).lexically_normal().string();
    }
  }
  extra["schema_version"] = std::to_string(history::kReportSchemaVersion);
  extra["run"] = history::run_section_json(prov);
  std::string text = build_report_json(built, cfg, checks, build_seconds, args.bench ? &peaks : nullptr, extra, history::machine_fields_json(prov.machine));
  const double prov_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - prov_t0).count();
  {
    std::ofstream f(report);
    f << text;
    if (!f) return IoError("cannot write report '" + report + "'");
  }
  std::printf("\nengine: %s (%.1f MB, %zu profiles)\nreport: %s\n", built.engine_path.c_str(),
              static_cast<double>(built.engine_bytes) / 1e6, built.profiles.size(), report.c_str());
  if (recording) {
    const auto rec_t0 = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(int64_t id, history::record_report(cfg.history.db, text, report));
    const double rec_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - rec_t0).count();
    const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("history: run %lld recorded into %s%s; provenance and traces %.0f ms + recording %.0f ms = %.2f%% of this run's %.1f s\n",
                static_cast<long long>(id), cfg.history.db.c_str(), cfg.history.label.empty() ? "" : (" as '" + cfg.history.label + "'").c_str(),
                prov_ms, rec_ms, 100 * (prov_ms + rec_ms) / wall_ms, wall_ms / 1e3);
  }
  if (args.bench && cfg.benchmark.enforce_budget) KILN_RETURN_IF_ERROR(check_budgets(checks, cfg.streaming.present ? &streaming_result : nullptr));
  return Status::Ok();
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  kiln::use_passive_omp_wait_policy(argv);
  try {
    auto args = kiln::parse_args(argc, argv);
    if (!args.ok()) {
      std::fprintf(stderr, "engine-build: %s\n%s", args.status().message().c_str(), kiln::kUsage);
      return 2;
    }
    kiln::Status st = kiln::run(*args);
    if (!st.ok()) {
      std::fprintf(stderr, "engine-build: %s\n", st.message().c_str());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine-build: internal error: %s\n", e.what());
    return 1;
  }
}
