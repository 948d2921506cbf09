// engine-perf: kiln's benchmark history. One SQLite file holds every recorded run (engine-build
// --record, or import); this tool compares runs, A/B-tests two engines, finds change points and
// writes the dashboard page. The work is in profiles/history/; this file parses the command line.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "profiles/history/ab_runner.h"
#include "profiles/history/change_points.h"
#include "profiles/history/compare.h"
#include "profiles/history/dashboard_writer.h"
#include "profiles/history/history_db.h"
#include "profiles/history/report_json.h"
#include "profiles/history/run_store.h"
#include "profiles/history/statistics.h"
#include "tools/cli_common.h"
#include "tools/omp_wait_policy.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using history::HistoryDb;

Status write_text(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << text;
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return IoError("cannot write '" + path + "'");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return IoError("cannot write '" + path + "': " + ec.message());
  return Status::Ok();
}

Status check_compare_options(const history::CompareOptions& c) {
  if (c.metric != "p50" && c.metric != "p99" && c.metric != "miss_rate")
    return InvalidArgument("--metric: expected p50, p99 or miss_rate, got '" + c.metric + "'");
  if (!(c.alpha > 0 && c.alpha < 1)) return InvalidArgument("--alpha must be in (0, 1)");
  if (!(c.min_effect >= 0)) return InvalidArgument("--min-effect must be >= 0");
  return Status::Ok();
}

struct CompareArgs {
  std::string db, a, b, json, fail_on;
  std::string metric = "p50";
  double min_effect_pct = 3, alpha = 0.05;
  history::CompareOptions options() const {
    history::CompareOptions o;
    o.metric = metric;
    o.min_effect = min_effect_pct / 100;
    o.alpha = alpha;
    return o;
  }
};

// 0, or 3 when --fail-on names the verdict (or a worse one).
int gate(const std::string& fail_on, const std::string& verdict) {
  if (fail_on.empty()) return 0;
  return history::verdict_rank(verdict) >= history::verdict_rank(fail_on) ? 3 : 0;
}

StatusOr<int> cmd_compare(const CompareArgs& a) {
  KILN_RETURN_IF_ERROR(check_compare_options(a.options()));
  KILN_ASSIGN_OR_RETURN(auto db, HistoryDb::open(a.db, HistoryDb::Mode::kExisting));
  KILN_ASSIGN_OR_RETURN(int64_t ia, history::resolve_run(*db, a.a));
  KILN_ASSIGN_OR_RETURN(int64_t ib, history::resolve_run(*db, a.b));
  const history::LoadOptions lo{true, false};
  KILN_ASSIGN_OR_RETURN(auto ra, history::load_run(*db, ia, lo));
  KILN_ASSIGN_OR_RETURN(auto rb, history::load_run(*db, ib, lo));
  const auto c = history::compare_runs(ra, rb, a.options());
  std::fputs(history::comparison_text(c).c_str(), stdout);
  if (!a.json.empty()) KILN_RETURN_IF_ERROR(write_text(a.json, history::comparison_json(c)));
  return gate(a.fail_on, c.verdict);
}

struct AbArgs {
  std::string engine_a, engine_b, db;
  history::AbOptions opts;
  CompareArgs cmp;
};

StatusOr<int> cmd_ab(AbArgs& a) {
  a.opts.compare = a.cmp.options();
  KILN_RETURN_IF_ERROR(check_compare_options(a.opts.compare));
  if (a.opts.max_rounds < a.opts.rounds) a.opts.max_rounds = a.opts.rounds;
  if (a.opts.label_a.empty()) a.opts.label_a = "ab-A:" + fs::path(a.engine_a).filename().string();
  if (a.opts.label_b.empty()) a.opts.label_b = "ab-B:" + fs::path(a.engine_b).filename().string();
  std::unique_ptr<HistoryDb> db;
  if (!a.db.empty()) {  // open first: a bad history file fails before minutes of benchmarking
    KILN_ASSIGN_OR_RETURN(db, HistoryDb::open(a.db, HistoryDb::Mode::kCreate));
  }
  auto progress = [](const std::string& s) { std::fprintf(stderr, "[engine-perf ab] %s\n", s.c_str()); };
  KILN_ASSIGN_OR_RETURN(auto res, history::run_ab(a.engine_a, a.engine_b, a.opts, progress));
  if (db) {
    KILN_RETURN_IF_ERROR(history::insert_run(*db, res.a));
    KILN_RETURN_IF_ERROR(history::insert_run(*db, res.b));
    res.comparison.a_id = res.a.id;
    res.comparison.b_id = res.b.id;
    std::fprintf(stderr, "[engine-perf ab] recorded runs %lld and %lld into %s\n", static_cast<long long>(res.a.id),
                 static_cast<long long>(res.b.id), a.db.c_str());
  }
  res.comparison.notes.push_back(std::to_string(res.rounds_run) + " ABBA rounds, " + std::to_string(res.a.profiles[0].samples_ms.size()) +
                                 " timed runs a side");
  std::fputs(history::comparison_text(res.comparison).c_str(), stdout);
  if (!a.cmp.json.empty()) KILN_RETURN_IF_ERROR(write_text(a.cmp.json, history::comparison_json(res.comparison)));
  return gate(a.cmp.fail_on, res.comparison.verdict);
}

