#include "builder/tactics/tactic_selection.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "builder/plan/plan_winograd_layout.h"
#include "builder/input_generator.h"
#include "builder/json_text.h"
#include "builder/tactics/tactic_refinement.h"
#include "runtime/engine_format.h"
#include "runtime/execution_context.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

// Attributes as text, in the AttrMap's (sorted) order, for the cache key.
std::string attrs_key(const AttrMap& attrs) {
  std::ostringstream os;
  for (const auto& [name, a] : attrs) {
    os << name << "=";
    switch (a.kind) {
      case Attribute::Kind::kInt: os << a.i; break;
      case Attribute::Kind::kFloat: os << a.f; break;
      case Attribute::Kind::kString: os << a.s; break;
      case Attribute::Kind::kInts: for (auto v : a.ints) os << v << ","; break;
      case Attribute::Kind::kFloats: for (auto v : a.floats) os << v << ","; break;
      default: os << "?"; break;
    }
    os << ";";
  }
  return os.str();
}

// Timing needs data-independent kernels: every input a float tensor (values do not change the
// work), so random inputs stand in for the real activations.
bool timeable(const Plan& plan, const PlanStep& step, const ExecutionContext& ctx) {
  if (!is_kernel_domain(step.domain)) return false;
  for (int v : step.inputs) {
    if (v < 0) continue;
    const DType dt = plan.values[v].constant >= 0 ? plan.constants[plan.values[v].constant].dtype() : ctx.value_desc(v).dtype;
    if (dt != DType::kFloat32 && dt != DType::kBFloat16) return false;
  }
  return true;
}

// Best-of-5 wall time of each candidate kernel on fixed inputs, after one warm-up run each. The
// candidates run in alternation (round r times every candidate once), so a change of load on a
// shared machine hits all of them rather than whichever was being timed. A candidate whose warm-up
// is more than 5x the fastest warm-up is not timed further (a naive reference kernel need not run
// six times at 1 GFLOP): its ms is minus its warm-up. A candidate that cannot run these inputs as
// itself gets its reason in `unavailable` and no time: its prepare fails with Unimplemented
// (oneDNN's Winograd convolution outside 3x3 stride 1), or it hands the case to another
// implementation (an oneDNN kernel falling back to the reference), which would otherwise be timed,
// and recorded, under the candidate's name.
StatusOr<std::vector<TacticTiming>> time_candidates(const KernelRegistry& registry, const KernelArgs& args, const AttrMap& attrs,
                                                    const std::vector<const KernelEntry*>& impls, std::span<const TensorView> in) {
  struct Candidate {
    std::unique_ptr<Kernel> kernel;
    std::vector<Tensor> outs;
    std::vector<TensorView> out_views;
  };
  std::vector<TacticTiming> timings;
  std::vector<Candidate> ready(impls.size());
  for (size_t c = 0; c < impls.size(); ++c) {
    timings.push_back({impls[c]->impl, 0, ""});
    Candidate& k = ready[c];
    KILN_ASSIGN_OR_RETURN(k.kernel, registry.create(args, attrs, impls[c]->impl));
    std::vector<TensorDesc> desc(static_cast<size_t>(args.num_outputs));
    KILN_RETURN_IF_ERROR(k.kernel->infer(in, desc));
    for (const auto& d : desc) {
      KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::try_zeros(d.dtype, d.shape, "tactic timing output"));
      k.outs.push_back(std::move(t));
      k.out_views.push_back(k.outs.back().view());
    }
    if (Status st = k.kernel->prepare(in, k.out_views); !st.ok()) {
      if (st.code() != StatusCode::kUnimplemented) return st;
      timings[c].unavailable = st.message();
    } else if (k.kernel->impl_name() != impls[c]->impl) {
      timings[c].unavailable = "runs these shapes as '" + std::string(k.kernel->impl_name()) + "'";
    }
    if (!timings[c].unavailable.empty()) k.kernel.reset();
  }
  auto run = [&](size_t c) -> StatusOr<double> {
    const auto t0 = Clock::now();
    KILN_RETURN_IF_ERROR(ready[c].kernel->run(in, ready[c].out_views));
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  double fastest_warmup = -1;
  std::vector<double> warmup(impls.size(), -1);
  for (size_t c = 0; c < impls.size(); ++c) {
    if (!ready[c].kernel) continue;
    KILN_ASSIGN_OR_RETURN(warmup[c], run(c));
    if (fastest_warmup < 0 || warmup[c] < fastest_warmup) fastest_warmup = warmup[c];
  }
  for (size_t c = 0; c < impls.size(); ++c) {
    if (!ready[c].kernel) continue;
    if (warmup[c] > 5 * fastest_warmup) {
      timings[c].ms = -warmup[c];  // far slower: out
      ready[c].kernel.reset();
    } else {
      timings[c].ms = -1;  // set by the first timed round
    }
  }
  for (int r = 0; r < 5; ++r)
    for (size_t c = 0; c < impls.size(); ++c) {
      if (!ready[c].kernel) continue;
      KILN_ASSIGN_OR_RETURN(double ms, run(c));
      timings[c].ms = timings[c].ms < 0 ? ms : std::min(timings[c].ms, ms);
    }
  return timings;
}

}  // namespace

