#include "profiles/history/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <cstring>
#include <numeric>

#include <nlohmann/json.hpp>

namespace kiln::history {

namespace {

SideStats side_stats(const ProfileRecord& p, double alpha) {
  SideStats s;
  s.n = static_cast<int>(p.samples_ms.size());
  s.p50 = quantile_ci(p.samples_ms, 0.5, alpha);
  s.p99 = quantile_ci(p.samples_ms, 0.99, alpha);
  if (p.budget_ms > 0)
    for (double v : p.samples_ms) s.misses += v > p.budget_ms ? 1 : 0;
  s.miss_rate = s.n ? static_cast<double>(s.misses) / s.n : 0;
  s.miss_rate_ci = clopper_pearson(s.misses, s.n, alpha);
  return s;
}

// Same samples, same interval: the bootstrap's seed comes from the data.
uint64_t seed_of(const std::vector<double>& a, const std::vector<double>& b) {
  uint64_t h = 1469598103934665603ull;
  for (const auto* v : {&a, &b})
    for (double x : *v) {
      uint64_t bits;
      std::memcpy(&bits, &x, sizeof bits);
      h = (h ^ bits) * 1099511628211ull;
    }
  return h;
}

std::string decide(double change, Interval ci, bool significant, double min_effect) {
  if (significant && change >= min_effect) return "regressed";
  if (significant && change <= -min_effect) return "improved";
  if (ci.lo >= -min_effect && ci.hi <= min_effect) return "same";
  return "inconclusive";
}

// Per side: entry name -> per-run ms. A step that replaced nodes (a fused attention, a fused
// matmul) gathers the other side's steps of those names under its own name.
struct Attribution {
  std::map<std::string, std::string> group_of;           // node name -> entry name
  std::map<std::string, std::string> entry_op;           // entry name -> op type shown
  std::map<std::string, std::vector<std::string>> members;
};

void add_groups(const ProfileRecord& p, Attribution& at) {
  for (const auto& l : p.layers)
    for (const auto& r : l.replaced)
      if (r != l.name) at.group_of.emplace(r, l.name);
}

std::map<std::string, std::vector<double>> entry_times(const ProfileRecord& p, Attribution& at, bool fused_side_names) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& l : p.layers) {
    auto g = at.group_of.find(l.name);
    const std::string key = g == at.group_of.end() ? l.name : g->second;
    if (g != at.group_of.end()) at.members[key].push_back(l.name);
    else if (fused_side_names || !at.entry_op.count(key)) at.entry_op[key] = l.op_type;
    auto& v = out[key];
    v.resize(std::max(v.size(), l.ms.size()), 0.0);
    for (size_t r = 0; r < l.ms.size(); ++r) v[r] += l.ms[r];
  }
  return out;
}

double mean(const std::vector<double>& v) { return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

void attribute_layers(const ProfileRecord& a, const ProfileRecord& b, ProfileComparison& pc, size_t max_layers) {
  if (a.layers.empty() || b.layers.empty()) return;
  Attribution at;
  add_groups(a, at);
  add_groups(b, at);
  auto ta = entry_times(a, at, true), tb = entry_times(b, at, false);
  std::map<std::string, bool> keys;
  for (const auto& [k, v] : ta) keys[k] = true;
  for (const auto& [k, v] : tb) keys[k] = true;
  for (const auto& [k, unused] : keys) {
    LayerChange lc;
    lc.name = k;
    lc.op_type = at.entry_op[k];
    std::vector<double> va = ta.count(k) ? ta[k] : std::vector<double>(static_cast<size_t>(a.layer_runs), 0.0);
    std::vector<double> vb = tb.count(k) ? tb[k] : std::vector<double>(static_cast<size_t>(b.layer_runs), 0.0);
    lc.a_ms = mean(va);
    lc.b_ms = mean(vb);
    lc.delta_ms = lc.b_ms - lc.a_ms;
    lc.p_value = welch_t_test(va, vb).p_value;
    auto m = at.members.find(k);
    if (m != at.members.end()) {
      lc.members = m->second;
      std::sort(lc.members.begin(), lc.members.end());
      lc.members.erase(std::unique(lc.members.begin(), lc.members.end()), lc.members.end());
      lc.op_type += " (" + std::to_string(lc.members.size()) + " ops unfused)";
    }
    pc.layers.push_back(std::move(lc));
  }
  std::stable_sort(pc.layers.begin(), pc.layers.end(),
                   [](const LayerChange& x, const LayerChange& y) { return std::fabs(x.delta_ms) > std::fabs(y.delta_ms); });
  if (pc.layers.size() > max_layers) pc.layers.resize(max_layers);
  std::map<std::string, OpTypeChange> ops;
  for (const auto& l : a.layers) ops[l.op_type].a_ms += mean(l.ms);
  for (const auto& l : b.layers) ops[l.op_type].b_ms += mean(l.ms);
  for (auto& [op, o] : ops) {
    o.op_type = op;
    o.delta_ms = o.b_ms - o.a_ms;
    pc.op_types.push_back(o);
  }
  std::stable_sort(pc.op_types.begin(), pc.op_types.end(),
                   [](const OpTypeChange& x, const OpTypeChange& y) { return std::fabs(x.delta_ms) > std::fabs(y.delta_ms); });
}

}  // namespace

