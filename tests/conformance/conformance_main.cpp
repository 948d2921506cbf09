// ONNX backend conformance: runs every test directory of the ONNX backend test data (node/,
// pytorch-converted/, pytorch-operator/, simple/) through kiln and compares with the expected
// outputs (rtol 1e-3, atol 1e-5 unless an op is listed in kOpTolerances). Tests whose model uses an
// op or feature kiln does not support are skipped with the reason. An expected-failures file lists
// known failures, each with how it fails (the stage and a piece of the message) and why:
//   suite/test  STAGE "message substring"  # reason
// A listed test passes as expected only if it fails at that stage with that message; passing,
// being skipped, crashing, timing out or failing another way fails the run, so the list stays
// true. Each test runs in a forked child so a crash is a failure of that test, not of the runner.
#include <onnx/onnx_pb.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "builder/plan/build_plan.h"
#include "builder/onnx/onnx_importer.h"
#include "builder/onnx/onnx_tensor.h"
#include "runtime/execution_context.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

const char* kSuites[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};

struct Tolerance { double rtol, atol; };
// Ops whose reference outputs were produced with a different accumulation order or precision.
const std::map<std::string, Tolerance> kOpTolerances = {
    {"ConvTranspose", {1e-3, 1e-4}},  // numpy reference accumulates in float64
    {"Resize", {1e-3, 1e-4}},         // cubic/linear interpolation computed in float64 by the reference
};

// Where a failing test failed: the importer, reading the test's input data or binding it, building
// the plan and its kernels, running, or comparing the outputs. An expected failure names one of
// these (never a crash or a timeout).
const std::set<std::string> kFailureStages = {"import-error", "input-error", "build-error", "run-error", "wrong-output"};

struct Outcome {
  enum Kind { kPass, kFail, kSkip } kind = kFail;
  std::string reason;
  std::string stage;  // for kFail: an entry of kFailureStages, "crash", "timeout" or "harness"
};

Outcome fail(const std::string& stage, const std::string& reason) { return {Outcome::kFail, reason, stage}; }
Outcome skip(const std::string& reason) { return {Outcome::kSkip, reason, ""}; }

std::string compare(const TensorView& got_view, const Tensor& want, const std::string& name, Tolerance tol) {
  TensorView got = got_view;
  // ONNX 1.12's test data stores expected bfloat16 outputs as uint16: compare the bits.
  if (got.dtype == DType::kBFloat16 && want.dtype() == DType::kUInt16) got.dtype = DType::kUInt16;
  if (got.dtype != want.dtype()) return "output '" + name + "' dtype " + dtype_name(got.dtype) + ", expected " + dtype_name(want.dtype());
  if (got.shape != want.shape()) return "output '" + name + "' shape " + got.shape.str() + ", expected " + want.shape().str();
  const bool is_float = dtype_is_float(got.dtype);
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double a = read_double(got, i), b = read_double(want.view(), i);
    if (is_float) {
      if (std::isnan(a) && std::isnan(b)) continue;
      if (std::isinf(a) || std::isinf(b)) {
        if (a == b) continue;
      } else if (std::fabs(a - b) <= tol.atol + tol.rtol * std::fabs(b)) {
        continue;
      }
    } else if (read_int(got, i) == read_int(want.view(), i)) {
      continue;
    }
    std::ostringstream os;
    os << "output '" << name << "' element " << i << " is " << a << ", expected " << b;
    return os.str();
  }
  return "";
}

std::vector<std::string> model_ops(const fs::path& model_path, std::string* err) {
  std::ifstream f(model_path, std::ios::binary);
  onnx::ModelProto m;
  if (!m.ParseFromIstream(&f)) {
    *err = "cannot parse model";
    return {};
  }
  std::set<std::string> ops;
  for (const auto& n : m.graph().node()) ops.insert((n.domain().empty() || n.domain() == "ai.onnx" ? "" : n.domain() + "::") + n.op_type());
  return {ops.begin(), ops.end()};
}

