#include "profiles/streaming_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

#include "profiles/engine_check.h"
#include "builder/json_text.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;
using Inputs = std::vector<std::pair<std::string, Tensor>>;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

const BindingInfo* find_input(const ProfileInfo& p, const std::string& name) {
  for (const auto& b : p.inputs)
    if (b.name == name) return &b;
  return nullptr;
}

// Rows [begin, end) of `t` along `axis`, contiguous.
Tensor slice_axis(const TensorView& t, int axis, int64_t begin, int64_t end) {
  Shape s = t.shape;
  s[axis] = end - begin;
  Tensor out = Tensor::zeros(t.dtype, s);
  const size_t es = dtype_size(t.dtype);
  const int64_t outer = t.shape.numel(0, axis), inner = t.shape.numel(axis + 1, t.shape.rank()) * static_cast<int64_t>(es);
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(static_cast<char*>(out.data()) + o * (end - begin) * inner,
                static_cast<const char*>(t.data) + (o * t.shape[axis] + begin) * inner, static_cast<size_t>((end - begin) * inner));
  return out;
}

double max_abs_err(const TensorView& a, const TensorView& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(read_double(a, i) - read_double(b, i));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

std::vector<std::pair<std::string, TensorView>> views(const Inputs& in) {
  std::vector<std::pair<std::string, TensorView>> v;
  for (const auto& [name, t] : in) v.emplace_back(name, t.view());
  return v;
}

struct Snapshot {
  std::map<std::string, Tensor> values;  // non-state outputs and state contents
};

StatusOr<Snapshot> snapshot(const StreamingSession& s, const Engine& engine, const StreamingSpec& spec) {
  Snapshot snap;
  const ProfileInfo& p = engine.profiles()[engine.find_profile(spec.step)];
  for (const auto& out : p.outputs) {
    bool state = false;
    for (const auto& st : spec.state) state = state || st.output == out.name;
    if (state) {
      KILN_ASSIGN_OR_RETURN(snap.values[out.name], s.state(out.name));
    } else {
      KILN_ASSIGN_OR_RETURN(TensorView v, s.output(out.name));
      snap.values[out.name] = Tensor::copy_of(v);
    }
  }
  return snap;
}

// full(T) against full(T-1) + one step, on the cold-start profile's opt inputs. Each per-step
// input is split along the axis where the two profiles' opt shapes differ (the timestep axis).
Status check_equivalence(StreamingSession& session, const Engine& engine, const BuildConfig& cfg, const StreamingSpec& spec,
                         StreamingResult& r, const std::function<void(const std::string&)>& progress) {
  KILN_ASSIGN_OR_RETURN(Inputs full, streaming_step_inputs(engine, spec.cold_start, cfg, spec));
  const ProfileInfo& cold = engine.profiles()[engine.find_profile(spec.cold_start)];
  const ProfileInfo& warm = engine.profiles()[engine.find_profile(spec.step)];
  Inputs prefix, last;
  for (const auto& [name, t] : full) {
    const BindingInfo* c = find_input(cold, name);
    const BindingInfo* w = find_input(warm, name);
    int axis = -1;
    for (int d = 0; w && d < t.shape().rank() && d < w->opt.rank(); ++d)
      if (t.shape()[d] != w->opt[d]) {
        if (axis >= 0)
          return InvalidArgument("streaming equivalence: input '" + name + "' differs from the step profile's shape " + w->opt.str() +
                                 " in more than one dim (" + t.shape().str() + "); cannot split it into timesteps");
        axis = d;
      }
    if (!c || !w) return InvalidArgument("streaming equivalence: input '" + name + "' is not an input of both profiles");
    if (axis < 0) {
      prefix.emplace_back(name, t);
      last.emplace_back(name, t);
      continue;
    }
    const int64_t total = t.shape()[axis], step = w->opt[axis];
    if (total <= step || total - step < c->min[axis])
      return InvalidArgument("streaming equivalence: cold-start profile '" + spec.cold_start + "' input '" + name + "' dim " +
                             std::to_string(axis) + " must allow " + std::to_string(total - step) + " (T-1) as well as " +
                             std::to_string(total) + " (T); its range is [" + std::to_string(c->min[axis]) + ", " + std::to_string(c->max[axis]) + "]");
    r.equivalence_timesteps = total / step;
    prefix.emplace_back(name, slice_axis(t.view(), axis, 0, total - step));
    last.emplace_back(name, slice_axis(t.view(), axis, total - step, total));
  }
  progress("streaming: equivalence check, full(T=" + std::to_string(r.equivalence_timesteps) + ") vs full(T-1) + one '" + spec.step + "' step");
  session.reset();
  KILN_RETURN_IF_ERROR(session.step(views(full)).with_context("streaming equivalence, full(T)"));
  KILN_ASSIGN_OR_RETURN(Snapshot a, snapshot(session, engine, spec));
  session.reset(/*scrub=*/true);
  KILN_RETURN_IF_ERROR(session.step(views(prefix)).with_context("streaming equivalence, full(T-1)"));
  if (session.cached_rows() > spec.tokens_per_step * spec.max_steps)
    return InvalidArgument("streaming equivalence: full(T-1) leaves " + std::to_string(session.cached_rows()) + " cache rows, more than the window of " +
                           std::to_string(spec.max_steps) + " steps keeps; the check needs T-1 <= window.max_steps");
  KILN_RETURN_IF_ERROR(session.step(views(last)).with_context("streaming equivalence, incremental step"));
  KILN_ASSIGN_OR_RETURN(Snapshot b, snapshot(session, engine, spec));
  for (const auto& [name, ta] : a.values) {
    const Tensor& tb = b.values.at(name);
    // An output over the call's new tokens only (its length differs between full(T) and one
    // step) has no counterpart to compare; the state and whole-window outputs do.
    if (ta.shape() != tb.shape()) continue;
    const double e = max_abs_err(ta.view(), tb.view());
    r.equivalence_err[name] = e;
    r.equivalence_max_abs_err = std::max(r.equivalence_max_abs_err, e);
  }
  if (r.equivalence_err.empty()) return InvalidArgument("streaming equivalence: no output has the same shape in full(T) and full(T-1) + step");
  session.reset();
  return Status::Ok();
}

}  // namespace

