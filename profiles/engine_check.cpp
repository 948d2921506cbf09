#include "profiles/engine_check.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <thread>

#include "builder/input_generator.h"
#include "builder/json_text.h"
#include "builder/quantization/calibration.h"

namespace kiln {

namespace {


std::string json_shape(const Shape& s) {
  std::string out = "[";
  for (int i = 0; i < s.rank(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Largest |a - b| over two outputs; NaN in the same place counts as equal, shape or dtype mismatch
// is an error.
StatusOr<double> max_abs_diff(const TensorView& a, const TensorView& b, const std::string& what) {
  if (a.dtype != b.dtype || a.shape != b.shape)
    return Internal(what + ": loaded engine gives " + dtype_name(a.dtype) + " " + a.shape.str() + ", built plan gives " +
                    dtype_name(b.dtype) + " " + b.shape.str());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = read_double(a, i), y = read_double(b, i);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (x == y) continue;
    const double d = std::fabs(x - y);
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

// {"attention": N, "sites": [{"node", "softmax", "replaced": [...]}], "unfused": [{"softmax", "reason"}]}
std::string fusions_json(const BuiltProfile& bp) {
  std::ostringstream os;
  size_t fused = 0;
  for (const auto& s : bp.attention_sites) fused += s.fused_node.empty() ? 0 : 1;
  os << "{\"attention\": " << fused << ", \"sites\": [";
  size_t k = 0;
  for (const auto& step : bp.plan->steps) {
    if (step.domain != "kiln" || step.op_type != "Attention") continue;
    os << (k++ ? ", " : "") << "{\"node\": " << json_string(step.name) << ", \"replaced\": [";
    for (size_t r = 0; r < step.replaced_nodes.size(); ++r) os << (r ? ", " : "") << json_string(step.replaced_nodes[r]);
    os << "]}";
  }
  os << "], \"unfused\": [";
  k = 0;
  for (const auto& s : bp.attention_sites)
    if (s.fused_node.empty())
      os << (k++ ? ", " : "") << "{\"softmax\": " << json_string(s.softmax) << ", \"reason\": " << json_string(s.reason) << "}";
  os << "]}";
  return os.str();
}

}  // namespace

StatusOr<std::vector<std::pair<std::string, Tensor>>> generate_profile_inputs(
    const ExecutionContext& ctx, const std::map<std::string, Shape>& shapes, const std::map<std::string, InputGenerator>& gens) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const std::string& name = ctx.input_name(i);
    const PlanValue& pv = ctx.plan().values[ctx.plan().inputs[i]];
    auto it = shapes.find(name);
    if (it == shapes.end()) return Internal("no shape for input '" + name + "'");
    auto g = gens.find(name);
    KILN_ASSIGN_OR_RETURN(Tensor t, generate_input(name, pv.dtype, it->second, g == gens.end() ? nullptr : &g->second));
    out.emplace_back(name, std::move(t));
  }
  return out;
}

namespace {
// Folds output o's |lowp - fp32| and max |fp32| of the last runs into pc.
Status accumulate_lowp_error(const ExecutionContext& lowp, const ExecutionContext& fp32, size_t o, const std::string& where,
                             ProfileCheck& pc) {
  const std::string& name = lowp.output_name(o);
  KILN_ASSIGN_OR_RETURN(double e, max_abs_diff(lowp.output(o), fp32.output(o), where + " output '" + name + "' " + pc.lowp + " vs fp32"));
  double scale = 0;
  for (int64_t i = 0; i < fp32.output(o).numel(); ++i) scale = std::max(scale, std::fabs(read_double(fp32.output(o), i)));
  pc.lowp_max_abs_err[name] = std::max(pc.lowp_max_abs_err[name], e);
  pc.fp32_max_abs[name] = std::max(pc.fp32_max_abs[name], scale);
  return Status::Ok();
}

// A context prepared for benchmarking one profile, with its inputs.
struct BenchContext {
  std::unique_ptr<ExecutionContext> ctx;
  std::vector<std::pair<std::string, Tensor>> inputs;
};
}  // namespace

StatusOr<std::vector<ProfileCheck>> check_engine(const Engine& engine, const BuildResult& built, const BuildConfig& cfg,
                                                 bool benchmark, const std::function<void(const std::string&)>& progress) {
  std::vector<ProfileCheck> checks;
  std::vector<BenchContext> bench;  // one per profile when benchmarking, in the order of `checks`
  for (const auto& bp : built.profiles) {
    ProfileCheck pc;
    pc.profile = bp.profile.name;
    const std::string where = "profile '" + pc.profile + "'";
    KILN_ASSIGN_OR_RETURN(auto loaded, engine.create_context(pc.profile));
    KILN_ASSIGN_OR_RETURN(auto in_memory, ExecutionContext::create(bp.plan));
    std::unique_ptr<ExecutionContext> fp32;
    if (bp.fp32_plan) {
      KILN_ASSIGN_OR_RETURN(fp32, ExecutionContext::create(bp.fp32_plan));
      pc.lowp = cfg.precision == "int8" ? "int8" : "bf16";
      pc.lowp_tolerance = pc.lowp == "int8" ? cfg.calibration.tolerance : kBf16Tolerance;
    }
    const std::pair<ResolvedProfile::Point, const char*> points[] = {
        {ResolvedProfile::Point::kMin, "min"}, {ResolvedProfile::Point::kOpt, "opt"}, {ResolvedProfile::Point::kMax, "max"}};
    std::vector<std::map<std::string, Shape>> seen;
    for (const auto& [point, label] : points) {
      auto shapes = bp.profile.shapes_at(point);
      bool dup = false;
      for (size_t i = 0; i < seen.size(); ++i)
        if (seen[i] == shapes) {
          pc.points[i] += std::string("=") + label;  // e.g. "opt=max": the same shapes, run once
          dup = true;
        }
      if (dup) continue;
      seen.push_back(shapes);
      progress(where + ": validating the loaded engine at " + label + " shapes");
      KILN_ASSIGN_OR_RETURN(auto inputs, generate_profile_inputs(*loaded, shapes, cfg.inputs));
      for (const auto& [name, t] : inputs) {
        KILN_RETURN_IF_ERROR(loaded->set_input(name, t.view()).with_context(where));
        KILN_RETURN_IF_ERROR(in_memory->set_input(name, t.view()).with_context(where));
        if (fp32) KILN_RETURN_IF_ERROR(fp32->set_input(name, t.view()).with_context(where));
      }
      if (fp32) KILN_RETURN_IF_ERROR(fp32->run().with_context(where + " (fp32 reference plan, " + std::string(label) + ")"));
      // Twice: the second run is a steady-state run on the arena planned by the first.
      KILN_RETURN_IF_ERROR(loaded->run().with_context(where + " (loaded engine, " + label + ")"));
      KILN_RETURN_IF_ERROR(loaded->run().with_context(where + " (loaded engine, " + label + ", second run)"));
      KILN_RETURN_IF_ERROR(in_memory->run().with_context(where + " (built plan, " + label + ")"));
      pc.points.push_back(label);
      for (size_t o = 0; o < loaded->num_outputs(); ++o) {
        KILN_ASSIGN_OR_RETURN(double d, max_abs_diff(loaded->output(o), in_memory->output(o),
                                                     where + " output '" + loaded->output_name(o) + "' at " + label));
        pc.max_abs_diff = std::max(pc.max_abs_diff, d);
        if (!fp32) continue;
        KILN_RETURN_IF_ERROR(accumulate_lowp_error(*loaded, *fp32, o, where, pc));
      }
    }
    // int8: batches calibration never saw, at opt shapes (validation's own inputs are batch 0).
    // A calibration folder holds the calibration profile's opt shapes only: other profiles report
    // the error on validation's inputs alone.
    const std::string& calib_profile = cfg.calibration.profile.empty() && !cfg.profiles.empty() ? cfg.profiles.front().name
                                                                                                : cfg.calibration.profile;
    const bool holdout_fits = cfg.calibration.folder.empty() || bp.profile.name == calib_profile;
    if (fp32 && pc.lowp == "int8" && holdout_fits) {
      const auto opt = bp.profile.shapes_at(ResolvedProfile::Point::kOpt);
      for (int h = 1; h <= cfg.calibration.holdout; ++h) {
        KILN_ASSIGN_OR_RETURN(auto inputs, batch_inputs(*bp.plan, opt, cfg, cfg.calibration.batches + h));
        for (const auto& [name, t] : inputs) {
          KILN_RETURN_IF_ERROR(loaded->set_input(name, t.view()).with_context(where));
          KILN_RETURN_IF_ERROR(fp32->set_input(name, t.view()).with_context(where));
        }
        KILN_RETURN_IF_ERROR(fp32->run().with_context(where + " (fp32 reference plan, held-out batch)"));
        KILN_RETURN_IF_ERROR(loaded->run().with_context(where + " (loaded engine, held-out batch)"));
        for (size_t o = 0; o < loaded->num_outputs(); ++o) KILN_RETURN_IF_ERROR(accumulate_lowp_error(*loaded, *fp32, o, where, pc));
      }
      pc.holdout_batches = cfg.calibration.holdout;
    }
    // Same kernels, same inputs: a difference means the engine file did not round-trip.
    if (pc.max_abs_diff > 1e-5)
      return DataLoss(where + ": the loaded engine differs from the built plan by " + fmt(pc.max_abs_diff));
    for (const auto& [name, e] : pc.lowp_max_abs_err) {
      const double rel = e / std::max(1.0, pc.fp32_max_abs[name]);
      const bool ok = rel <= pc.lowp_tolerance;
      pc.lowp_within_tolerance &= ok;
      progress(where + ": " + pc.lowp + " vs fp32 output '" + name + "': max abs err " + fmt(e) + " (max |fp32| " + fmt(pc.fp32_max_abs[name]) +
               ", " + fmt(rel) + " of max(1, max |fp32|))" + (ok ? "" : " OVER the " + pc.lowp + " tolerance " + fmt(pc.lowp_tolerance)));
    }
    // int8 has a configured tolerance: beyond it the engine is not what the config asked for.
    if (pc.lowp == "int8" && !pc.lowp_within_tolerance)
      return FailedPrecondition(where + ": the int8 engine's outputs differ from fp32 beyond calibration.tolerance " + fmt(pc.lowp_tolerance) +
                                " (see the lines above; keep the layers that lose accuracy in precision_overrides, engine-build --sensitivity ranks them)");
    pc.opt_shapes = bp.profile.shapes_at(ResolvedProfile::Point::kOpt);
    if (benchmark) {
      // A fresh context prepared for the profile (arena for max, kernels for opt), as a user would
      // create one: its first run at opt is timed on its own to show it needs no preparation.
      progress(where + ": preparing a new context for the profile");
      BenchContext b;
      KILN_ASSIGN_OR_RETURN(b.ctx, engine.create_context(pc.profile, /*prepare=*/true));
      KILN_ASSIGN_OR_RETURN(b.inputs, generate_profile_inputs(*b.ctx, pc.opt_shapes, cfg.inputs));
      for (const auto& [name, t] : b.inputs) KILN_RETURN_IF_ERROR(b.ctx->set_input(name, t.view()));
      const auto t0 = std::chrono::steady_clock::now();
      KILN_RETURN_IF_ERROR(b.ctx->run().with_context(where + " (first run of a new context)"));
      pc.first_run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      bench.push_back(std::move(b));
    }
    checks.push_back(std::move(pc));
  }
  if (!benchmark || bench.empty()) return checks;
  const BenchmarkConfig& bc = cfg.benchmark;
  const int rounds = bench.size() > 1 ? std::clamp(bc.rounds, 1, bc.iterations) : 1;
  std::string names;
  std::vector<std::function<Status()>> runs;
  for (size_t i = 0; i < bench.size(); ++i) {
    names += (i ? ", '" : "'") + checks[i].profile + "'";
    ExecutionContext* ctx = bench[i].ctx.get();
    runs.push_back([ctx] { return ctx->run(); });
  }
  progress("benchmarking " + names + " at opt shapes: " + std::to_string(bc.warmup) + " warm-up and " + std::to_string(bc.iterations) +
           " timed runs each" + (rounds > 1 ? ", alternating in " + std::to_string(rounds) + " rounds" : std::string()));
  KILN_ASSIGN_OR_RETURN(auto results, run_alternating_benchmarks(runs, bc.warmup, bc.iterations, rounds, bc.budget_ms));
  for (size_t i = 0; i < bench.size(); ++i) {
    checks[i].bench = results[i];
    checks[i].benchmarked = true;
    progress("profile '" + checks[i].profile + "': per-layer profile (3 runs with per-step timing, separate from the timed runs)");
    KILN_ASSIGN_OR_RETURN(checks[i].layers, profile_layers(*bench[i].ctx, 3));
  }
  return checks;
}

double ProfileCheck::gflops_per_s() const {
  return benchmarked && bench.latency.p50_ms > 0 ? layers.flops.flops / 1e9 / (bench.latency.p50_ms / 1e3) : 0;
}

double ProfileCheck::peak_fraction(const MatmulPeaks& peaks) const {
  const double ideal = ideal_ms(layers, peaks);
  return benchmarked && bench.latency.p50_ms > 0 ? ideal / bench.latency.p50_ms : 0;
}

std::set<FlopPrecision> used_precisions(const std::vector<ProfileCheck>& checks) {
  std::set<FlopPrecision> used;
  for (const auto& c : checks)
    if (c.benchmarked)
      for (const auto& t : c.layers.steps)
        if (t.flops.flops > 0) used.insert(t.precision);
  return used;
}

std::string build_report_json(const BuildResult& built, const BuildConfig& cfg, const std::vector<ProfileCheck>& checks,
                              double build_seconds, const MatmulPeaks* peaks, const std::map<std::string, std::string>& extra,
                              const std::string& machine_fields) {
  std::ostringstream os;
  os << "{\n  \"engine\": {\"path\": " << json_string(built.engine_path) << ", \"bytes\": " << built.engine_bytes
     << ", \"model\": " << json_string(cfg.model) << ", \"model_bytes\": " << built.model_bytes << ", \"profiles\": [";
  for (size_t i = 0; i < built.profiles.size(); ++i) os << (i ? ", " : "") << json_string(built.profiles[i].profile.name);
  os << "], \"precision\": " << json_string(cfg.precision) << ", \"build_seconds\": " << fmt(build_seconds) << "},\n";
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  os << "  \"machine\": {\"hardware_threads\": " << std::thread::hardware_concurrency() << ", \"omp_threads\": " << omp_get_max_threads()
     << ", \"omp_wait_policy\": " << json_string(policy ? policy : "default")
     << ", \"gomp_spincount\": " << json_string(std::getenv("GOMP_SPINCOUNT") ? std::getenv("GOMP_SPINCOUNT") : "default");
  if (peaks)
    for (int i = 0; i < kFlopPrecisions; ++i)
      if ((*peaks)[i] > 0)
        os << ", \"matmul_peak_gflops_" << flop_precision_name(static_cast<FlopPrecision>(i)) << "\": " << fmt((*peaks)[i]);
  os << machine_fields << "},\n";
  os << "  \"fusions\": {\"attention\": {";
  for (size_t i = 0; i < built.profiles.size(); ++i) {
    size_t fused = 0;
    for (const auto& s : built.profiles[i].attention_sites) fused += s.fused_node.empty() ? 0 : 1;
    os << (i ? ", " : "") << json_string(built.profiles[i].profile.name) << ": " << fused;
  }
  os << "}},\n";
  os << "  \"profiles\": {";
  for (size_t i = 0; i < checks.size(); ++i) {
    const ProfileCheck& c = checks[i];
    os << (i ? "," : "") << "\n    " << json_string(c.profile) << ": {";
    os << "\"fusions\": " << fusions_json(built.profiles[i]) << ", ";
    os << "\"validated_at\": [";
    for (size_t p = 0; p < c.points.size(); ++p) os << (p ? ", " : "") << json_string(c.points[p]);
    os << "], \"engine_vs_plan_max_abs_diff\": " << fmt(c.max_abs_diff) << ", \"opt_shapes\": {";
    size_t k = 0;
    for (const auto& [name, s] : c.opt_shapes) os << (k++ ? ", " : "") << json_string(name) << ": " << json_shape(s);
    os << "}";
    if (!c.lowp_max_abs_err.empty()) {
      os << ", " << json_string(c.lowp + "_vs_fp32") << ": {\"tolerance\": " << fmt(c.lowp_tolerance) << ", \"within_tolerance\": "
         << (c.lowp_within_tolerance ? "true" : "false");
      if (c.lowp == "int8") os << ", \"holdout_batches\": " << c.holdout_batches;
      os << ", \"outputs\": {";
      size_t j = 0;
      for (const auto& [name, e] : c.lowp_max_abs_err)
        os << (j++ ? ", " : "") << json_string(name) << ": {\"max_abs_err\": " << fmt(e) << ", \"max_abs_fp32\": "
           << fmt(c.fp32_max_abs.at(name)) << ", \"relative_err\": " << fmt(e / std::max(1.0, c.fp32_max_abs.at(name))) << "}";
      os << "}}";
    }
    if (c.benchmarked) {
      os << ", \"latency_ms\": " << latency_json(c.bench.latency) << ", \"iterations\": " << c.bench.latency.iterations
         << ", \"budget_ms\": " << fmt(c.bench.budget_ms) << ", \"within_budget\": " << (c.bench.within_budget ? "true" : "false")
         << ", \"deadline_misses\": " << c.bench.deadline_misses << ", \"first_run_ms\": " << fmt(c.first_run_ms);
      // FLOPs: profiles/flop_count.h (what is counted; upper bound when a mask hid keys from the count).
      os << ", \"gflop\": " << fmt(c.layers.flops.flops / 1e9) << ", \"gflop_upper_bound\": " << (c.layers.flops.upper_bound ? "true" : "false")
         << ", \"gflops_per_s\": " << fmt(c.gflops_per_s());
      if (peaks) os << ", \"peak_fraction\": " << fmt(c.peak_fraction(*peaks));
      os << ", \"profiled_run_ms\": " << fmt(c.layers.run_ms) << ", " << layer_summary_json(c.layers, 15, peaks);
      os << ", \"samples_ms\": [";
      for (size_t k = 0; k < c.bench.samples_ms.size(); ++k) os << (k ? ", " : "") << fmt(c.bench.samples_ms[k]);
      os << "], " << all_layers_json(c.layers);
      if (!c.trace_path.empty()) os << ", \"trace\": " << json_string(c.trace_path);
    }
    os << "}";
  }
  os << "\n  }";
  for (const auto& [key, json] : extra) os << ",\n  " << json_string(key) << ": " << json;
  os << "\n}\n";
  return os.str();
}

}  // namespace kiln