StatusOr<TimingCache> TimingCache::load(const std::string& path) {
  TimingCache cache;
  std::ifstream f(path);
  if (!f) return cache;
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.rfind('\t');
    if (tab == std::string::npos || tab == 0 || tab + 1 == line.size())
      return InvalidArgument("timing cache '" + path + "' line " + std::to_string(n) + ": expected KEY<TAB>IMPL");
    cache.entries_[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return cache;
}

Status TimingCache::save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  std::error_code dir_ec;
  if (const auto dir = std::filesystem::path(path).parent_path(); !dir.empty()) std::filesystem::create_directories(dir, dir_ec);
  if (dir_ec) return IoError("cannot create the folder of timing cache '" + path + "': " + dir_ec.message());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << "# kiln timing cache: tactic choices, KEY<TAB>IMPL (KEY = op|candidates|inputs|attributes|threads|cpu)\n";
    for (const auto& [k, v] : entries_) f << k << '\t' << v << '\n';
    if (!f) return IoError("cannot write timing cache '" + tmp + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return IoError("cannot write timing cache '" + path + "': " + ec.message());
  return Status::Ok();
}

const std::string* TimingCache::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

namespace {

// Graph input `name` (plan input `index`) for the run that learns every step's shapes.
using InputSource = std::function<StatusOr<Tensor>(size_t index, const std::string& name)>;

StatusOr<std::vector<TacticDecision>> select(Plan& plan, const InputSource& input_for, TimingCache& cache, const KernelRegistry& registry) {
  std::vector<TacticDecision> decisions;
  // Candidates keep the step's precision: precision is the config's choice (bf16 kernels only
  // where `precision: bf16` put them, int8 ones where calibration did), tactics only pick among
  // kernels of that precision.
  auto precision_of = [](const std::string& impl) {
    return impl.find("int8") != std::string::npos ? 2 : impl.find("bf16") != std::string::npos ? 1 : 0;
  };
  // Kernels needing CPU features this machine lacks are not candidates (and so not in cache keys).
  const uint64_t host = host_cpu_features();
  auto candidates = [&](const PlanStep& step) {
    std::vector<const KernelEntry*> out;
    for (const auto* e : registry.implementations(step.op_type))
      if (precision_of(e->impl) == precision_of(step.impl) && (e->cpu_features & ~host) == 0) out.push_back(e);
    return out;
  };
  std::vector<size_t> candidates_steps;
  for (size_t s = 0; s < plan.steps.size(); ++s)
    if (is_kernel_domain(plan.steps[s].domain) && candidates(plan.steps[s]).size() > 1) candidates_steps.push_back(s);
  if (candidates_steps.empty()) return decisions;

  // One run at opt gives every step's input shapes.
  auto shared = std::make_shared<const Plan>(plan);
  KILN_ASSIGN_OR_RETURN(auto ctx, ExecutionContext::create(shared, registry));
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < ctx->num_inputs(); ++i) {
    KILN_ASSIGN_OR_RETURN(Tensor t, input_for(i, ctx->input_name(i)));
    inputs.push_back(std::move(t));
    KILN_RETURN_IF_ERROR(ctx->set_input(i, inputs.back().view()));
  }
  KILN_RETURN_IF_ERROR(ctx->run().with_context("tactic selection: running profile '" + plan.profile + "' at opt"));
  // A second run, on the planned arena, for the scale of a whole run (the in-context refinement's
  // unit of cost).
  const auto run_start = Clock::now();
  KILN_RETURN_IF_ERROR(ctx->run().with_context("tactic selection: running profile '" + plan.profile + "' at opt"));
  const double run_ms = std::chrono::duration<double, std::milli>(Clock::now() - run_start).count();

  const std::string machine = "|threads=" + std::to_string(omp_get_max_threads()) + "|cpu=" + std::to_string(host_cpu_features());
  // Keys timed in this build whose runner-up came close, for the in-context refinement; the steps
  // sharing such a key (later steps hit it in the cache) are decided with it.
  std::vector<ContestedKey> contested;
  std::vector<std::string> contested_keys;
  std::map<std::string, size_t> contested_index;
  std::vector<size_t> decision_of(plan.steps.size(), 0);
  // A step's cache key: op, candidates, input dtypes and shapes (weights marked), attributes and
  // machine. Steps with equal keys take one choice.
  auto key_of = [&](const PlanStep& step) {
    std::string key = step.op_type + "|";
    for (const auto* e : candidates(step)) key += e->impl + ",";
    key += "|";
    for (const int v : step.inputs) {
      if (v < 0) {
        key += "-;";
      } else if (plan.values[v].constant >= 0) {
        const Tensor& c = plan.constants[plan.values[v].constant];
        key += "w" + dtype_name(c.dtype()) + c.shape().str() + ";";
      } else {
        const TensorDesc d = ctx->value_desc(v);
        key += dtype_name(d.dtype) + d.shape.str() + ";";
      }
    }
    return key + "|" + attrs_key(step.attrs) + machine;
  };
  // How many steps share each key: a choice weighs in a run by all of them (the ControlTransformer
  // step's 21 Q/K/V projections are each a small share of a run, together a large one).
  std::map<std::string, int> steps_with_key;
  for (size_t s : candidates_steps)
    if (timeable(plan, plan.steps[s], *ctx)) ++steps_with_key[key_of(plan.steps[s])];
  for (size_t s : candidates_steps) {
    PlanStep& step = plan.steps[s];
    if (!timeable(plan, step, *ctx)) continue;
    const auto impls = candidates(step);
    const std::string key = key_of(step);
    std::vector<Tensor> random;
    std::vector<TensorView> in;
    for (const int v : step.inputs) {
      if (v < 0) {
        in.push_back(TensorView{});
      } else if (plan.values[v].constant >= 0) {
        in.push_back(plan.constants[plan.values[v].constant].view());
      } else {
        const TensorDesc d = ctx->value_desc(v);
        KILN_ASSIGN_OR_RETURN(Tensor t, generate_input(plan.values[v].name, d.dtype, d.shape, nullptr));
        random.push_back(std::move(t));
        in.push_back(random.back().view());
      }
    }
    TacticDecision dec{step.name, step.op_type, "", false, {}, {}};
    if (const std::string* hit = cache.find(key); hit && std::any_of(impls.begin(), impls.end(), [&](auto* e) { return e->impl == *hit; })) {
      dec.chosen = *hit;
      dec.from_cache = true;
      if (auto it = contested_index.find(key); it != contested_index.end()) contested[it->second].steps.push_back(s);
    } else {
      const KernelArgs args = KernelArgs::of(step, plan.opset);
      KILN_ASSIGN_OR_RETURN(dec.timings, time_candidates(registry, args, step.attrs, impls, in));
      double best = -1;
      for (const auto& t : dec.timings)
        if (t.unavailable.empty() && t.ms >= 0 && (best < 0 || t.ms < best)) {
          best = t.ms;
          dec.chosen = t.impl;
        }
      if (dec.chosen.empty()) dec.chosen = step.impl;  // no candidate could run it as itself: keep the default
      cache.insert(key, dec.chosen);
      // The runner-up: the fastest other candidate timed to the end.
      const TacticTiming* second = nullptr;
      for (const auto& t : dec.timings)
        if (t.unavailable.empty() && t.ms >= 0 && t.impl != dec.chosen && (!second || t.ms < second->ms)) second = &t;
      // Whole runs decide only keys that weigh in them: deciding a 0.05 ms MatMul of a 500 ms
      // transformer run that way would cost seconds for nothing measurable.
      if (second && best > 0 && second->ms < kContestedRatio * best && best * steps_with_key[key] >= kContestedMinShare * run_ms) {
        contested_index[key] = contested.size();
        contested.push_back({{s}, dec.chosen, second->impl, 0, 0, ""});
        contested_keys.push_back(key);
      }
    }
    step.impl = dec.chosen;
    decision_of[s] = decisions.size();
    decisions.push_back(std::move(dec));
  }
  // Rounds within a budget of about 2 s of whole runs (two variants per round), 3 to 7.
  const int rounds = std::clamp(static_cast<int>(1000.0 / std::max(run_ms, 1e-3)), 3, 7);
  KILN_RETURN_IF_ERROR(refine_in_context(plan, contested, inputs, registry, rounds));
  for (size_t k = 0; k < contested.size(); ++k) {
    const ContestedKey& c = contested[k];
    cache.insert(contested_keys[k], c.chosen);
    for (size_t s : c.steps) decisions[decision_of[s]].chosen = c.chosen;
    decisions[decision_of[c.steps[0]]].in_context = {{c.first, c.first_ms, ""}, {c.second, c.second_ms, ""}};
  }
  return decisions;
}

}  // namespace

