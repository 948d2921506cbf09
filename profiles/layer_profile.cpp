#include "profiles/layer_profile.h"

#include "builder/json_text.h"
#include "runtime/kernel.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>

namespace kiln {

namespace {


std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Microseconds with ns resolution: enough digits that short view steps keep a distinct start.
std::string micros(double ms) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", std::max(ms, 0.0) * 1000.0);
  return buf;
}

std::string describe(const TensorView& v) {
  std::string s = dtype_name(v.dtype) + "[";
  for (int d = 0; d < v.shape.rank(); ++d) s += (d ? "," : "") + std::to_string(v.shape[d]);
  return s + "]";
}

std::string json_list(const std::vector<std::string>& items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + json_string(items[i]);
  return s + "]";
}

}  // namespace

StatusOr<LayerProfile> profile_layers(ExecutionContext& ctx, int runs) {
  runs = std::max(runs, 1);
  ctx.set_profiling(true);
  LayerProfile p;
  // step_ms() accumulates over the runs: each run's own times are the differences.
  std::vector<std::vector<double>> per_run(ctx.plan().steps.size());
  std::vector<double> before(ctx.plan().steps.size(), 0.0);
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    Status st = ctx.run();
    p.run_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) {
      ctx.set_profiling(false);
      return st.with_context("profiling run");
    }
    for (size_t s = 0; s < per_run.size(); ++s) {
      per_run[s].push_back(ctx.step_ms()[s] - before[s]);
      before[s] = ctx.step_ms()[s];
    }
  }
  p.run_ms /= runs;
  const Plan& plan = ctx.plan();
  const std::vector<FlopCount> flops = plan_step_flops(ctx);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const PlanStep& step = plan.steps[s];
    LayerTiming t;
    t.name = step.name;
    t.op_type = is_kernel_domain(step.domain) ? step.op_type : step.domain + "::" + step.op_type;
    t.begin_ms = ctx.step_begin_ms()[s];
    t.ms = ctx.step_ms()[s] / runs;
    t.run_ms = per_run[s];
    t.replaced = step.replaced_nodes;
    for (int v : step.inputs) t.inputs.push_back(v >= 0 ? describe(ctx.value(v)) : "");
    for (int v : step.outputs) t.outputs.push_back(describe(ctx.value(v)));
    t.flops = flops[s];
    t.precision = step_precision(step, ctx.kernel(s).impl_name());
    p.steps.push_back(std::move(t));
  }
  p.flops = total_flops(flops);
  ctx.set_profiling(false);
  return p;
}

std::vector<size_t> slowest_steps(const LayerProfile& p, size_t n) {
  std::vector<size_t> order(p.steps.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p.steps[a].ms > p.steps[b].ms; });
  order.resize(std::min(n, order.size()));
  return order;
}

