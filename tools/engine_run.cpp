// engine-run: run an ONNX model (built in memory for the given input shapes) or an engine file
// (one of its profiles), write the outputs, optionally time it; or inspect an engine file.
//   engine-run MODEL.onnx --input NAME=FILE ... --output-dir DIR [--iterations N] [--json FILE]
//                         [--profile-layers TRACE.json] [--disable-pass NAME ...] [--no-tactics]
//   engine-run ENGINE --profile NAME --input NAME=FILE ... --output-dir DIR [--iterations N] [--json FILE]
//                     [--profile-layers TRACE.json]
//   engine-run ENGINE --stream DIR [--output-dir OUT]
//   engine-run --inspect ENGINE
// FILE is .npy or .pb (ONNX TensorProto; NAME= may be omitted for .pb). Errors: one line, exit 1.
// --profile-layers: one more run, separate from the timed ones, with per-step timing, written as a
// Chrome trace (Perfetto, chrome://tracing).
// An ONNX model gets the same tactic selection as engine-build (each multi-kernel step timed at the
// given inputs' shapes, the fastest kept), so it runs the kernels an engine built for those shapes
// would; --no-tactics keeps every op's highest-priority kernel.
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "builder/plan/build_plan.h"
#include "builder/onnx/onnx_importer.h"
#include "builder/onnx/onnx_tensor.h"
#include "profiles/latency_stats.h"
#include "profiles/layer_profile.h"
#include "builder/tactics/tactic_selection.h"
#include "runtime/plugin_host/plugin_registry.h"
#include "runtime/engine.h"
#include "runtime/engine_format.h"
#include "runtime/execution_context.h"
#include "tools/npy_io.h"
#include "tools/omp_wait_policy.h"
#include "tools/run_options.h"
#include "tools/stream_run.h"

