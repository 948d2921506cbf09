// The history file: schema migration from version 1, a newer schema / foreign / truncated /
// non-SQLite file refused with one line and left byte for byte as it was, two writer processes
// at once, and a run's round trip.
#include "profiles/history/history_db.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "profiles/history/provenance.h"
#include "profiles/history/run_store.h"

namespace kiln::history {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_history_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string p = (dir / name).string();
  for (const char* s : {"", "-wal", "-shm"}) fs::remove(p + s);
  return p;
}

std::string file_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

RunRecord sample_run(int i) {
  RunRecord r;
  r.unix_time = 1.8e9 + i;
  r.time = iso8601_utc(r.unix_time);
  r.label = i % 2 ? "odd" : "even";
  r.series_key = "configs/test.yaml";
  r.kiln_version = "0.1.0";
  r.machine = {"Test CPU", {"avx2", "avx512f"}, 2, int64_t{24} << 30, "00112233aabbccdd"};
  r.load_before = {0.5, 0.4, 0.3, true};
  for (const char* name : {"full", "incremental"}) {
    ProfileRecord p;
    p.name = name;
    p.budget_ms = 100;
    for (int s = 0; s < 50; ++s) p.samples_ms.push_back(10 + i + 0.01 * s);
    p.layer_runs = 3;
    for (int l = 0; l < 40; ++l)
      p.layers.push_back({"/layer" + std::to_string(l), l % 4 ? "FusedMatMul" : "kiln::Attention", l % 4 ? std::vector<std::string>{}
                                                                                                         : std::vector<std::string>{"/mm", "/softmax"},
                          {0.5 + l, 0.6 + l, 0.7 + l}});
    r.profiles.push_back(std::move(p));
  }
  ProfileRecord s;
  s.name = "streaming";
  s.kind = "streaming";
  s.budget_ms = 100;
  for (int k = 0; k < 10; ++k) {
    s.steps.push_back({100.0 * k, 100.0 * k + 1, 100.0 * k + 40, false});
    s.samples_ms.push_back(40);
  }
  r.profiles.push_back(s);
  return r;
}

TEST(HistoryDb, RoundTripKeepsEverything) {
  const std::string path = temp_path("roundtrip.db");
  auto db = HistoryDb::open(path, HistoryDb::Mode::kCreate);
  ASSERT_TRUE(db.ok()) << db.status().message();
  EXPECT_EQ((*db)->schema_version(), kSchemaVersion);
  RunRecord r = sample_run(3);
  ASSERT_TRUE(insert_run(**db, r).ok());
  EXPECT_GT(r.id, 0);
  auto back = load_run(**db, r.id, LoadOptions{true, true});
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->label, "odd");
  EXPECT_EQ(back->machine.isa, r.machine.isa);
  EXPECT_EQ(back->machine.fingerprint, r.machine.fingerprint);
  ASSERT_EQ(back->profiles.size(), 3u);
  EXPECT_EQ(back->profiles[0].samples_ms, r.profiles[0].samples_ms);
  ASSERT_EQ(back->profiles[1].layers.size(), 40u);
  EXPECT_EQ(back->profiles[1].layers[4].replaced, (std::vector<std::string>{"/mm", "/softmax"}));
  EXPECT_NEAR(back->profiles[1].layers[5].ms[2], 5.7, 1e-5);  // stored as float32
  ASSERT_EQ(back->profiles[2].steps.size(), 10u);
  EXPECT_EQ(back->profiles[2].steps[3].release_ms, 300.0);
  EXPECT_TRUE(back->load_before.present);
  // Labels resolve to their latest run; ids to themselves.
  RunRecord r2 = sample_run(5);
  ASSERT_TRUE(insert_run(**db, r2).ok());
  EXPECT_EQ(resolve_run(**db, "odd").value(), r2.id);
  EXPECT_EQ(resolve_run(**db, std::to_string(r.id)).value(), r.id);
  EXPECT_FALSE(resolve_run(**db, "nope").ok());
}

TEST(HistoryDb, MigratesVersionOneKeepingItsRuns) {
  const std::string path = temp_path("v1.db");
  {
    auto db = HistoryDb::open_at_version(path, 1);
    ASSERT_TRUE(db.ok()) << db.status().message();
    EXPECT_EQ((*db)->schema_version(), 1);
    // A version-1 run, written as a version-1 kiln wrote it.
    const double samples[3] = {10.5, 11.0, 10.75};
    ASSERT_TRUE((*db)->exec("INSERT INTO machines VALUES(1, 'ffeeddccbbaa9988', 'Old CPU', 'avx2', 4, 17179869184);"
                            "INSERT INTO runs(id, unix_time, time, label, source, series_key, machine_id) "
                            "VALUES(7, 1.7e9, '2023-11-14T22:13:20Z', 'before', 'engine-build', 'configs/x.yaml', 1)").ok());
    Statement ins(**db, "INSERT INTO profiles(run_id, name, kind, budget_ms, samples) VALUES(7, 'full', 'profile', 100, ?)");
    ins.bind_blob(1, samples, sizeof samples);
    ASSERT_TRUE(ins.run().ok());
  }
  auto db = HistoryDb::open(path, HistoryDb::Mode::kExisting);
  ASSERT_TRUE(db.ok()) << db.status().message();
  EXPECT_EQ((*db)->schema_version(), kSchemaVersion);
  auto runs = load_runs(**db, LoadOptions{true, true});
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].label, "before");
  EXPECT_EQ((*runs)[0].profiles[0].samples_ms, (std::vector<double>{10.5, 11.0, 10.75}));
  EXPECT_TRUE((*runs)[0].profiles[0].layers.empty());
  // And the migrated file takes new runs with layers.
  RunRecord r = sample_run(1);
  ASSERT_TRUE(insert_run(**db, r).ok());
}