// Per-step inputs of `profile` at its opt shapes: everything but the state inputs and the mask
// the session generates.
StatusOr<Inputs> streaming_step_inputs(const Engine& engine, const std::string& profile, const BuildConfig& cfg, const StreamingSpec& spec) {
  KILN_ASSIGN_OR_RETURN(auto ctx, engine.create_context(profile));
  const ProfileInfo& p = engine.profiles()[engine.find_profile(profile)];
  std::map<std::string, Shape> shapes;
  for (const auto& b : p.inputs) shapes[b.name] = b.opt;
  KILN_ASSIGN_OR_RETURN(Inputs all, generate_profile_inputs(*ctx, shapes, cfg.inputs));
  Inputs out;
  for (auto& [name, t] : all) {
    bool skip = name == spec.mask_input;
    for (const auto& st : spec.state) skip = skip || name == st.input;
    if (!skip) out.emplace_back(name, std::move(t));
  }
  return out;
}

StatusOr<StreamingResult> run_streaming_check(std::shared_ptr<const Engine> engine, const BuildConfig& cfg, bool benchmark,
                                              const std::function<void(const std::string&)>& progress) {
  StreamingResult r;
  if (!engine->info().has_streaming) return Internal("the engine does not record the config's streaming section");
  const StreamingSpec& spec = engine->info().streaming;
  progress("streaming: creating a session ('" + spec.cold_start + "' cold start, then '" + spec.step + "' steps; window " +
           std::to_string(spec.max_steps) + " x " + std::to_string(spec.tokens_per_step) + " tokens)");
  KILN_ASSIGN_OR_RETURN(auto session, StreamingSession::create(engine));
  r.state_buffer_bytes = session->state_buffer_bytes();
  KILN_RETURN_IF_ERROR(check_equivalence(*session, *engine, cfg, spec, r, progress));
  for (const auto& [name, e] : r.equivalence_err) progress("streaming:   " + name + ": max abs err " + fmt(e));
  constexpr double kTolerance = 1e-4;  // float32, the bound
  if (!(r.equivalence_max_abs_err <= kTolerance))
    return DataLoss("streaming equivalence failed: full(T) and full(T-1) + one step differ by " + fmt(r.equivalence_max_abs_err) +
                    " (tolerance " + fmt(kTolerance) + ")");
  if (!benchmark) return r;

  KILN_ASSIGN_OR_RETURN(Inputs cold_in, streaming_step_inputs(*engine, spec.cold_start, cfg, spec));
  KILN_ASSIGN_OR_RETURN(Inputs step_in, streaming_step_inputs(*engine, spec.step, cfg, spec));
  const auto cold_views = views(cold_in), step_views = views(step_in);
  r.steps = cfg.streaming.steps;
  r.budget_ms = cfg.benchmark.budget_ms;
  const double period_ms = 1000.0 / cfg.benchmark.rate_hz;
  progress("streaming: benchmark, 1 cold start + " + std::to_string(r.steps) + " steps paced at " + fmt(cfg.benchmark.rate_hz) + " Hz (" +
           fmt(r.steps * period_ms / 1000.0) + " s)");
  auto t0 = Clock::now();
  KILN_RETURN_IF_ERROR(session->step(cold_views));
  r.cold_start_ms = ms_since(t0);
  std::vector<double> lat, service;
  lat.reserve(static_cast<size_t>(r.steps));
  service.reserve(static_cast<size_t>(r.steps));
  r.step_times.reserve(static_cast<size_t>(r.steps));
  uint64_t copied = 0, appended = 0;
  // A fixed schedule: step i is released at loop_start + i periods whatever happened before it.
  // A late step is not re-based on its own start (that would hide the wait it caused).
  const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(period_ms));
  const auto loop_start = Clock::now() + period;
  auto ms_from_start = [&](Clock::time_point t) { return std::chrono::duration<double, std::milli>(t - loop_start).count(); };
  for (int i = 0; i < r.steps; ++i) {
    const auto release = loop_start + i * period;
    std::this_thread::sleep_until(release);
    const auto start = Clock::now();
    KILN_RETURN_IF_ERROR(session->step(step_views).with_context("streaming benchmark step " + std::to_string(i + 1)));
    const auto end = Clock::now();
    StreamingResult::Step st{ms_from_start(release), ms_from_start(start), ms_from_start(end), false};
    lat.push_back(st.end_ms - st.release_ms);
    service.push_back(st.end_ms - st.start_ms);
    st.missed = lat.back() > r.budget_ms;
    r.step_times.push_back(st);
    const StreamingStepStats& s = session->last_stats();
    copied += s.state_bytes_copied;
    appended += s.state_bytes_appended;
    r.state_bytes_copied_max = std::max(r.state_bytes_copied_max, s.state_bytes_copied);
    r.in_place_steps += s.in_place ? 1 : 0;
    r.deadline_misses += st.missed ? 1 : 0;
  }
  r.cached_rows = session->last_stats().cached_rows;
  if (r.steps > 0) {
    r.latency = compute_latency_stats(lat);
    r.service = compute_latency_stats(service);
    r.profile_switch_ms = std::max(0.0, service.front() - r.service.p50_ms);
    r.state_bytes_copied_per_step = static_cast<double>(copied) / r.steps;
    r.state_bytes_appended_per_step = static_cast<double>(appended) / r.steps;
  }
  return r;
}