int verdict_rank(const std::string& v) {
  if (v == "regressed") return 3;
  if (v == "inconclusive") return 2;
  if (v == "same") return 1;
  return 0;
}

ProfileComparison compare_profiles(const ProfileRecord& a, const ProfileRecord& b, const CompareOptions& opts) {
  ProfileComparison pc;
  pc.name = a.name;
  pc.kind = a.kind;
  pc.budget_ms = b.budget_ms > 0 ? b.budget_ms : a.budget_ms;
  ProfileRecord a2 = a, b2 = b;
  a2.budget_ms = b2.budget_ms = pc.budget_ms;  // one deadline for both sides
  pc.a = side_stats(a2, opts.alpha);
  pc.b = side_stats(b2, opts.alpha);
  const uint64_t seed = seed_of(a.samples_ms, b.samples_ms);
  pc.p50_change = pc.a.p50.estimate > 0 ? pc.b.p50.estimate / pc.a.p50.estimate - 1 : 0;
  pc.p99_change = pc.a.p99.estimate > 0 ? pc.b.p99.estimate / pc.a.p99.estimate - 1 : 0;
  pc.p50_change_ci = bootstrap_relative_change(a.samples_ms, b.samples_ms, 0.5, opts.alpha, opts.bootstrap_resamples, seed);
  pc.p99_change_ci = bootstrap_relative_change(a.samples_ms, b.samples_ms, 0.99, opts.alpha, opts.bootstrap_resamples, seed + 1);
  pc.p_value = mann_whitney_u(a.samples_ms, b.samples_ms).p_value;
  pc.miss_rate_change = pc.b.miss_rate - pc.a.miss_rate;
  pc.miss_rate_change_ci = {pc.b.miss_rate_ci.lo - pc.a.miss_rate_ci.hi, pc.b.miss_rate_ci.hi - pc.a.miss_rate_ci.lo};
  pc.miss_p_value = fisher_exact_p(pc.a.misses, pc.a.n, pc.b.misses, pc.b.n);
  if (opts.metric == "p99") {
    const bool sig = pc.p99_change_ci.lo > 0 || pc.p99_change_ci.hi < 0;
    pc.verdict = decide(pc.p99_change, pc.p99_change_ci, sig, opts.min_effect);
  } else if (opts.metric == "miss_rate") {
    pc.verdict = decide(pc.miss_rate_change, pc.miss_rate_change_ci, pc.miss_p_value < opts.alpha, opts.min_effect);
  } else {
    pc.verdict = decide(pc.p50_change, pc.p50_change_ci, pc.p_value < opts.alpha, opts.min_effect);
  }
  attribute_layers(a, b, pc, opts.max_layers);
  return pc;
}