StatusOr<std::vector<TacticDecision>> select_tactics(Plan& plan, const std::map<std::string, Shape>& opt_shapes, const BuildConfig& cfg,
                                                     TimingCache& cache, const KernelRegistry& registry) {
  auto generated = [&](size_t i, const std::string& name) -> StatusOr<Tensor> {
    auto it = opt_shapes.find(name);
    if (it == opt_shapes.end()) return Internal("tactic selection: no opt shape for input '" + name + "'");
    auto g = cfg.inputs.find(name);
    return generate_input(name, plan.values[plan.inputs[i]].dtype, it->second, g == cfg.inputs.end() ? nullptr : &g->second);
  };
  return select(plan, generated, cache, registry);
}

StatusOr<std::vector<TacticDecision>> select_tactics_for_inputs(Plan& plan, const std::map<std::string, Tensor>& inputs, TimingCache& cache,
                                                                const KernelRegistry& registry) {
  auto given = [&](size_t, const std::string& name) -> StatusOr<Tensor> {
    auto it = inputs.find(name);
    if (it == inputs.end()) return InvalidArgument("tactic selection: no value for input '" + name + "'");
    return it->second;
  };
  return select(plan, given, cache, registry);
}

std::string tactics_summary(const Plan& plan, const std::vector<TacticDecision>& decisions) {
  std::map<std::string, int> chosen;
  for (const auto& d : decisions) ++chosen[d.op_type + " " + d.chosen];
  std::string summary;
  for (const auto& [what, n] : chosen) summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  int blocked = 0;
  for (const auto& step : plan.steps) {
    auto it = step.attrs.find("y_layout");
    blocked += step.op_type == "FusedConv" && it != step.attrs.end() && it->second.s == "nchw16c";
  }
  if (blocked) summary += "; " + std::to_string(blocked) + " values between Winograd convolutions kept in nChw16c";
  return summary;
}

