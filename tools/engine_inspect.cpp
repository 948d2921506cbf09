#include "tools/engine_inspect.h"

#include <chrono>
#include <cstdio>

#include "runtime/engine.h"
#include "runtime/engine_format.h"

namespace kiln {

namespace {

std::string shape_or_range(const BindingInfo& b) {
  if (b.min.rank() == 0 && b.max.rank() == 0) return "";
  if (b.min == b.max) return " " + b.min.str();
  std::string s = " [";
  for (int d = 0; d < b.min.rank(); ++d) {
    if (d) s += ", ";
    s += b.min[d] == b.max[d] ? std::to_string(b.min[d])
                              : (d < static_cast<int>(b.dim_names.size()) && !b.dim_names[d].empty() ? b.dim_names[d] + ":" : "") +
                                    std::to_string(b.min[d]) + ".." + std::to_string(b.opt[d]) + ".." + std::to_string(b.max[d]);
  }
  return s + "]  (min..opt..max)";
}

}  // namespace

Status inspect_engine(const std::string& path, const LoadOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(auto engine, Engine::load_file(path, options));
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const EngineInfo& info = engine->info();
  std::printf("engine: %s\n  format version %u, produced by %s, loaded in %.1f ms\n", path.c_str(), info.format_version,
              info.producer.c_str(), load_ms);
  std::printf("  source model: %s, precision %s\n  required CPU features: %s\n", info.source_model.c_str(),
              info.precision.c_str(), cpu_feature_names(info.required_cpu_features).c_str());
  std::printf("  file %.1f MB, weights %.1f MB in %zu tensors (stored once for all profiles)\n",
              static_cast<double>(info.file_bytes) / 1e6, static_cast<double>(info.weight_bytes) / 1e6, info.weight_count);
  if (info.tactic_threads > 0) std::printf("  tactics timed at %d threads\n", info.tactic_threads);
  for (const auto& lib : info.plugin_libraries) {
    std::string plugins;
    for (const auto& p : lib.plugins) plugins += (plugins.empty() ? "" : ", ") + p;
    std::printf("  plugin library '%s' version %s (%s; built from %s): %s\n", lib.name.c_str(), lib.version.c_str(), lib.file_name.c_str(),
                lib.built_from.c_str(), plugins.c_str());
  }
  for (const auto& [name, g] : info.input_generators)
    std::printf("  input generator '%s': %s [%g, %g)%s\n", name.c_str(), g.kind.c_str(), g.low, g.high,
                g.block ? (" block " + std::to_string(g.block)).c_str() : "");
  if (info.has_streaming) {
    const StreamingSpec& st = info.streaming;
    std::string pairs;
    for (const auto& s : st.state) pairs += (pairs.empty() ? "" : ", ") + s.output + " -> " + s.input + " (axis " + std::to_string(s.axis) + ")";
    std::printf("  streaming: cold start '%s', then '%s' steps; state %s; window %lld steps x %lld tokens%s\n", st.cold_start.c_str(),
                st.step.c_str(), pairs.c_str(), static_cast<long long>(st.max_steps), static_cast<long long>(st.tokens_per_step),
                st.mask_input.empty() ? "" : ("; mask '" + st.mask_input + "' generated block-causal").c_str());
  }
  for (const StateBufferSpec& st : info.state) {
    std::string binds;
    for (const auto& b : st.bindings)
      binds += (binds.empty() ? "" : "; ") + b.entry + (b.input.empty() ? "" : " reads " + b.input) +
               (b.input.empty() || b.output.empty() ? "" : ",") + (b.output.empty() ? "" : " writes " + b.output);
    std::printf("  state '%s': %s %s (%s)\n", st.name.c_str(), dtype_name(st.dtype).c_str(), Shape(st.dims).str().c_str(), binds.c_str());
  }
  for (size_t p = 0; p < engine->profiles().size(); ++p) {
    const ProfileInfo& pi = engine->profiles()[p];
    const Plan& plan = *engine->plan(p);
    std::printf("\nprofile '%s': %zu layers\n  inputs:\n", pi.name.c_str(), plan.steps.size());
    for (const auto& b : pi.inputs)
      std::printf("    %-58s %-8s%s\n", b.name.c_str(), dtype_name(b.dtype).c_str(), shape_or_range(b).c_str());
    std::printf("  outputs:\n");
    for (const auto& b : pi.outputs) std::printf("    %-58s %s\n", b.name.c_str(), dtype_name(b.dtype).c_str());
    KILN_ASSIGN_OR_RETURN(auto ctx, engine->create_context(pi.name));
    std::printf("  layers (index, op, kernel, name):\n");
    for (size_t s = 0; s < plan.steps.size(); ++s)
      std::printf("    %4zu  %-20s %-10s %s\n", s, plan.steps[s].op_type.c_str(), ctx->kernel(s).impl_name(),
                  plan.steps[s].name.c_str());
  }
  return Status::Ok();
}

}  // namespace kiln