Comparison compare_runs(const RunRecord& a, const RunRecord& b, const CompareOptions& opts) {
  Comparison c;
  c.options = opts;
  c.a_id = a.id, c.b_id = b.id;
  c.a_label = a.label, c.b_label = b.label;
  c.a_time = a.time, c.b_time = b.time;
  c.same_machine = a.machine.fingerprint == b.machine.fingerprint;
  if (!c.same_machine)
    c.notes.push_back("the runs are from different machines (" + a.machine.fingerprint + " " + a.machine.cpu_model + ", " +
                      b.machine.fingerprint + " " + b.machine.cpu_model + "): differences include the machine");
  // A busy host slows both engines and hides nothing from the statistics above: the samples are
  // honest, but the change may be the neighbours'. Say so; `engine-perf ab` interleaves instead.
  if (a.load_before.present && b.load_before.present) {
    const double la = a.load_before.one, lb = b.load_before.one;
    const int cores = std::max(1, std::max(a.machine.cores, b.machine.cores));
    if (std::fabs(la - lb) > std::max(1.0, 0.25 * cores) || std::max(la, lb) > cores) {
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "load average before the runs: %.2f (A) and %.2f (B) on %d cores: the host's load, not the engines, may explain "
                    "part of a change; engine-perf ab runs both engines interleaved",
                    la, lb, cores);
      c.notes.push_back(buf);
    }
  }
  int worst = -1;
  for (const auto& pa : a.profiles) {
    const ProfileRecord* pb = b.find_profile(pa.name);
    if (!pb) {
      c.notes.push_back("profile '" + pa.name + "' is only in A");
      continue;
    }
    c.profiles.push_back(compare_profiles(pa, *pb, opts));
    worst = std::max(worst, verdict_rank(c.profiles.back().verdict));
  }
  for (const auto& pb : b.profiles)
    if (!a.find_profile(pb.name)) c.notes.push_back("profile '" + pb.name + "' is only in B");
  static const char* kNames[] = {"improved", "same", "inconclusive", "regressed"};
  c.verdict = worst < 0 ? "inconclusive" : kNames[worst];
  if (worst < 0) c.notes.push_back("no profile in common");
  return c;
}

std::string comparison_json(const Comparison& c) {
  using nlohmann::json;
  auto ci = [](const Interval& i) { return json::array({i.lo, i.hi}); };
  json j;
  j["verdict"] = c.verdict;
  j["a"] = {{"run", c.a_id}, {"label", c.a_label}, {"time", c.a_time}};
  j["b"] = {{"run", c.b_id}, {"label", c.b_label}, {"time", c.b_time}};
  j["options"] = {{"metric", c.options.metric}, {"min_effect", c.options.min_effect}, {"alpha", c.options.alpha}};
  j["same_machine"] = c.same_machine;
  j["notes"] = c.notes;
  j["profiles"] = json::object();
  for (const auto& p : c.profiles) {
    json pj;
    pj["verdict"] = p.verdict;
    pj["kind"] = p.kind;
    pj["budget_ms"] = p.budget_ms;
    pj["n"] = {{"a", p.a.n}, {"b", p.b.n}};
    pj["p50_ms"] = {{"a", p.a.p50.estimate}, {"b", p.b.p50.estimate}, {"a_ci", ci(p.a.p50.ci)}, {"b_ci", ci(p.b.p50.ci)}};
    pj["p99_ms"] = {{"a", p.a.p99.estimate}, {"b", p.b.p99.estimate}, {"a_ci", ci(p.a.p99.ci)}, {"b_ci", ci(p.b.p99.ci)},
                    {"ci_exact", p.a.p99.exact && p.b.p99.exact}};
    pj["p50_change"] = p.p50_change;
    pj["p50_change_ci"] = ci(p.p50_change_ci);
    pj["p99_change"] = p.p99_change;
    pj["p99_change_ci"] = ci(p.p99_change_ci);
    pj["p_value"] = p.p_value;
    pj["miss_rate"] = {{"a", p.a.miss_rate}, {"b", p.b.miss_rate}, {"a_ci", ci(p.a.miss_rate_ci)}, {"b_ci", ci(p.b.miss_rate_ci)},
                       {"a_misses", p.a.misses}, {"b_misses", p.b.misses}, {"p_value", p.miss_p_value}};
    json layers = json::array();
    for (const auto& l : p.layers)
      layers.push_back({{"name", l.name}, {"op_type", l.op_type}, {"a_ms", l.a_ms}, {"b_ms", l.b_ms}, {"delta_ms", l.delta_ms},
                        {"p_value", l.p_value}, {"members", l.members}});
    pj["layers"] = layers;
    json ops = json::array();
    for (const auto& o : p.op_types) ops.push_back({{"op_type", o.op_type}, {"a_ms", o.a_ms}, {"b_ms", o.b_ms}, {"delta_ms", o.delta_ms}});
    pj["op_types"] = ops;
    j["profiles"][p.name] = pj;
  }
  return j.dump(2) + "\n";
}