PlanHook tactic_selection_hook(const BuildConfig& cfg, TimingCache& cache, const std::function<void(const std::string&)>& progress,
                               TacticLog* log) {
  return [&cfg, &cache, progress, log](Plan& plan, const ResolvedProfile& profile) -> Status {
    const auto t0 = Clock::now();
    KILN_ASSIGN_OR_RETURN(auto decisions, select_tactics(plan, profile.shapes_at(ResolvedProfile::Point::kOpt), cfg, cache));
    size_t cached = 0;
    for (const auto& d : decisions) cached += d.from_cache ? 1 : 0;
    const std::string summary = tactics_summary(plan, decisions);
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.2f s", std::chrono::duration<double>(Clock::now() - t0).count());
    progress("[profile '" + profile.name + "'] tactics: " + std::to_string(decisions.size()) + " steps with a choice (" +
             std::to_string(cached) + " from the timing cache) in " + secs + (summary.empty() ? "" : ": " + summary));
    (*log)[profile.name] = std::move(decisions);
    return Status::Ok();
  };
}

std::string tactics_report_json(const TacticLog& log) {
  std::ostringstream os;
  os << "{";
  size_t p = 0;
  for (const auto& [profile, decisions] : log) {
    os << (p++ ? ", " : "") << json_string(profile) << ": [";
    for (size_t i = 0; i < decisions.size(); ++i) {
      const auto& d = decisions[i];
      os << (i ? ", " : "") << "{\"node\": " << json_string(d.node) << ", \"op\": " << json_string(d.op_type) << ", \"chosen\": " << json_string(d.chosen)
         << ", \"cached\": " << (d.from_cache ? "true" : "false") << ", \"ms\": {";
      for (size_t k = 0; k < d.timings.size(); ++k) {
        char ms[32];
        std::snprintf(ms, sizeof ms, "%.4g", d.timings[k].ms);
        // An unavailable candidate has no time: null (its reason is in "unavailable").
        os << (k ? ", " : "") << json_string(d.timings[k].impl) << ": " << (d.timings[k].unavailable.empty() ? ms : "null");
      }
      if (!d.in_context.empty()) {
        os << "}, \"in_context_ms\": {";
        for (size_t k = 0; k < d.in_context.size(); ++k) {
          char ms[32];
          std::snprintf(ms, sizeof ms, "%.4g", d.in_context[k].ms);
          os << (k ? ", " : "") << json_string(d.in_context[k].impl) << ": " << ms;
        }
      }
      os << "}, \"unavailable\": {";
      size_t u = 0;
      for (const auto& t : d.timings)
        if (!t.unavailable.empty()) os << (u++ ? ", " : "") << json_string(t.impl) << ": " << json_string(t.unavailable);
      os << "}}";
    }
    os << "]";
  }
  os << "}";
  return os.str();
}

}  // namespace kiln
