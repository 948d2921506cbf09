// The history at scale (not a test): writes a history of N runs x 2 profiles x 50 samples (and
// every layer of 3 profiled runs, 120 layers a profile, as a small model has), then the dashboard
// page over it, and prints the file sizes and times. bench/history_bench.sh then opens the page in
// headless Chromium for its script time.
//
//   history-bench [--runs 1000] [--samples 50] [--layers 120] --out DIR
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "profiles/history/dashboard_writer.h"
#include "profiles/history/history_db.h"
#include "profiles/history/provenance.h"
#include "profiles/history/run_store.h"

namespace fs = std::filesystem;
using namespace kiln::history;

int main(int argc, char** argv) {
  int runs = 1000, samples = 50, layers = 120;
  std::string out;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--runs") runs = std::atoi(argv[i + 1]);
    else if (a == "--samples") samples = std::atoi(argv[i + 1]);
    else if (a == "--layers") layers = std::atoi(argv[i + 1]);
    else if (a == "--out") out = argv[i + 1];
  }
  if (out.empty() || runs < 1) {
    std::fprintf(stderr, "usage: history-bench [--runs N] [--samples N] [--layers N] --out DIR\n");
    return 2;
  }
  fs::create_directories(out);
  const std::string db_path = out + "/history.db", html = out + "/history.html";
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db_path + suffix);
  auto db = HistoryDb::open(db_path, HistoryDb::Mode::kCreate);
  if (!db.ok()) {
    std::fprintf(stderr, "%s\n", db.status().message().c_str());
    return 1;
  }
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0, 0.03);
  std::uniform_real_distribution<double> u(0, 1);
  const MachineInfo machine = read_machine_info();
  const double t0 = 1.79e9;
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < runs; ++r) {
    RunRecord run;
    run.unix_time = t0 + r * 3600.0;
    run.time = iso8601_utc(run.unix_time);
    run.label = r % 100 == 0 ? "release-" + std::to_string(r / 100) : "";
    run.series_key = "configs/incremental.yaml";
    run.kiln_version = "0.1.0";
    run.kiln_commit = sha256_hex(std::to_string(r)).substr(0, 40);
    run.machine = machine;
    run.load_before = {1.2, 1.1, 1.0, true};
    run.load_after = {1.3, 1.1, 1.0, true};
    run.report_path = "/tmp/report-" + std::to_string(r) + ".json";
    for (const auto& [name, base] : {std::pair<const char*, double>{"full", 190}, {"incremental", 41}}) {
      ProfileRecord p;
      p.name = name;
      p.budget_ms = 100;
      const double level = base * (r >= runs * 3 / 5 ? 1.06 : 1.0);  // a planted step
      for (int s = 0; s < samples; ++s) p.samples_ms.push_back(level * std::exp(noise(rng)) * (u(rng) < 0.02 ? 1.5 : 1.0));
      p.layer_runs = 3;
      for (int l = 0; l < layers; ++l) {
        LayerRecord lr{"/blocks." + std::to_string(l / 15) + "/op_" + std::to_string(l % 15), l % 15 == 3 ? "kiln::Attention" : "FusedMatMul", {}, {}};
        for (int k = 0; k < 3; ++k) lr.ms.push_back(level / layers * std::exp(noise(rng)));
        p.layers.push_back(std::move(lr));
      }
      run.profiles.push_back(std::move(p));
    }
    auto st = insert_run(**db, run);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
  }
  const double insert_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  (void)(*db)->exec("PRAGMA wal_checkpoint(TRUNCATE)");
  start = std::chrono::steady_clock::now();
  DashboardOptions opts;
  auto st = write_dashboard(**db, html, opts);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  const double page_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("history: %d runs x 2 profiles x %d samples, %d layers x 3 profiled runs a profile\n", runs, samples, layers);
  std::printf("  database %s: %.2f MB (recording all runs took %.2f s, %.1f ms a run)\n", db_path.c_str(), fs::file_size(db_path) / 1e6, insert_s,
              1e3 * insert_s / runs);
  std::printf("  dashboard %s: %.2f MB, written in %.2f s\n", html.c_str(), fs::file_size(html) / 1e6, page_s);
  return 0;
}