std::string streaming_report_json(const StreamingResult& r) {
  std::ostringstream os;
  os << "{\"steps\": " << r.steps << ", \"latency_ms\": " << latency_json(r.latency) << ", \"budget_ms\": " << fmt(r.budget_ms)
     << ", \"deadline_misses\": " << r.deadline_misses << ", \"cold_start_ms\": " << fmt(r.cold_start_ms)
     << ", \"equivalence_max_abs_err\": " << fmt(r.equivalence_max_abs_err) << ", \"equivalence_timesteps\": " << r.equivalence_timesteps
     << ", \"equivalence_err\": {";
  size_t k = 0;
  for (const auto& [name, e] : r.equivalence_err) os << (k++ ? ", " : "") << json_string(name) << ": " << fmt(e);
  os << "}, \"state_bytes_copied_per_step\": " << fmt(r.state_bytes_copied_per_step) << ", \"state_bytes_copied_max\": " << r.state_bytes_copied_max
     << ", \"state_bytes_appended_per_step\": " << fmt(r.state_bytes_appended_per_step) << ", \"state_buffer_bytes\": " << r.state_buffer_bytes
     << ", \"in_place_steps\": " << r.in_place_steps << ", \"cached_rows\": " << r.cached_rows << ", \"profile_switch_ms\": " << fmt(r.profile_switch_ms);
  // latency_ms counts from each step's scheduled release; service_ms from its start.
  os << ", \"latency_from\": \"scheduled_release\", \"service_ms\": " << latency_json(r.service) << ", \"steps_detail\": [";
  for (size_t i = 0; i < r.step_times.size(); ++i) {
    const auto& st = r.step_times[i];
    os << (i ? ", " : "") << "[" << fmt(st.release_ms) << ", " << fmt(st.start_ms) << ", " << fmt(st.end_ms) << ", " << (st.missed ? 1 : 0) << "]";
  }
  os << "]}";
  return os.str();
}

}  // namespace kiln
