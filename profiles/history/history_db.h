// The history file: one SQLite database (application_id 'kiln', schema version in user_version).
// Opening checks the file before anything is written to it: a file that is not SQLite, one that
// is shorter than its header says (truncated), one of another application, or one whose schema is
// newer than this kiln's is refused with a one-line error and left as it was. An older kiln schema
// is migrated in one transaction. WAL journaling and a busy timeout let two writers (two
// engine-build runs recording into one file) take turns instead of failing.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace kiln::history {

constexpr int kSchemaVersion = 2;
constexpr int32_t kApplicationId = 0x6b696c6e;  // "kiln"
constexpr int kBusyTimeoutMs = 30000;

class HistoryDb {
 public:
  enum class Mode { kCreate, kExisting };
  // kExisting: the file must already be a kiln history (compare, history, dashboard).
  static StatusOr<std::unique_ptr<HistoryDb>> open(const std::string& path, Mode mode);
  // Opens without migrating past `schema_version` (tests build older schemas with it).
  static StatusOr<std::unique_ptr<HistoryDb>> open_at_version(const std::string& path, int schema_version);
  ~HistoryDb();
  HistoryDb(const HistoryDb&) = delete;
  HistoryDb& operator=(const HistoryDb&) = delete;

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }
  int schema_version() const { return version_; }

  // Runs SQL without results; errors name the file.
  Status exec(const std::string& sql);
  Status error(const std::string& what) const;  // "PATH: what: sqlite's message"

 private:
  HistoryDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  static StatusOr<std::unique_ptr<HistoryDb>> open_impl(const std::string& path, Mode mode, int target_version);
  Status migrate(int target_version);
  sqlite3* db_ = nullptr;
  std::string path_;
  int version_ = 0;
};

// A prepared statement, finalized on destruction. bind_* take 1-based indices.
class Statement {
 public:
  Statement(const HistoryDb& db, const std::string& sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  const Status& status() const { return status_; }
  Statement& bind(int i, int64_t v);
  Statement& bind(int i, double v);
  Statement& bind(int i, const std::string& v);
  Statement& bind_blob(int i, const void* data, size_t bytes);
  Statement& bind_null(int i);
  // SQLITE_ROW: true; SQLITE_DONE: false; errors go to status().
  bool step();
  Status run();  // step to done; the status
  void reset();
  int64_t column_int(int c) const { return sqlite3_column_int64(stmt_, c); }
  double column_double(int c) const { return sqlite3_column_double(stmt_, c); }
  std::string column_text(int c) const;
  bool column_null(int c) const { return sqlite3_column_type(stmt_, c) == SQLITE_NULL; }
  std::vector<unsigned char> column_blob(int c) const;

 private:
  const HistoryDb& db_;
  sqlite3_stmt* stmt_ = nullptr;
  Status status_;
};

}  // namespace kiln::history