std::vector<std::pair<std::string, double>> ms_by_op_type(const LayerProfile& p) {
  std::map<std::string, double> sum;
  for (const auto& s : p.steps) sum[s.op_type] += s.ms;
  std::vector<std::pair<std::string, double>> out(sum.begin(), sum.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

std::vector<std::pair<std::string, double>> gflop_by_op_type(const LayerProfile& p) {
  std::map<std::string, double> sum;
  for (const auto& s : p.steps)
    if (s.flops.flops > 0) sum[s.op_type] += s.flops.flops / 1e9;
  std::vector<std::pair<std::string, double>> out(sum.begin(), sum.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

std::array<double, kFlopPrecisions> gflop_by_precision(const LayerProfile& p) {
  std::array<double, kFlopPrecisions> g{};
  for (const auto& s : p.steps) g[static_cast<int>(s.precision)] += s.flops.flops / 1e9;
  return g;
}

double ideal_ms(const LayerProfile& p, const std::array<double, kFlopPrecisions>& peak_gflops, const std::string& op_type) {
  double ms = 0;
  for (const auto& s : p.steps) {
    if (s.flops.flops <= 0 || (!op_type.empty() && s.op_type != op_type)) continue;
    const double peak = peak_gflops[static_cast<int>(s.precision)];
    if (peak <= 0) return 0;
    ms += s.flops.flops / 1e9 / peak * 1e3;
  }
  return ms;
}

std::vector<std::pair<std::string, double>> peak_fraction_by_op_type(const LayerProfile& p,
                                                                     const std::array<double, kFlopPrecisions>& peak_gflops) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [op, gflop] : gflop_by_op_type(p)) {
    double ms = 0;
    for (const auto& s : p.steps) ms += s.op_type == op ? s.ms : 0;
    const double ideal = ideal_ms(p, peak_gflops, op);
    if (ms > 0 && ideal > 0) out.emplace_back(op, ideal / ms);
  }
  return out;
}

std::string chrome_trace_json(const LayerProfile& p, const std::vector<std::pair<std::string, std::string>>& other_data) {
  std::ostringstream os;
  os << "{\"traceEvents\": [";
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const LayerTiming& s = p.steps[i];
    os << (i ? "," : "") << "\n  {\"name\": " << json_string(s.name) << ", \"cat\": " << json_string(s.op_type)
       << ", \"ph\": \"X\", \"ts\": " << micros(s.begin_ms) << ", \"dur\": " << micros(s.ms) << ", \"pid\": 1, \"tid\": 1"
       << ", \"args\": {\"op_type\": " << json_string(s.op_type) << ", \"step\": " << i << ", \"inputs\": " << json_list(s.inputs)
       << ", \"outputs\": " << json_list(s.outputs);
    if (!s.replaced.empty()) os << ", \"replaced\": " << json_list(s.replaced);  // the ONNX nodes a fused step stands for
    if (s.run_ms.size() > 1) {  // several profiled runs: each one's time, for medians and spreads
      os << ", \"run_us\": [";
      for (size_t r = 0; r < s.run_ms.size(); ++r) os << (r ? ", " : "") << micros(s.run_ms[r]);
      os << "]";
    }
    if (s.flops.flops > 0)
      os << ", \"gflop\": " << num(s.flops.flops / 1e9) << ", \"precision\": " << json_string(flop_precision_name(s.precision));
    os << "}}";
  }
  os << "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {";
  for (size_t i = 0; i < other_data.size(); ++i)
    os << (i ? ", " : "") << json_string(other_data[i].first) << ": " << json_string(other_data[i].second);
  os << "}}\n";
  return os.str();
}

std::string layer_summary_json(const LayerProfile& p, size_t top_n, const std::array<double, kFlopPrecisions>* peak_gflops) {
  std::ostringstream os;
  os << "\"layers\": [";
  size_t k = 0;
  for (size_t i : slowest_steps(p, top_n))
    os << (k++ ? ", " : "") << "{\"name\": " << json_string(p.steps[i].name) << ", \"op_type\": " << json_string(p.steps[i].op_type)
       << ", \"ms\": " << num(p.steps[i].ms) << "}";
  os << "], \"by_op_type\": {";
  k = 0;
  for (const auto& [op, ms] : ms_by_op_type(p)) os << (k++ ? ", " : "") << json_string(op) << ": " << num(ms);
  os << "}, \"gflop_by_op_type\": {";
  k = 0;
  for (const auto& [op, gflop] : gflop_by_op_type(p)) os << (k++ ? ", " : "") << json_string(op) << ": " << num(gflop);
  os << "}, \"gflop_by_precision\": {";
  k = 0;
  const auto by_precision = gflop_by_precision(p);
  for (int i = 0; i < kFlopPrecisions; ++i)
    if (by_precision[i] > 0) os << (k++ ? ", " : "") << json_string(flop_precision_name(static_cast<FlopPrecision>(i))) << ": " << num(by_precision[i]);
  os << "}";
  if (peak_gflops) {
    os << ", \"peak_fraction_by_op_type\": {";
    k = 0;
    for (const auto& [op, f] : peak_fraction_by_op_type(p, *peak_gflops)) os << (k++ ? ", " : "") << json_string(op) << ": " << num(f);
    os << "}";
  }
  return os.str();
}

std::string all_layers_json(const LayerProfile& p) {
  std::ostringstream os;
  const size_t runs = p.steps.empty() ? 0 : p.steps.front().run_ms.size();
  os << "\"layer_runs\": " << runs << ", \"all_layers\": [";
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const LayerTiming& t = p.steps[i];
    os << (i ? ", " : "") << "{\"name\": " << json_string(t.name) << ", \"op_type\": " << json_string(t.op_type)
       << ", \"replaced\": " << json_list(t.replaced) << ", \"ms\": [";
    for (size_t r = 0; r < t.run_ms.size(); ++r) os << (r ? ", " : "") << num(t.run_ms[r]);
    os << "]}";
  }
  os << "]";
  return os.str();
}

}  // namespace kiln
