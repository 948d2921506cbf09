// interference: the paced control loop of an engine's streaming session while another process
// competes for the machine, and the soak (the same loop for an hour).
//
//   interference CONFIG.yaml --engine ENGINE [--steps N] [--hog none|cpu|memory] [--hog-cpu K]
//                [--json FILE] [--label TEXT] [--sample-every S] [run options: --threads, --pin-threads,
//                --realtime, --lock-memory, --max-memory, --plugin]
//
// CONFIG supplies the input generators and the rate (benchmark.rate_hz, budget_ms) of the engine
// engine-build made from it. The hog is a child process pinned to CPU K (default: the last CPU):
// `cpu` spins, `memory` streams over a 256 MiB buffer (reads and writes, to load the memory bus and
// the last-level cache). One cold start, steps until the window is full plus the config's
// benchmark.warmup, then N
// steps paced at rate_hz on a real clock; prints and writes p50/p90/p99/max, deadline misses, page
// faults in the paced steps (getrusage), the pool's regions and late workers, and resident memory
// sampled every S seconds (the soak's flatness check).
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include "builder/build_config.h"
#include "profiles/latency_stats.h"
#include "profiles/streaming_check.h"
#include "runtime/engine.h"
#include "runtime/streaming_session.h"
#include "runtime/thread_pool.h"
#include "tools/omp_wait_policy.h"
#include "tools/run_options.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: interference CONFIG.yaml --engine ENGINE [--steps N] [--hog none|cpu|memory] [--hog-cpu K] [--json FILE]\n"
    "                    [--label TEXT] [--sample-every SECONDS] [run options]\n";

struct Args {
  std::string config, engine, hog = "none", json, label;
  int steps = 600;
  int hog_cpu = -1;
  double sample_every_s = 60;
  RunOptions run;
};

StatusOr<Args> parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    KILN_ASSIGN_OR_RETURN(bool consumed, parse_run_option(argc, argv, &i, &a.run));
    if (consumed) continue;
    const std::string s = argv[i];
    auto value = [&]() -> StatusOr<std::string> {
      if (i + 1 >= argc) return InvalidArgument(s + " needs a value");
      return std::string(argv[++i]);
    };
    if (s == "--engine") { KILN_ASSIGN_OR_RETURN(a.engine, value()); }
    else if (s == "--hog") { KILN_ASSIGN_OR_RETURN(a.hog, value()); }
    else if (s == "--json") { KILN_ASSIGN_OR_RETURN(a.json, value()); }
    else if (s == "--label") { KILN_ASSIGN_OR_RETURN(a.label, value()); }
    else if (s == "--steps") { KILN_ASSIGN_OR_RETURN(std::string v, value()); a.steps = std::atoi(v.c_str()); }
    else if (s == "--hog-cpu") { KILN_ASSIGN_OR_RETURN(std::string v, value()); a.hog_cpu = std::atoi(v.c_str()); }
    else if (s == "--sample-every") { KILN_ASSIGN_OR_RETURN(std::string v, value()); a.sample_every_s = std::atof(v.c_str()); }
    else if (s == "-h" || s == "--help") { std::cout << kUsage << kRunOptionsHelp; std::exit(0); }
    else if (!s.empty() && s[0] == '-') return InvalidArgument("unknown option '" + s + "'");
    else if (a.config.empty()) a.config = s;
    else return InvalidArgument("unexpected argument '" + s + "'");
  }
  if (a.config.empty() || a.engine.empty()) return InvalidArgument("CONFIG.yaml and --engine are required");
  if (a.hog != "none" && a.hog != "cpu" && a.hog != "memory") return InvalidArgument("--hog must be none, cpu or memory");
  if (a.steps < 1) return InvalidArgument("--steps must be positive");
  return a;
}

