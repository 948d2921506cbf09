#include "builder/passes/layout_ops.h"

#include <cstring>
#include <set>
#include <string>

#include "runtime/kernel.h"

namespace kiln {

bool is_2d_fused_conv(const Graph& g, const Node& n) {
  return !n.removed && n.domain == kKilnDomain && n.op_type == "FusedConv" && n.inputs.size() >= 2 && n.inputs[1] >= 0 &&
         g.values[n.inputs[1]].is_constant() && g.values[n.inputs[1]].constant.shape().rank() == 4;
}

bool fused_conv_has_layout(const Node& n) {
  for (const char* a : {"x_layout", "residual_layout", "y_layout"}) {
    auto it = n.attrs.find(a);
    if (it != n.attrs.end() && it->second.s != "nchw") return true;
  }
  return false;
}

bool is_layout_blind_elementwise(const Graph& g, const Node& n) {
  if (n.removed || n.outputs.size() != 1 || n.inputs.empty()) return false;
  const auto& shape = g.values[n.outputs[0]].shape;
  if (!shape || shape->size() != 4) return false;
  if (n.domain == kKilnDomain && n.op_type == "FusedElementwise") {
    auto norm = n.attrs.find("norm");
    return norm == n.attrs.end() || norm->second.s == "none";
  }
  static const std::set<std::string> kOps = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Relu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid"};
  return n.domain.empty() && kOps.count(n.op_type) > 0;
}

bool is_2d_global_average_pool(const Graph& g, const Node& n) {
  if (n.removed || !n.domain.empty() || n.op_type != "GlobalAveragePool" || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  const auto& shape = g.values[n.outputs[0]].shape;
  return shape && shape->size() == 4;
}

bool is_per_channel_constant(const Graph& g, int v, int64_t C) {
  if (v < 0 || !g.values[v].is_constant()) return false;
  const Tensor& t = g.values[v].constant;
  const Shape& s = t.shape();
  if (t.numel() == 1) return s.rank() <= 4;
  if (t.numel() != C || s.rank() < 3 || s.rank() > 4) return false;
  return s[s.rank() - 3] == C && s[s.rank() - 2] == 1 && s[s.rank() - 1] == 1;
}

Tensor per_channel_in_layout(const Tensor& t, int64_t block) {
  const int64_t C = t.numel();
  Tensor out = Tensor::zeros(t.dtype(), block > 0 ? Shape{C / block, 1, 1, block} : Shape{C});
  std::memcpy(out.data(), t.data(), t.nbytes());
  return out;
}

void keep_followers_whole(const Graph& g, std::set<int>& kept, const std::function<bool(const Node&)>& follows,
                          const std::function<bool(const Node&, int)>& ignored) {
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& n : g.nodes) {
      if (!follows(n)) continue;
      bool all = kept.count(n.outputs[0]) > 0, any = all;
      for (int v : n.inputs) {
        if (ignored(n, v)) continue;
        all = all && v >= 0 && kept.count(v);
        any = any || (v >= 0 && kept.count(v));
      }
      if (all || !any) continue;
      for (int v : n.inputs)
        if (v >= 0) kept.erase(v);
      kept.erase(n.outputs[0]);
      changed = true;
    }
  }
}

}  // namespace kiln
