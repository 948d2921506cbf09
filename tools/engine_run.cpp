// engine-run: run an ONNX model (built in memory for the given input shapes) or one profile of an
// engine file, write the outputs, time it as trtexec does; run an engine's streaming session; or
// inspect an engine file; run one entry of a multi-entry engine (--entry) or greedy generation over
// a seq2seq engine (--generate). `engine-run --help` lists every option.
//
// Inputs: --input NAME=FILE (.npy, or .pb = ONNX TensorProto; NAME= may be omitted for .pb). An
// engine input without a file is generated at --shape NAME=DIMS or the profile's opt shape, by the
// generator the build config recorded for it (default: uniform [0, 1) floats, zero integers,
// all-true bools), so `engine-run ENGINE --profile P --iterations 100` just works. An ONNX model
// input needs a file or a --shape. Errors: one line, exit 1 (usage errors: exit 2).
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "builder/input_generator.h"
#include "builder/onnx/onnx_importer.h"
#include "builder/onnx/onnx_tensor.h"
#include "builder/plan/build_plan.h"
#include "builder/tactics/tactic_selection.h"
#include "profiles/layer_profile.h"
#include "runtime/engine.h"
#include "runtime/engine_format.h"
#include "runtime/execution_context.h"
#include "runtime/log.h"
#include "runtime/plugin_host/plugin_registry.h"
#include "tools/cli_common.h"
#include "tools/engine_inspect.h"
#include "tools/entry_run.h"
#include "tools/generate_run.h"
#include "runtime/npy_io.h"
#include "tools/omp_wait_policy.h"
#include "tools/run_options_cli.h"
#include "tools/stream_run.h"
#include "tools/timed_runs.h"