namespace kiln {
namespace {

constexpr const char* kUsage =
    "usage: engine-run MODEL.onnx --input NAME=FILE ... --output-dir DIR [--iterations N] [--json FILE] "
    "[--profile-layers TRACE.json] [--disable-pass NAME ...] [--no-tactics]\n"
    "       engine-run ENGINE --profile NAME --input NAME=FILE ... --output-dir DIR [--iterations N] [--json FILE] "
    "[--profile-layers TRACE.json]\n"
    "       engine-run ENGINE --stream DIR [--output-dir OUT]\n"
    "       engine-run --inspect ENGINE\n"
    "  --input NAME=FILE: an input; FILE is .npy (little-endian, C order) or .pb (ONNX TensorProto; NAME= may be omitted)\n"
    "  --profile NAME: the engine's profile to run (may be omitted when the engine has one)\n"
    "  --output-dir DIR: write each output as DIR/<name>.npy (required unless --iterations or --profile-layers)\n"
    "  --iterations N: time N runs after one warm-up and print min/p50/p90/p99/max/mean\n"
    "  --json FILE: write the latency statistics as JSON\n"
    "  --profile-layers: one separate run with per-layer timing, written as a Chrome trace (Perfetto)\n"
    "  --disable-pass NAME: build the ONNX model without that graph pass (repeatable)\n"
    "  --no-tactics: an ONNX model runs every op's highest-priority kernel instead of the fastest timed one\n"
    "  --stream: the engine's streaming session over DIR/<step>/NAME.npy folders in name order (the first is the cold start)\n"
    "  --inspect: print the engine's format version, CPU features, profiles, layers with their kernels and weights\n"
    "  environment: KILN_MAX_CPU_ISA=avx2|avx512_core|avx512_core_vnni|avx512_core_bf16|avx512_core_amx caps kiln's kernels\n"
    "  (and oneDNN's unless DNNL_MAX_CPU_ISA is set, which alone caps both) to the instruction sets of a smaller CPU\n";

struct Args {
  std::string model;
  std::vector<std::string> inputs;
  std::string output_dir;
  int iterations = 0;
  std::string json;
  std::set<std::string> disabled_passes;
  std::string profile;
  std::string profile_layers;  // Chrome trace output
  std::string stream;          // folder of per-step input folders
  bool inspect = false;
  bool tactics = true;         // ONNX models: time the kernels of multi-kernel steps
  RunOptions run;              // plugins allowed, memory cap, scheduling
};

StatusOr<Args> parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    KILN_ASSIGN_OR_RETURN(bool consumed, parse_run_option(argc, argv, &i, &a.run));
    if (consumed) continue;
    std::string s = argv[i];
    auto need = [&](const char* flag) -> StatusOr<std::string> {
      if (i + 1 >= argc) return InvalidArgument(std::string(flag) + " needs a value");
      return std::string(argv[++i]);
    };
    if (s == "--input") { KILN_ASSIGN_OR_RETURN(std::string v, need("--input")); a.inputs.push_back(v); }
    else if (s == "--output-dir") { KILN_ASSIGN_OR_RETURN(a.output_dir, need("--output-dir")); }
    else if (s == "--json") { KILN_ASSIGN_OR_RETURN(a.json, need("--json")); }
    else if (s == "--profile") { KILN_ASSIGN_OR_RETURN(a.profile, need("--profile")); }
    else if (s == "--profile-layers") { KILN_ASSIGN_OR_RETURN(a.profile_layers, need("--profile-layers")); }
    else if (s == "--stream") { KILN_ASSIGN_OR_RETURN(a.stream, need("--stream")); }
    else if (s == "--inspect") a.inspect = true;
    else if (s == "--no-tactics") a.tactics = false;
    else if (s == "--disable-pass") { KILN_ASSIGN_OR_RETURN(std::string v, need("--disable-pass")); a.disabled_passes.insert(v); }
    else if (s == "--iterations") {
      KILN_ASSIGN_OR_RETURN(std::string v, need("--iterations"));
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (*end || n < 1 || n > 10000000) return InvalidArgument("--iterations must be a positive integer, got '" + v + "'");
      a.iterations = static_cast<int>(n);
    } else if (s == "-h" || s == "--help") {
      std::cout << kUsage << kRunOptionsHelp;
      std::exit(0);
    } else if (!s.empty() && s[0] == '-') {
      return InvalidArgument("unknown option '" + s + "'");
    } else if (a.model.empty()) {
      a.model = s;
    } else {
      return InvalidArgument("unexpected argument '" + s + "' (only one model may be given)");
    }
  }
  if (a.model.empty()) return InvalidArgument(a.inspect ? "--inspect needs an engine file" : "no model given");
  if (a.inspect) return a;
  if (!a.stream.empty()) {
    if (!a.inputs.empty() || a.iterations || !a.profile.empty() || !a.profile_layers.empty())
      return InvalidArgument("--stream takes its inputs from its folders; it combines only with --output-dir");
    return a;
  }
  if (a.output_dir.empty() && a.iterations == 0 && a.profile_layers.empty())
    return InvalidArgument("--output-dir is required (or --iterations / --profile-layers to only time)");
  return a;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// NAME=FILE or FILE.pb -> (name, tensor).
StatusOr<std::pair<std::string, Tensor>> load_input(const std::string& spec) {
  std::string name, path = spec;
  const size_t eq = spec.find('=');
  if (eq != std::string::npos && !std::filesystem::exists(spec)) {
    name = spec.substr(0, eq);
    path = spec.substr(eq + 1);
  }
  if (ends_with(path, ".npy")) {
    if (name.empty()) return InvalidArgument("--input '" + spec + "': a .npy file needs NAME=FILE");
    KILN_ASSIGN_OR_RETURN(Tensor t, read_npy(path));
    return std::make_pair(name, t);
  }
  if (ends_with(path, ".pb")) {
    std::string proto_name;
    KILN_ASSIGN_OR_RETURN(Tensor t, read_tensor_pb(path, &proto_name));
    if (name.empty()) name = proto_name;
    if (name.empty()) return InvalidArgument("--input '" + spec + "': the TensorProto has no name; use NAME=FILE");
    return std::make_pair(name, t);
  }
  return InvalidArgument("--input '" + spec + "': the file must end in .npy or .pb");
}

bool is_engine_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  f.read(magic, 8);
  return f && std::memcmp(magic, kEngineMagic, 8) == 0;
}

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

