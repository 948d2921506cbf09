// shape_sources: a Shape of a computed value whose dims are known sizes or sums of graph-input dims
// reads the graph inputs instead (no longer a reader of that value); one with a dim it cannot
// express (a product) is left alone. Asserted on the rewritten graph and by running the plan with
// the pass on and off at points of the profile.
#include <gtest/gtest.h>

#include <cmath>

#include "builder/build_profile.h"
#include "builder/optimization_profile.h"
#include "builder/passes/pass.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

constexpr int64_t kD = 4;

// a [batch, S, 4], b [batch, P, 4] -> c = Concat(a, b, axis 1) -> r = Relu(c);
// y = Reshape(r, [Shape(r)[0], -1]) (reads batch, S+P and 4 of r); flat = Reshape(r, [-1, 4]);
// flat_shape = Shape(flat) ([batch·(S+P), 4]: a product, not expressible as a sum).
Graph model() {
  OnnxModelBuilder b;
  b.input("a", DType::kFloat32, {std::string("batch"), std::string("S"), kD});
  b.input("b", DType::kFloat32, {std::string("batch"), std::string("P"), kD});
  b.initializer("i0", {0}, {}).initializer("axes0", {0}, {1}).initializer("minus1", {-1}, {1});
  b.initializer("flat_target", {-1, kD}, {2});
  OnnxModelBuilder::int_attr(b.node("Concat", {"a", "b"}, {"c"}, "concat"), "axis", 1);
  b.node("Relu", {"c"}, {"r"}, "relu");
  b.node("Shape", {"r"}, {"r_shape"}, "shape_r");
  b.node("Gather", {"r_shape", "i0"}, {"batch"}, "gather_batch");
  b.node("Unsqueeze", {"batch", "axes0"}, {"batch1"}, "unsqueeze_batch");
  OnnxModelBuilder::int_attr(b.node("Concat", {"batch1", "minus1"}, {"y_target"}, "y_target"), "axis", 0);
  b.node("Reshape", {"r", "y_target"}, {"y"}, "reshape_y");
  b.node("Reshape", {"r", "flat_target"}, {"flat"}, "reshape_flat");
  b.node("Shape", {"flat"}, {"flat_shape"}, "shape_flat");
  b.output("y").output("r_shape").output("flat_shape");
  auto g = b.import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::move(g).value();
}

const Node* node_named(const Graph& g, const std::string& name) {
  for (const auto& n : g.nodes)
    if (!n.removed && n.name == name) return &n;
  return nullptr;
}

int readers(const Graph& g, const std::string& value) {
  const int v = g.find_value(value);
  int r = 0;
  for (const auto& n : g.nodes)
    if (!n.removed)
      for (int i : n.inputs) r += i == v;
  return r;
}

TEST(ShapeSources, ASumOfInputDimsReadsTheInputs) {
  Graph g = model();
  PassContext ctx;
  ctx.dim_ranges = {{"batch", {1, 2}}, {"S", {1, 8}}, {"P", {1, 8}}};
  ASSERT_TRUE(run_pass_pipeline(g, ctx).ok());
  EXPECT_EQ(node_named(g, "shape_r"), nullptr);
  EXPECT_NE(node_named(g, "shape_r/from_inputs/Concat"), nullptr);
  // r's readers are the two Reshapes only.
  EXPECT_EQ(readers(g, "r"), 2);
  const Value& rs = g.values[g.find_value("r_shape")];
  ASSERT_TRUE(rs.sym_value.has_value());
  EXPECT_EQ(sym_shape_str(*rs.sym_value), sym_shape_str({Dim::sym("batch"), dim_add(Dim::sym("S"), Dim::sym("P")), Dim::known(kD)}));
  // batch·(S+P) is no sum of input dims: that Shape stays.
  EXPECT_NE(node_named(g, "shape_flat"), nullptr);
}

struct Outputs {
  std::vector<float> y;
  std::vector<int64_t> r_shape, flat_shape;
};

Outputs run(int64_t batch, int64_t s, int64_t p, const std::set<std::string>& disabled) {
  Outputs o;
  const Graph g = model();
  auto rp = resolve_profile(g, ProfileConfig{"ranged",
                                             {{"batch", DimRange{1, 2, 2}}, {"S", DimRange{1, 4, 8}}, {"P", DimRange{1, 4, 8}}},
                                             {},
                                             0});
  EXPECT_TRUE(rp.ok()) << rp.status().message();
  if (!rp.ok()) return o;
  auto plan = build_profile_plan(g, *rp, disabled);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return o;
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return o;
  std::vector<float> av(batch * s * kD), bv(batch * p * kD);
  for (size_t i = 0; i < av.size(); ++i) av[i] = std::sin(0.7f * static_cast<float>(i));
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = std::cos(0.3f * static_cast<float>(i));
  Tensor a = Tensor::from_vector<float>(av, Shape{batch, s, kD}), b = Tensor::from_vector<float>(bv, Shape{batch, p, kD});
  EXPECT_TRUE((*ctx)->set_input("a", a.view()).ok());
  EXPECT_TRUE((*ctx)->set_input("b", b.view()).ok());
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return o;
  const TensorView& y = (*ctx)->output(0);
  EXPECT_EQ(y.shape, (Shape{batch, (s + p) * kD}));
  o.y.assign(y.as<float>(), y.as<float>() + y.numel());
  const TensorView& rs = (*ctx)->output(1);
  o.r_shape.assign(rs.as<int64_t>(), rs.as<int64_t>() + rs.numel());
  const TensorView& fs = (*ctx)->output(2);
  o.flat_shape.assign(fs.as<int64_t>(), fs.as<int64_t>() + fs.numel());
  return o;
}

TEST(ShapeSources, SameOutputsWithThePassOnAndOff) {
  for (auto [batch, s, p] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {2, 3, 5}, {2, 8, 8}}) {
    const Outputs on = run(batch, s, p, {});
    const Outputs off = run(batch, s, p, {"shape_sources"});
    EXPECT_EQ(on.r_shape, (std::vector<int64_t>{batch, s + p, kD}));
    EXPECT_EQ(on.flat_shape, (std::vector<int64_t>{batch * (s + p), kD}));
    EXPECT_EQ(on.r_shape, off.r_shape);
    EXPECT_EQ(on.flat_shape, off.flat_shape);
    EXPECT_EQ(on.y, off.y);
    // y is relu(concat(a, b)) flattened per batch row.
    ASSERT_EQ(on.y.size(), static_cast<size_t>(batch * (s + p) * kD));
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t t = 0; t < s + p; ++t)
        for (int64_t d = 0; d < kD; ++d) {
          const float x = t < s ? std::sin(0.7f * static_cast<float>((bi * s + t) * kD + d))
                                : std::cos(0.3f * static_cast<float>((bi * p + t - s) * kD + d));
          EXPECT_FLOAT_EQ(on.y[(bi * (s + p) + t) * kD + d], std::max(x, 0.0f)) << bi << "," << t << "," << d;
        }
  }
}

}  // namespace
}  // namespace kiln
