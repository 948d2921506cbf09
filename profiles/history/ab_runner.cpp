#include "profiles/history/ab_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "builder/build_config.h"
#include "profiles/engine_check.h"
#include "profiles/layer_profile.h"
#include "profiles/history/provenance.h"
#include "runtime/engine.h"

namespace kiln::history {

namespace fs = std::filesystem;

namespace {

struct Side {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<ExecutionContext> ctx;
  std::vector<double> samples;
};

StatusOr<Side> open_side(const std::string& path, const std::string& profile) {
  Side s;
  KILN_ASSIGN_OR_RETURN(s.engine, Engine::load_file(path));
  if (s.engine->find_profile(profile) < 0) {
    std::string names;
    for (const auto& p : s.engine->profiles()) names += (names.empty() ? "" : ", ") + p.name;
    return InvalidArgument(path + ": no profile '" + profile + "' (it has: " + names + ")");
  }
  KILN_ASSIGN_OR_RETURN(s.ctx, s.engine->create_context(profile, /*prepare=*/true));
  return s;
}

Status timed_block(Side& s, int n) {
  KILN_RETURN_IF_ERROR(s.ctx->run());  // untimed: the caches back after the other side's block
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(s.ctx->run());
    s.samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return Status::Ok();
}

RunRecord make_record(const std::string& engine_path, const Side& s, const LayerProfile& layers, const AbOptions& opts,
                      const std::string& label, double start, const LoadAverage& before) {
  RunRecord r;
  r.source = "ab";
  r.unix_time = start;
  r.time = iso8601_utc(start);
  r.label = label;
  const BuildInfo bi = kiln_build_info();
  r.kiln_version = bi.version, r.kiln_commit = bi.commit, r.kiln_dirty = bi.dirty;
  r.engine_path = fs::absolute(engine_path).lexically_normal().string();
  r.series_key = "ab:" + fs::path(engine_path).filename().string();
  auto h = sha256_file(engine_path);
  if (h.ok()) r.engine_sha256 = *h;
  r.config_path = opts.config;
  r.machine = read_machine_info();
  r.load_before = before;
  r.load_after = read_load_average();
  ProfileRecord p;
  p.name = opts.profile;
  p.budget_ms = opts.budget_ms;
  p.samples_ms = s.samples;
  p.layer_runs = layers.steps.empty() ? 0 : static_cast<int>(layers.steps.front().run_ms.size());
  for (const auto& t : layers.steps) p.layers.push_back(LayerRecord{t.name, t.op_type, t.replaced, t.run_ms});
  p.gflop = layers.flops.flops / 1e9;
  r.profiles.push_back(std::move(p));
  return r;
}

}  // namespace

int ab_looks(int rounds, int max_rounds) {
  if (rounds < 1) return 1;
  const int extra_rounds = std::max(0, max_rounds - rounds);
  return 1 + (extra_rounds + rounds - 1) / rounds;  // the first look, then one per (partial) batch
}

StatusOr<AbResult> run_ab(const std::string& engine_a, const std::string& engine_b, const AbOptions& opts,
                          const std::function<void(const std::string&)>& progress) {
  const double start = unix_time_now();
  const LoadAverage before = read_load_average();
  KILN_ASSIGN_OR_RETURN(Side a, open_side(engine_a, opts.profile));
  KILN_ASSIGN_OR_RETURN(Side b, open_side(engine_b, opts.profile));
  std::map<std::string, InputGenerator> gens;
  if (!opts.config.empty()) {
    KILN_ASSIGN_OR_RETURN(BuildConfig cfg, load_build_config(opts.config));
    gens = cfg.inputs;
  }
  // One set of inputs at the profile's opt shapes, bound to both contexts.
  const ProfileInfo& pa = a.engine->profiles()[static_cast<size_t>(a.engine->find_profile(opts.profile))];
  const ProfileInfo& pb = b.engine->profiles()[static_cast<size_t>(b.engine->find_profile(opts.profile))];
  std::map<std::string, Shape> shapes;
  for (const auto& in : pa.inputs) shapes[in.name] = in.opt;
  for (const auto& in : pb.inputs)
    if (!shapes.count(in.name) || shapes[in.name] != in.opt)
      return InvalidArgument("the engines differ in profile '" + opts.profile + "' input '" + in.name + "' (opt shape " + in.opt.str() + ")");
  KILN_ASSIGN_OR_RETURN(auto inputs, generate_profile_inputs(*a.ctx, shapes, gens));
  for (const auto& [name, t] : inputs) {
    KILN_RETURN_IF_ERROR(a.ctx->set_input(name, t.view()).with_context(engine_a));
    KILN_RETURN_IF_ERROR(b.ctx->set_input(name, t.view()).with_context(engine_b));
  }
  for (int i = 0; i < opts.warmup; ++i) {
    KILN_RETURN_IF_ERROR(a.ctx->run());
    KILN_RETURN_IF_ERROR(b.ctx->run());
  }
  const int half = std::max(1, opts.iterations / 2);
  // Looking at the data after every batch of rounds and stopping at the first significant verdict
  // is a sequential test: at a fixed alpha per look, an A/A run is called changed more often than
  // alpha. The level is split evenly over the planned looks (Bonferroni), so the whole run keeps it.
  const int looks = ab_looks(opts.rounds, opts.max_rounds);
  CompareOptions per_look = opts.compare;
  per_look.alpha = opts.compare.alpha / looks;
  AbResult res;
  RunRecord ra, rb;
  LayerProfile la, lb;
  int target = opts.rounds;
  while (true) {
    for (; res.rounds_run < target; ++res.rounds_run) {
      KILN_RETURN_IF_ERROR(timed_block(a, half));
      KILN_RETURN_IF_ERROR(timed_block(b, half));
      KILN_RETURN_IF_ERROR(timed_block(b, half));
      KILN_RETURN_IF_ERROR(timed_block(a, half));
    }
    ra = make_record(engine_a, a, la, opts, opts.label_a, start, before);
    rb = make_record(engine_b, b, lb, opts, opts.label_b, start, before);
    res.comparison = compare_runs(ra, rb, per_look);
    progress("after " + std::to_string(res.rounds_run) + " ABBA rounds (" + std::to_string(a.samples.size()) + " runs a side): " +
             res.comparison.verdict);
    if (res.comparison.verdict != "inconclusive" || res.rounds_run >= opts.max_rounds) break;
    target = std::min(opts.max_rounds, res.rounds_run + opts.rounds);
    progress("inconclusive: " + std::to_string(target - res.rounds_run) + " more rounds");
  }
  progress("per-layer profiles (" + std::to_string(opts.layer_runs) + " runs a side, alternating)");
  for (int i = 0; i < opts.layer_runs; ++i) {
    KILN_ASSIGN_OR_RETURN(LayerProfile x, profile_layers(*a.ctx, 1));
    KILN_ASSIGN_OR_RETURN(LayerProfile y, profile_layers(*b.ctx, 1));
    if (i == 0) {
      la = x, lb = y;
      continue;
    }
    for (size_t s = 0; s < la.steps.size(); ++s) la.steps[s].run_ms.push_back(x.steps[s].run_ms.front());
    for (size_t s = 0; s < lb.steps.size(); ++s) lb.steps[s].run_ms.push_back(y.steps[s].run_ms.front());
  }
  res.a = make_record(engine_a, a, la, opts, opts.label_a, start, before);
  res.b = make_record(engine_b, b, lb, opts, opts.label_b, start, before);
  res.comparison = compare_runs(res.a, res.b, per_look);
  if (looks > 1) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "alpha %.3g split over %d planned looks: %.3g per look", opts.compare.alpha, looks, per_look.alpha);
    res.comparison.notes.push_back(buf);
  }
  return res;
}

}  // namespace kiln::history
