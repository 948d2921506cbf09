// engine-run: build an ONNX model in memory for the given input shapes, run it, write outputs.
//   engine-run MODEL.onnx --input NAME=FILE ... --output-dir DIR [--iterations N] [--json FILE]
//                         [--disable-pass NAME ...]
// FILE is .npy or .pb (ONNX TensorProto; NAME= may be omitted for .pb). Errors: one line, exit 1.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "builder/build_plan.h"
#include "builder/onnx_importer.h"
#include "builder/onnx_tensor.h"
#include "profiles/latency_stats.h"
#include "runtime/execution_context.h"
#include "tools/npy_io.h"

namespace kiln {
namespace {

constexpr const char* kUsage =
    "usage: engine-run MODEL.onnx --input NAME=FILE ... --output-dir DIR [--iterations N] [--json FILE] "
    "[--disable-pass NAME ...]\n"
    "  FILE is .npy (little-endian, C order) or .pb (ONNX TensorProto; NAME= may be omitted)\n";

struct Args {
  std::string model;
  std::vector<std::string> inputs;
  std::string output_dir;
  int iterations = 0;
  std::string json;
  std::set<std::string> disabled_passes;
};

StatusOr<Args> parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto need = [&](const char* flag) -> StatusOr<std::string> {
      if (i + 1 >= argc) return InvalidArgument(std::string(flag) + " needs a value");
      return std::string(argv[++i]);
    };
    if (s == "--input") { KILN_ASSIGN_OR_RETURN(std::string v, need("--input")); a.inputs.push_back(v); }
    else if (s == "--output-dir") { KILN_ASSIGN_OR_RETURN(a.output_dir, need("--output-dir")); }
    else if (s == "--json") { KILN_ASSIGN_OR_RETURN(a.json, need("--json")); }
    else if (s == "--disable-pass") { KILN_ASSIGN_OR_RETURN(std::string v, need("--disable-pass")); a.disabled_passes.insert(v); }
    else if (s == "--iterations") {
      KILN_ASSIGN_OR_RETURN(std::string v, need("--iterations"));
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (*end || n < 1 || n > 10000000) return InvalidArgument("--iterations must be a positive integer, got '" + v + "'");
      a.iterations = static_cast<int>(n);
    } else if (s == "-h" || s == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (!s.empty() && s[0] == '-') {
      return InvalidArgument("unknown option '" + s + "'");
    } else if (a.model.empty()) {
      a.model = s;
    } else {
      return InvalidArgument("unexpected argument '" + s + "' (only one model may be given)");
    }
  }
  if (a.model.empty()) return InvalidArgument("no model given");
  if (a.output_dir.empty() && a.iterations == 0) return InvalidArgument("--output-dir is required (or --iterations to only time)");
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

Status run(const Args& args) {
  std::map<std::string, Tensor> inputs;
  for (const auto& spec : args.inputs) {
    KILN_ASSIGN_OR_RETURN(auto named, load_input(spec));
    if (inputs.count(named.first)) return InvalidArgument("input '" + named.first + "' is given twice");
    inputs.emplace(named.first, named.second);
  }
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
  KILN_ASSIGN_OR_RETURN(auto plan, build_plan(std::move(graph), options));
  KILN_ASSIGN_OR_RETURN(auto ctx, ExecutionContext::create(plan));
  for (const auto& [name, t] : inputs) KILN_RETURN_IF_ERROR(ctx->set_input(name, t.view()));
  KILN_RETURN_IF_ERROR(ctx->run());

  if (args.iterations > 0) {
    std::vector<double> samples;
    for (int i = 0; i < args.iterations; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      KILN_RETURN_IF_ERROR(ctx->run());
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
  if (!args.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(args.output_dir, ec);
    if (ec) return IoError("cannot create output directory '" + args.output_dir + "': " + ec.message());
    for (size_t i = 0; i < ctx->num_outputs(); ++i) {
      const std::string path = (std::filesystem::path(args.output_dir) / (sanitize_file_name(ctx->output_name(i)) + ".npy")).string();
      KILN_RETURN_IF_ERROR(write_npy(path, ctx->output(i)));
    }
  }
  return Status::Ok();
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
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