struct ImportArgs {
  std::string db, label;
  std::vector<std::string> files;
};

StatusOr<int> cmd_import(const ImportArgs& a) {
  // Read every file before writing anything: one bad file imports none.
  std::vector<history::RunRecord> runs;
  for (const auto& f : a.files) {
    KILN_ASSIGN_OR_RETURN(auto r, history::read_run_file(f));
    if (!a.label.empty()) r.label = a.label;
    if (r.source == "engine-build") r.source = "import";
    runs.push_back(std::move(r));
  }
  KILN_ASSIGN_OR_RETURN(auto db, HistoryDb::open(a.db, HistoryDb::Mode::kCreate));
  for (size_t i = 0; i < runs.size(); ++i) {
    KILN_RETURN_IF_ERROR(history::insert_run(*db, runs[i]).with_context(a.files[i]));
    std::printf("%s: run %lld (%zu profiles%s)\n", a.files[i].c_str(), static_cast<long long>(runs[i].id), runs[i].profiles.size(),
                runs[i].label.empty() ? "" : (", label '" + runs[i].label + "'").c_str());
  }
  return 0;
}

struct HistoryArgs {
  std::string db, config, profile, json;
  double alpha = 0.001;
};

StatusOr<int> cmd_history(const HistoryArgs& a) {
  KILN_ASSIGN_OR_RETURN(auto db, HistoryDb::open(a.db, HistoryDb::Mode::kExisting));
  KILN_ASSIGN_OR_RETURN(auto runs, history::load_runs(*db));
  nlohmann::json out = nlohmann::json::array();
  size_t shown = 0;
  for (const auto& s : history::build_series(runs)) {
    if (!a.config.empty() && s.key != a.config && fs::path(s.key).filename() != fs::path(a.config).filename()) continue;
    if (!a.profile.empty() && s.profile != a.profile) continue;
    ++shown;
    std::vector<double> p50;
    for (size_t r : s.runs) p50.push_back(history::quantile(runs[r].find_profile(s.profile)->samples_ms, 0.5));
    const auto cps = history::e_divisive_change_points(p50, 3, a.alpha);
    std::printf("%s  profile '%s'  machine %s (%s): %zu runs, %zu change point%s\n", s.key.c_str(), s.profile.c_str(), s.machine.c_str(),
                runs[s.runs[0]].machine.cpu_model.c_str(), s.runs.size(), cps.size(), cps.size() == 1 ? "" : "s");
    nlohmann::json js = {{"config", s.key}, {"profile", s.profile}, {"machine", s.machine}, {"runs", nlohmann::json::array()},
                         {"p50_ms", p50}, {"change_points", nlohmann::json::array()}};
    for (size_t r : s.runs) js["runs"].push_back(runs[r].id);
    for (const auto& cp : cps) {
      auto id = [&](size_t i) { return runs[s.runs[i]].id; };
      std::printf("  change at run %lld: median p50 %.3f -> %.3f ms (%+.1f%%), t-test p = %.2g; runs %lld-%lld before, %lld-%lld after\n",
                  static_cast<long long>(id(cp.index)), cp.median_before, cp.median_after,
                  cp.median_before > 0 ? 100 * (cp.median_after / cp.median_before - 1) : 0.0, cp.p_value,
                  static_cast<long long>(id(cp.before_begin)), static_cast<long long>(id(cp.index - 1)),
                  static_cast<long long>(id(cp.index)), static_cast<long long>(id(cp.after_end - 1)));
      js["change_points"].push_back({{"run", id(cp.index)}, {"index", cp.index}, {"p_value", cp.p_value},
                                     {"median_before", cp.median_before}, {"median_after", cp.median_after},
                                     {"runs_before", {id(cp.before_begin), id(cp.index - 1)}},
                                     {"runs_after", {id(cp.index), id(cp.after_end - 1)}}});
    }
    out.push_back(js);
  }
  if (shown == 0) std::printf("no series%s in %s\n", a.config.empty() && a.profile.empty() ? "" : " matches", a.db.c_str());
  if (!a.json.empty()) KILN_RETURN_IF_ERROR(write_text(a.json, out.dump(2) + "\n"));
  return 0;
}

