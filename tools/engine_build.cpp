// engine-build: YAML config -> engine file, loaded back, validated and benchmarked per profile
// (profiles/engine_build_flow.h does the work; this prints its tables). `engine-build --help`.
#include <chrono>
#include <cstdio>

#include "profiles/engine_build_flow.h"
#include "profiles/history/recorder.h"
#include "profiles/history/report_sections.h"
#include "runtime/log.h"
#include "tools/cli_common.h"
#include "tools/omp_wait_policy.h"
#include "tools/run_options_cli.h"

namespace kiln {
namespace {

struct Args {
  std::string config, output, report, record_db, label;
  bool no_bench = false;
  bool enforce_budget = false;
  bool sensitivity = false;
  RunOptions run;   // memory cap and scheduling; plugins come from the config's plugins: {load}
  std::vector<std::string> overrides;   // KEY=VALUE
  LogOptions log;
};

void progress(const std::string& line) {
  // Builder lines that warn carry "warning:" somewhere ("[profile 'p'] warning: ...").
  log_message(line.find("warning: ") != std::string::npos ? LogLevel::kWarn : LogLevel::kInfo, line);
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

// --sensitivity's ranking, as a table.
void print_sensitivity(const SensitivityResult& r, const std::string& path) {
  std::printf("\nint8 sensitivity, profile '%s' (error = max over outputs of max |x - fp32| / max(1, max |fp32|), %d held-out batch(es)):\n"
              "all steps int8: %.4g\n%4s  %-48s %12s %12s\n", r.profile.c_str(), r.batches, r.all_int8, "rank", "step", "alone int8", "all but it");
  for (size_t i = 0; i < r.layers.size(); ++i)
    std::printf("%4zu  %-48s %12.4g %12.4g\n", i + 1, r.layers[i].step.c_str(), r.layers[i].alone, r.layers[i].all_but);
  std::printf("\nsensitivity: %s (keep the top steps out of int8 with precision_overrides: {STEP: bf16})\n", path.c_str());
}

Status run(Args& args) {
  const auto t0 = std::chrono::steady_clock::now();
  const history::RunStart start = history::run_start_now();
  if (!args.label.empty() && args.record_db.empty()) return InvalidArgument("--label needs --record DB");
  EngineBuildRequest request;
  request.config_path = args.config;
  request.output = args.output;
  request.report_path = args.report;
  request.benchmark = !args.no_bench;
  request.sensitivity = args.sensitivity;
  request.load = args.run.load;
  for (const auto& kv : args.overrides) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return InvalidArgument("--set expects KEY=VALUE, got '" + kv + "'");
    request.overrides.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  request.configure = [&](BuildConfig& cfg) -> Status {
    if (!args.record_db.empty()) cfg.history = {args.record_db, args.label};
    if (args.enforce_budget) cfg.benchmark.enforce_budget = true;
    if (!cfg.history.db.empty() && args.no_bench) return InvalidArgument("recording into a history needs the benchmark (drop --no-bench)");
    if (cfg.threads > 0 && args.run.pool.threads == 0) {
      args.run.pool.threads = cfg.threads;
      args.run.configure_pool = true;
    }
    return apply_run_options(&args.run, "engine-build");
  };
  // What the report gains for the history: when, from what and where (history/provenance.h).
  double prov_ms = 0;
  request.before_report = [&](EngineBuildOutcome& out, std::map<std::string, std::string>& extra, std::string& machine) -> Status {
    const auto p0 = std::chrono::steady_clock::now();
    const bool traces = !out.config.history.db.empty() && !args.no_bench;
    KILN_RETURN_IF_ERROR(history::add_run_sections(out, start, traces, extra, machine).status());
    prov_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count();
    return Status::Ok();
  };
  KILN_ASSIGN_OR_RETURN(EngineBuildOutcome out, run_engine_build(request, progress));
  if (out.sensitivity) {
    print_sensitivity(*out.sensitivity, out.sensitivity_path);
    return Status::Ok();
  }
  if (request.benchmark) {
    print_table(out.checks);
    print_layer_summary(out.checks, out.peaks);
    if (out.streaming) print_streaming(*out.streaming, out.checks);
  }
  std::printf("\nengine: %s (%.1f MB, %zu profiles)\nreport: %s\n", out.built.engine_path.c_str(),
              static_cast<double>(out.built.engine_bytes) / 1e6, out.built.profiles.size(), out.report_path.c_str());
  const BuildConfig& cfg = out.config;
  if (!cfg.history.db.empty()) {
    const auto rec_t0 = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(int64_t id, history::record_report(cfg.history.db, out.report_json, out.report_path));
    const double rec_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - rec_t0).count();
    const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("history: run %lld recorded into %s%s; provenance and traces %.0f ms + recording %.0f ms = %.2f%% of this run's %.1f s\n",
                static_cast<long long>(id), cfg.history.db.c_str(), cfg.history.label.empty() ? "" : (" as '" + cfg.history.label + "'").c_str(),
                prov_ms, rec_ms, 100 * (prov_ms + rec_ms) / wall_ms, wall_ms / 1e3);
  }
  if (request.benchmark && cfg.benchmark.enforce_budget)
    KILN_RETURN_IF_ERROR(check_budgets(out.checks, out.streaming ? &*out.streaming : nullptr));
  return Status::Ok();
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  kiln::use_passive_omp_wait_policy(argv);
  kiln::Args args;
  CLI::App app{"engine-build: build an engine file from a YAML build config, load it back, check every profile against the "
               "built plans at its min/opt/max shapes, benchmark each profile against the control-loop budget and write a JSON report.",
               "engine-build"};
  app.add_option("config", args.config, "The YAML build config (see README: YAML build config)")->required();
  app.add_option("-o,--output", args.output, "Engine file to write (default: the config's `output`)");
  app.add_option("--report", args.report, "Report JSON to write (default: ENGINE.report.json)");
  app.add_flag("--no-bench", args.no_bench, "Build, load back and check only: no benchmark, no per-layer profile, no matmul peak");
  app.add_option("--record", args.record_db, "Store the benchmark run in the history file DB (engine-perf reads it); also history.db")
      ->type_name("DB");
  app.add_option("--label", args.label, "Label the recorded run (engine-perf compare takes labels); also history.label")->type_name("NAME");
  app.add_flag("--sensitivity", args.sensitivity,
               "precision int8 only: build, then rank the int8 steps by the output error each causes alone (and left out alone) on "
               "held-out inputs of the calibration profile, print the ranking and write it to ENGINE.sensitivity.json instead of "
               "checking and benchmarking the engine");
  app.add_flag("--enforce-budget", args.enforce_budget,
               "Exit non-zero when a profile's p99 misses its budget; also benchmark.enforce_budget");
  app.add_option("--set", args.overrides,
                 "Override a config key by dotted path with a YAML value, e.g. --set benchmark.iterations=20 or "
                 "--set 'profiles.full.dims.timesteps={min: 1, opt: 6, max: 6}' (repeatable)")
      ->allow_extra_args(false)->type_name("KEY=VALUE");
  kiln::add_run_options(app, args.run);
  kiln::add_log_options(app, args.log);
  if (const int code = kiln::parse_command_line(app, "engine-build", argc, argv); code >= 0) return code;
  kiln::apply_log_options("engine-build", args.log);
  try {
    kiln::Status st = kiln::run(args);
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
