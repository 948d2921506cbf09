#include "builder/tactics/tactic_refinement.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "builder/plan/plan_winograd_layout.h"
#include "runtime/execution_context.h"
#include "runtime/openmp_team.h"

namespace kiln {

namespace {

// One variant of the plan (a choice per contested key) with a ready context and its samples.
struct Variant {
  std::vector<std::string> pick;
  std::unique_ptr<ExecutionContext> ctx;
  std::vector<std::vector<double>> step_ms;  // [step][round]
  std::vector<double> run_ms;                // [round]
};

StatusOr<Variant> make_variant(const Plan& base, const std::vector<ContestedKey>& contested, std::vector<std::string> pick,
                               const std::vector<Tensor>& inputs, const KernelRegistry& registry) {
  Plan p = base;
  for (size_t k = 0; k < contested.size(); ++k)
    for (size_t s : contested[k].steps) p.steps[s].impl = pick[k];
  keep_nchw16c_between_winograd_convs(p);
  Variant v;
  v.pick = std::move(pick);
  KILN_ASSIGN_OR_RETURN(v.ctx, ExecutionContext::create(std::make_shared<const Plan>(std::move(p)), registry));
  for (size_t i = 0; i < inputs.size(); ++i) KILN_RETURN_IF_ERROR(v.ctx->set_input(i, inputs[i].view()));
  // Untimed: plans the arena and packs the weights.
  KILN_RETURN_IF_ERROR(v.ctx->run().with_context("tactic refinement: warm-up run"));
  v.step_ms.assign(v.ctx->plan().steps.size(), {});
  return v;
}

// One run with per-step timing.
Status sample(Variant& v) {
  v.ctx->set_profiling(true);
  const auto t0 = std::chrono::steady_clock::now();
  Status st = v.ctx->run();
  v.run_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  for (size_t s = 0; s < v.step_ms.size() && st.ok(); ++s) v.step_ms[s].push_back(v.ctx->step_ms()[s]);
  v.ctx->set_profiling(false);
  return st.with_context("tactic refinement: profiled run");
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

std::vector<std::vector<std::string>> whole_run_picks(const std::vector<ContestedKey>& contested, const std::vector<std::string>& mix) {
  std::vector<std::vector<std::string>> picks(2);
  for (const auto& c : contested) {
    picks[0].push_back(c.first);
    picks[1].push_back(c.second);
  }
  auto consider = [&picks](std::vector<std::string> pick) {
    if (std::find(picks.begin(), picks.end(), pick) == picks.end()) picks.push_back(std::move(pick));
  };
  consider(mix);
  for (const bool team : {true, false}) {
    std::vector<std::string> same = mix;
    for (size_t k = 0; k < contested.size(); ++k) {
      const ContestedKey& c = contested[k];
      if (impl_runs_on_openmp_team(c.first) != impl_runs_on_openmp_team(c.second))
        same[k] = impl_runs_on_openmp_team(c.first) == team ? c.first : c.second;
    }
    consider(std::move(same));
  }
  return picks;
}

Status refine_in_context(Plan& plan, std::vector<ContestedKey>& contested, const std::vector<Tensor>& inputs, const KernelRegistry& registry,
                         int rounds) {
  if (contested.empty()) return Status::Ok();
  std::vector<std::string> firsts, seconds;
  for (const auto& c : contested) {
    firsts.push_back(c.first);
    seconds.push_back(c.second);
  }
  KILN_ASSIGN_OR_RETURN(Variant a, make_variant(plan, contested, firsts, inputs, registry));
  KILN_ASSIGN_OR_RETURN(Variant b, make_variant(plan, contested, seconds, inputs, registry));
  // Alternating, so load changes on a shared machine hit both alike.
  for (int r = 0; r < rounds; ++r) {
    KILN_RETURN_IF_ERROR(sample(a));
    KILN_RETURN_IF_ERROR(sample(b));
  }
  std::vector<std::string> mix;
  for (auto& c : contested) {
    c.first_ms = c.second_ms = 0;
    for (size_t s : c.steps) {
      c.first_ms += median(a.step_ms[s]);
      c.second_ms += median(b.step_ms[s]);
    }
    c.chosen = c.second_ms < c.first_ms ? c.second : c.first;
    mix.push_back(c.chosen);
  }
  const std::vector<std::vector<std::string>> picks = whole_run_picks(contested, mix);
  if (picks.size() > 2) {
    std::vector<Variant> whole;
    whole.push_back(std::move(a));
    whole.push_back(std::move(b));
    for (size_t i = 2; i < picks.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(Variant v, make_variant(plan, contested, picks[i], inputs, registry));
      whole.push_back(std::move(v));
    }
    // A run's median over many rounds where runs are short (about 1.5 s in all), at least `rounds`.
    const double run_ms = std::max(median(whole[0].run_ms), 1e-3);
    const int whole_rounds = std::clamp(static_cast<int>(1500.0 / (run_ms * static_cast<double>(whole.size()))), rounds, 25);
    for (auto& v : whole) v.run_ms.clear();
    for (int r = 0; r < whole_rounds; ++r)
      for (size_t i = 0; i < whole.size(); ++i) KILN_RETURN_IF_ERROR(sample(whole[(i + static_cast<size_t>(r)) % whole.size()]));
    // The per-step mix stands unless another plan is faster as a whole.
    size_t best = static_cast<size_t>(std::find(picks.begin(), picks.end(), mix) - picks.begin());
    for (size_t i = 0; i < whole.size(); ++i)
      if (median(whole[i].run_ms) < median(whole[best].run_ms)) best = i;
    for (size_t k = 0; k < contested.size(); ++k) contested[k].chosen = whole[best].pick[k];
  }
  for (const auto& c : contested)
    for (size_t s : c.steps) plan.steps[s].impl = c.chosen;
  return Status::Ok();
}

}  // namespace kiln
