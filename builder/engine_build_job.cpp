#include "builder/engine_build_job.h"

#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "builder/plan/build_plan.h"
#include "builder/engine_writer.h"
#include "builder/onnx/onnx_importer.h"
#include "runtime/plugin_host/plugin_kernel.h"
#include "runtime/plugin_host/plugin_registry.h"
#include "runtime/engine_format.h"
#include "runtime/kernel.h"

namespace kiln {

namespace {

// Ops whose arithmetic bf16 would speed up: named in the fallback warning when they stay fp32
// (data movement and shape ops are not worth a warning).
const std::set<std::string> kFloatComputeOps = {"MatMul", "Gemm", "Conv", "FusedMatMul", "ConvTranspose", "Einsum"};

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

// Input dtypes and shapes of every plugin node, by node name, with the graph specialized at one
// point of the profile; an input whose shape is not concrete there is left out (nullopt).
using PluginInputs = std::map<std::string, std::vector<std::optional<TensorDesc>>>;
StatusOr<PluginInputs> plugin_inputs_at(const Graph& graph, const ResolvedProfile& rp, ResolvedProfile::Point point,
                                        const std::set<std::string>& disabled) {
  Graph copy = graph;
  KILN_RETURN_IF_ERROR(specialize_inputs(copy, rp.shapes_at(point)));
  PassContext ctx;
  ctx.disabled = disabled;
  KILN_RETURN_IF_ERROR(run_pass_pipeline(copy, ctx));
  PluginInputs out;
  for (const auto& n : copy.nodes) {
    if (n.removed || n.domain.empty()) continue;
    auto& descs = out[n.name];
    for (int v : n.inputs) {
      const Value* val = v >= 0 ? &copy.values[v] : nullptr;
      if (!val) descs.emplace_back(TensorDesc{});
      else if (val->is_constant()) descs.emplace_back(val->constant.view().desc());
      else if (val->shape && sym_shape_concrete(*val->shape) && dtype_is_known(val->dtype)) descs.emplace_back(TensorDesc{val->dtype, to_shape(*val->shape)});
      else descs.emplace_back(std::nullopt);
    }
  }
  return out;
}

// PluginBuild::configure for each plugin step of a profile's plan with its inputs' min/opt/max,
// taken from the graph specialized at the profile's min, opt and max. A plugin whose inputs are
// not all concrete at the three points is not configured. The step then saves the fields the
// configured plugin reports.
Status configure_plugins(const Graph& graph, const ResolvedProfile& rp, const std::set<std::string>& disabled, Plan& plan) {
  bool any = false;
  for (const auto& step : plan.steps) any |= !step.domain.empty();
  if (!any) return Status::Ok();
  KILN_ASSIGN_OR_RETURN(PluginInputs at_min, plugin_inputs_at(graph, rp, ResolvedProfile::Point::kMin, disabled));
  KILN_ASSIGN_OR_RETURN(PluginInputs at_opt, plugin_inputs_at(graph, rp, ResolvedProfile::Point::kOpt, disabled));
  KILN_ASSIGN_OR_RETURN(PluginInputs at_max, plugin_inputs_at(graph, rp, ResolvedProfile::Point::kMax, disabled));
  for (auto& step : plan.steps) {
    if (step.domain.empty() || !at_min.count(step.name) || !at_opt.count(step.name) || !at_max.count(step.name)) continue;
    const auto &lo = at_min[step.name], &mid = at_opt[step.name], &hi = at_max[step.name];
    if (lo.size() != step.inputs.size() || mid.size() != lo.size() || hi.size() != lo.size()) continue;
    std::vector<PluginInputRange> ranges;
    bool concrete = true;
    for (size_t i = 0; i < lo.size() && concrete; ++i) {
      concrete = lo[i] && mid[i] && hi[i] && lo[i]->dtype == hi[i]->dtype;
      if (concrete) ranges.push_back(PluginInputRange{lo[i]->dtype, lo[i]->shape, mid[i]->shape, hi[i]->shape});
    }
    if (!concrete) continue;
    KILN_ASSIGN_OR_RETURN(std::string version, plugin_version_from_impl(step));
    const PluginEntry* entry = PluginRegistry::global().find(step.domain, step.op_type, version);
    if (!entry) return Internal("node '" + step.name + "': plugin " + step.domain + "::" + step.op_type + " vanished from the registry");
    const std::string where = "node '" + step.name + "' (plugin " + entry->id() + ")";
    auto build = entry->creator->create(step.attrs);
    if (!build.ok()) return build.status().with_context(where);
    if (!build.value()) return Internal(where + ": creator returned no plugin");
    KILN_RETURN_IF_ERROR(build.value()->configure(ranges).with_context(where + ": configure for profile '" + rp.name + "'"));
    step.attrs = build.value()->fields();
  }
  return Status::Ok();
}

// precision: bf16 needs AVX512_BF16 on the building CPU (the engine then requires it wherever it
// loads). KILN_DISABLE_BF16=1 hides the feature, so the fp32 fallback can be tested on any CPU.
bool host_has_bf16() {
  const char* off = std::getenv("KILN_DISABLE_BF16");
  return (host_cpu_features() & kCpuAvx512Bf16) && !(off && *off && std::string(off) != "0");
}

// Switches every step that has a bf16 kernel to it and returns the op types left in fp32. Attention
// plugins get their "precision" field set only when they declare one (their fields, defaults
// included, are what the step saved); *plugins_changed tells the caller to configure them again.
std::set<std::string> lower_to_bf16(Plan& plan, bool* plugins_changed) {
  const KernelRegistry& reg = KernelRegistry::builtin();
  std::set<std::string> fp32_ops;
  for (auto& step : plan.steps) {
    if (!step.domain.empty()) {
      // A plugin opts in by declaring a string field `precision` (it may omit it from its saved
      // fields while it is at the fp32 default, as kiln::Attention does).
      bool declared = false;
      auto version = plugin_version_from_impl(step);
      if (const PluginEntry* entry = version.ok() ? PluginRegistry::global().find(step.domain, step.op_type, *version) : nullptr)
        for (const auto& f : entry->creator->field_specs()) declared |= f.name == "precision" && f.kind == Attribute::Kind::kString;
      auto it = step.attrs.find("precision");
      if (declared || (it != step.attrs.end() && it->second.kind == Attribute::Kind::kString)) {
        *plugins_changed |= it == step.attrs.end() || it->second.s != "bf16";
        step.attrs["precision"] = Attribute::String("bf16");
      } else {
        fp32_ops.insert(step.domain + "::" + step.op_type);
      }
      continue;
    }
    bool has_bf16 = false;
    for (const KernelEntry* e : reg.implementations(step.op_type)) has_bf16 |= e->impl == "onednn_bf16";
    if (has_bf16) step.impl = "onednn_bf16";
    else if (kFloatComputeOps.count(step.op_type)) fp32_ops.insert(step.op_type);
  }
  return fp32_ops;
}

// The CpuFeature bits the plans' kernels declare in the registry (KernelEntry::cpu_features).
uint64_t kernel_cpu_features(const std::vector<std::shared_ptr<const Plan>>& plans) {
  const KernelRegistry& reg = KernelRegistry::builtin();
  uint64_t f = 0;
  for (const auto& plan : plans)
    for (const auto& step : plan->steps) {
      if (!step.domain.empty()) continue;
      for (const KernelEntry* e : reg.implementations(step.op_type))
        if (e->impl == step.impl) f |= e->cpu_features;
    }
  return f;
}

}  // namespace

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

StatusOr<BuildResult> build_engine(const BuildConfig& cfg, const ProgressFn& progress, const PlanHook& tune) {
  BuildResult result;
  std::error_code ec;
  if (std::filesystem::equivalent(cfg.model, cfg.output, ec))
    return InvalidArgument("output '" + cfg.output + "' is the model file itself; refusing to overwrite it");
  const bool bf16 = cfg.precision == "bf16" && host_has_bf16();
  if (cfg.precision == "bf16" && !bf16)
    progress("warning: precision bf16 needs AVX512_BF16, which this CPU does not have (or KILN_DISABLE_BF16 is set): building fp32");

  // Plugin libraries load before the import so the model's custom ops resolve; the engine records
  // their names, versions and file names, and the loader finds them again on its search path.
  std::vector<PluginLibraryInfo> plugin_libraries;
  for (const auto& lib : cfg.plugin_libraries) {
    KILN_RETURN_IF_ERROR(PluginRegistry::global().load_library(lib).with_context(cfg.config_path + ": plugins.load"));
    KILN_ASSIGN_OR_RETURN(PluginLibraryInfo info, PluginRegistry::global().library_info(lib));
    progress("loaded plugin library '" + info.name + "' version " + info.version + " from " + info.built_from);
    plugin_libraries.push_back(std::move(info));
  }

  auto t0 = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(result.model_bytes, model_size_on_disk(cfg.model));
  progress("parsing " + cfg.model + " (" + megabytes(result.model_bytes) + ")");
  KILN_ASSIGN_OR_RETURN(Graph graph, import_onnx_file(cfg.model));
  progress("parsed: " + std::to_string(graph.nodes.size()) + " nodes, " + std::to_string(graph.inputs.size()) + " inputs, opset " +
           std::to_string(graph.opset) + " in " + seconds_since(t0));
  for (int id : graph.inputs) result.input_dtypes[graph.values[id].name] = graph.values[id].dtype;
  for (const auto& [name, gen] : cfg.inputs)
    if (!result.input_dtypes.count(name)) return InvalidArgument(cfg.config_path + ": inputs names '" + name + "', which the model does not have");
  // A streaming state pair naming a missing input or output fails before anything is built.
  for (const auto& st : cfg.streaming.state) {
    bool has_output = false;
    for (int id : graph.outputs) has_output = has_output || graph.values[id].name == st.output;
    if (!result.input_dtypes.count(st.input))
      return InvalidArgument(cfg.config_path + ": streaming.state names input '" + st.input + "', which the model does not have");
    if (!has_output) return InvalidArgument(cfg.config_path + ": streaming.state names output '" + st.output + "', which the model does not have");
  }

  std::set<std::string> disabled(cfg.disabled_passes.begin(), cfg.disabled_passes.end());
  // fusions: {attention: required | auto | off}
  const auto attention_mode = cfg.fusions.count("attention") ? cfg.fusions.at("attention") : std::string("auto");
  if (attention_mode == "off") disabled.insert("attention_fusion");
  const bool attention_required = attention_mode == "required";
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
    KILN_ASSIGN_OR_RETURN(bp.plan, build_profile_plan(graph, *resolved, disabled, &bp.pass_log, attention_required, &bp.attention_sites));
    size_t fused = 0;
    for (const auto& site : bp.attention_sites) fused += site.fused_node.empty() ? 0 : 1;
    progress(step + "attention fusion: " + std::to_string(fused) + " of " + std::to_string(bp.attention_sites.size()) +
             " attention sites fused" + (disabled.count("attention_fusion") ? " (fusions.attention: off)" : ""));
    for (const auto& site : bp.attention_sites)
      if (site.fused_node.empty()) progress(step + "  not fused: '" + site.softmax + "': " + site.reason);
    for (const auto& line : bp.pass_log)
      if (line.rfind("selected_row_narrowing:", 0) == 0) progress(step + line);
    st = configure_plugins(graph, *resolved, disabled, *bp.plan);
    if (!st.ok()) return st.with_context(cfg.config_path + ":" + std::to_string(pc.line));
    if (bf16) {
      // The fp32 plan stays in memory as the reference engine-build's report measures bf16 against.
      bp.fp32_plan = std::make_shared<Plan>(*bp.plan);
      bool plugins_changed = false;
      const std::set<std::string> fp32_ops = lower_to_bf16(*bp.plan, &plugins_changed);
      // A plugin may size its tiles or workspace by precision in configure().
      if (plugins_changed) st = configure_plugins(graph, *resolved, disabled, *bp.plan);
      if (!st.ok()) return st.with_context(cfg.config_path + ":" + std::to_string(pc.line));
      if (!fp32_ops.empty()) {
        std::string list;
        for (const auto& op : fp32_ops) list += (list.empty() ? "" : ", ") + op;
        progress(step + "warning: precision bf16: no bf16 kernel for " + list + "; these steps run in fp32");
      }
    }
    if (tune) {
      st = tune(*bp.plan, *resolved);
      if (!st.ok()) return st.with_context("profile '" + pc.name + "'");
    }
    progress(step + std::to_string(bp.plan->steps.size()) + " steps, " + std::to_string(bp.plan->constants.size()) + " constants, built in " + seconds_since(tp));
    plans.push_back(bp.plan);
    result.profiles.push_back(std::move(bp));
  }

  EngineWriteInput in;
  in.plans = plans;
  in.source_model = std::filesystem::path(cfg.model).filename().string();
  in.precision = bf16 ? "bf16" : "fp32";
  in.plugin_libraries = plugin_libraries;
  in.tactic_threads = tune ? omp_get_max_threads() : 0;   // the caller's hook times tactics at this thread count
  in.input_generators = cfg.inputs;
  in.has_streaming = cfg.streaming.present;
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
