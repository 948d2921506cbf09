#include "profiles/history/report_json.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "profiles/history/provenance.h"

namespace kiln::history {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json load_json(const LoadAverage& l) { return l.present ? json::array({l.one, l.five, l.fifteen}) : json(nullptr); }

LoadAverage load_from(const json& j) {
  LoadAverage l;
  if (j.is_array() && j.size() == 3) l = {j[0].get<double>(), j[1].get<double>(), j[2].get<double>(), true};
  return l;
}

std::string str(const json& o, const char* key) { return o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : ""; }
double num(const json& o, const char* key) { return o.contains(key) && o[key].is_number() ? o[key].get<double>() : 0.0; }

Status need(bool cond, const std::string& path, const std::string& what) {
  return cond ? Status::Ok() : InvalidArgument(path + ": " + what);
}

std::vector<double> doubles(const json& a) {
  std::vector<double> v;
  if (a.is_array())
    for (const auto& x : a)
      if (x.is_number()) v.push_back(x.get<double>());
  return v;
}

StatusOr<ProfileRecord> profile_from(const std::string& name, const json& p, const std::string& path) {
  ProfileRecord r;
  r.name = name;
  r.budget_ms = num(p, "budget_ms");
  r.samples_ms = doubles(p.value("samples_ms", json()));
  KILN_RETURN_IF_ERROR(need(!r.samples_ms.empty(), path, "profile '" + name + "' has no samples_ms"));
  r.gflop = num(p, "gflop");
  r.gflops_per_s = num(p, "gflops_per_s");
  r.peak_fraction = num(p, "peak_fraction");
  r.trace_path = str(p, "trace");
  r.layer_runs = p.contains("layer_runs") ? p["layer_runs"].get<int>() : 0;
  if (p.contains("all_layers") && p["all_layers"].is_array())
    for (const auto& l : p["all_layers"]) {
      LayerRecord lr;
      lr.name = str(l, "name");
      lr.op_type = str(l, "op_type");
      if (l.contains("replaced"))
        for (const auto& x : l["replaced"]) lr.replaced.push_back(x.get<std::string>());
      lr.ms = doubles(l.value("ms", json()));
      lr.ms.resize(static_cast<size_t>(r.layer_runs), 0.0);
      r.layers.push_back(std::move(lr));
    }
  return r;
}

}  // namespace

std::string run_section_json(const RunRecord& run) {
  json j = {
      {"time", run.time},
      {"unix_time", run.unix_time},
      {"label", run.label},
      {"kiln", {{"version", run.kiln_version}, {"commit", run.kiln_commit}, {"dirty", run.kiln_dirty}}},
      {"config",
       {{"path", run.config_path}, {"series", run.series_key}, {"sha256", run.config_sha256}, {"repo_commit", run.config_repo_commit},
        {"repo_dirty", run.config_repo_dirty}}},
      {"model_sha256", run.model_sha256},
      {"engine_sha256", run.engine_sha256},
      {"precision", run.precision},
      {"threads", run.threads},
      {"load_average", {{"before", load_json(run.load_before)}, {"after", load_json(run.load_after)}}},
  };
  return j.dump();
}

std::string machine_fields_json(const MachineInfo& m) {
  return ", \"cpu_model\": " + json(m.cpu_model).dump() + ", \"isa\": " + json(m.isa).dump() + ", \"cores\": " + std::to_string(m.cores) +
         ", \"memory_bytes\": " + std::to_string(m.memory_bytes) + ", \"fingerprint\": " + json(m.fingerprint).dump();
}

static StatusOr<RunRecord> report_unchecked(const std::string& text, const std::string& path) {
  const json j = json::parse(text, nullptr, false);
  KILN_RETURN_IF_ERROR(need(j.is_object(), path, "not a JSON object"));
  KILN_RETURN_IF_ERROR(need(j.contains("schema_version") && j["schema_version"].is_number_integer(), path,
                            "no schema_version: an engine-build report written before kiln kept a history; run engine-build again"));
  RunRecord r;
  r.report_schema = j["schema_version"].get<int>();
  if (r.report_schema > kReportSchemaVersion)
    return FailedPrecondition(path + ": report schema version " + std::to_string(r.report_schema) + " is newer than this kiln reads (" +
                              std::to_string(kReportSchemaVersion) + ")");
  KILN_RETURN_IF_ERROR(need(j.contains("run") && j["run"].is_object(), path, "no \"run\" object"));
  const json& run = j["run"];
  r.time = str(run, "time");
  r.unix_time = num(run, "unix_time");
  r.label = str(run, "label");
  if (run.contains("kiln")) {
    r.kiln_version = str(run["kiln"], "version");
    r.kiln_commit = str(run["kiln"], "commit");
    r.kiln_dirty = run["kiln"].value("dirty", false);
  }
  if (run.contains("config")) {
    const json& c = run["config"];
    r.config_path = str(c, "path");
    r.series_key = str(c, "series");
    r.config_sha256 = str(c, "sha256");
    r.config_repo_commit = str(c, "repo_commit");
    r.config_repo_dirty = c.value("repo_dirty", false);
  }
  KILN_RETURN_IF_ERROR(need(!r.series_key.empty(), path, "run.config.series is missing"));
  r.model_sha256 = str(run, "model_sha256");
  r.engine_sha256 = str(run, "engine_sha256");
  r.precision = str(run, "precision");
  r.threads = run.value("threads", 0);
  if (run.contains("load_average")) {
    r.load_before = load_from(run["load_average"].value("before", json()));
    r.load_after = load_from(run["load_average"].value("after", json()));
  }
  KILN_RETURN_IF_ERROR(need(j.contains("machine") && j["machine"].contains("fingerprint"), path, "machine.fingerprint is missing"));
  const json& m = j["machine"];
  r.machine.cpu_model = str(m, "cpu_model");
  for (const auto& f : m.value("isa", json::array())) r.machine.isa.push_back(f.get<std::string>());
  r.machine.cores = m.value("cores", 0);
  r.machine.memory_bytes = m.value("memory_bytes", int64_t{0});
  r.machine.fingerprint = str(m, "fingerprint");
  if (j.contains("engine")) r.engine_path = str(j["engine"], "path");
  r.report_path = fs::absolute(path).lexically_normal().string();
  if (j.contains("profiles"))
    for (const auto& [name, p] : j["profiles"].items()) {
      if (!p.contains("samples_ms")) continue;  // validated, not benchmarked (--no-bench)
      KILN_ASSIGN_OR_RETURN(ProfileRecord pr, profile_from(name, p, path));
      r.profiles.push_back(std::move(pr));
    }
  if (j.contains("streaming") && j["streaming"].contains("steps_detail")) {
    const json& s = j["streaming"];
    ProfileRecord pr;
    pr.name = "streaming";
    pr.kind = "streaming";
    pr.budget_ms = num(s, "budget_ms");
    for (const auto& st : s["steps_detail"]) {
      KILN_RETURN_IF_ERROR(need(st.is_array() && st.size() == 4, path, "streaming.steps_detail entries must be [release, start, end, missed]"));
      StreamingStep x{st[0].get<double>(), st[1].get<double>(), st[2].get<double>(), st[3].get<int>() != 0};
      pr.steps.push_back(x);
      pr.samples_ms.push_back(x.end_ms - x.release_ms);
    }
    if (!pr.steps.empty()) r.profiles.push_back(std::move(pr));
  }
  KILN_RETURN_IF_ERROR(need(!r.profiles.empty(), path, "no benchmarked profile (written with --no-bench?)"));
  return r;
}

