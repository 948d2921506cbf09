#include "tools/stream_run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "runtime/streaming_session.h"
#include "runtime/npy_io.h"

namespace kiln {

namespace fs = std::filesystem;

Status run_stream(const std::string& engine_path, const std::string& dir, const std::string& out_dir, const LoadOptions& load) {
  KILN_ASSIGN_OR_RETURN(auto engine, Engine::load_file(engine_path, load));
  if (!engine->info().has_streaming)
    return FailedPrecondition("engine '" + engine_path + "' records no streaming section; build it from a config with `streaming:`");
  std::error_code ec;
  std::vector<fs::path> steps;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory()) steps.push_back(e.path());
  if (ec) return IoError("cannot read stream folder '" + dir + "': " + ec.message());
  if (steps.empty()) return InvalidArgument("stream folder '" + dir + "' has no step folders (step_000 = cold start, step_001, ...)");
  std::sort(steps.begin(), steps.end());
  KILN_ASSIGN_OR_RETURN(auto session, StreamingSession::create(engine));
  const StreamingSpec& spec = engine->info().streaming;
  const ProfileInfo& warm = engine->profiles()[engine->find_profile(spec.step)];
  for (const fs::path& step : steps) {
    std::vector<std::pair<std::string, Tensor>> inputs;
    for (const auto& f : fs::directory_iterator(step, ec)) {
      if (f.path().extension() != ".npy") continue;
      KILN_ASSIGN_OR_RETURN(Tensor t, read_npy(f.path().string()));
      inputs.emplace_back(f.path().stem().string(), std::move(t));
    }
    if (ec) return IoError("cannot read step folder '" + step.string() + "': " + ec.message());
    std::vector<std::pair<std::string, TensorView>> views;
    for (const auto& [name, t] : inputs) views.emplace_back(name, t.view());
    const auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(session->step(views).with_context(step.string()));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const StreamingStepStats& s = session->last_stats();
    std::printf("%s: %s %.2f ms, %lld cached + %lld new rows, %.2f MB state copied%s\n", step.filename().c_str(),
                s.cold_start ? "cold start" : "step", ms, static_cast<long long>(s.cached_rows), static_cast<long long>(s.new_rows),
                static_cast<double>(s.state_bytes_copied) / 1e6, s.in_place ? "" : " (state not in place)");
    if (out_dir.empty()) continue;
    const fs::path out = fs::path(out_dir) / step.filename();
    fs::create_directories(out, ec);
    if (ec) return IoError("cannot create output directory '" + out.string() + "': " + ec.message());
    for (const auto& b : warm.outputs) {
      bool state = false;
      for (const auto& st : spec.state) state = state || st.output == b.name;
      const std::string path = (out / (sanitize_file_name(b.name) + ".npy")).string();
      if (state) {
        KILN_ASSIGN_OR_RETURN(Tensor t, session->state(b.name));
        KILN_RETURN_IF_ERROR(write_npy(path, t.view()));
      } else {
        KILN_ASSIGN_OR_RETURN(TensorView v, session->output(b.name));
        KILN_RETURN_IF_ERROR(write_npy(path, v));
      }
    }
  }
  return Status::Ok();
}

}  // namespace kiln
