#include "builder/engine_build_job.h"

#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "builder/build_profile.h"
#include "builder/engine_writer.h"
#include "builder/entries.h"
#include "builder/onnx/onnx_importer.h"
#include "builder/plan/int8_lowering.h"
#include "runtime/plugin_host/plugin_kernel.h"
#include "runtime/plugin_host/plugin_registry.h"
#include "runtime/engine_format.h"
#include "runtime/kernel.h"

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

// The CpuFeature bits the plans' kernels declare in the registry (KernelEntry::cpu_features).
uint64_t kernel_cpu_features(const std::vector<std::shared_ptr<const Plan>>& plans) {
  const KernelRegistry& reg = KernelRegistry::builtin();
  uint64_t f = 0;
  for (const auto& plan : plans)
    for (const auto& step : plan->steps) {
      if (!is_kernel_domain(step.domain)) continue;
      for (const KernelEntry* e : reg.implementations(step.op_type))
        if (e->impl == step.impl) f |= e->cpu_features;
    }
  return f;
}

}  // namespace

// precision: bf16 needs AVX512_BF16 on the building CPU (the engine then requires it wherever it
// loads). KILN_DISABLE_BF16=1 hides the feature, so the fp32 fallback can be tested on any CPU.
bool host_has_bf16() {
  const char* off = std::getenv("KILN_DISABLE_BF16");
  return (host_cpu_features() & kCpuAvx512Bf16) && !(off && *off && std::string(off) != "0");
}

StreamingSpec streaming_spec(const BuildConfig& cfg) {
  StreamingSpec spec;
  spec.cold_start = cfg.streaming.cold_start;
  spec.step = cfg.streaming.step;
  for (const auto& s : cfg.streaming.state) spec.state.push_back({s.output, s.input, static_cast<int>(s.axis)});
  spec.tokens_per_step = cfg.streaming.tokens_per_step;
  spec.max_steps = cfg.streaming.max_steps;
  for (const auto& [name, gen] : cfg.inputs)
    if (gen.kind == "block_causal") {
      spec.mask_input = name;
      spec.mask_block = gen.block;
    }
  return spec;
}

