#include "runtime/position_bounds.h"

#include <algorithm>

namespace kiln {

namespace {

class Tracer {
 public:
  explicit Tracer(const Plan& plan) : plan_(plan), producer_(plan.values.size(), -1), is_input_(plan.values.size(), 0) {
    for (size_t s = 0; s < plan.steps.size(); ++s)
      for (int o : plan.steps[s].outputs)
        if (o >= 0) producer_[o] = static_cast<int>(s);
    for (int v : plan.inputs) is_input_[v] = 1;
  }

  const PlanStep* producer(int v, const char* op) const {
    if (v < 0 || producer_[v] < 0) return nullptr;
    const PlanStep& s = plan_.steps[producer_[v]];
    return s.domain.empty() && s.op_type == op && !s.inputs.empty() ? &s : nullptr;
  }

  // The plan input `v` carries unchanged in value (through ops that only reshape, broadcast or
  // cast it), or -1.
  int input_through_shape_ops(int v) const {
    static const char* const kThrough[] = {"Unsqueeze", "Expand", "Reshape", "Squeeze", "Cast", "Identity"};
    for (int depth = 0; depth < 12 && v >= 0; ++depth) {
      if (is_input_[v]) return v;
      const PlanStep* s = nullptr;
      for (const char* op : kThrough)
        if (!s) s = producer(v, op);
      if (!s) return -1;
      v = s->inputs[0];
    }
    return -1;
  }

  // How many index columns `v` contributes to a Concat along the last axis: a constant's last dim,
  // 1 for Unsqueeze(x, axes = [-1]); -1 when not known from here.
  int64_t columns(int v) const {
    if (v < 0) return -1;
    if (plan_.values[v].constant >= 0) {
      const Shape& s = plan_.constants[plan_.values[v].constant].shape();
      return s.rank() > 0 ? s[s.rank() - 1] : -1;
    }
    return unsqueezed_last(v) ? 1 : -1;
  }

  // Whether `v` is Unsqueeze(x, axes = [-1]) (attribute or constant input).
  bool unsqueezed_last(int v) const {
    const PlanStep* u = producer(v, "Unsqueeze");
    if (!u) return false;
    std::vector<int64_t> axes;
    if (auto it = u->attrs.find("axes"); it != u->attrs.end()) {
      axes = it->second.ints;
    } else if (u->inputs.size() > 1 && u->inputs[1] >= 0 && plan_.values[u->inputs[1]].constant >= 0) {
      const Tensor& c = plan_.constants[plan_.values[u->inputs[1]].constant];
      for (int64_t i = 0; i < c.numel(); ++i) axes.push_back(read_int(c.view(), i));
    }
    return axes == std::vector<int64_t>{-1};
  }

  // The plan input at the root of a ScatterND chain's data, or -1.
  int data_root(int v) const {
    for (int depth = 0; depth < 64 && v >= 0; ++depth) {
      if (is_input_[v]) return v;
      const PlanStep* s = producer(v, "ScatterND");
      if (!s) return -1;
      v = s->inputs[0];
    }
    return -1;
  }

  bool scalar_input(int v) const {
    const PlanValue& pv = plan_.values[v];
    if (pv.dtype != DType::kInt64 && pv.dtype != DType::kInt32) return false;
    return std::all_of(pv.dims.begin(), pv.dims.end(), [](int64_t d) { return d == 1; });
  }

 private:
  const Plan& plan_;
  std::vector<int> producer_;
  std::vector<char> is_input_;
};

}  // namespace

std::vector<PositionBound> find_position_bounds(const Plan& plan) {
  Tracer t(plan);
  std::vector<PositionBound> bounds;
  for (const PlanStep& step : plan.steps) {
    if (!step.domain.empty() || step.op_type != "ScatterND" || step.inputs.size() < 2) continue;
    const int data = t.data_root(step.inputs[0]);
    const PlanStep* cat = t.producer(step.inputs[1], "Concat");
    if (data < 0 || !cat || !cat->attrs.count("axis") || cat->attrs.at("axis").i != -1) continue;
    const PlanValue& dv = plan.values[data];
    size_t axis = 0;  // the data axis the next part's first column indexes
    for (int part : cat->inputs) {
      const int64_t cols = t.columns(part);
      if (cols < 0) break;  // its width is unknown: so are the axes of the parts after it
      const int pos = cols == 1 ? t.input_through_shape_ops(part) : -1;
      axis += static_cast<size_t>(cols);
      if (pos < 0 || !t.scalar_input(pos) || axis > dv.dims.size() || dv.dims[axis - 1] <= 0) continue;
      PositionBound b{plan.values[pos].name, dv.name, static_cast<int>(axis - 1), dv.dims[axis - 1]};
      const bool seen = std::any_of(bounds.begin(), bounds.end(), [&](const PositionBound& o) {
        return o.position == b.position && o.limit == b.limit;
      });
      if (!seen) bounds.push_back(std::move(b));
    }
  }
  return bounds;
}

}  // namespace kiln