Status inspect(const std::string& path, const LoadOptions& load) {
  const auto t0 = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(auto engine, Engine::load_file(path, load));
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const EngineInfo& info = engine->info();
  std::printf("engine: %s\n  format version %u, produced by %s, loaded in %.1f ms\n", path.c_str(), info.format_version,
              info.producer.c_str(), load_ms);
  std::printf("  source model: %s, precision %s\n  required CPU features: %s\n", info.source_model.c_str(),
              info.precision.c_str(), cpu_feature_names(info.required_cpu_features).c_str());
  std::printf("  file %.1f MB, weights %.1f MB in %zu tensors (stored once for all profiles)\n",
              static_cast<double>(info.file_bytes) / 1e6, static_cast<double>(info.weight_bytes) / 1e6, info.weight_count);
  if (info.has_streaming) {
    const StreamingSpec& st = info.streaming;
    std::string pairs;
    for (const auto& s : st.state) pairs += (pairs.empty() ? "" : ", ") + s.output + " -> " + s.input + " (axis " + std::to_string(s.axis) + ")";
    std::printf("  streaming: cold start '%s', then '%s' steps; state %s; window %lld steps x %lld tokens%s\n", st.cold_start.c_str(),
                st.step.c_str(), pairs.c_str(), static_cast<long long>(st.max_steps), static_cast<long long>(st.tokens_per_step),
                st.mask_input.empty() ? "" : ("; mask '" + st.mask_input + "' generated block-causal").c_str());
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

Status run_context(ExecutionContext& ctx, const Args& args);

Status run_engine(const Args& args, const std::map<std::string, Tensor>& inputs) {
  KILN_ASSIGN_OR_RETURN(auto engine, Engine::load_file(args.model, args.run.load));
  std::string profile = args.profile;
  if (profile.empty()) {
    if (engine->profiles().size() != 1) {
      std::string names;
      for (const auto& p : engine->profiles()) names += (names.empty() ? "" : ", ") + p.name;
      return InvalidArgument("engine '" + args.model + "' has several profiles; choose one with --profile (" + names + ")");
    }
    profile = engine->profiles()[0].name;
  }
  KILN_ASSIGN_OR_RETURN(auto ctx, engine->create_context(profile));
  for (size_t i = 0; i < ctx->num_inputs(); ++i)
    if (!inputs.count(ctx->input_name(i))) return InvalidArgument("missing input '" + ctx->input_name(i) + "': pass --input " + ctx->input_name(i) + "=FILE");
  for (const auto& [name, t] : inputs) KILN_RETURN_IF_ERROR(ctx->set_input(name, t.view()));
  return run_context(*ctx, args);
}

Status run(Args& args) {
  KILN_RETURN_IF_ERROR(apply_run_options(&args.run, "engine-run"));
  // The libraries named with --plugin are the caller's choice: loaded up front (an ONNX model's
  // custom ops need them; an engine's recorded libraries must be among them).
  for (const auto& lib : args.run.load.allowed_plugins) KILN_RETURN_IF_ERROR(PluginRegistry::global().load_library(lib));
  if (args.inspect) return inspect(args.model, args.run.load);
  if (!args.stream.empty()) return run_stream(args.model, args.stream, args.output_dir, args.run.load);
  std::map<std::string, Tensor> inputs;
  for (const auto& spec : args.inputs) {
    KILN_ASSIGN_OR_RETURN(auto named, load_input(spec));
    if (inputs.count(named.first)) return InvalidArgument("input '" + named.first + "' is given twice");
    inputs.emplace(named.first, named.second);
  }
  if (is_engine_file(args.model)) return run_engine(args, inputs);
  if (!args.profile.empty()) return InvalidArgument("--profile applies to engine files; '" + args.model + "' is not one");
  KILN_ASSIGN_OR_RETURN(Graph graph, import_onnx_file(args.model));
  BuildOptions options;
  options.disabled_passes = args.disabled_passes;
  for (int id : graph.inputs) {
    const Value& v = graph.values[id];
    auto it = inputs.find(v.name);
    if (it == inputs.end()) return InvalidArgument("missing input '" + v.name + "' (" + dtype_name(v.dtype) + " " + (v.shape ? sym_shape_str(*v.shape) : "[?]") + "): pass --input " + v.name + "=FILE");
    if (it->second.dtype() != v.dtype)
      return InvalidArgument("input '" + v.name + "' must be " + dtype_name(v.dtype) + ", file has " + dtype_name(it->second.dtype()));
    options.input_shapes[v.name] = it->second.shape();
  }
  for (const auto& [name, t] : inputs)
    if (!options.input_shapes.count(name)) {
      std::string known;
      for (int id : graph.inputs) known += (known.empty() ? "" : ", ") + graph.values[id].name;
      return InvalidArgument("the model has no input named '" + name + "' (inputs: " + known + ")");
    }
  TimingCache cache;
  if (args.tactics)
    options.tactics = [&](Plan& plan, const ResolvedProfile&) -> Status {
      const auto t0 = std::chrono::steady_clock::now();
      KILN_ASSIGN_OR_RETURN(auto decisions, select_tactics_for_inputs(plan, inputs, cache));
      if (!decisions.empty())
        std::fprintf(stderr, "engine-run: tactics: %zu steps with a choice in %.2f s: %s\n", decisions.size(),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), tactics_summary(plan, decisions).c_str());
      return Status::Ok();
    };
  KILN_ASSIGN_OR_RETURN(auto plan, build_plan(std::move(graph), options));
  KILN_ASSIGN_OR_RETURN(auto ctx, ExecutionContext::create(plan));
  for (const auto& [name, t] : inputs) KILN_RETURN_IF_ERROR(ctx->set_input(name, t.view()));
  return run_context(*ctx, args);
}

// Writes every output, or none: each goes to a temporary beside it and all are renamed into place
// once all are written. An output that would replace the model or an input file is an error
// before anything is written.
Status write_outputs(const Args& args, const std::vector<std::pair<std::string, TensorView>>& outs) {
  std::vector<std::string> theirs{args.model};
  for (const auto& spec : args.inputs) {
    const size_t eq = spec.find('=');
    theirs.push_back(eq != std::string::npos && !std::filesystem::exists(spec) ? spec.substr(eq + 1) : spec);
  }
  for (const auto& [path, view] : outs)
    for (const auto& t : theirs) {
      std::error_code ec;
      if (std::filesystem::equivalent(path, t, ec))
        return InvalidArgument("output '" + path + "' would overwrite the input '" + t + "'; choose another --output-dir");
    }
  std::error_code ec;
  const bool made_dir = !std::filesystem::exists(args.output_dir);
  std::filesystem::create_directories(args.output_dir, ec);
  if (ec) return IoError("cannot create output directory '" + args.output_dir + "': " + ec.message());
  std::vector<std::string> temps;
  auto undo = [&](Status st) {
    for (const auto& t : temps) ::unlink(t.c_str());
    if (made_dir) std::filesystem::remove(args.output_dir, ec);
    return st;
  };
  for (const auto& [path, view] : outs) {
    temps.push_back(path + ".tmp-" + std::to_string(::getpid()));
    if (Status st = write_npy(temps.back(), view); !st.ok()) return undo(st);
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    std::filesystem::rename(temps[i], outs[i].first, ec);
    if (ec) return undo(IoError("cannot write '" + outs[i].first + "': " + ec.message()));
  }
  return Status::Ok();
}

Status run_context(ExecutionContext& c, const Args& args) {
  ExecutionContext* ctx = &c;
  KILN_RETURN_IF_ERROR(ctx->run());

  if (args.iterations > 0) {
    // Also the process's CPU time per run (every thread): on a shared machine a run's wall time
    // mostly measures waiting for a core, its CPU time still the work (compare at equal threads).
    auto cpu_ms = [] {
      timespec t;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
      return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
    };
    std::vector<double> samples, cpu_samples;
    for (int i = 0; i < args.iterations; ++i) {
      const double c0 = cpu_ms();
      auto t0 = std::chrono::steady_clock::now();
      KILN_RETURN_IF_ERROR(ctx->run());
      samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      cpu_samples.push_back(cpu_ms() - c0);
    }
    LatencyStats s = compute_latency_stats(samples), cpu = compute_latency_stats(cpu_samples);
    std::cout << "latency over " << s.iterations << " iterations (after 1 warm-up): " << latency_line(s) << "\n";
    std::cout << "cpu time per run (all threads): " << latency_line(cpu) << "\n";
    if (!args.json.empty()) {
      std::ofstream f(args.json);
      f << "{\"latency_ms\": " << latency_json(s) << ", \"cpu_ms\": " << latency_json(cpu) << ", \"iterations\": " << s.iterations << "}\n";
      if (!f) return IoError("cannot write '" + args.json + "'");
    }
  }
  if (!args.profile_layers.empty()) {
    // Without timed runs, the first run on the fresh arena would put its page faults in the trace.
    if (args.iterations == 0) KILN_RETURN_IF_ERROR(ctx->run());
    KILN_ASSIGN_OR_RETURN(LayerProfile layers, profile_layers(*ctx, 1));
    char gflop[32];
    std::snprintf(gflop, sizeof gflop, "%.4g", layers.flops.flops / 1e9);
    std::ofstream f(args.profile_layers);
    f << chrome_trace_json(layers, {{"model", args.model},
                                    {"profile", ctx->plan().profile},
                                    {"run_ms", std::to_string(layers.run_ms)},
                                    {"gflop", gflop},
                                    {"gflop_upper_bound", layers.flops.upper_bound ? "true" : "false"}});
    if (!f) return IoError("cannot write '" + args.profile_layers + "'");
    std::printf("layer profile: %zu steps in %.2f ms (one run with per-step timing) -> %s\n", layers.steps.size(), layers.run_ms,
                args.profile_layers.c_str());
  }
  if (!args.output_dir.empty()) {
    std::vector<std::pair<std::string, TensorView>> outs;
    for (size_t i = 0; i < ctx->num_outputs(); ++i)
      outs.emplace_back((std::filesystem::path(args.output_dir) / (sanitize_file_name(ctx->output_name(i)) + ".npy")).string(), ctx->output(i));
    KILN_RETURN_IF_ERROR(write_outputs(args, outs));
  }
  return Status::Ok();
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  kiln::use_passive_omp_wait_policy(argv);
  try {
    auto args = kiln::parse_args(argc, argv);
    if (!args.ok()) {
      std::fprintf(stderr, "engine-run: %s\n%s", args.status().message().c_str(), kiln::kUsage);
      return 2;
    }
    kiln::Status st = kiln::run(*args);
    if (!st.ok()) {
      std::fprintf(stderr, "engine-run: %s\n", st.message().c_str());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine-run: internal error: %s\n", e.what());
    return 1;
  }
}