struct DashboardArgs {
  std::string db, out;
  history::DashboardOptions opts;
};

StatusOr<int> cmd_dashboard(const DashboardArgs& a) {
  KILN_ASSIGN_OR_RETURN(auto db, HistoryDb::open(a.db, HistoryDb::Mode::kExisting));
  KILN_RETURN_IF_ERROR(history::write_dashboard(*db, a.out, a.opts));
  std::printf("dashboard: %s\n", a.out.c_str());
  return 0;
}

// `engine-perf record`: engine-build with --record, found next to this program.
int cmd_record(const std::string& db, const std::string& label, const std::vector<std::string>& rest, const char* argv0) {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) self = argv0;
  const std::string build = (self.parent_path() / "engine-build").string();
  std::vector<std::string> args{build};
  args.insert(args.end(), rest.begin(), rest.end());
  args.push_back("--record");
  args.push_back(db);
  if (!label.empty()) {
    args.push_back("--label");
    args.push_back(label);
  }
  std::vector<char*> cargs;
  for (auto& s : args) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  std::fflush(stdout);
  execv(build.c_str(), cargs.data());
  std::fprintf(stderr, "engine-perf: cannot run %s: %s\n", build.c_str(), std::strerror(errno));
  return 1;
}

void add_compare_options(CLI::App* c, CompareArgs& a) {
  c->add_option("--metric", a.metric, "what decides the verdict: p50 (Mann-Whitney U + bootstrap interval), p99 (bootstrap), "
                                      "miss_rate (Fisher's exact test; --min-effect in percentage points)")
      ->capture_default_str();
  c->add_option("--min-effect", a.min_effect_pct, "smallest change, in percent, that counts as regressed/improved")->capture_default_str();
  c->add_option("--alpha", a.alpha, "significance level of the tests and 1 - level of the intervals")->capture_default_str();
  c->add_option("--json", a.json, "also write the comparison as JSON");
  c->add_option("--fail-on", a.fail_on, "exit 3 when the overall verdict is this or worse (regressed > inconclusive > same > improved)")
      ->check(CLI::IsMember({"regressed", "inconclusive", "same", "improved"}));
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  using namespace kiln;
  use_passive_omp_wait_policy(argv);
  CLI::App app{"engine-perf: kiln's benchmark history (one SQLite file): record, import, compare, A/B, change points, dashboard"};
  app.require_subcommand(0, 1);   // none given: a one-line error below, after unknown arguments are reported
  app.set_help_all_flag("--help-all", "help for every subcommand");
  LogOptions log;
  add_log_options(app, log);

  std::string rec_db, rec_label;
  std::vector<std::string> rec_rest;
  auto* rec = app.add_subcommand("record", "run engine-build CONFIG [its options] --record DB [--label NAME]");
  rec->add_option("--db", rec_db, "history file")->required();
  rec->add_option("--label", rec_label, "label of the recorded run");
  rec->add_option("args", rec_rest, "CONFIG.yaml and engine-build's own options (after --)")->required();
  rec->allow_extras();

  ImportArgs imp;
  auto* im = app.add_subcommand("import", "store engine-build reports (REPORT.json) or Google benchmark JSON files in the history");
  im->add_option("--db", imp.db, "history file (created if missing)")->required();
  im->add_option("--label", imp.label, "label of the imported runs");
  im->add_option("files", imp.files, "report or Google benchmark JSON files")->required()->check(CLI::ExistingFile);

  CompareArgs cmp;
  auto* co = app.add_subcommand("compare", "compare run B against run A, profile by profile, with layer attribution");
  co->add_option("--db", cmp.db, "history file")->required();
  co->add_option("A", cmp.a, "run id or label (its latest run)")->required();
  co->add_option("B", cmp.b, "run id or label (its latest run)")->required();
  add_compare_options(co, cmp);

  AbArgs ab;
  auto* abc = app.add_subcommand("ab", "run two engines interleaved (ABBA rounds, same inputs) and compare them, looking again after each batch of --rounds while inconclusive (--alpha is split over those looks); ab X X is an A/A calibration");
  abc->add_option("ENGINE_A", ab.engine_a, "engine file")->required()->check(CLI::ExistingFile);
  abc->add_option("ENGINE_B", ab.engine_b, "engine file")->required()->check(CLI::ExistingFile);
  abc->add_option("--profile", ab.opts.profile, "profile to run")->required();
  abc->add_option("--rounds", ab.opts.rounds, "ABBA rounds before the first verdict")->capture_default_str()->check(CLI::Range(1, 1000));
  abc->add_option("--max-rounds", ab.opts.max_rounds, "rounds cap when the verdict stays inconclusive")->capture_default_str()->check(CLI::Range(1, 10000));
  abc->add_option("--iterations", ab.opts.iterations, "timed runs per side per round")->capture_default_str()->check(CLI::Range(2, 100000));
  abc->add_option("--warmup", ab.opts.warmup, "untimed runs per side first")->capture_default_str()->check(CLI::Range(0, 100000));
  abc->add_option("--budget-ms", ab.opts.budget_ms, "deadline for the miss rate")->capture_default_str();
  abc->add_option("--config", ab.opts.config, "build config whose input generators make the inputs")->check(CLI::ExistingFile);
  abc->add_option("--db", ab.db, "also record both sides into this history file");
  abc->add_option("--label-a", ab.opts.label_a, "label of A's recorded run");
  abc->add_option("--label-b", ab.opts.label_b, "label of B's recorded run");
  add_compare_options(abc, ab.cmp);

  HistoryArgs hist;
  auto* hi = app.add_subcommand("history", "change points per series (config, profile, machine) by E-divisive means with a t-test");
  hi->add_option("--db", hist.db, "history file")->required();
  hi->add_option("--config", hist.config, "only this config (its path in the repository, or file name)");
  hi->add_option("--profile", hist.profile, "only this profile");
  hi->add_option("--alpha", hist.alpha, "t-test significance for a change point")->capture_default_str();
  hi->add_option("--json", hist.json, "also write the series and change points as JSON");

  DashboardArgs dash;
  auto* da = app.add_subcommand("dashboard", "write the self-contained HTML dashboard");
  da->add_option("--db", dash.db, "history file")->required();
  da->add_option("-o,--output", dash.out, "HTML file to write")->required();
  da->add_option("--baseline", dash.opts.baseline_label, "label the latest runs are judged against (default: each series' oldest labelled run)");
  da->add_option("--title", dash.opts.title, "page title")->capture_default_str();
  da->add_option("--layer-runs", dash.opts.layer_runs, "latest runs per series whose per-layer times the page carries")->capture_default_str();

  if (const int code = parse_command_line(app, "engine-perf", argc, argv); code >= 0) return code;
  apply_log_options("engine-perf", log);
  if (app.get_subcommands().empty()) {
    std::fprintf(stderr, "engine-perf: a subcommand is required: record, import, compare, ab, history or dashboard (see engine-perf --help)\n");
    return 2;
  }
  try {
    StatusOr<int> rc = 0;
    if (*rec) {
      std::vector<std::string> rest = rec_rest;
      for (const auto& x : rec->remaining()) rest.push_back(x);
      return cmd_record(rec_db, rec_label, rest, argv[0]);
    }
    if (*im) rc = cmd_import(imp);
    else if (*co) rc = cmd_compare(cmp);
    else if (*abc) rc = cmd_ab(ab);
    else if (*hi) rc = cmd_history(hist);
    else if (*da) rc = cmd_dashboard(dash);
    if (!rc.ok()) {
      std::fprintf(stderr, "engine-perf: %s\n", rc.status().message().c_str());
      return 1;
    }
    return *rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine-perf: internal error: %s\n", e.what());
    return 1;
  }
}