TEST(HistoryDb, NewerSchemaRefusedUntouched) {
  const std::string path = temp_path("newer.db");
  {
    auto db = HistoryDb::open(path, HistoryDb::Mode::kCreate);
    ASSERT_TRUE(db.ok());
    RunRecord r = sample_run(1);
    ASSERT_TRUE(insert_run(**db, r).ok());
    ASSERT_TRUE((*db)->exec("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA user_version=" + std::to_string(kSchemaVersion + 1)).ok());
    ASSERT_TRUE((*db)->exec("PRAGMA wal_checkpoint(TRUNCATE)").ok());
  }
  const std::string before = file_bytes(path);
  auto db = HistoryDb::open(path, HistoryDb::Mode::kCreate);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().message().find("is newer than this kiln understands"), std::string::npos) << db.status().message();
  EXPECT_EQ(db.status().message().find('\n'), std::string::npos);
  EXPECT_EQ(file_bytes(path), before);
}

TEST(HistoryDb, ForeignDatabaseRefusedUntouched) {
  const std::string path = temp_path("foreign.db");
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "CREATE TABLE invoices(id INTEGER, total REAL); INSERT INTO invoices VALUES(1, 9.5)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  const std::string before = file_bytes(path);
  auto db = HistoryDb::open(path, HistoryDb::Mode::kCreate);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().message().find("another application"), std::string::npos) << db.status().message();
  EXPECT_EQ(file_bytes(path), before);
  EXPECT_FALSE(fs::exists(path + "-wal"));
}

TEST(HistoryDb, NonSqliteFileRefusedUntouched) {
  const std::string path = temp_path("notes.txt");
  { std::ofstream(path) << "these are my notes, not a database\n"; }
  const std::string before = file_bytes(path);
  auto db = HistoryDb::open(path, HistoryDb::Mode::kCreate);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().message().find("not an SQLite 3 file"), std::string::npos) << db.status().message();
  EXPECT_EQ(file_bytes(path), before);
}

TEST(HistoryDb, TruncatedFileRefusedUntouched) {
  const std::string path = temp_path("whole.db"), cut = temp_path("cut.db");
  {
    auto db = HistoryDb::open(path, HistoryDb::Mode::kCreate);
    ASSERT_TRUE(db.ok());
    for (int i = 0; i < 20; ++i) {
      RunRecord r = sample_run(i);
      ASSERT_TRUE(insert_run(**db, r).ok());
    }
    ASSERT_TRUE((*db)->exec("PRAGMA wal_checkpoint(TRUNCATE)").ok());
  }
  std::string bytes = file_bytes(path);
  ASSERT_GT(bytes.size(), 8192u);
  bytes.resize(bytes.size() / 2);
  { std::ofstream(cut, std::ios::binary) << bytes; }
  auto db = HistoryDb::open(cut, HistoryDb::Mode::kExisting);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().message().find("truncated"), std::string::npos) << db.status().message();
  EXPECT_EQ(file_bytes(cut), bytes);
  // A missing file is not created by the readers.
  const std::string missing = temp_path("missing.db");
  EXPECT_FALSE(HistoryDb::open(missing, HistoryDb::Mode::kExisting).ok());
  EXPECT_FALSE(fs::exists(missing));
}

TEST(HistoryDb, TwoWriterProcessesAtOnce) {
  const std::string path = temp_path("concurrent.db");
  constexpr int kPerWriter = 25;
  pid_t kids[2];
  for (int w = 0; w < 2; ++w) {
    kids[w] = fork();
    ASSERT_GE(kids[w], 0);
    if (kids[w] == 0) {
      // Both create the same new file and write at once: WAL, BEGIN IMMEDIATE and the busy
      // timeout make them take turns.
      auto db = HistoryDb::open(path, HistoryDb::Mode::kCreate);
      if (!db.ok()) _exit(10);
      for (int i = 0; i < kPerWriter; ++i) {
        RunRecord r = sample_run(w * 1000 + i);
        r.label = "writer" + std::to_string(w);
        if (!insert_run(**db, r).ok()) _exit(11);
      }
      _exit(0);
    }
  }
  for (pid_t k : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(k, &status, 0), k);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  auto db = HistoryDb::open(path, HistoryDb::Mode::kExisting);
  ASSERT_TRUE(db.ok()) << db.status().message();
  auto runs = load_runs(**db, LoadOptions{true, true});
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 2u * kPerWriter);
  int per[2] = {0, 0};
  for (const auto& r : *runs) {
    per[r.label == "writer1"]++;
    ASSERT_EQ(r.profiles.size(), 3u);
    EXPECT_EQ(r.profiles[1].layers.size(), 40u);
  }
  EXPECT_EQ(per[0], kPerWriter);
  EXPECT_EQ(per[1], kPerWriter);
}

}  // namespace
}  // namespace kiln::history
