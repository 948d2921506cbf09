#include "builder/engine_build_job.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "builder/engine_writer.h"
#include "builder/onnx_importer.h"
#include "runtime/engine_format.h"

namespace kiln {

namespace {

std::string seconds_since(std::chrono::steady_clock::time_point t0) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return buf;
}

std::string megabytes(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

StatusOr<uint64_t> model_size_on_disk(const std::string& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return IoError("cannot open model '" + path + "': " + ec.message());
  return size;
}

}  // namespace

StatusOr<BuildResult> build_engine(const BuildConfig& cfg, const ProgressFn& progress) {
  BuildResult result;
  std::error_code ec;
  if (std::filesystem::equivalent(cfg.model, cfg.output, ec))
    return InvalidArgument("output '" + cfg.output + "' is the model file itself; refusing to overwrite it");
  if (cfg.precision != "fp32")
    return Unimplemented("precision '" + cfg.precision + "' is not implemented yet (fp32 only)");
  if (!cfg.plugin_libraries.empty()) return Unimplemented("plugins.load is not implemented yet");

  auto t0 = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(result.model_bytes, model_size_on_disk(cfg.model));
  progress("parsing " + cfg.model + " (" + megabytes(result.model_bytes) + ")");
  KILN_ASSIGN_OR_RETURN(Graph graph, import_onnx_file(cfg.model));
  progress("parsed: " + std::to_string(graph.nodes.size()) + " nodes, " + std::to_string(graph.inputs.size()) + " inputs, opset " +
           std::to_string(graph.opset) + " in " + seconds_since(t0));
  for (int id : graph.inputs) result.input_dtypes[graph.values[id].name] = graph.values[id].dtype;
  for (const auto& [name, gen] : cfg.inputs)
    if (!result.input_dtypes.count(name)) return InvalidArgument(cfg.config_path + ": inputs names '" + name + "', which the model does not have");

  const std::set<std::string> disabled(cfg.disabled_passes.begin(), cfg.disabled_passes.end());
  std::vector<std::shared_ptr<const Plan>> plans;
  for (size_t i = 0; i < cfg.profiles.size(); ++i) {
    const ProfileConfig& pc = cfg.profiles[i];
    auto tp = std::chrono::steady_clock::now();
    const std::string step = "[profile " + std::to_string(i + 1) + "/" + std::to_string(cfg.profiles.size()) + " '" + pc.name + "'] ";
    auto resolved = resolve_profile(graph, pc);
    if (!resolved.ok()) return resolved.status().with_context(cfg.config_path + ":" + std::to_string(pc.line));
    progress(step + "checking dims against the graph at min/opt/max");
    Status st = check_profile_against_graph(graph, *resolved);
    if (!st.ok()) return st.with_context(cfg.config_path + ":" + std::to_string(pc.line));
    progress(step + "building plan");
    BuiltProfile bp;
    bp.profile = *resolved;
    KILN_ASSIGN_OR_RETURN(bp.plan, build_profile_plan(graph, *resolved, disabled, &bp.pass_log));
    progress(step + std::to_string(bp.plan->steps.size()) + " steps, " + std::to_string(bp.plan->constants.size()) + " constants, built in " + seconds_since(tp));
    plans.push_back(bp.plan);
    result.profiles.push_back(std::move(bp));
  }

  EngineWriteInput in;
  in.plans = plans;
  in.source_model = std::filesystem::path(cfg.model).filename().string();
  in.precision = cfg.precision;
  // The runtime library is compiled for x86-64-v3 (AVX2 + FMA): an engine needs at least that.
  in.required_cpu_features = kCpuAvx2 | kCpuFma;
  auto tw = std::chrono::steady_clock::now();
  KILN_RETURN_IF_ERROR(write_engine_file(cfg.output, in, &result.engine_bytes));
  result.engine_path = cfg.output;
  progress("wrote " + cfg.output + " (" + megabytes(result.engine_bytes) + ", model " + megabytes(result.model_bytes) + ") in " + seconds_since(tw));
  return result;
}

}  // namespace kiln
