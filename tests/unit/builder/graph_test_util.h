// Helpers shared by the pass tests.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "builder/graph.h"
#include "builder/passes/pass.h"
#include "builder/plan/build_plan.h"
#include "runtime/execution_context.h"
#include "runtime/tensor.h"

namespace kiln::testing {

// Live (not removed) nodes of `op` in `g`.
inline int count_op(const Graph& g, const std::string& op) {
  int c = 0;
  for (const auto& n : g.nodes) c += !n.removed && n.op_type == op;
  return c;
}

// The live node whose first output is `value`, or null.
inline const Node* producer(const Graph& g, const std::string& value) {
  const int v = g.find_value(value);
  for (const auto& n : g.nodes)
    if (!n.removed && !n.outputs.empty() && n.outputs[0] == v) return &n;
  return nullptr;
}

// Attribute `name` of `n` as text (a string's value, an int's digits), `def` when `n` has none,
// "<no producer>" when `n` is null.
inline std::string attr_or(const Node* n, const char* name, const std::string& def) {
  if (!n) return "<no producer>";
  auto it = n->attrs.find(name);
  return it == n->attrs.end() ? def : it->second.kind == Attribute::Kind::kString ? it->second.s : std::to_string(it->second.i);
}

// A graph after the pass pipeline, its passes' log, and its first output run on one input "x".
struct Built {
  std::vector<float> y;
  std::vector<std::string> log;
  Graph graph;
};

// The pipeline with `disabled` passes and conv_channels_last's layout `layout` ("" = this machine's),
// lowered and run on `x`.
inline Built build_and_run(const Graph& g0, const std::set<std::string>& disabled, const std::string& layout, const Tensor& x) {
  Built out;
  out.graph = g0;
  PassContext ctx;
  ctx.disabled = disabled;
  ctx.conv_layout = layout;
  const Status st = run_pass_pipeline(out.graph, ctx);
  EXPECT_TRUE(st.ok()) << st.message();
  out.log = ctx.log;
  auto plan = lower_to_plan(out.graph);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return out;
  auto ec = ExecutionContext::create(*plan);
  EXPECT_TRUE(ec.ok()) << ec.status().message();
  if (!ec.ok()) return out;
  EXPECT_TRUE((*ec)->set_input("x", x.view()).ok());
  const Status rs = (*ec)->run();
  EXPECT_TRUE(rs.ok()) << rs.message();
  const TensorView& y = (*ec)->output(0);
  out.y.assign(y.as<float>(), y.as<float>() + y.numel());
  return out;
}

}  // namespace kiln::testing