static StatusOr<RunRecord> gbench_unchecked(const std::string& text, const std::string& path) {
  const json j = json::parse(text, nullptr, false);
  KILN_RETURN_IF_ERROR(need(j.is_object() && j.contains("benchmarks") && j["benchmarks"].is_array(), path,
                            "not a Google benchmark JSON file (no \"benchmarks\" list)"));
  RunRecord r;
  r.source = "gbench";
  r.unix_time = unix_time_now();
  const json ctx = j.value("context", json::object());
  // "2026-11-24T16:40:12+00:00": the run's own time where it parses.
  const std::string date = str(ctx, "date");
  int Y, M, D, h, mi, s, oh = 0, om = 0;
  char sign = '+';
  if (std::sscanf(date.c_str(), "%d-%d-%dT%d:%d:%d%c%d:%d", &Y, &M, &D, &h, &mi, &s, &sign, &oh, &om) >= 6) {
    std::tm tm{};
    tm.tm_year = Y - 1900, tm.tm_mon = M - 1, tm.tm_mday = D, tm.tm_hour = h, tm.tm_min = mi, tm.tm_sec = s;
    const double offset = (sign == '-' ? -1 : 1) * (oh * 3600.0 + om * 60.0);
    r.unix_time = static_cast<double>(timegm(&tm)) - offset;
  }
  r.time = iso8601_utc(r.unix_time);
  const std::string exe = str(ctx, "executable");
  r.series_key = "bench:" + (exe.empty() ? fs::path(path).stem().string() : fs::path(exe).filename().string());
  r.config_path = exe;
  r.machine = read_machine_info();
  r.load_after = read_load_average();
  r.report_path = fs::absolute(path).lexically_normal().string();
  const BuildInfo bi = kiln_build_info();
  r.kiln_version = bi.version;
  r.kiln_commit = bi.commit;
  r.kiln_dirty = bi.dirty;
  r.report_schema = 0;
  for (const auto& b : j["benchmarks"]) {
    if (str(b, "run_type") == "aggregate" || b.value("error_occurred", false)) continue;
    const std::string name = b.contains("run_name") ? str(b, "run_name") : str(b, "name");
    const std::string unit = str(b, "time_unit");
    const double scale = unit == "ns" ? 1e-6 : unit == "us" ? 1e-3 : unit == "s" ? 1e3 : 1.0;
    ProfileRecord* p = nullptr;
    for (auto& q : r.profiles)
      if (q.name == name) p = &q;
    if (!p) {
      r.profiles.push_back(ProfileRecord{});
      p = &r.profiles.back();
      p->name = name;
      p->kind = "microbenchmark";
    }
    p->samples_ms.push_back(num(b, "real_time") * scale);
    if (b.contains("GFLOP/s")) p->gflops_per_s = num(b, "GFLOP/s");
  }
  KILN_RETURN_IF_ERROR(need(!r.profiles.empty(), path, "no benchmark results in it"));
  return r;
}

// nlohmann throws on a value of the wrong type (a string where a number belongs): one line.
template <typename F>
StatusOr<RunRecord> guarded(F f, const std::string& text, const std::string& path) {
  try {
    return f(text, path);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(path + ": unexpected JSON: " + e.what());
  }
}

StatusOr<RunRecord> run_from_report_json(const std::string& text, const std::string& path) { return guarded(report_unchecked, text, path); }
StatusOr<RunRecord> run_from_gbench_json(const std::string& text, const std::string& path) { return guarded(gbench_unchecked, text, path); }

StatusOr<RunRecord> read_run_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return IoError(path + ": cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return InvalidArgument(path + ": not valid JSON");
  if (j.is_object() && j.contains("benchmarks") && j.contains("context")) return run_from_gbench_json(text, path);
  return run_from_report_json(text, path);
}

}  // namespace kiln::history
