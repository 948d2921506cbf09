#include "profiles/history/history_db.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace kiln::history {

namespace fs = std::filesystem;

namespace {

// Schema migrations, in order: migration i takes user_version i to i + 1. Never edit one that has
// shipped; add the next.
const char* const kMigrations[] = {
    // 0 -> 1: runs, where they ran and per profile the raw timed samples.
    R"sql(
CREATE TABLE machines(
  id INTEGER PRIMARY KEY, fingerprint TEXT NOT NULL UNIQUE, cpu_model TEXT NOT NULL, isa TEXT NOT NULL,
  cores INTEGER NOT NULL, memory_bytes INTEGER NOT NULL);
CREATE TABLE runs(
  id INTEGER PRIMARY KEY, unix_time REAL NOT NULL, time TEXT NOT NULL, label TEXT, source TEXT NOT NULL,
  report_schema INTEGER, kiln_version TEXT, kiln_commit TEXT, kiln_dirty INTEGER, config_path TEXT,
  series_key TEXT NOT NULL, config_sha256 TEXT, config_repo_commit TEXT, config_repo_dirty INTEGER,
  model_sha256 TEXT, engine_sha256 TEXT, engine_path TEXT, precision TEXT, threads INTEGER,
  machine_id INTEGER NOT NULL REFERENCES machines(id), load_before TEXT, load_after TEXT, report_path TEXT);
CREATE INDEX runs_by_label ON runs(label, unix_time);
CREATE INDEX runs_by_series ON runs(series_key, machine_id, unix_time);
-- samples: float64 little-endian, one per timed iteration (streaming: latency from release).
CREATE TABLE profiles(
  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, name TEXT NOT NULL,
  kind TEXT NOT NULL, budget_ms REAL NOT NULL, samples BLOB NOT NULL, gflop REAL, gflops_per_s REAL,
  peak_fraction REAL, trace_path TEXT, UNIQUE(run_id, name));
)sql",
    // 1 -> 2: every layer of the profiled runs and every paced streaming step.
    // layers: per layer an int32 layer_names.id then layer_runs float32 ms; steps: per step four
    // float64 (release, start, end in ms from the loop's start, missed 0/1). Little-endian.
    R"sql(
CREATE TABLE layer_names(
  id INTEGER PRIMARY KEY, name TEXT NOT NULL, op_type TEXT NOT NULL, replaced TEXT NOT NULL,
  UNIQUE(name, op_type, replaced));
ALTER TABLE profiles ADD COLUMN layer_runs INTEGER NOT NULL DEFAULT 0;
ALTER TABLE profiles ADD COLUMN layers BLOB;
ALTER TABLE profiles ADD COLUMN steps BLOB;
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kSchemaVersion);

uint32_t big_endian(const unsigned char* p, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) v = v << 8 | p[i];
  return v;
}

// What the file's first 100 bytes say, before SQLite (or anything that writes) touches it.
Status check_header(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return IoError(path + ": " + ec.message());
  if (size == 0) return Status::Ok();  // SQLite treats an empty file as an empty database
  unsigned char h[100] = {};
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(h), sizeof h);
  if (size < 100 || std::memcmp(h, "SQLite format 3", 16) != 0)
    return InvalidArgument(path + ": not a kiln history database (not an SQLite 3 file); refusing to touch it");
  uint32_t page_size = big_endian(h + 16, 2);
  if (page_size == 1) page_size = 65536;
  const uint32_t pages = big_endian(h + 28, 4), change = big_endian(h + 24, 4), valid_for = big_endian(h + 92, 4);
  // The page count is meaningful when the "version-valid-for" number matches the change counter.
  if (valid_for == change && pages > 0 && static_cast<uintmax_t>(pages) * page_size > size)
    return DataLoss(path + ": truncated: its header says " + std::to_string(pages) + " pages of " + std::to_string(page_size) +
                    " bytes (" + std::to_string(static_cast<uintmax_t>(pages) * page_size) + " bytes), the file has " +
                    std::to_string(size) + "; refusing to use it");
  return Status::Ok();
}

}  // namespace

Status HistoryDb::error(const std::string& what) const {
  return IoError(path_ + ": " + what + ": " + (db_ ? sqlite3_errmsg(db_) : "no database"));
}

Status HistoryDb::exec(const std::string& sql) {
  char* msg = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string m = msg ? msg : sqlite3_errmsg(db_);
    sqlite3_free(msg);
    return IoError(path_ + ": " + m);
  }
  return Status::Ok();
}

HistoryDb::~HistoryDb() {
  if (db_) sqlite3_close_v2(db_);
}

StatusOr<std::unique_ptr<HistoryDb>> HistoryDb::open(const std::string& path, Mode mode) {
  return open_impl(path, mode, kSchemaVersion);
}

StatusOr<std::unique_ptr<HistoryDb>> HistoryDb::open_at_version(const std::string& path, int schema_version) {
  return open_impl(path, Mode::kCreate, schema_version);
}

