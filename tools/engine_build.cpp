// engine-build: YAML config -> engine file, loaded back, validated and benchmarked per profile.
//   engine-build CONFIG.yaml [--output ENGINE] [--report REPORT.json] [--no-bench] [--sensitivity] [--set KEY=VALUE ...]
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "builder/build_config.h"
#include "builder/engine_build_job.h"
#include "builder/quantization/calibration.h"
#include "profiles/engine_check.h"
#include "profiles/matmul_peak.h"
#include "profiles/sensitivity.h"
#include "profiles/streaming_check.h"
#include "builder/tactics/tactic_selection.h"
#include "runtime/engine.h"
#include "tools/omp_wait_policy.h"

namespace kiln {
namespace {

constexpr const char* kUsage =
    "usage: engine-build CONFIG.yaml [--output ENGINE] [--report REPORT.json] [--no-bench] [--sensitivity] [--set KEY=VALUE ...]\n"
    "  --sensitivity: precision int8 only: builds, then ranks the int8 steps by the output error each causes alone (and\n"
    "  left out alone) on held-out inputs of the calibration profile, prints the ranking and writes it to\n"
    "  <engine>.sensitivity.json instead of checking and benchmarking the engine\n"
    "  environment: KILN_MAX_CPU_ISA=avx2|avx512_core|avx512_core_vnni|avx512_core_bf16|avx512_core_amx caps kiln's kernels\n"
    "  (and oneDNN's unless DNNL_MAX_CPU_ISA is set, which alone caps both) to the instruction sets of a smaller CPU\n";

struct Args {
  std::string config, output, report;
  bool bench = true;
  bool sensitivity = false;
  std::vector<std::pair<std::string, std::string>> overrides;
};

StatusOr<Args> parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&]() -> StatusOr<std::string> {
      if (i + 1 >= argc) return InvalidArgument(s + " needs a value");
      return std::string(argv[++i]);
    };
    if (s == "--output") { KILN_ASSIGN_OR_RETURN(a.output, value()); }
    else if (s == "--report") { KILN_ASSIGN_OR_RETURN(a.report, value()); }
    else if (s == "--no-bench") a.bench = false;
    else if (s == "--sensitivity") a.sensitivity = true;
    else if (s == "--set") {
      KILN_ASSIGN_OR_RETURN(std::string kv, value());
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) return InvalidArgument("--set expects KEY=VALUE, got '" + kv + "'");
      a.overrides.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    } else if (s == "-h" || s == "--help") {
      std::cout << kUsage;
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
Status run_sensitivity(const BuildConfig& cfg, const BuildResult& built) {
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
    const std::string path = built.engine_path + ".sensitivity.json";
    std::ofstream f(path);
    f << sensitivity_json(r);
    if (!f) return IoError("cannot write '" + path + "'");
    std::printf("\nsensitivity: %s (keep the top steps out of int8 with precision_overrides: {STEP: bf16})\n", path.c_str());
    return Status::Ok();
  }
  return Internal("--sensitivity: no fp32 plan of the calibration profile '" + want + "'");
}

Status run(const Args& args) {
  const auto t0 = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(BuildConfig cfg, load_build_config(args.config, args.overrides));
  if (!args.output.empty()) cfg.output = args.output;
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
  TimingCache cache;
  if (!cfg.timing_cache.empty()) {
    KILN_ASSIGN_OR_RETURN(cache, TimingCache::load(cfg.timing_cache));
    progress("timing cache " + cfg.timing_cache + ": " + std::to_string(cache.size()) + " entries");
  }
  TacticLog tactics;
  const CalibrateHook calibrate_hook = [&](const Plan& fp32_plan, const ResolvedProfile& rp) -> StatusOr<std::map<std::string, float>> {
    KILN_ASSIGN_OR_RETURN(CalibrationResult r, calibrate(fp32_plan, rp.name, rp.shapes_at(ResolvedProfile::Point::kOpt), cfg, progress));
    return r.a_scale;
  };
  KILN_ASSIGN_OR_RETURN(BuildResult built, build_engine(cfg, progress, cfg.select_tactics ? tactic_selection_hook(cfg, cache, progress, &tactics) : PlanHook{},
                                                        calibrate_hook));
  if (!cfg.timing_cache.empty()) KILN_RETURN_IF_ERROR(cache.save(cfg.timing_cache));
  const double build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (args.sensitivity) return run_sensitivity(cfg, built);

  progress("loading " + built.engine_path + " back through the runtime loader");
  KILN_ASSIGN_OR_RETURN(auto engine, Engine::load_file(built.engine_path));
  auto checked = check_engine(*engine, built, cfg, args.bench, progress);
  if (!checked.ok()) {
    // An engine that failed its checks (int8 beyond calibration.tolerance) is not left behind.
    engine.reset();
    std::error_code ec;
    std::filesystem::remove(built.engine_path, ec);
    return checked.status();
  }
  auto checks = std::move(checked).value();
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
  if (cfg.streaming.present) {
    KILN_ASSIGN_OR_RETURN(StreamingResult streaming, run_streaming_check(engine, cfg, args.bench, progress));
    char err[32];
    std::snprintf(err, sizeof err, "%.3g", streaming.equivalence_max_abs_err);
    progress(std::string("streaming: equivalence full(T) vs full(T-1) + step: max abs err ") + err + " (tolerance 1e-4)");
    if (args.bench) print_streaming(streaming, checks);
    extra["streaming"] = streaming_report_json(streaming);
  }

  const std::string report = args.report.empty() ? built.engine_path + ".report.json" : args.report;
  std::ofstream f(report);
  f << build_report_json(built, cfg, checks, build_seconds, args.bench ? &peaks : nullptr, extra);
  if (!f) return IoError("cannot write report '" + report + "'");
  std::printf("\nengine: %s (%.1f MB, %zu profiles)\nreport: %s\n", built.engine_path.c_str(),
              static_cast<double>(built.engine_bytes) / 1e6, built.profiles.size(), report.c_str());
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