// Runs one test (in the child process).
Outcome run_test(const fs::path& dir, Tolerance tol) {
  auto graph = import_onnx_file((dir / "model.onnx").string());
  // Import-level Unimplemented (an opset outside kiln's range, sequence/optional types, string
  // tensors, subgraphs) means the model uses a feature kiln does not support: skipped, with the reason.
  if (!graph.ok()) {
    if (graph.status().code() == StatusCode::kUnimplemented) return skip(graph.status().message());
    return fail("import-error", graph.status().message());
  }
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return skip("no test_data_set");
  for (const auto& set : sets) {
    BuildOptions opts;
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < graph->inputs.size(); ++i) {
      fs::path p = set / ("input_" + std::to_string(i) + ".pb");
      if (!fs::exists(p)) return fail("harness", "missing " + p.string());
      auto t = read_tensor_pb(p.string(), nullptr);
      if (!t.ok()) {
        if (t.status().code() == StatusCode::kUnimplemented) return skip("input data: " + t.status().message());
        return fail("input-error", "input data: " + t.status().message());
      }
      // ONNX 1.12's test data stores bfloat16 tensors with data_type uint16; same bits, relabelled.
      Tensor in = *t;
      if (in.dtype() == DType::kUInt16 && graph->values[graph->inputs[i]].dtype == DType::kBFloat16)
        in = Tensor::borrow(in.data(), DType::kBFloat16, in.shape(), std::shared_ptr<const void>(in.data(), [keep = in](const void*) {}));
      opts.input_shapes[graph->values[graph->inputs[i]].name] = in.shape();
      inputs.push_back(in);
    }
    auto plan = build_plan(*graph, opts);
    if (!plan.ok()) return fail("build-error", plan.status().message());
    // Creating the context creates the kernels, which validate their attributes: still the build.
    auto ctx = ExecutionContext::create(*plan);
    if (!ctx.ok()) return fail("build-error", ctx.status().message());
    for (size_t i = 0; i < inputs.size(); ++i) {
      Status st = (*ctx)->set_input(i, inputs[i].view());
      if (!st.ok()) return fail("input-error", st.message());
    }
    // Run twice: the second run uses the planned arena, which is what steady state exercises.
    for (int rep = 0; rep < 2; ++rep) {
      Status st = (*ctx)->run();
      if (!st.ok()) return fail("run-error", st.message());
      for (size_t o = 0; o < (*ctx)->num_outputs(); ++o) {
        fs::path p = set / ("output_" + std::to_string(o) + ".pb");
        auto want = read_tensor_pb(p.string(), nullptr);
        if (!want.ok()) {
          if (want.status().code() == StatusCode::kUnimplemented) return skip("expected data: " + want.status().message());
          return fail("harness", "expected data: " + want.status().message());
        }
        std::string diff = compare((*ctx)->output(o), *want, (*ctx)->output_name(o), tol);
        if (!diff.empty()) return fail("wrong-output", diff + (rep ? " (second run)" : ""));
      }
    }
  }
  return {Outcome::kPass, "", ""};
}

Outcome run_isolated(const fs::path& dir, Tolerance tol, int timeout_s) {
  int fds[2];
  if (pipe(fds) != 0) return fail("harness", "pipe failed");
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(static_cast<unsigned>(timeout_s));
    Outcome o = run_test(dir, tol);
    std::string msg = std::to_string(static_cast<int>(o.kind)) + o.stage + "\n" + o.reason;
    ssize_t w = write(fds[1], msg.data(), msg.size());
    (void)w;
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[4096];
  ssize_t r;
  while ((r = read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(r));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    if (WTERMSIG(status) == SIGALRM) return fail("timeout", "timed out after " + std::to_string(timeout_s) + " s");
    return fail("crash", "crashed with signal " + std::to_string(WTERMSIG(status)));
  }
  const size_t newline = msg.find('\n');
  if (msg.empty() || newline == std::string::npos) return fail("crash", "child exited without a result");
  return {static_cast<Outcome::Kind>(msg[0] - '0'), msg.substr(newline + 1), msg.substr(1, newline - 1)};
}

struct ExpectedFailure {
  std::string stage;      // one of kFailureStages
  std::string substring;  // must occur in the failure's message
  std::string reason;     // why kiln fails it (for the reader)
};

