#include "runtime/memory_plan.h"

#include <algorithm>
#include <functional>
#include <utility>


namespace kiln {

namespace {
size_t aligned_size(const TensorDesc& d) {
  const size_t bytes = static_cast<size_t>(d.shape.numel()) * dtype_size(d.dtype);
  return (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
}
}  // namespace

PlanMemory PlanMemory::analyze(const Plan& plan, const KernelRegistry& registry) {
  const size_t nv = plan.values.size(), ns = plan.steps.size();
  PlanMemory m;
  m.step.resize(ns);
  m.producer.assign(nv, -1);
  m.readers.resize(nv);
  m.last_use.assign(nv, -1);
  m.alias_root.assign(nv, -1);
  std::vector<const Tensor*> constants;
  for (size_t s = 0; s < ns; ++s) {
    const PlanStep& step = plan.steps[s];
    for (int v : step.inputs)
      if (v >= 0) {
        m.last_use[v] = static_cast<int>(s);
        m.readers[v].push_back(static_cast<int>(s));
      }
    for (int v : step.outputs) m.producer[v] = static_cast<int>(s);
    if (!is_kernel_domain(step.domain)) continue;  // a plugin may reuse a standard op's name
    const MemoryRule rule = registry.memory_rule(step.domain, step.op_type);
    if (!rule) continue;
    constants.clear();
    for (int v : step.inputs)
      constants.push_back(v >= 0 && plan.values[v].constant >= 0 ? &plan.constants[plan.values[v].constant] : nullptr);
    m.step[s] = rule(MemoryQuery{step.attrs, constants, step.outputs.size()});
    // A view needs an input to view and exactly one output.
    if (m.step[s].alias != OutputAlias::kNone && (step.outputs.size() != 1 || step.inputs.empty() || step.inputs[0] < 0))
      m.step[s].alias = OutputAlias::kNone;
  }
  for (int v : plan.outputs) m.last_use[v] = static_cast<int>(ns);
  // An always-view's buffer is its input's (the alias root), which must then live as long as its
  // last view is read.
  for (size_t s = 0; s < ns; ++s)
    if (m.always_views(s)) m.alias_root[plan.steps[s].outputs[0]] = m.root(plan.steps[s].inputs[0]);
  for (size_t v = 0; v < nv; ++v)
    if (m.alias_root[v] >= 0 && m.last_use[v] >= 0) m.last_use[m.alias_root[v]] = std::max(m.last_use[m.alias_root[v]], m.last_use[v]);
  // A step that may be a view keeps its own (planned) buffer, and its input's buffer lives as long
  // as the step's output is read; later steps first, so chains of them reach the root.
  for (size_t s = ns; s-- > 0;) {
    if (m.step[s].alias != OutputAlias::kMayView) continue;
    const int root = m.root(plan.steps[s].inputs[0]);
    m.last_use[root] = std::max(m.last_use[root], m.last_use[plan.steps[s].outputs[0]]);
  }
  return m;
}

void PlanMemory::alias(int value, int root_value) {
  alias_root[value] = root_value;
  last_use[root_value] = std::max(last_use[root_value], last_use[value]);
}

namespace {
// The axis step `s` joins along at these shapes, when its output's slices along it are contiguous
// (every dim before it is 1), else -1.
int64_t contiguous_join_axis(const Plan& plan, const PlanMemory& m, std::span<const TensorDesc> desc, size_t s) {
  if (!m.step[s].joins_inputs_along) return -1;
  const Shape& os = desc[plan.steps[s].outputs[0]].shape;
  if (os.rank() == 0) return -1;
  const int64_t axis = *m.step[s].joins_inputs_along < 0 ? *m.step[s].joins_inputs_along + os.rank() : *m.step[s].joins_inputs_along;
  if (axis < 0 || axis >= os.rank() || os.numel(0, static_cast<int>(axis)) != 1) return -1;
  return axis;
}

// A joining step whose inputs are the first inputs of a larger joining step along the same axis
// (DenseNet: each layer's Concat of every earlier feature map is a prefix of its block's last
// Concat) has its output hosted at the start of the larger one's, whose parts then sit where
// both need them: no Concat of the chain copies a part that a kernel wrote in place. The largest
// such step hosts; it holds more inputs, so hosts never form a cycle.
void host_prefix_joins(const Plan& plan, const PlanMemory& m, std::span<const TensorDesc> desc, std::span<const char> bound,
                       const std::vector<char>& is_output, ArenaLayout& layout) {
  std::vector<size_t> joins;
  std::vector<int64_t> axis(plan.steps.size(), -1);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    axis[s] = contiguous_join_axis(plan, m, desc, s);
    const int out = axis[s] >= 0 ? plan.steps[s].outputs[0] : -1;
    if (out >= 0 && m.alias_root[out] < 0 && !bound[out]) joins.push_back(s);
  }
  for (size_t s : joins) {
    const PlanStep& small = plan.steps[s];
    const int out = small.outputs[0];
    if (is_output[out]) continue;
    const Shape& os = desc[out].shape;
    int best = -1;
    for (size_t t : joins) {
      const PlanStep& big = plan.steps[t];
      if (t == s || axis[t] != axis[s] || big.inputs.size() <= small.inputs.size()) continue;
      if (!std::equal(small.inputs.begin(), small.inputs.end(), big.inputs.begin())) continue;
      const TensorDesc& bd = desc[big.outputs[0]];
      if (bd.dtype != desc[out].dtype || bd.shape.rank() != os.rank()) continue;
      bool same = true;
      for (int d = 0; d < os.rank(); ++d) same = same && (d == axis[s] || bd.shape[d] == os[d]);
      if (same && (best < 0 || big.inputs.size() > plan.steps[best].inputs.size())) best = static_cast<int>(t);
    }
    if (best < 0) continue;
    layout.host[out] = plan.steps[best].outputs[0];
    layout.host_offset[out] = 0;
  }
}

// The value whose buffer holds `v`: its host's host, and so on (v itself when hosted by none).
int host_root(const ArenaLayout& layout, int v) {
  while (layout.host[v] >= 0) v = layout.host[v];
  return v;
}

// Places the inputs of joining steps (Concat) in their slices of the joined output's buffer.
void place_joined_inputs(const Plan& plan, const PlanMemory& m, std::span<const TensorDesc> desc, std::span<const char> bound,
                         const std::vector<char>& is_output, ArenaLayout& layout) {
  host_prefix_joins(plan, m, desc, bound, is_output, layout);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const PlanStep& step = plan.steps[s];
    if (!m.step[s].joins_inputs_along) continue;
    const int out = step.outputs[0];
    const Shape& os = desc[out].shape;
    if (m.alias_root[out] >= 0 || bound[out] || os.rank() == 0) continue;
    const int64_t axis = *m.step[s].joins_inputs_along < 0 ? *m.step[s].joins_inputs_along + os.rank() : *m.step[s].joins_inputs_along;
    if (axis < 0 || axis >= os.rank() || os.numel(0, static_cast<int>(axis)) != 1) continue;
    size_t offset = 0;
    for (int in : step.inputs) {
      if (in < 0) continue;
      const TensorDesc& d = desc[in];
      const size_t bytes = static_cast<size_t>(d.shape.numel()) * dtype_size(d.dtype);
      const int root = m.root(in);
      const bool placeable = bytes > 0 && root != out && m.producer[root] >= 0 && !m.always_views(m.producer[root]) && layout.host[root] < 0 &&
                             !bound[root] && desc[root].shape.numel() == d.shape.numel() && desc[root].dtype == d.dtype &&
                             !(is_output[root] && is_output[out]);
      if (placeable) {
        layout.host[root] = out;
        layout.host_offset[root] = offset;
      }
      offset += bytes;
    }
  }
}

// Output 0 of a step whose kernel writes over input i (writes_over[s] = i) takes that input's buffer
// where the step is its last reader and the buffer is the input's alone: produced by a step (not
// the caller's input or a constant), not a view, not a slice of a joined output nor holding slices,
// neither bound nor a graph output, not read through another input of the step, and of output 0's
// size. A chain of such steps (the residual stream through a ResNet's blocks) shares one buffer.
void place_over_inputs(const Plan& plan, const PlanMemory& m, std::span<const TensorDesc> desc, std::span<const char> bound,
                       const std::vector<char>& is_output, std::span<const int> writes_over, ArenaLayout& layout) {
  if (writes_over.empty()) return;
  const size_t nv = plan.values.size();
  std::vector<char> holds_slices(nv, 0), written_over(nv, 0);
  for (size_t v = 0; v < nv; ++v)
    if (layout.host[v] >= 0) holds_slices[layout.host[v]] = 1;
  auto free_value = [&](int v) { return !bound[v] && !is_output[v] && m.alias_root[v] < 0; };
  for (size_t s = 0; s < plan.steps.size() && s < writes_over.size(); ++s) {
    const PlanStep& step = plan.steps[s];
    const int i = writes_over[s];
    if (i < 0 || static_cast<size_t>(i) >= step.inputs.size() || step.outputs.empty()) continue;
    const int in = step.inputs[i], out = step.outputs[0];
    if (in < 0 || out < 0 || in == out || !free_value(in) || !free_value(out) || layout.host[out] >= 0) continue;
    if (m.producer[in] < 0 || m.last_use[in] != static_cast<int>(s) || holds_slices[in] || (layout.host[in] >= 0 && !written_over[in])) continue;
    if (desc[in].dtype != desc[out].dtype || desc[in].shape.numel() != desc[out].shape.numel()) continue;
    bool read_elsewhere = false;
    for (size_t j = 0; j < step.inputs.size(); ++j) {
      const int v = step.inputs[j];
      read_elsewhere = read_elsewhere || (j != static_cast<size_t>(i) && v >= 0 && host_root(layout, m.root(v)) == host_root(layout, in));
    }
    if (read_elsewhere) continue;
    layout.host[out] = in;
    layout.host_offset[out] = 0;
    written_over[out] = 1;
  }
}
}  // namespace