StatusOr<std::unique_ptr<HistoryDb>> HistoryDb::open_impl(const std::string& path, Mode mode, int target_version) {
  const bool exists = fs::exists(path);
  if (!exists && mode == Mode::kExisting) return NotFound(path + ": no such history database");
  if (exists) KILN_RETURN_IF_ERROR(check_header(path));
  sqlite3* raw = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | (mode == Mode::kCreate ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  std::unique_ptr<HistoryDb> db(new HistoryDb(raw, path));
  if (rc != SQLITE_OK) return db->error("cannot open");
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, kBusyTimeoutMs);

  // Read-only look first: what is this file?
  int64_t app_id = 0, version = 0, tables = 0;
  {
    Statement a(*db, "PRAGMA application_id");
    if (!a.status().ok()) return a.status();
    if (a.step()) app_id = a.column_int(0);
    KILN_RETURN_IF_ERROR(a.status());
    Statement v(*db, "PRAGMA user_version");
    if (v.step()) version = v.column_int(0);
    KILN_RETURN_IF_ERROR(v.status());
    Statement t(*db, "SELECT count(*) FROM sqlite_master");
    if (t.step()) tables = t.column_int(0);
    KILN_RETURN_IF_ERROR(t.status());
  }
  if (app_id != kApplicationId && !(app_id == 0 && tables == 0)) {
    char id[16];
    std::snprintf(id, sizeof id, "0x%08x", static_cast<uint32_t>(app_id));
    return InvalidArgument(path + ": an SQLite database of another application (application_id " + id + ", " + std::to_string(tables) +
                           " schema objects), not a kiln history; refusing to write into it");
  }
  if (app_id == 0 && mode == Mode::kExisting) return InvalidArgument(path + ": an empty file, not a kiln history database");
  if (version > kSchemaVersion)
    return FailedPrecondition(path + ": history schema version " + std::to_string(version) + " is newer than this kiln understands (" +
                              std::to_string(kSchemaVersion) + "); use a newer engine-perf");
  // Only now change the file: WAL lets readers go on while one writer commits, and writers queue
  // on the busy timeout. (journal_mode needs no transaction and is kept in the file.)
  KILN_RETURN_IF_ERROR(db->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON"));
  KILN_RETURN_IF_ERROR(db->migrate(target_version));
  return db;
}

Status HistoryDb::migrate(int target_version) {
  {
    Statement v(*this, "PRAGMA user_version");
    if (v.step()) version_ = static_cast<int>(v.column_int(0));
    KILN_RETURN_IF_ERROR(v.status());
  }
  if (version_ >= target_version) return Status::Ok();
  // IMMEDIATE takes the write lock up front, so two processes creating the same file migrate it
  // once: the second waits, then sees the new version inside its own transaction.
  KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  auto fail = [&](Status st) {
    (void)exec("ROLLBACK");
    return st;
  };
  int current = 0;
  {
    Statement v(*this, "PRAGMA user_version");
    if (v.step()) current = static_cast<int>(v.column_int(0));
    if (!v.status().ok()) return fail(v.status());
  }
  for (int m = current; m < target_version; ++m) {
    Status st = exec(kMigrations[m]);
    if (!st.ok()) return fail(st.with_context("schema migration " + std::to_string(m) + " -> " + std::to_string(m + 1)));
  }
  if (current < target_version) {
    Status st = exec("PRAGMA application_id=" + std::to_string(kApplicationId) + "; PRAGMA user_version=" + std::to_string(target_version));
    if (!st.ok()) return fail(st);
  }
  KILN_RETURN_IF_ERROR(exec("COMMIT"));
  version_ = std::max(current, target_version);
  return Status::Ok();
}

Statement::Statement(const HistoryDb& db, const std::string& sql) : db_(db) {
  if (sqlite3_prepare_v2(db.handle(), sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK) status_ = db.error("preparing a query");
}

Statement::~Statement() {
  if (stmt_) sqlite3_finalize(stmt_);
}

Statement& Statement::bind(int i, int64_t v) {
  if (stmt_) sqlite3_bind_int64(stmt_, i, v);
  return *this;
}
Statement& Statement::bind(int i, double v) {
  if (stmt_) sqlite3_bind_double(stmt_, i, v);
  return *this;
}
Statement& Statement::bind(int i, const std::string& v) {
  if (stmt_) sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  return *this;
}
Statement& Statement::bind_blob(int i, const void* data, size_t bytes) {
  if (stmt_) sqlite3_bind_blob64(stmt_, i, data, bytes, SQLITE_TRANSIENT);
  return *this;
}
Statement& Statement::bind_null(int i) {
  if (stmt_) sqlite3_bind_null(stmt_, i);
  return *this;
}

bool Statement::step() {
  if (!stmt_ || !status_.ok()) return false;
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc != SQLITE_DONE) status_ = db_.error("query");
  return false;
}

Status Statement::run() {
  while (step()) {
  }
  return status_;
}

void Statement::reset() {
  if (!stmt_) return;
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::string Statement::column_text(int c) const {
  const unsigned char* t = sqlite3_column_text(stmt_, c);
  return t ? std::string(reinterpret_cast<const char*>(t), static_cast<size_t>(sqlite3_column_bytes(stmt_, c))) : std::string();
}

std::vector<unsigned char> Statement::column_blob(int c) const {
  const auto* p = static_cast<const unsigned char*>(sqlite3_column_blob(stmt_, c));
  const int n = sqlite3_column_bytes(stmt_, c);
  return p ? std::vector<unsigned char>(p, p + n) : std::vector<unsigned char>();
}

}  // namespace kiln::history