// Lines "suite/test  STAGE "message substring"  # reason"; blank lines and lines starting with '#'
// are comments. A malformed line is an error naming it.
std::map<std::string, ExpectedFailure> read_expected_failures(const std::string& path, bool* ok) {
  std::map<std::string, ExpectedFailure> out;
  std::ifstream f(path);
  *ok = static_cast<bool>(f);
  std::string line;
  for (int line_no = 1; std::getline(f, line); ++line_no) {
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    auto bad = [&](const std::string& what) {
      std::fprintf(stderr, "%s:%d: %s (expected: suite/test  STAGE \"message substring\"  # reason)\n", path.c_str(), line_no,
                   what.c_str());
      *ok = false;
    };
    std::istringstream is(line);
    std::string name;
    ExpectedFailure e;
    is >> name >> e.stage >> std::ws;
    if (!kFailureStages.count(e.stage)) {
      bad("'" + e.stage + "' is not a failure stage (import-error, input-error, build-error, run-error, wrong-output)");
      continue;
    }
    std::string rest;
    std::getline(is, rest);
    const size_t close = rest.size() > 1 && rest[0] == '"' ? rest.find('"', 1) : std::string::npos;
    if (close == std::string::npos || close == 1) {
      bad("no quoted, non-empty message substring after the stage");
      continue;
    }
    e.substring = rest.substr(1, close - 1);
    const size_t hash = rest.find('#', close);
    e.reason = hash == std::string::npos ? "" : rest.substr(hash + 1);
    e.reason.erase(0, std::min(e.reason.size(), e.reason.find_first_not_of(" \t")));
    if (e.reason.empty()) {
      bad("'" + name + "' has no reason after '#'");
      continue;
    }
    if (!out.emplace(name, e).second) bad("'" + name + "' is listed twice");
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = "/usr/share/libonnx-testdata/data", xfail_path, filter;
  bool verbose = false;
  int timeout_s = 120;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) data = argv[++i];
    else if (a == "--expected-failures" && i + 1 < argc) xfail_path = argv[++i];
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "--timeout" && i + 1 < argc) timeout_s = std::atoi(argv[++i]);
    else if (a == "-v" || a == "--verbose") verbose = true;
    else {
      std::fprintf(stderr, "usage: onnx_conformance [--data DIR] [--expected-failures FILE] [--filter SUBSTR] [--timeout SECONDS] [-v]\n");
      return 2;
    }
  }
  if (!fs::is_directory(data)) {
    std::fprintf(stderr, "onnx_conformance: test data folder '%s' does not exist (install libonnx-testdata)\n", data.c_str());
    return 1;
  }
  bool xfail_ok = true;
  auto xfail = xfail_path.empty() ? std::map<std::string, ExpectedFailure>{} : read_expected_failures(xfail_path, &xfail_ok);
  if (!xfail_ok) {
    std::fprintf(stderr, "onnx_conformance: cannot use expected-failures file '%s'\n", xfail_path.c_str());
    return 1;
  }
  const auto& reg = KernelRegistry::builtin();
  const auto op_types = reg.op_types();
  std::set<std::string> supported(op_types.begin(), op_types.end());
  supported.insert("Constant");  // the importer turns Constant nodes into constants
  std::cout << "supported ops (" << supported.size() << "):";
  for (const auto& op : supported) std::cout << " " << op;
  std::cout << "\n";

  struct Row { int pass = 0, fail = 0, skip = 0, xfail = 0; };
  std::map<std::string, Row> per_op;
  std::map<std::string, Row> per_suite;
  int passed = 0, failed = 0, skipped = 0, xfailed = 0;
  std::vector<std::string> failures;
  std::set<std::string> listed_seen;
  std::map<std::string, int> skip_reasons;
  for (const char* suite : kSuites) {
    fs::path sdir = fs::path(data) / suite;
    if (!fs::is_directory(sdir)) continue;
    std::vector<fs::path> tests;
    for (const auto& e : fs::directory_iterator(sdir))
      if (e.is_directory()) tests.push_back(e.path());
    std::sort(tests.begin(), tests.end());
    for (const auto& t : tests) {
      const std::string name = t.filename().string();
      const std::string full = std::string(suite) + "/" + name;
      if (!filter.empty() && full.find(filter) == std::string::npos) continue;
      std::string err;
      auto ops = model_ops(t / "model.onnx", &err);
      std::vector<std::string> missing;
      for (const auto& op : ops)
        if (!supported.count(op)) missing.push_back(op);
      Outcome o;
      Tolerance tol{1e-3, 1e-5};
      for (const auto& op : ops)
        if (auto it = kOpTolerances.find(op); it != kOpTolerances.end()) tol = it->second;
      if (!err.empty()) o = fail("harness", err);
      else if (!missing.empty()) {
        std::string m;
        for (const auto& op : missing) m += (m.empty() ? "" : ", ") + op;
        o = skip("unsupported op " + m);
      } else {
        o = run_isolated(t, tol, timeout_s);
      }
      const auto listed = xfail.find(full);
      std::string status;
      if (listed == xfail.end()) {
        if (o.kind == Outcome::kSkip) { ++skipped; status = "SKIP"; }
        else if (o.kind == Outcome::kPass) { ++passed; status = "PASS"; }
        else { ++failed; status = "FAIL"; o.reason = o.stage + ": " + o.reason; }
      } else {
        listed_seen.insert(full);
        const ExpectedFailure& e = listed->second;
        const std::string expected = e.stage + " \"" + e.substring + "\"";
        if (o.kind == Outcome::kFail && o.stage == e.stage && o.reason.find(e.substring) != std::string::npos) {
          ++xfailed;
          status = "XFAIL";
        } else {
          ++failed;
          status = o.kind == Outcome::kPass ? "XPASS" : "FAIL";
          o.reason = o.kind == Outcome::kPass ? "listed as an expected failure (" + expected + ") but passes: remove it from the list"
                     : o.kind == Outcome::kSkip ? "listed as an expected failure (" + expected + ") but skipped: " + o.reason
                                                : "listed as failing with " + expected + " but failed with " + o.stage + ": " + o.reason;
        }
      }
      if (status == "FAIL" || status == "XPASS") failures.push_back(full + ": " + o.reason);
      if (status == "SKIP" && !o.reason.empty()) skip_reasons[o.reason.substr(o.reason.find(": ") == std::string::npos ? 0 : o.reason.rfind(": ") + 2)]++;
      if (verbose || status == "FAIL" || status == "XPASS")
        std::cout << status << " " << full << (o.reason.empty() ? "" : ": " + o.reason) << "\n";
      for (const auto& op : ops) {
        Row& r = per_op[op];
        if (status == "PASS") ++r.pass;
        else if (status == "SKIP") ++r.skip;
        else if (status == "XFAIL") ++r.xfail;
        else ++r.fail;
      }
      Row& sr = per_suite[suite];
      if (status == "PASS") ++sr.pass;
      else if (status == "SKIP") ++sr.skip;
      else if (status == "XFAIL") ++sr.xfail;
      else ++sr.fail;
    }
  }
  std::printf("\n%-32s %6s %6s %6s %6s\n", "op", "pass", "fail", "xfail", "skip");
  for (const auto& [op, r] : per_op) std::printf("%-32s %6d %6d %6d %6d\n", op.c_str(), r.pass, r.fail, r.xfail, r.skip);
  std::printf("\n%-32s %6s %6s %6s %6s\n", "suite", "pass", "fail", "xfail", "skip");
  for (const auto& [s, r] : per_suite) std::printf("%-32s %6d %6d %6d %6d\n", s.c_str(), r.pass, r.fail, r.xfail, r.skip);
  for (const auto& [name, e] : xfail)
    if (name.find(filter) != std::string::npos && !listed_seen.count(name)) {
      ++failed;
      failures.push_back(name + ": listed as an expected failure but no such test exists in " + data);
    }
  std::printf("\nskip reasons:\n");
  for (const auto& [reason, count] : skip_reasons) std::printf("  %4d  %s\n", count, reason.c_str());
  if (!failures.empty()) {
    std::printf("\nunexpected results:\n");
    for (const auto& f : failures) std::printf("  %s\n", f.c_str());
  }
  std::printf("\n%d passed, %d failed, %d expected failures (listed, each failing at its stage with its message), "
              "%d skipped (unsupported op or feature)\n", passed, failed, xfailed, skipped);
  return failed == 0 ? 0 : 1;
}
