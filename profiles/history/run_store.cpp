#include "profiles/history/run_store.h"

#include <bit>
#include <cstring>
#include <map>

#include <nlohmann/json.hpp>

namespace kiln::history {

static_assert(std::endian::native == std::endian::little, "the history's blobs are little-endian");

namespace {

template <typename T>
void put(std::vector<unsigned char>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

template <typename T>
T get(const std::vector<unsigned char>& in, size_t& at) {
  T v{};
  if (at + sizeof(T) <= in.size()) std::memcpy(&v, in.data() + at, sizeof(T));
  at += sizeof(T);
  return v;
}

std::string load_json(const LoadAverage& l) {
  if (!l.present) return "";
  return nlohmann::json::array({l.one, l.five, l.fifteen}).dump();
}

LoadAverage parse_load(const std::string& s) {
  LoadAverage l;
  if (s.empty()) return l;
  auto j = nlohmann::json::parse(s, nullptr, false);
  if (!j.is_array() || j.size() != 3) return l;
  l = {j[0].get<double>(), j[1].get<double>(), j[2].get<double>(), true};
  return l;
}

std::string join_isa(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(' ', i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

StatusOr<int64_t> machine_id(HistoryDb& db, const MachineInfo& m) {
  Statement find(db, "SELECT id FROM machines WHERE fingerprint = ?");
  find.bind(1, m.fingerprint);
  if (find.step()) return find.column_int(0);
  KILN_RETURN_IF_ERROR(find.status());
  Statement ins(db, "INSERT INTO machines(fingerprint, cpu_model, isa, cores, memory_bytes) VALUES(?, ?, ?, ?, ?)");
  ins.bind(1, m.fingerprint).bind(2, m.cpu_model).bind(3, join_isa(m.isa)).bind(4, static_cast<int64_t>(m.cores)).bind(5, m.memory_bytes);
  KILN_RETURN_IF_ERROR(ins.run());
  return sqlite3_last_insert_rowid(db.handle());
}

// Layer names are interned: a history repeats the same few hundred names in every run.
class LayerNames {
 public:
  explicit LayerNames(HistoryDb& db)
      : find_(db, "SELECT id FROM layer_names WHERE name = ? AND op_type = ? AND replaced = ?"),
        insert_(db, "INSERT INTO layer_names(name, op_type, replaced) VALUES(?, ?, ?)"), db_(db) {}
  StatusOr<int32_t> id(const LayerRecord& l) {
    const std::string replaced = nlohmann::json(l.replaced).dump();
    find_.reset();
    find_.bind(1, l.name).bind(2, l.op_type).bind(3, replaced);
    if (find_.step()) return static_cast<int32_t>(find_.column_int(0));
    KILN_RETURN_IF_ERROR(find_.status());
    insert_.reset();
    insert_.bind(1, l.name).bind(2, l.op_type).bind(3, replaced);
    KILN_RETURN_IF_ERROR(insert_.run());
    return static_cast<int32_t>(sqlite3_last_insert_rowid(db_.handle()));
  }

 private:
  Statement find_, insert_;
  HistoryDb& db_;
};

Status insert_profiles(HistoryDb& db, RunRecord& run) {
  LayerNames names(db);
  Statement ins(db,
                "INSERT INTO profiles(run_id, name, kind, budget_ms, samples, gflop, gflops_per_s, peak_fraction, trace_path, "
                "layer_runs, layers, steps) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  KILN_RETURN_IF_ERROR(ins.status());
  for (auto& p : run.profiles) {
    std::vector<unsigned char> samples, layers, steps;
    for (double v : p.samples_ms) put(samples, v);
    for (const auto& s : p.steps) {
      put(steps, s.release_ms);
      put(steps, s.start_ms);
      put(steps, s.end_ms);
      put(steps, s.missed ? 1.0 : 0.0);
    }
    for (const auto& l : p.layers) {
      KILN_ASSIGN_OR_RETURN(int32_t id, names.id(l));
      put(layers, id);
      for (int r = 0; r < p.layer_runs; ++r) put(layers, static_cast<float>(r < static_cast<int>(l.ms.size()) ? l.ms[static_cast<size_t>(r)] : 0.0));
    }
    ins.reset();
    ins.bind(1, run.id).bind(2, p.name).bind(3, p.kind).bind(4, p.budget_ms).bind_blob(5, samples.data(), samples.size());
    ins.bind(6, p.gflop).bind(7, p.gflops_per_s).bind(8, p.peak_fraction).bind(9, p.trace_path);
    ins.bind(10, static_cast<int64_t>(p.layer_runs));
    if (layers.empty()) ins.bind_null(11); else ins.bind_blob(11, layers.data(), layers.size());
    if (steps.empty()) ins.bind_null(12); else ins.bind_blob(12, steps.data(), steps.size());
    KILN_RETURN_IF_ERROR(ins.run());
    p.id = sqlite3_last_insert_rowid(db.handle());
  }
  return Status::Ok();
}

constexpr const char* kRunColumns =
    "r.id, r.unix_time, r.time, r.label, r.source, r.report_schema, r.kiln_version, r.kiln_commit, r.kiln_dirty, r.config_path, "
    "r.series_key, r.config_sha256, r.config_repo_commit, r.config_repo_dirty, r.model_sha256, r.engine_sha256, r.engine_path, "
    "r.precision, r.threads, r.load_before, r.load_after, r.report_path, m.fingerprint, m.cpu_model, m.isa, m.cores, m.memory_bytes";

RunRecord read_run_row(const Statement& s) {
  RunRecord r;
  int c = 0;
  r.id = s.column_int(c++);
  r.unix_time = s.column_double(c++);
  r.time = s.column_text(c++);
  r.label = s.column_text(c++);
  r.source = s.column_text(c++);
  r.report_schema = static_cast<int>(s.column_int(c++));
  r.kiln_version = s.column_text(c++);
  r.kiln_commit = s.column_text(c++);
  r.kiln_dirty = s.column_int(c++) != 0;
  r.config_path = s.column_text(c++);
  r.series_key = s.column_text(c++);
  r.config_sha256 = s.column_text(c++);
  r.config_repo_commit = s.column_text(c++);
  r.config_repo_dirty = s.column_int(c++) != 0;
  r.model_sha256 = s.column_text(c++);
  r.engine_sha256 = s.column_text(c++);
  r.engine_path = s.column_text(c++);
  r.precision = s.column_text(c++);
  r.threads = static_cast<int>(s.column_int(c++));
  r.load_before = parse_load(s.column_text(c++));
  r.load_after = parse_load(s.column_text(c++));
  r.report_path = s.column_text(c++);
  r.machine.fingerprint = s.column_text(c++);
  r.machine.cpu_model = s.column_text(c++);
  r.machine.isa = split_words(s.column_text(c++));
  r.machine.cores = static_cast<int>(s.column_int(c++));
  r.machine.memory_bytes = s.column_int(c++);
  return r;
}

ProfileRecord read_profile_row(const Statement& s) {
  ProfileRecord p;
  p.id = s.column_int(0);
  p.name = s.column_text(2);
  p.kind = s.column_text(3);
  p.budget_ms = s.column_double(4);
  const auto blob = s.column_blob(5);
  size_t at = 0;
  while (at + sizeof(double) <= blob.size()) p.samples_ms.push_back(get<double>(blob, at));
  p.gflop = s.column_double(6);
  p.gflops_per_s = s.column_double(7);
  p.peak_fraction = s.column_double(8);
  p.trace_path = s.column_text(9);
  p.layer_runs = static_cast<int>(s.column_int(10));
  return p;
}

constexpr const char* kProfileColumns = "id, run_id, name, kind, budget_ms, samples, gflop, gflops_per_s, peak_fraction, trace_path, layer_runs";

}  // namespace

Status insert_run(HistoryDb& db, RunRecord& run) {
  // IMMEDIATE: take the write lock now (waiting out another writer on the busy timeout) rather
  // than fail half-way when a read lock cannot be upgraded.
  KILN_RETURN_IF_ERROR(db.exec("BEGIN IMMEDIATE"));
  auto body = [&]() -> Status {
    KILN_ASSIGN_OR_RETURN(int64_t mid, machine_id(db, run.machine));
    Statement ins(db,
                  "INSERT INTO runs(unix_time, time, label, source, report_schema, kiln_version, kiln_commit, kiln_dirty, config_path, "
                  "series_key, config_sha256, config_repo_commit, config_repo_dirty, model_sha256, engine_sha256, engine_path, precision, "
                  "threads, machine_id, load_before, load_after, report_path) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    // One bind per statement: a chain of bind(c++, ...) calls reads as unsequenced to GCC.
    int c = 0;
    auto next = [&c] { return ++c; };
    ins.bind(next(), run.unix_time);
    ins.bind(next(), run.time);
    if (run.label.empty()) ins.bind_null(next());
    else ins.bind(next(), run.label);
    ins.bind(next(), run.source);
    ins.bind(next(), static_cast<int64_t>(run.report_schema));
    ins.bind(next(), run.kiln_version);
    ins.bind(next(), run.kiln_commit);
    ins.bind(next(), static_cast<int64_t>(run.kiln_dirty));
    ins.bind(next(), run.config_path);
    ins.bind(next(), run.series_key);
    ins.bind(next(), run.config_sha256);
    ins.bind(next(), run.config_repo_commit);
    ins.bind(next(), static_cast<int64_t>(run.config_repo_dirty));
    ins.bind(next(), run.model_sha256);
    ins.bind(next(), run.engine_sha256);
    ins.bind(next(), run.engine_path);
    ins.bind(next(), run.precision);
    ins.bind(next(), static_cast<int64_t>(run.threads));
    ins.bind(next(), mid);
    ins.bind(next(), load_json(run.load_before));
    ins.bind(next(), load_json(run.load_after));
    ins.bind(next(), run.report_path);
    KILN_RETURN_IF_ERROR(ins.run());
    run.id = sqlite3_last_insert_rowid(db.handle());
    return insert_profiles(db, run);
  };
  Status st = body();
  if (!st.ok()) {
    (void)db.exec("ROLLBACK");
    run.id = 0;
    return st.with_context("recording a run");
  }
  return db.exec("COMMIT");
}

StatusOr<std::vector<RunRecord>> load_runs(const HistoryDb& db, const LoadOptions& opts) {
  std::vector<RunRecord> runs;
  std::map<int64_t, size_t> index;
  {
    Statement s(db, std::string("SELECT ") + kRunColumns + " FROM runs r JOIN machines m ON m.id = r.machine_id ORDER BY r.unix_time, r.id");
    while (s.step()) {
      index[s.column_int(0)] = runs.size();
      runs.push_back(read_run_row(s));
    }
    KILN_RETURN_IF_ERROR(s.status());
  }
  Statement p(db, std::string("SELECT ") + kProfileColumns + " FROM profiles ORDER BY id");
  while (p.step()) {
    auto it = index.find(p.column_int(1));
    if (it != index.end()) runs[it->second].profiles.push_back(read_profile_row(p));
  }
  KILN_RETURN_IF_ERROR(p.status());
  if (opts.layers || opts.steps)
    for (auto& r : runs) KILN_RETURN_IF_ERROR(load_details(db, r, opts));
  return runs;
}

StatusOr<RunRecord> load_run(const HistoryDb& db, int64_t id, const LoadOptions& opts) {
  RunRecord run;
  {
    Statement s(db, std::string("SELECT ") + kRunColumns + " FROM runs r JOIN machines m ON m.id = r.machine_id WHERE r.id = ?");
    s.bind(1, id);
    if (!s.step()) {
      KILN_RETURN_IF_ERROR(s.status());
      return NotFound(db.path() + ": no run " + std::to_string(id));
    }
    run = read_run_row(s);
  }
  Statement p(db, std::string("SELECT ") + kProfileColumns + " FROM profiles WHERE run_id = ? ORDER BY id");
  p.bind(1, id);
  while (p.step()) run.profiles.push_back(read_profile_row(p));
  KILN_RETURN_IF_ERROR(p.status());
  KILN_RETURN_IF_ERROR(load_details(db, run, opts));
  return run;
}

Status load_details(const HistoryDb& db, RunRecord& run, const LoadOptions& opts) {
  if (!opts.layers && !opts.steps) return Status::Ok();
  std::map<int64_t, LayerRecord> names;
  Statement s(db, "SELECT layers, steps FROM profiles WHERE id = ?");
  Statement n(db, "SELECT name, op_type, replaced FROM layer_names WHERE id = ?");
  for (auto& p : run.profiles) {
    s.reset();
    s.bind(1, p.id);
    if (!s.step()) {
      KILN_RETURN_IF_ERROR(s.status());
      continue;
    }
    if (opts.layers) {
      p.layers.clear();
      const auto blob = s.column_blob(0);
      const size_t rec = sizeof(int32_t) + sizeof(float) * static_cast<size_t>(p.layer_runs);
      for (size_t at = 0; at + rec <= blob.size();) {
        const int32_t id = get<int32_t>(blob, at);
        auto it = names.find(id);
        if (it == names.end()) {
          n.reset();
          n.bind(1, static_cast<int64_t>(id));
          LayerRecord l;
          if (n.step()) {
            l.name = n.column_text(0);
            l.op_type = n.column_text(1);
            auto rep = nlohmann::json::parse(n.column_text(2), nullptr, false);
            if (rep.is_array())
              for (const auto& x : rep) l.replaced.push_back(x.get<std::string>());
          }
          KILN_RETURN_IF_ERROR(n.status());
          it = names.emplace(id, std::move(l)).first;
        }
        LayerRecord l = it->second;
        for (int r = 0; r < p.layer_runs; ++r) l.ms.push_back(get<float>(blob, at));
        p.layers.push_back(std::move(l));
      }
    }
    if (opts.steps) {
      p.steps.clear();
      const auto blob = s.column_blob(1);
      for (size_t at = 0; at + 4 * sizeof(double) <= blob.size();) {
        StreamingStep st;
        st.release_ms = get<double>(blob, at);
        st.start_ms = get<double>(blob, at);
        st.end_ms = get<double>(blob, at);
        st.missed = get<double>(blob, at) != 0;
        p.steps.push_back(st);
      }
    }
  }
  return Status::Ok();
}

StatusOr<int64_t> resolve_run(const HistoryDb& db, const std::string& id_or_label) {
  if (!id_or_label.empty() && id_or_label.find_first_not_of("0123456789") == std::string::npos) {
    Statement s(db, "SELECT id FROM runs WHERE id = ?");
    s.bind(1, static_cast<int64_t>(std::stoll(id_or_label)));
    if (s.step()) return s.column_int(0);
    KILN_RETURN_IF_ERROR(s.status());
  }
  Statement s(db, "SELECT id FROM runs WHERE label = ? ORDER BY unix_time DESC, id DESC LIMIT 1");
  s.bind(1, id_or_label);
  if (s.step()) return s.column_int(0);
  KILN_RETURN_IF_ERROR(s.status());
  return NotFound(db.path() + ": no run with id or label '" + id_or_label + "'");
}

}  // namespace kiln::history