// The hog: a child process pinned to one CPU, at normal priority, until killed.
pid_t start_hog(const std::string& kind, int cpu) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  // A child inherits the forking thread's policy: with --realtime that is SCHED_FIFO, and a FIFO
  // busy loop would own its core. The hog is an ordinary process.
  sched_param normal{};
  ::sched_setscheduler(0, SCHED_OTHER, &normal);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ::sched_setaffinity(0, sizeof(set), &set);
  if (kind == "cpu") {
    volatile uint64_t x = 1;
    for (;;) x = x * 6364136223846793005ull + 1442695040888963407ull;
  }
  const size_t bytes = size_t{256} << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  for (;;) {
    std::memcpy(b.data(), a.data(), bytes);
    std::memcpy(a.data(), b.data(), bytes);
  }
}

uint64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

Status run(Args& a) {
  KILN_RETURN_IF_ERROR(apply_run_options(&a.run, "interference"));
  KILN_ASSIGN_OR_RETURN(BuildConfig cfg, load_build_config(a.config, {}));
  for (const auto& lib : cfg.plugin_libraries) a.run.load.allowed_plugins.push_back(lib);
  KILN_ASSIGN_OR_RETURN(auto engine, Engine::load_file(a.engine, a.run.load));
  if (!engine->info().has_streaming) return InvalidArgument("engine '" + a.engine + "' has no streaming section");
  const StreamingSpec& spec = engine->info().streaming;
  KILN_ASSIGN_OR_RETURN(auto session, StreamingSession::create(engine));
  KILN_ASSIGN_OR_RETURN(auto cold_in, streaming_step_inputs(*engine, spec.cold_start, cfg, spec));
  KILN_ASSIGN_OR_RETURN(auto step_in, streaming_step_inputs(*engine, spec.step, cfg, spec));
  std::vector<std::pair<std::string, TensorView>> cold_views, step_views;
  for (const auto& [n, t] : cold_in) cold_views.emplace_back(n, t.view());
  for (const auto& [n, t] : step_in) step_views.emplace_back(n, t.view());

  const int ncpu = static_cast<int>(std::thread::hardware_concurrency());
  const int hog_cpu = a.hog_cpu >= 0 ? a.hog_cpu : ncpu - 1;
  struct HogGuard {
    pid_t pid = 0;
    ~HogGuard() {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } hog;
  if (a.hog != "none") hog.pid = start_hog(a.hog, hog_cpu);

  const double period_ms = 1000.0 / cfg.benchmark.rate_hz, budget_ms = cfg.benchmark.budget_ms;
  KILN_RETURN_IF_ERROR(session->step(cold_views));
  // Warm-up: until the window is full (each step before that runs at a new cache length) and then
  // the config's warm-up count.
  const int warmup = static_cast<int>(spec.max_steps) + 1 + std::max(cfg.benchmark.warmup, 3);
  for (int i = 0; i < warmup; ++i) KILN_RETURN_IF_ERROR(session->step(step_views));

  rusage ru0{};
  ::getrusage(RUSAGE_SELF, &ru0);
  const ThreadPool::Stats pool0 = ThreadPool::global().stats();
  std::vector<double> lat;
  lat.reserve(static_cast<size_t>(a.steps));
  std::vector<std::pair<double, uint64_t>> rss;  // (seconds, bytes)
  int misses = 0, steps_with_faults = 0;
  long step_faults = 0;
  const auto start = Clock::now();
  auto next = start;
  double next_sample = 0;
  Status failure;
  for (int i = 0; i < a.steps && failure.ok(); ++i) {
    next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(period_ms));
    std::this_thread::sleep_until(next);
    // Page faults of the step alone (the loop's own bookkeeping, e.g. reading /proc for the RSS
    // samples, is outside the window).
    rusage before{}, after{};
    ::getrusage(RUSAGE_SELF, &before);
    const auto t0 = Clock::now();
    failure = session->step(step_views);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ::getrusage(RUSAGE_SELF, &after);
    lat.push_back(ms);
    misses += ms > budget_ms;
    const long faults = after.ru_minflt - before.ru_minflt + after.ru_majflt - before.ru_majflt;
    steps_with_faults += faults != 0;
    step_faults += faults;
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (s >= next_sample) {
      rss.emplace_back(s, resident_bytes());
      next_sample += a.sample_every_s;
    }
    if (next < Clock::now()) next = Clock::now();  // an overrun does not make the next steps rush
  }
  rss.emplace_back(std::chrono::duration<double>(Clock::now() - start).count(), resident_bytes());
  rusage ru1{};
  ::getrusage(RUSAGE_SELF, &ru1);
  if (hog.pid > 0) {
    ::kill(hog.pid, SIGKILL);
    ::waitpid(hog.pid, nullptr, 0);
    hog.pid = 0;
  }
  KILN_RETURN_IF_ERROR(failure);
  const ThreadPool::Stats pool1 = ThreadPool::global().stats();
  const LatencyStats l = compute_latency_stats(lat);
  double load[3] = {0, 0, 0};
  ::getloadavg(load, 3);
  const long minflt = ru1.ru_minflt - ru0.ru_minflt, majflt = ru1.ru_majflt - ru0.ru_majflt;  // whole loop
  std::printf("%s hog=%s threads=%d steps=%d p50 %.2f p90 %.2f p99 %.2f max %.2f ms; %d over %.0f ms; page faults in steps %ld (in %d steps; whole loop %ld minor %ld major); "
              "regions %llu, inline loops %llu, late workers %llu; rss %.1f -> %.1f MB; load %.2f\n",
              a.label.c_str(), a.hog.c_str(), ThreadPool::global().max_threads(), static_cast<int>(lat.size()), l.p50_ms, l.p90_ms, l.p99_ms,
              l.max_ms, misses, budget_ms, step_faults, steps_with_faults, minflt, majflt, static_cast<unsigned long long>(pool1.regions - pool0.regions),
              static_cast<unsigned long long>(pool1.inline_loops - pool0.inline_loops),
              static_cast<unsigned long long>(pool1.late_workers - pool0.late_workers), rss.front().second / 1e6, rss.back().second / 1e6, load[0]);
  if (!a.json.empty()) {
    std::ostringstream os;
    os << "{\"label\": \"" << a.label << "\", \"hog\": \"" << a.hog << "\", \"hog_cpu\": " << hog_cpu << ", \"engine\": \"" << a.engine
       << "\", \"threads\": " << ThreadPool::global().max_threads() << ", \"realtime\": " << (a.run.pool.realtime ? "true" : "false")
       << ", \"steps\": " << lat.size() << ", \"budget_ms\": " << budget_ms << ", \"latency_ms\": " << latency_json(l)
       << ", \"deadline_misses\": " << misses << ", \"page_faults_minor\": " << minflt << ", \"page_faults_major\": " << majflt
       << ", \"step_page_faults\": " << step_faults << ", \"steps_with_page_faults\": " << steps_with_faults << ", \"pool_regions\": " << pool1.regions - pool0.regions
       << ", \"pool_inline_loops\": " << pool1.inline_loops - pool0.inline_loops << ", \"pool_late_workers\": " << pool1.late_workers - pool0.late_workers
       << ", \"loadavg_1m\": " << load[0] << ", \"rss_bytes\": [";
    for (size_t i = 0; i < rss.size(); ++i) os << (i ? ", " : "") << "[" << rss[i].first << ", " << rss[i].second << "]";
    os << "], \"samples_ms\": [";
    for (size_t i = 0; i < lat.size(); ++i) os << (i ? ", " : "") << lat[i];
    os << "]}\n";
    std::ofstream f(a.json, std::ios::app);
    f << os.str();
    if (!f) return IoError("cannot write '" + a.json + "'");
  }
  return Status::Ok();
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  kiln::use_passive_omp_wait_policy(argv);
  auto args = kiln::parse_args(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "interference: %s\n%s", args.status().message().c_str(), kiln::kUsage);
    return 2;
  }
  kiln::Status st = kiln::run(*args);
  if (!st.ok()) {
    std::fprintf(stderr, "interference: %s\n", st.message().c_str());
    return 1;
  }
  return 0;
}