StatusOr<BuildResult> build_engine(const BuildConfig& cfg, const ProgressFn& progress, const PlanHook& tune,
                                   const CalibrateHook& calibrate) {
  BuildResult result;
  std::error_code ec;
  if (std::filesystem::equivalent(cfg.model, cfg.output, ec))
    return InvalidArgument("output '" + cfg.output + "' is the model file itself; refusing to overwrite it");
  const bool int8 = cfg.precision == "int8";
  // int8 engines run attention and the matmuls int8 leaves out in bf16 where the CPU has it.
  const bool bf16 = (cfg.precision == "bf16" || int8) && host_has_bf16();
  if (cfg.precision == "bf16" && !bf16)
    progress("warning: precision bf16 needs AVX512_BF16, which this CPU does not have (or KILN_DISABLE_BF16 is set): building fp32");
  if (int8 && !calibrate) return InvalidArgument(cfg.config_path + ": precision int8 needs calibration, which this caller does not provide");
  if (int8 && !cfg.calibration.profile.empty()) {
    bool found = false;
    for (const auto& pc : cfg.profiles) found |= pc.name == cfg.calibration.profile;
    if (!found) return InvalidArgument(cfg.config_path + ": calibration.profile '" + cfg.calibration.profile + "' is not a profile of the config");
  }

  // Plugin libraries load before the import so the model's custom ops resolve; the engine records
  // their names, versions and file names, and the loader finds them again on its search path.
  std::vector<PluginLibraryInfo> plugin_libraries;
  for (const auto& lib : cfg.plugin_libraries) {
    KILN_RETURN_IF_ERROR(PluginRegistry::global().load_library(lib).with_context(cfg.config_path + ": plugins.load"));
    KILN_ASSIGN_OR_RETURN(PluginLibraryInfo info, PluginRegistry::global().library_info(lib));
    progress("loaded plugin library '" + info.name + "' version " + info.version + " from " + info.built_from);
    plugin_libraries.push_back(std::move(info));
  }

  if (int8 && !cfg.entries.empty()) return InvalidArgument(cfg.config_path + ": precision int8 is not supported with entries yet");
  ProfileBuildOptions options;
  options.disabled_passes = std::set<std::string>(cfg.disabled_passes.begin(), cfg.disabled_passes.end());
  // fusions: {attention: required | auto | off}
  const auto attention_mode = cfg.fusions.count("attention") ? cfg.fusions.at("attention") : std::string("auto");
  if (attention_mode == "off") options.disabled_passes.insert("attention_fusion");
  options.attention_required = attention_mode == "required";
  options.bf16 = bf16;
  options.tactics = tune;
  options.precision_overrides = cfg.precision_overrides;
  std::map<std::string, float> scales;

  std::vector<std::shared_ptr<const Plan>> plans;
  std::vector<std::string> plan_entries;
  std::set<std::string> output_names;
  // One model: import it, then build each of its profiles. `entry` names an entry of `entries:`
  // ("" for the top-level model); its plans are named "<entry>/<profile>" (docs/multi_entry.md).
  auto build_model = [&](const std::string& model, const std::vector<ProfileConfig>& profile_configs, const std::string& entry) -> Status {
    auto t0 = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(uint64_t model_bytes, model_size_on_disk(model));
    result.model_bytes += model_bytes;
    progress("parsing " + model + " (" + megabytes(model_bytes) + ")" + (entry.empty() ? "" : " for entry '" + entry + "'"));
    KILN_ASSIGN_OR_RETURN(Graph graph, import_onnx_file(model));
    progress("parsed: " + std::to_string(graph.nodes.size()) + " nodes, " + std::to_string(graph.inputs.size()) + " inputs, opset " +
             std::to_string(graph.opset) + " in " + seconds_since(t0));
    for (int id : graph.inputs) result.input_dtypes[graph.values[id].name] = graph.values[id].dtype;
    for (int id : graph.outputs) output_names.insert(graph.values[id].name);

    // int8: the activation scales measured on the calibration profile's fp32 plan (untuned, before
    // any lowering) serve every profile, whose steps keep their node names; that profile's graph is
    // built once more for it.
    if (int8) {
      const std::string& want = cfg.calibration.profile.empty() ? profile_configs.front().name : cfg.calibration.profile;
      for (const ProfileConfig& pc : profile_configs) {
        if (pc.name != want) continue;
        const std::string at_line = cfg.config_path + ":" + std::to_string(pc.line);
        auto resolved = resolve_profile(graph, pc);
        if (!resolved.ok()) return resolved.status().with_context(at_line);
        ProfileBuildOptions fp32 = options;
        fp32.bf16 = false;
        fp32.tactics = {};
        fp32.precision_overrides.clear();
        auto built = build_profile(graph, *resolved, fp32);
        if (!built.ok()) return built.status().with_context(at_line);
        auto got = calibrate(*built->plan, built->profile);
        if (!got.ok()) return got.status().with_context(cfg.config_path + ": calibration on profile '" + want + "'");
        scales = std::move(got).value();
      }
      options.int8_scales = &scales;
    }

    for (size_t i = 0; i < profile_configs.size(); ++i) {
      ProfileConfig pc = profile_configs[i];
      if (!entry.empty()) pc.name = entry_profile_name(entry, pc.name);
      auto tp = std::chrono::steady_clock::now();
      const std::string step = "[profile " + std::to_string(i + 1) + "/" + std::to_string(profile_configs.size()) + " '" + pc.name + "'] ";
      const std::string at_line = cfg.config_path + ":" + std::to_string(pc.line);
      auto resolved = resolve_profile(graph, pc);
      if (!resolved.ok()) return resolved.status().with_context(at_line);
      progress(step + "building plan (dims checked at min/opt/max)");
      auto built = build_profile(graph, *resolved, options);
      if (!built.ok()) return built.status().with_context(at_line);
      BuiltProfile& bp = *built;
      size_t fused = 0;
      for (const auto& site : bp.attention_sites) fused += site.fused_node.empty() ? 0 : 1;
      progress(step + "attention fusion: " + std::to_string(fused) + " of " + std::to_string(bp.attention_sites.size()) +
               " attention sites fused" + (options.disabled_passes.count("attention_fusion") ? " (fusions.attention: off)" : ""));
      for (const auto& site : bp.attention_sites)
        if (site.fused_node.empty()) progress(step + "  not fused: '" + site.softmax + "': " + site.reason);
      for (const auto& line : bp.pass_log) {
        for (const char* shown : {"selected_row_narrowing:", "winograd_layout:", "int8:", "precision_overrides:"})
          if (line.rfind(shown, 0) == 0) progress(step + line);
        // Attention over a fixed-size cache that reads only the live positions: worth a line each.
        if (line.rfind("attention_fusion:", 0) == 0 && line.find("live length") != std::string::npos) progress(step + line);
      }
      if (bf16 && !bp.fp32_ops.empty()) {
        std::string list;
        for (const auto& op : bp.fp32_ops) list += (list.empty() ? "" : ", ") + op;
        progress(step + "warning: precision " + cfg.precision + ": no bf16 kernel for " + list + "; these steps run in fp32");
      }
      progress(step + std::to_string(bp.plan->steps.size()) + " steps, " + std::to_string(bp.plan->constants.size()) + " constants, built in " +
               seconds_since(tp));
      plans.push_back(bp.plan);
      plan_entries.push_back(entry);
      result.profiles.push_back(std::move(bp));
    }
    return Status::Ok();
  };
  if (cfg.entries.empty()) {
    KILN_RETURN_IF_ERROR(build_model(cfg.model, cfg.profiles, ""));
  } else {
    for (const EntryConfig& ec : cfg.entries) {
      std::error_code eq;
      if (std::filesystem::equivalent(ec.model, cfg.output, eq))
        return InvalidArgument("output '" + cfg.output + "' is entry '" + ec.name + "''s model file; refusing to overwrite it");
      KILN_RETURN_IF_ERROR(build_model(ec.model, ec.profiles, ec.name));
    }
  }
  for (const auto& [name, gen] : cfg.inputs)
    if (!result.input_dtypes.count(name)) return InvalidArgument(cfg.config_path + ": inputs names '" + name + "', which the model does not have");
  // A streaming state pair naming a missing input or output fails before anything is written.
  for (const auto& st : cfg.streaming.state) {
    if (!result.input_dtypes.count(st.input))
      return InvalidArgument(cfg.config_path + ": streaming.state names input '" + st.input + "', which the model does not have");
    if (!output_names.count(st.output)) return InvalidArgument(cfg.config_path + ": streaming.state names output '" + st.output + "', which the model does not have");
  }
  KILN_ASSIGN_OR_RETURN(auto state, check_state_bindings(cfg, result.profiles, plan_entries));

  EngineWriteInput in;
  in.plans = plans;
  in.source_model = std::filesystem::path(cfg.model).filename().string();
  in.precision = int8 ? "int8" : bf16 ? "bf16" : "fp32";
  in.plugin_libraries = plugin_libraries;
  in.tactic_threads = tune ? omp_get_max_threads() : 0;   // the caller's hook times tactics at this thread count
  in.input_generators = cfg.inputs;
  in.has_streaming = cfg.streaming.present;
  if (!cfg.entries.empty()) in.plan_entries = plan_entries;
  in.state = std::move(state);
  if (in.has_streaming) in.streaming = streaming_spec(cfg);
  // The runtime library is compiled for x86-64-v3 (AVX2 + FMA): an engine needs at least that, plus
  // what the chosen kernels need (a Winograd convolution picked by tactics needs AVX-512).
  in.required_cpu_features = kCpuAvx2 | kCpuFma | (bf16 ? uint64_t{kCpuAvx512Bf16} : uint64_t{0}) | kernel_cpu_features(plans);
  auto tw = std::chrono::steady_clock::now();
  KILN_RETURN_IF_ERROR(write_engine_file(cfg.output, in, &result.engine_bytes));
  result.engine_path = cfg.output;
  progress("wrote " + cfg.output + " (" + megabytes(result.engine_bytes) + ", model " + megabytes(result.model_bytes) + ") in " + seconds_since(tw));
  return result;
}

}  // namespace kiln