std::string comparison_text(const Comparison& c, size_t layers_shown) {
  std::string out;
  char buf[512];
  auto side = [](int64_t id, const std::string& label, const std::string& time) {
    return "run " + std::to_string(id) + (label.empty() ? "" : " '" + label + "'") + " (" + time + ")";
  };
  out += "A = " + side(c.a_id, c.a_label, c.a_time) + "\nB = " + side(c.b_id, c.b_label, c.b_time) + "\n";
  for (const auto& n : c.notes) out += "note: " + n + "\n";
  for (const auto& p : c.profiles) {
    std::snprintf(buf, sizeof buf,
                  "\nprofile '%s' (%s): %s\n  p50 %.3f [%.3f, %.3f] -> %.3f [%.3f, %.3f] ms, change %+.1f%% [%+.1f%%, %+.1f%%], "
                  "Mann-Whitney p = %.2g\n  p99 %.3f -> %.3f ms, change %+.1f%% [%+.1f%%, %+.1f%%]\n",
                  p.name.c_str(), p.kind.c_str(), p.verdict.c_str(), p.a.p50.estimate, p.a.p50.ci.lo, p.a.p50.ci.hi, p.b.p50.estimate,
                  p.b.p50.ci.lo, p.b.p50.ci.hi, 100 * p.p50_change, 100 * p.p50_change_ci.lo, 100 * p.p50_change_ci.hi, p.p_value,
                  p.a.p99.estimate, p.b.p99.estimate, 100 * p.p99_change, 100 * p.p99_change_ci.lo, 100 * p.p99_change_ci.hi);
    out += buf;
    if (p.budget_ms > 0) {
      std::snprintf(buf, sizeof buf, "  over the %.1f ms budget: %lld of %d [%.1f%%, %.1f%%] -> %lld of %d [%.1f%%, %.1f%%], Fisher p = %.2g\n",
                    p.budget_ms, static_cast<long long>(p.a.misses), p.a.n, 100 * p.a.miss_rate_ci.lo, 100 * p.a.miss_rate_ci.hi,
                    static_cast<long long>(p.b.misses), p.b.n, 100 * p.b.miss_rate_ci.lo, 100 * p.b.miss_rate_ci.hi, p.miss_p_value);
      out += buf;
    }
    if (!p.layers.empty()) out += "  layers that moved most (mean of the profiled runs):\n";
    for (size_t i = 0; i < p.layers.size() && i < layers_shown; ++i) {
      const auto& l = p.layers[i];
      std::snprintf(buf, sizeof buf, "    %+8.3f ms  %8.3f -> %8.3f ms  p = %-7.2g %s  %s\n", l.delta_ms, l.a_ms, l.b_ms, l.p_value,
                    l.op_type.c_str(), l.name.c_str());
      out += buf;
    }
  }
  out += "\nverdict: " + c.verdict + " (metric " + c.options.metric + ", minimum effect " + std::to_string(c.options.min_effect * 100).substr(0, 4) +
         "%, alpha " + std::to_string(c.options.alpha).substr(0, 5) + ")\n";
  return out;
}

}  // namespace kiln::history