ArenaLayout layout_arena(const Plan& plan, const PlanMemory& m, std::span<const TensorDesc> desc, std::span<const char> bound,
                         std::span<const int> writes_over) {
  const size_t nv = plan.values.size();
  ArenaLayout layout;
  layout.offsets.assign(nv, 0);
  layout.host.assign(nv, -1);
  layout.host_offset.assign(nv, 0);
  std::vector<int> begin(nv, -1), end(nv, -1);
  for (size_t s = 0; s < plan.steps.size(); ++s)
    for (int v : plan.steps[s].outputs) {
      begin[v] = static_cast<int>(s);
      end[v] = m.last_use[v] < 0 ? static_cast<int>(s) : m.last_use[v];
    }
  std::vector<char> is_output(nv, 0);
  for (int v : plan.outputs) is_output[v] = 1;
  place_joined_inputs(plan, m, desc, bound, is_output, layout);
  place_over_inputs(plan, m, desc, bound, is_output, writes_over, layout);
  // A hosted value lives inside its host's buffer, which must then live from the first write of
  // any part to the last read of any part.
  for (size_t v = 0; v < nv; ++v)
    if (layout.host[v] >= 0) {
      const int r = host_root(layout, static_cast<int>(v));
      begin[r] = std::min(begin[r], begin[v]);
      end[r] = std::max(end[r], end[v]);
    }
  struct Item { int value; int begin; int end; size_t size; };
  std::vector<Item> items;
  for (size_t s = 0; s < plan.steps.size(); ++s)
    for (int v : plan.steps[s].outputs) {
      if (m.alias_root[v] >= 0 || layout.host[v] >= 0) continue;  // lives in another value's buffer
      items.push_back(Item{v, begin[v], end[v], aligned_size(desc[v])});
    }
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return items[a].size > items[b].size; });
  std::vector<size_t> placed;
  std::vector<std::pair<size_t, size_t>> busy;
  for (size_t idx : order) {
    const Item& it = items[idx];
    busy.clear();
    for (size_t p : placed) {
      const Item& q = items[p];
      if (q.begin <= it.end && it.begin <= q.end) busy.push_back({layout.offsets[q.value], layout.offsets[q.value] + q.size});
    }
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (const auto& [b, e] : busy) {
      if (off + it.size <= b) break;
      off = std::max(off, e);
    }
    layout.offsets[it.value] = off;
    layout.bytes = std::max(layout.bytes, off + it.size);
    placed.push_back(idx);
  }
  // Hosted values sit at their offset within their host (hosts first: a host may be hosted).
  std::vector<char> resolved(nv, 0);
  std::function<void(int)> resolve = [&](int v) {
    if (resolved[v] || layout.host[v] < 0) return;
    resolve(layout.host[v]);
    layout.offsets[v] = layout.offsets[layout.host[v]] + layout.host_offset[v];
    resolved[v] = 1;
  };
  for (size_t v = 0; v < nv; ++v) resolve(static_cast<int>(v));
  return layout;
}

}  // namespace kiln
