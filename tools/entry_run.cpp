#include "tools/entry_run.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "profiles/latency_stats.h"
#include "runtime/session.h"
#include "runtime/npy_io.h"

namespace kiln {

Status run_entry(const EntryRunArgs& args, const std::map<std::string, Tensor>& inputs) {
  KILN_ASSIGN_OR_RETURN(auto engine, Engine::load_file(args.engine, args.load));
  KILN_ASSIGN_OR_RETURN(auto session, Session::create(engine));
  std::vector<NamedView> views;
  for (const auto& [name, t] : inputs) {
    const int st = session->state_of_input(args.entry, name);
    if (st >= 0) KILN_RETURN_IF_ERROR(session->write_state(session->states()[st].name, t.view()).with_context("--input " + name));
    else views.emplace_back(name, t.view());
  }
  KILN_ASSIGN_OR_RETURN(auto outs, session->run(args.entry, views, args.profile));
  const SessionRunStats first = session->last_stats();
  std::printf("entry '%s' (profile '%s'): %zu outputs; state bytes read %llu, written in place %llu, copied %llu\n", args.entry.c_str(),
              std::string(first.profile).c_str(), outs.size(), static_cast<unsigned long long>(first.state_bytes_read),
              static_cast<unsigned long long>(first.state_bytes_written), static_cast<unsigned long long>(first.state_bytes_copied));
  // Outputs of the first run: timed runs after it would see the state it wrote.
  if (!args.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(args.output_dir, ec);
    if (ec) return IoError("cannot create output directory '" + args.output_dir + "': " + ec.message());
    for (const auto& [name, view] : outs)
      KILN_RETURN_IF_ERROR(write_npy((std::filesystem::path(args.output_dir) / (sanitize_file_name(name) + ".npy")).string(), view));
  }
  if (args.iterations > 0) {
    std::vector<double> samples;
    for (int i = 0; i < args.iterations; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      KILN_RETURN_IF_ERROR(session->run(args.entry, views, args.profile).status());
      samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    LatencyStats s = compute_latency_stats(samples);
    std::cout << "latency over " << s.iterations << " iterations (after 1 warm-up): " << latency_line(s) << "\n";
    if (!args.json.empty()) {
      std::ofstream f(args.json);
      f << "{\"latency_ms\": " << latency_json(s) << ", \"iterations\": " << s.iterations << "}\n";
      if (!f) return IoError("cannot write '" + args.json + "'");
    }
  }
  return Status::Ok();
}

}  // namespace kiln
