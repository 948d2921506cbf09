#include "profiles/history/dashboard_writer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "profiles/history/change_points.h"
#include "profiles/history/history_db.h"
#include "profiles/history/provenance.h"
#include "profiles/history/run_store.h"
#include "profiles/history/statistics.h"

namespace kiln::history {

namespace assets {
extern const std::string_view kDashboardHtml, kDashboardJs, kDashboardCss, kUplotJs, kUplotCss;
}

using nlohmann::json;
namespace fs = std::filesystem;

std::vector<Series> build_series(const std::vector<RunRecord>& runs) {
  std::vector<Series> out;
  std::map<std::tuple<std::string, std::string, std::string>, size_t> index;
  for (size_t r = 0; r < runs.size(); ++r)
    for (const auto& p : runs[r].profiles) {
      auto k = std::make_tuple(runs[r].series_key, p.name, runs[r].machine.fingerprint);
      auto it = index.find(k);
      if (it == index.end()) {
        it = index.emplace(k, out.size()).first;
        out.push_back(Series{runs[r].series_key, p.name, p.kind, runs[r].machine.fingerprint, p.budget_ms, {}});
      }
      out[it->second].runs.push_back(r);
      out[it->second].budget_ms = p.budget_ms;  // the latest run's budget
    }
  return out;
}

namespace {

json verdict_json(const ProfileComparison& pc, const RunRecord& a, const RunRecord& b) {
  return {{"a", a.id}, {"b", b.id}, {"verdict", pc.verdict}, {"p50_a", pc.a.p50.estimate}, {"p50_b", pc.b.p50.estimate},
          {"p50_change", pc.p50_change}, {"p50_change_ci", {pc.p50_change_ci.lo, pc.p50_change_ci.hi}}, {"p_value", pc.p_value},
          {"p99_a", pc.a.p99.estimate}, {"p99_b", pc.b.p99.estimate}, {"miss_a", pc.a.miss_rate}, {"miss_b", pc.b.miss_rate},
          {"load_a", a.load_before.present ? json(a.load_before.one) : json(nullptr)},
          {"load_b", b.load_before.present ? json(b.load_before.one) : json(nullptr)}, {"cores", std::max(a.machine.cores, b.machine.cores)}};
}

// Rounds to 4 significant digits: the page shows no more, and 1,000 runs stay small.
double r4(double v) {
  if (v == 0 || !std::isfinite(v)) return std::isfinite(v) ? v : 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return std::strtod(buf, nullptr);
}

}  // namespace

std::string dashboard_data_json(const std::vector<RunRecord>& runs, const DashboardOptions& opts, const std::string& db_path) {
  json j;
  j["title"] = opts.title;
  j["generated"] = iso8601_utc(unix_time_now());
  j["db"] = db_path;
  j["baseline_label"] = opts.baseline_label;
  const BuildInfo bi = kiln_build_info();
  j["kiln"] = {{"version", bi.version}, {"commit", bi.commit}};
  std::map<std::string, json> machines;
  json jruns = json::array();
  for (const auto& r : runs) {
    if (!machines.count(r.machine.fingerprint))
      machines[r.machine.fingerprint] = {{"fingerprint", r.machine.fingerprint}, {"cpu_model", r.machine.cpu_model}, {"isa", r.machine.isa},
                                         {"cores", r.machine.cores}, {"memory_gib", r.machine.memory_bytes >> 30}};
    auto load = [](const LoadAverage& l) { return l.present ? json::array({l.one, l.five, l.fifteen}) : json(nullptr); };
    json traces = json::object();
    for (const auto& p : r.profiles)
      if (!p.trace_path.empty()) traces[p.name] = p.trace_path;
    jruns.push_back({{"id", r.id}, {"time", r.time}, {"t", r.unix_time}, {"label", r.label}, {"source", r.source},
                     {"kiln_commit", r.kiln_commit.substr(0, 12)}, {"kiln_dirty", r.kiln_dirty},
                     {"config_commit", r.config_repo_commit.substr(0, 12)}, {"config_dirty", r.config_repo_dirty},
                     {"config", r.series_key}, {"machine", r.machine.fingerprint}, {"precision", r.precision}, {"threads", r.threads},
                     {"load_before", load(r.load_before)}, {"load_after", load(r.load_after)}, {"report", r.report_path},
                     {"traces", traces}});
  }
  j["runs"] = jruns;
  json jm = json::array();
  for (auto& [fp, m] : machines) jm.push_back(m);
  j["machines"] = jm;

  const double alpha = opts.compare.alpha;
  json jseries = json::array(), verdicts = json::array();
  std::set<size_t> layer_runs;  // run indices whose layers the page carries
  for (const Series& s : build_series(runs)) {
    json js = {{"key", s.key}, {"profile", s.profile}, {"kind", s.kind}, {"machine", s.machine}, {"budget_ms", s.budget_ms}};
    std::vector<double> p50s;
    json ids = json::array(), t = json::array(), p50 = json::array(), p50lo = json::array(), p50hi = json::array(), p99 = json::array(),
         p99lo = json::array(), p99hi = json::array(), miss = json::array(), misslo = json::array(), misshi = json::array(), n = json::array();
    for (size_t r : s.runs) {
      const ProfileRecord* p = runs[r].find_profile(s.profile);
      const QuantileCi q50 = quantile_ci(p->samples_ms, 0.5, alpha), q99 = quantile_ci(p->samples_ms, 0.99, alpha);
      int64_t misses = 0;
      for (double v : p->samples_ms) misses += s.budget_ms > 0 && v > s.budget_ms ? 1 : 0;
      const int64_t cnt = static_cast<int64_t>(p->samples_ms.size());
      const Interval cp = clopper_pearson(misses, cnt, alpha);
      ids.push_back(runs[r].id);
      t.push_back(runs[r].unix_time);
      p50.push_back(r4(q50.estimate));
      p50lo.push_back(r4(q50.ci.lo));
      p50hi.push_back(r4(q50.ci.hi));
      p99.push_back(r4(q99.estimate));
      p99lo.push_back(r4(q99.ci.lo));
      p99hi.push_back(r4(q99.ci.hi));
      miss.push_back(r4(cnt ? static_cast<double>(misses) / cnt : 0));
      misslo.push_back(r4(cp.lo));
      misshi.push_back(r4(cp.hi));
      n.push_back(cnt);
      p50s.push_back(q50.estimate);
    }
    js["runs"] = ids, js["t"] = t, js["p50"] = p50, js["p50_lo"] = p50lo, js["p50_hi"] = p50hi;
    js["p99"] = p99, js["p99_lo"] = p99lo, js["p99_hi"] = p99hi, js["miss"] = miss, js["miss_lo"] = misslo, js["miss_hi"] = misshi, js["n"] = n;
    json cps = json::array();
    for (const auto& cp : e_divisive_change_points(p50s, 3, opts.change_point_alpha))
      cps.push_back({{"index", cp.index}, {"run", runs[s.runs[cp.index]].id}, {"p_value", cp.p_value}, {"median_before", cp.median_before},
                     {"median_after", cp.median_after}, {"runs_before", {runs[s.runs[cp.before_begin]].id, runs[s.runs[cp.index - 1]].id}},
                     {"runs_after", {runs[s.runs[cp.index]].id, runs[s.runs[cp.after_end - 1]].id}}});
    js["change_points"] = cps;
    jseries.push_back(js);

    // Verdicts of the latest run: against the previous one and against the baseline.
    const size_t last = s.runs.back();
    json v = {{"key", s.key}, {"profile", s.profile}, {"machine", s.machine}, {"latest", runs[last].id}};
    CompareOptions co = opts.compare;
    co.max_layers = 0;
    if (s.runs.size() >= 2) {
      const size_t prev = s.runs[s.runs.size() - 2];
      v["vs_previous"] = verdict_json(compare_profiles(*runs[prev].find_profile(s.profile), *runs[last].find_profile(s.profile), co),
                                      runs[prev], runs[last]);
    }
    // Baseline: the latest run with the chosen label in this series, else the series' oldest
    // labelled run.
    std::optional<size_t> base;
    for (size_t r : s.runs)
      if (r != last && !runs[r].label.empty() &&
          (opts.baseline_label.empty() ? !base.has_value() : runs[r].label == opts.baseline_label))
        base = r;
    if (base) {
      v["baseline_label"] = runs[*base].label;
      v["vs_baseline"] = verdict_json(compare_profiles(*runs[*base].find_profile(s.profile), *runs[last].find_profile(s.profile), co),
                                      runs[*base], runs[last]);
      layer_runs.insert(*base);
    }
    verdicts.push_back(v);
    for (size_t i = s.runs.size() > opts.layer_runs ? s.runs.size() - opts.layer_runs : 0; i < s.runs.size(); ++i) layer_runs.insert(s.runs[i]);
  }
  j["series"] = jseries;
  j["verdicts"] = verdicts;
  // Per-layer times of the latest runs of each series and the baselines (the page's layer and
  // op-type tables compare any two of them).
  json layers = json::object();
  for (size_t r : layer_runs) {
    json lp = json::object();
    for (const auto& p : runs[r].profiles) {
      if (p.layers.empty()) continue;
      json rows = json::array();
      for (const auto& l : p.layers) {
        double m = 0;
        for (double x : l.ms) m += x;
        rows.push_back({l.name, l.op_type, r4(l.ms.empty() ? 0 : m / static_cast<double>(l.ms.size())), l.replaced});
      }
      lp[p.name] = rows;
    }
    if (!lp.empty()) layers[std::to_string(runs[r].id)] = lp;
  }
  j["layers"] = layers;
  return j.dump();
}

std::string dashboard_html(const std::string& data_json, const std::string& title) {
  // The JSON sits in a <script type="application/json"> block: "</" must not end it early.
  std::string safe;
  safe.reserve(data_json.size());
  for (size_t i = 0; i < data_json.size(); ++i) {
    if (data_json[i] == '<' && i + 1 < data_json.size() && data_json[i + 1] == '/') {
      safe += "<\\/";
      ++i;
    } else {
      safe += data_json[i];
    }
  }
  std::string html(assets::kDashboardHtml);
  // Marks are filled in page order, each after the text before it, so inserted text (uPlot, the
  // data) is never searched for marks.
  size_t from = 0;
  auto fill = [&](const std::string& mark, std::string_view text) {
    const size_t at = html.find(mark, from);
    if (at == std::string::npos) return;
    html.replace(at, mark.size(), text);
    from = at + text.size();
  };
  std::string esc_title;
  for (char c : title) esc_title += c == '<' ? std::string("&lt;") : c == '&' ? std::string("&amp;") : std::string(1, c);
  fill("{{TITLE}}", esc_title);
  fill("/*{{UPLOT_CSS}}*/", assets::kUplotCss);
  fill("/*{{DASHBOARD_CSS}}*/", assets::kDashboardCss);
  fill("{{TITLE}}", esc_title);
  fill("{{DATA}}", safe);
  fill("/*{{UPLOT_JS}}*/", assets::kUplotJs);
  fill("/*{{DASHBOARD_JS}}*/", assets::kDashboardJs);
  return html;
}

Status write_dashboard(const HistoryDb& db, const std::string& out_path, const DashboardOptions& opts) {
  KILN_ASSIGN_OR_RETURN(auto runs, load_runs(db));
  // Per-layer times only for the runs the page shows them for.
  const auto series = build_series(runs);
  std::set<size_t> want;
  for (const auto& s : series) {
    for (size_t i = s.runs.size() > opts.layer_runs ? s.runs.size() - opts.layer_runs : 0; i < s.runs.size(); ++i) want.insert(s.runs[i]);
    for (size_t r : s.runs)
      if (!runs[r].label.empty()) want.insert(r);
  }
  for (size_t r : want) KILN_RETURN_IF_ERROR(load_details(db, runs[r], LoadOptions{true, false}));
  const std::string html = dashboard_html(dashboard_data_json(runs, opts, db.path()), opts.title);
  const std::string tmp = out_path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << html;
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return IoError("cannot write '" + out_path + "'");
    }
  }
  std::error_code ec;
  fs::rename(tmp, out_path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return IoError("cannot write '" + out_path + "': " + ec.message());
  }
  return Status::Ok();
}

}  // namespace kiln::history
