#include "tools/timed_runs.h"

#include <time.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "builder/json_text.h"
#include "profiles/latency_stats.h"
#include "runtime/openmp_team.h"
#include "runtime/thread_pool.h"

namespace kiln {

StatusOr<TimedRuns> time_runs(const std::function<Status()>& run, const TimingOptions& options,
                              const std::vector<std::pair<std::string, std::string>>& context) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < options.warmup; ++i) KILN_RETURN_IF_ERROR(run());
  TimedRuns t;
  const int min_runs = options.iterations > 0 ? options.iterations : 1;
  if (options.iterations > 0) {
    t.start_ms.reserve(static_cast<size_t>(options.iterations));
    t.latency_ms.reserve(static_cast<size_t>(options.iterations));
  }
  // Also the process's CPU time per run (every thread): on a shared machine a run's wall time
  // mostly measures waiting for a core, its CPU time still the work (compare at equal threads).
  auto cpu_now_ms = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
  };
  const ThreadPool::Stats pool0 = ThreadPool::global().stats();
  const OpenmpTeamStats team0 = openmp_team_stats();
  const auto begin = Clock::now();
  for (;;) {
    const double c0 = cpu_now_ms();
    const auto t0 = Clock::now();
    KILN_RETURN_IF_ERROR(run());
    const auto t1 = Clock::now();
    t.cpu_ms.push_back(cpu_now_ms() - c0);
    t.start_ms.push_back(std::chrono::duration<double, std::milli>(t0 - begin).count());
    t.latency_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    if (static_cast<int>(t.latency_ms.size()) >= min_runs && std::chrono::duration<double>(t1 - begin).count() >= options.duration_s) break;
  }
  const LatencyStats s = compute_latency_stats(t.latency_ms), cpu = compute_latency_stats(t.cpu_ms);
  std::cout << "latency over " << s.iterations << " iterations (after " << options.warmup << " warm-up): " << latency_line(s) << "\n";
  std::cout << "cpu time per run (all threads): " << latency_line(cpu) << "\n";
  // Where the threads went: a machine whose second core is busy shows late workers and solo
  // OpenMP regions here (runtime/thread_pool.h, runtime/openmp_team.h).
  const ThreadPool::Stats pool1 = ThreadPool::global().stats();
  const OpenmpTeamStats team1 = openmp_team_stats();
  const double runs = static_cast<double>(t.latency_ms.size());
  const double regions = static_cast<double>(pool1.regions - pool0.regions) / runs,
               inline_loops = static_cast<double>(pool1.inline_loops - pool0.inline_loops) / runs,
               late_workers = static_cast<double>(pool1.late_workers - pool0.late_workers) / runs,
               probes = static_cast<double>(team1.probes - team0.probes) / runs,
               late_probes = static_cast<double>(team1.late_probes - team0.late_probes) / runs,
               solo = static_cast<double>(team1.solo_regions - team0.solo_regions) / runs;
  char line[256];
  std::snprintf(line, sizeof line,
                "threads per run: kiln pool %.1f regions, %.1f inline loops, %.2f late workers; OpenMP %.2f team probes (%.2f late), "
                "%.1f solo regions\n",
                regions, inline_loops, late_workers, probes, late_probes, solo);
  std::cout << line;
  if (!options.json.empty()) {
    // The same per-run thread counts, so a benchmark that keeps the JSON can tell a process whose
    // OpenMP team ran solo (a slow round) from a slow machine.
    char threads[320];
    std::snprintf(threads, sizeof threads,
                  "{\"pool_regions\": %.3f, \"inline_loops\": %.3f, \"late_workers\": %.3f, \"team_probes\": %.3f, "
                  "\"late_probes\": %.3f, \"solo_regions\": %.3f}",
                  regions, inline_loops, late_workers, probes, late_probes, solo);
    std::ofstream f(options.json);
    f << "{\"latency_ms\": " << latency_json(s) << ", \"cpu_ms\": " << latency_json(cpu) << ", \"iterations\": " << s.iterations
      << ", \"threads_per_run\": " << threads << "}\n";
    if (!f) return IoError("cannot write '" + options.json + "'");
  }
  if (!options.export_times.empty()) {
    std::ofstream f(options.export_times);
    f << "{";
    for (const auto& [key, value] : context) f << json_string(key) << ": " << json_string(value) << ", ";
    f << "\"warmup\": " << options.warmup << ", \"runs\": [";
    char buf[96];
    for (size_t i = 0; i < t.latency_ms.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%s{\"start_ms\": %.6f, \"latency_ms\": %.6f}", i ? ", " : "", t.start_ms[i], t.latency_ms[i]);
      f << buf;
    }
    f << "]}\n";
    if (!f) return IoError("cannot write '" + options.export_times + "'");
  }
  return t;
}

}  // namespace kiln