namespace kiln {
namespace {

struct Args {
  std::string model;
  std::vector<std::string> inputs;   // NAME=FILE or FILE.pb
  std::vector<std::string> shapes;   // NAME=DIMS
  std::string output_dir;
  std::string save_inputs;     // write the inputs used (given or generated) here
  TimingOptions timing;
  std::vector<std::string> disabled_passes;
  std::string profile;
  std::string entry;           // multi-entry engines (tools/entry_run.h)
  bool generate = false;       // tools/generate_run.h
  int max_new_tokens = 32;
  std::string profile_layers;  // Chrome trace output
  int profile_runs = 1;        // profiled runs behind it
  std::string stream;          // folder of per-step input folders
  RunOptions run;              // plugin search path, memory cap, scheduling
  bool inspect = false;
  bool no_tactics = false;     // ONNX models: keep every op's highest-priority kernel
  LogOptions log;
};

Status check_args(const Args& a) {
  if (a.inspect) return Status::Ok();
  if (a.generate) {
    if (!a.entry.empty() || !a.profile.empty() || a.timing.enabled() || !a.profile_layers.empty() || !a.stream.empty())
      return InvalidArgument("--generate combines only with --input, --max-new-tokens and --output-dir");
    return Status::Ok();
  }
  if (!a.entry.empty()) {
    if (!a.profile_layers.empty() || !a.disabled_passes.empty() || a.no_tactics || !a.stream.empty() || !a.shapes.empty())
      return InvalidArgument("--entry combines only with --profile, --input, --output-dir, --iterations and --json");
    if (a.output_dir.empty() && a.timing.iterations == 0) return InvalidArgument("--output-dir is required (or --iterations to only time)");
    return Status::Ok();
  }
  if (!a.stream.empty()) {
    if (!a.inputs.empty() || !a.shapes.empty() || a.timing.enabled() || !a.profile.empty() || !a.profile_layers.empty() ||
        !a.save_inputs.empty())
      return InvalidArgument("--stream takes its inputs from its folders; it combines only with --output-dir");
    return Status::Ok();
  }
  if (a.output_dir.empty() && !a.timing.enabled() && a.profile_layers.empty() && a.save_inputs.empty())
    return InvalidArgument("nothing to do: give --output-dir, --iterations / --duration (timing), --profile-layers or --save-inputs");
  return Status::Ok();
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

// NAME=1x274x384 (or 1,274,384) -> (name, shape).
StatusOr<std::pair<std::string, Shape>> parse_shape(const std::string& spec) {
  const size_t eq = spec.rfind('=');
  if (eq == std::string::npos || eq == 0) return InvalidArgument("--shape expects NAME=DIMS (e.g. x=1x274x384), got '" + spec + "'");
  Shape shape;
  std::string dims = spec.substr(eq + 1), item;
  if (dims.empty()) return std::make_pair(spec.substr(0, eq), shape);   // NAME= : a scalar
  for (size_t i = 0; i <= dims.size(); ++i) {
    if (i == dims.size() || dims[i] == 'x' || dims[i] == ',') {
      char* end = nullptr;
      const long long d = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end || d < 0) return InvalidArgument("--shape '" + spec + "': '" + item + "' is not a dim");
      if (shape.rank() == kMaxRank) return InvalidArgument("--shape '" + spec + "': rank above 8");
      shape.push_back(d);
      item.clear();
    } else {
      item += dims[i];
    }
  }
  return std::make_pair(spec.substr(0, eq), shape);
}

bool is_engine_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  f.read(magic, 8);
  return f && std::memcmp(magic, kEngineMagic, 8) == 0;
}

Status run_context(ExecutionContext& ctx, const Args& args);

Status save_inputs(const std::string& dir, const std::map<std::string, Tensor>& inputs) {
  if (dir.empty()) return Status::Ok();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("cannot create folder '" + dir + "': " + ec.message());
  for (const auto& [name, t] : inputs)
    KILN_RETURN_IF_ERROR(write_npy((std::filesystem::path(dir) / (sanitize_file_name(name) + ".npy")).string(), t.view()));
  return Status::Ok();
}

// The profile's inputs that no file gave: at --shape or the opt shape, by the recorded generator.
Status generate_missing_inputs(const Engine& engine, const ProfileInfo& profile, const std::map<std::string, Shape>& shapes,
                               std::map<std::string, Tensor>& inputs) {
  for (const BindingInfo& b : profile.inputs) {
    if (inputs.count(b.name)) continue;
    auto given = shapes.find(b.name);
    const Shape shape = given != shapes.end() ? given->second : b.opt;
    auto gen = engine.info().input_generators.find(b.name);
    const InputGenerator* g = gen != engine.info().input_generators.end() ? &gen->second : nullptr;
    KILN_ASSIGN_OR_RETURN(Tensor t, generate_input(b.name, b.dtype, shape, g));
    log_info("input '" + b.name + "': generated " + dtype_name(b.dtype) + " " + shape.str() + " (" +
             (g ? "recorded generator '" + g->kind + "'" : std::string("default generator")) + ")");
    inputs.emplace(b.name, std::move(t));
  }
  return Status::Ok();
}

Status run_engine(const Args& args, std::map<std::string, Tensor>& inputs, const std::map<std::string, Shape>& shapes) {
  KILN_ASSIGN_OR_RETURN(auto engine, Engine::load_file(args.model, args.run.load));
  const int recorded = engine->info().tactic_threads, threads = omp_get_max_threads();
  if (recorded > 0 && recorded != threads)
    log_warn("engine '" + args.model + "' had its tactics (kernel choices) timed at " + std::to_string(recorded) + " threads; running at " +
             std::to_string(threads) + ", where other kernels may be faster (rebuild with threads: " + std::to_string(threads) + ")");
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
  const ProfileInfo& info = engine->profiles()[engine->find_profile(profile)];
  for (const auto& [name, s] : shapes)
    if (inputs.count(name)) return InvalidArgument("input '" + name + "' has both --input and --shape");
  KILN_RETURN_IF_ERROR(generate_missing_inputs(*engine, info, shapes, inputs));
  KILN_RETURN_IF_ERROR(save_inputs(args.save_inputs, inputs));
  for (const auto& [name, t] : inputs) KILN_RETURN_IF_ERROR(ctx->set_input(name, t.view()));
  return run_context(*ctx, args);
}

Status run_onnx(const Args& args, std::map<std::string, Tensor>& inputs, const std::map<std::string, Shape>& shapes) {
  if (!args.profile.empty()) return InvalidArgument("--profile applies to engine files; '" + args.model + "' is not one");
  KILN_ASSIGN_OR_RETURN(Graph graph, import_onnx_file(args.model));
  BuildOptions options;
  options.disabled_passes.insert(args.disabled_passes.begin(), args.disabled_passes.end());
  for (int id : graph.inputs) {
    const Value& v = graph.values[id];
    auto it = inputs.find(v.name);
    if (it == inputs.end()) {
      auto s = shapes.find(v.name);
      if (s == shapes.end())
        return InvalidArgument("missing input '" + v.name + "' (" + dtype_name(v.dtype) + " " + (v.shape ? sym_shape_str(*v.shape) : "[?]") +
                               "): pass --input " + v.name + "=FILE or --shape " + v.name + "=DIMS");
      KILN_ASSIGN_OR_RETURN(Tensor t, generate_input(v.name, v.dtype, s->second, nullptr));
      it = inputs.emplace(v.name, std::move(t)).first;
    }
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
  KILN_RETURN_IF_ERROR(save_inputs(args.save_inputs, inputs));
  TimingCache cache;
  if (!args.no_tactics)
    options.tactics = [&](Plan& plan, const ResolvedProfile&) -> Status {
      const auto t0 = std::chrono::steady_clock::now();
      KILN_ASSIGN_OR_RETURN(auto decisions, select_tactics_for_inputs(plan, inputs, cache));
      if (!decisions.empty())
        log_info("tactics: " + std::to_string(decisions.size()) + " steps with a choice in " +
                 std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) + " s: " +
                 tactics_summary(plan, decisions));
      return Status::Ok();
    };
  KILN_ASSIGN_OR_RETURN(auto plan, build_plan(std::move(graph), options));
  KILN_ASSIGN_OR_RETURN(auto ctx, ExecutionContext::create(plan));
  for (const auto& [name, t] : inputs) KILN_RETURN_IF_ERROR(ctx->set_input(name, t.view()));
  return run_context(*ctx, args);
}

Status run(Args& args) {
  KILN_RETURN_IF_ERROR(apply_run_options(&args.run, "engine-run"));
  // The libraries named with --plugin are the caller's choice: loaded up front (an ONNX model's
  // custom ops need them; an engine finds its recorded libraries among the loaded ones first).
  for (const auto& lib : args.run.load.allowed_plugins) KILN_RETURN_IF_ERROR(PluginRegistry::global().load_library(lib));
  if (args.inspect) return inspect_engine(args.model, args.run.load);
  if (!args.stream.empty()) return run_stream(args.model, args.stream, args.output_dir, args.run.load);
  std::map<std::string, Tensor> inputs;
  for (const auto& spec : args.inputs) {
    KILN_ASSIGN_OR_RETURN(auto named, load_input(spec));
    if (inputs.count(named.first)) return InvalidArgument("input '" + named.first + "' is given twice");
    inputs.emplace(named.first, named.second);
  }
  std::map<std::string, Shape> shapes;
  for (const auto& spec : args.shapes) {
    KILN_ASSIGN_OR_RETURN(auto named, parse_shape(spec));
    if (!shapes.emplace(named.first, named.second).second) return InvalidArgument("--shape for '" + named.first + "' is given twice");
  }
  if (args.generate) {
    if (!is_engine_file(args.model)) return InvalidArgument("--generate applies to engine files; '" + args.model + "' is not one");
    return run_generate(GenerateArgs{args.model, args.output_dir, args.max_new_tokens, args.run.load}, inputs);
  }
  if (!args.entry.empty()) {
    if (!is_engine_file(args.model)) return InvalidArgument("--entry applies to engine files; '" + args.model + "' is not one");
    return run_entry(EntryRunArgs{args.model, args.entry, args.profile, args.output_dir, args.timing.iterations, args.timing.json, args.run.load},
                     inputs);
  }
  return is_engine_file(args.model) ? run_engine(args, inputs, shapes) : run_onnx(args, inputs, shapes);
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

Status run_context(ExecutionContext& ctx, const Args& args) {
  KILN_RETURN_IF_ERROR(ctx.run());
  if (args.timing.enabled()) {
    KILN_RETURN_IF_ERROR(time_runs([&] { return ctx.run(); }, args.timing,
                                   {{"model", args.model}, {"profile", ctx.plan().profile}, {"threads", std::to_string(omp_get_max_threads())}})
                             .status());
  }
  if (!args.profile_layers.empty()) {
    // Without timed runs, the first run on the fresh arena would put its page faults in the trace.
    if (!args.timing.enabled()) KILN_RETURN_IF_ERROR(ctx.run());
    KILN_ASSIGN_OR_RETURN(LayerProfile layers, profile_layers(ctx, args.profile_runs));
    char gflop[32];
    std::snprintf(gflop, sizeof gflop, "%.4g", layers.flops.flops / 1e9);
    std::ofstream f(args.profile_layers);
    f << chrome_trace_json(layers, {{"model", args.model},
                                    {"profile", ctx.plan().profile},
                                    {"run_ms", std::to_string(layers.run_ms)},
                                    {"gflop", gflop},
                                    {"gflop_upper_bound", layers.flops.upper_bound ? "true" : "false"}});
    if (!f) return IoError("cannot write '" + args.profile_layers + "'");
    std::printf("layer profile: %zu steps in %.2f ms (%s with per-step timing) -> %s\n", layers.steps.size(), layers.run_ms,
                args.profile_runs > 1 ? ("the mean of " + std::to_string(args.profile_runs) + " runs").c_str() : "one run",
                args.profile_layers.c_str());
  }
  if (!args.output_dir.empty()) {
    std::vector<std::pair<std::string, TensorView>> outs;
    for (size_t i = 0; i < ctx.num_outputs(); ++i)
      outs.emplace_back((std::filesystem::path(args.output_dir) / (sanitize_file_name(ctx.output_name(i)) + ".npy")).string(), ctx.output(i));
    KILN_RETURN_IF_ERROR(write_outputs(args, outs));
  }
  return Status::Ok();
}

void add_options(CLI::App& app, Args& a) {
  app.add_option("model", a.model, "An ONNX model (built in memory for its inputs' shapes) or an engine file")->required();
  app.add_option("--profile", a.profile, "The engine profile to run (needed when the engine has several); with --entry, the entry's profile");
  app.add_option("--entry", a.entry, "Run one entry of a multi-entry engine in a fresh session; an --input naming a state-bound input sets "
                                     "that state")
      ->type_name("NAME");
  app.add_flag("--generate", a.generate, "Greedy generation over a seq2seq engine (encoder, prefill, step entries; configs/seq2seq.yaml): "
                                         "writes DIR/tokens.npy, DIR/logits.npy and DIR/timings.json");
  app.add_option("--max-new-tokens", a.max_new_tokens, "--generate stops after N tokens, at the end token or at the cache length")
      ->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("-i,--input", a.inputs, "An input from a file: NAME=FILE.npy, NAME=FILE.pb or FILE.pb (repeatable)")->allow_extra_args(false)->type_name("NAME=FILE");
  app.add_option("--shape", a.shapes,
                 "Generate input NAME at this shape, e.g. x=1x274x384 (repeatable). An engine's inputs without --input are generated "
                 "at --shape or the profile's opt shape by the engine's recorded generators")
      ->allow_extra_args(false)->type_name("NAME=DIMS");
  app.add_option("-o,--output-dir", a.output_dir, "Write every output as DIR/<name>.npy (characters outside [A-Za-z0-9._-] become _)");
  app.add_option("--save-inputs", a.save_inputs, "Write the inputs of the run (given or generated) as DIR/<name>.npy")->type_name("DIR");
  app.add_option("--warmup", a.timing.warmup, "Untimed runs before the timed ones")->check(CLI::Range(0, 10000000))->capture_default_str();
  app.add_option("--iterations", a.timing.iterations, "Time at least N runs and print min/p50/p90/p99/max/mean")->check(CLI::Range(1, 10000000));
  app.add_option("--duration", a.timing.duration_s, "Time runs for at least S seconds (with --iterations: both)")->check(CLI::Range(0.0, 1e6));
  app.add_option("--json", a.timing.json,
                 "Write the latency statistics as JSON: {\"latency_ms\": {...}, \"cpu_ms\": {...}, \"iterations\": N, \"threads_per_run\": "
                 "{pool_regions, inline_loops, late_workers, team_probes, late_probes, solo_regions}} (the 'threads per run' line)");
  app.add_option("--export-times", a.timing.export_times,
                 "Write every timed run's start and latency as JSON: {\"model\", \"profile\", \"threads\", \"warmup\", \"runs\": "
                 "[{\"start_ms\", \"latency_ms\"}, ...]}");
  app.add_option("--profile-layers", a.profile_layers, "One more run with per-layer timing, written as a Chrome trace (Perfetto)")
      ->type_name("TRACE.json");
  app.add_option("--profile-runs", a.profile_runs,
                 "With --profile-layers: profile N runs; a step's duration is its mean, args.run_us lists each run's (default 1)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--stream", a.stream, "Run the engine's streaming session over DIR/<step>/NAME.npy folders in name order "
                                       "(the first is the cold start); outputs to --output-dir/<step>/")
      ->type_name("DIR");
  app.add_flag("--inspect", a.inspect, "Print the engine's format, CPU features, profiles with their bindings and every layer's kernel");
  app.add_option("--disable-pass", a.disabled_passes, "ONNX models: skip this graph pass (repeatable)")->allow_extra_args(false)->type_name("NAME");
  app.add_flag("--no-tactics", a.no_tactics, "ONNX models: run every op's highest-priority kernel instead of the fastest timed one");
  add_run_options(app, a.run);
  add_log_options(app, a.log);
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  kiln::use_passive_omp_wait_policy(argv);
  kiln::Args args;
  CLI::App app{"engine-run: run an ONNX model or a profile of an engine file, write its outputs, time it; run an engine's streaming "
               "session; or inspect an engine.",
               "engine-run"};
  kiln::add_options(app, args);
  if (const int code = kiln::parse_command_line(app, "engine-run", argc, argv); code >= 0) return code;
  kiln::apply_log_options("engine-run", args.log);
  try {
    kiln::Status st = kiln::check_args(args);
    if (!st.ok()) {
      std::fprintf(stderr, "engine-run: %s (see engine-run --help)\n", st.message().c_str());
      return 2;
    }
    st = kiln::run(args);
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
