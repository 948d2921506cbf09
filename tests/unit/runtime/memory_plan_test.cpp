// Memory planning apart from running (runtime/memory_plan.h): views and in-place updates come from
// the kernels' registry declarations, never from an op's name; the arena layout reuses the memory
// of dead values, keeps live ones apart and hosts joined inputs in the joined output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "builder/plan/build_plan.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"
#include "runtime/memory_plan.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

// A plan written by hand: value i is named v<i>, float32; each step reads `in` and writes `out`.
struct HandPlan {
  Plan plan;
  explicit HandPlan(int values) {
    for (int i = 0; i < values; ++i) {
      PlanValue v;
      v.name = "v" + std::to_string(i);
      v.dtype = DType::kFloat32;
      plan.values.push_back(std::move(v));
    }
  }
  HandPlan& step(const std::string& op, std::vector<int> in, std::vector<int> out, const std::string& domain = "") {
    PlanStep s;
    s.name = "n" + std::to_string(plan.steps.size());
    s.op_type = op;
    s.domain = domain;
    s.inputs = std::move(in);
    s.outputs = std::move(out);
    plan.steps.push_back(std::move(s));
    return *this;
  }
};

StepMemory declares_view(const MemoryQuery&) { return view_memory(OutputAlias::kView); }

TEST(PlanMemory, ViewsComeFromRegistryDeclarationsNotOpNames) {
  HandPlan h(5);
  h.step("Reshape", {0}, {1})                    // a view in the builtin registry
      .step("Reshape", {1}, {2}, "com.example")  // a plugin reusing the name: never a view
      .step("CopyOf", {2}, {3})                  // an op the test registry declares a view
      .step("Relu", {3}, {4});
  h.plan.inputs = {0};
  h.plan.outputs = {4};

  const PlanMemory builtin = PlanMemory::analyze(h.plan, KernelRegistry::builtin());
  EXPECT_EQ(builtin.step[0].alias, OutputAlias::kView);
  EXPECT_EQ(builtin.step[1].alias, OutputAlias::kNone);
  EXPECT_EQ(builtin.step[2].alias, OutputAlias::kNone) << "the builtin registry has no CopyOf";
  EXPECT_EQ(builtin.alias_root[1], 0);
  EXPECT_EQ(builtin.alias_root[2], -1);

  // A registry whose Reshape declares nothing and whose CopyOf declares a view.
  KernelRegistry custom;
  for (const char* op : {"Reshape", "CopyOf", "Relu"}) {
    KernelEntry e;
    e.op_type = op;
    e.impl = "reference";
    custom.add(std::move(e));
  }
  custom.set_memory_rule("CopyOf", declares_view);
  const PlanMemory m = PlanMemory::analyze(h.plan, custom);
  EXPECT_EQ(m.step[0].alias, OutputAlias::kNone) << "a Reshape is a view only because its entry declares it";
  EXPECT_EQ(m.step[2].alias, OutputAlias::kView);
  EXPECT_EQ(m.alias_root[3], 2);
  EXPECT_EQ(m.last_use[2], 3) << "the viewed buffer lives as long as its view is read";
}

TEST(PlanMemory, DeclaredUpdatesAndJoins) {
  HandPlan h(7);
  h.step("ScatterND", {0, 1, 2}, {3}).step("Concat", {3, 3}, {4}).step("Gather", {4, 5}, {6});
  h.plan.steps[1].attrs["axis"] = Attribute::Int(-1);
  h.plan.values[5].constant = 0;
  h.plan.constants.push_back(Tensor::zeros(DType::kInt64, Shape{}));
  h.plan.inputs = {0, 1, 2};
  h.plan.outputs = {6};
  const PlanMemory m = PlanMemory::analyze(h.plan, KernelRegistry::builtin());
  EXPECT_EQ(m.step[0].updates_input_with, 2);
  ASSERT_TRUE(m.step[1].joins_inputs_along.has_value());
  EXPECT_EQ(*m.step[1].joins_inputs_along, -1);
  EXPECT_EQ(m.step[2].alias, OutputAlias::kViewAtOffset) << "a Gather of one constant index on axis 0";
  h.plan.values[5].constant = -1;  // a computed index: a copy
  EXPECT_EQ(PlanMemory::analyze(h.plan, KernelRegistry::builtin()).step[2].alias, OutputAlias::kNone);
}

std::vector<TensorDesc> descs(const Plan& plan, const Shape& shape) {
  return std::vector<TensorDesc>(plan.values.size(), TensorDesc{DType::kFloat32, shape});
}

bool overlap(const ArenaLayout& l, int a, int b, size_t size) {
  return l.offsets[a] < l.offsets[b] + size && l.offsets[b] < l.offsets[a] + size;
}

TEST(ArenaLayout, ReusesDeadMemoryAndKeepsLiveValuesApart) {
  // v1 = f(v0); v2 = f(v1); v3 = f(v2): v1 is dead once v2 is written, so v3 may take its place.
  HandPlan h(4);
  h.step("Relu", {0}, {1}).step("Relu", {1}, {2}).step("Relu", {2}, {3});
  h.plan.inputs = {0};
  h.plan.outputs = {3};
  const PlanMemory m = PlanMemory::analyze(h.plan, KernelRegistry::builtin());
  const auto d = descs(h.plan, Shape{1024});  // 4096 bytes: a multiple of the alignment
  const std::vector<char> bound(4, 0);
  const ArenaLayout l = layout_arena(h.plan, m, d, bound);
  const size_t size = 4096;
  EXPECT_FALSE(overlap(l, 1, 2, size));
  EXPECT_FALSE(overlap(l, 2, 3, size));
  EXPECT_EQ(l.offsets[3], l.offsets[1]);
  EXPECT_EQ(l.bytes, 2 * size);
}

TEST(ArenaLayout, JoinedInputsAreHostedInTheJoinedOutput) {
  // v3 = Concat(v1, v2) along axis 1 of [1, N]: both parts are written at their slices of v3.
  HandPlan h(5);
  h.step("Relu", {0}, {1}).step("Neg", {0}, {2}).step("Concat", {1, 2}, {3}).step("Abs", {3}, {4});
  h.plan.steps[2].attrs["axis"] = Attribute::Int(1);
  h.plan.inputs = {0};
  h.plan.outputs = {4};
  const PlanMemory m = PlanMemory::analyze(h.plan, KernelRegistry::builtin());
  auto d = descs(h.plan, Shape{1, 16});
  d[3].shape = Shape{1, 32};
  d[4].shape = Shape{1, 32};
  std::vector<char> bound(5, 0);
  ArenaLayout l = layout_arena(h.plan, m, d, bound);
  EXPECT_EQ(l.host[1], 3);
  EXPECT_EQ(l.host[2], 3);
  EXPECT_EQ(l.offsets[1], l.offsets[3]);
  EXPECT_EQ(l.offsets[2], l.offsets[3] + 16 * sizeof(float));
  EXPECT_FALSE(l.offsets[4] < l.offsets[3] + 128 && l.offsets[3] < l.offsets[4] + 128) << "v3 is read while v4 is written";
  // A part the caller bound to its own buffer is not hosted.
  bound[1] = 1;
  l = layout_arena(h.plan, m, d, bound);
  EXPECT_EQ(l.host[1], -1);
  EXPECT_EQ(l.host[2], 3);
}

TEST(ArenaLayout, PrefixJoinsAreHostedInTheLargestJoin) {
  // DenseNet's dense block: v2 = Concat(v1), v4 = Concat(v1, v3), v6 = Concat(v1, v3, v5), with
  // v3 = f(v2), v5 = f(v4). v2 and v4 are prefixes of v6: hosted at its start, and every part sits
  // at its slice of v6, so no Concat copies. v8 = Concat(v3, v1) is no prefix: it keeps its own.
  HandPlan h(10);
  h.step("Relu", {0}, {1})
      .step("Concat", {1}, {2})
      .step("Neg", {2}, {3})
      .step("Concat", {1, 3}, {4})
      .step("Abs", {4}, {5})
      .step("Concat", {1, 3, 5}, {6})
      .step("Relu", {6}, {7})
      .step("Concat", {3, 1}, {8})
      .step("Add", {7, 8}, {9});
  for (size_t s : {1, 3, 5, 7}) h.plan.steps[s].attrs["axis"] = Attribute::Int(1);
  h.plan.inputs = {0};
  h.plan.outputs = {9};
  const PlanMemory m = PlanMemory::analyze(h.plan, KernelRegistry::builtin());
  std::vector<TensorDesc> d = descs(h.plan, Shape{1, 16, 4});  // 256 bytes a part
  d[4].shape = Shape{1, 32, 4};
  d[5].shape = Shape{1, 16, 4};
  d[6].shape = Shape{1, 48, 4};
  d[7].shape = Shape{1, 48, 4};
  d[8].shape = Shape{1, 32, 4};
  d[9].shape = Shape{1, 48, 4};  // shapes of a hand plan need not add up away from the joins
  const std::vector<char> bound(10, 0);
  const ArenaLayout l = layout_arena(h.plan, m, d, bound);
  EXPECT_EQ(l.host[2], 6);
  EXPECT_EQ(l.host[4], 6);
  EXPECT_EQ(l.host[8], -1);
  const size_t part = 16 * 4 * sizeof(float);
  EXPECT_EQ(l.offsets[2], l.offsets[6]);
  EXPECT_EQ(l.offsets[4], l.offsets[6]);
  EXPECT_EQ(l.offsets[1], l.offsets[6]);
  EXPECT_EQ(l.offsets[3], l.offsets[6] + part);
  EXPECT_EQ(l.offsets[5], l.offsets[6] + 2 * part);
  // v6's buffer is live from v1's write to v8's read of v1 (step 7): v7 cannot take it.
  EXPECT_FALSE(l.offsets[7] < l.offsets[6] + 3 * part && l.offsets[6] < l.offsets[7] + 3 * part);
  // A joined output the caller bound hosts no prefix.
  std::vector<char> bound6(10, 0);
  bound6[6] = 1;
  EXPECT_EQ(layout_arena(h.plan, m, d, bound6).host[4], -1);
}

TEST(ArenaLayout, AnOutputTakesTheBufferOfTheInputItsKernelWritesOver) {
  // v1 = f(v0); v2 = g(v1); v3 = K(v1, v2) writing over v2; v4 = K(v3, v1) over v3 (a chain: one
  // buffer); v5 = K(v4, v4) (read through its other input too); v6 = K(v1, v5) over v1 (read
  // later); v7 = K(v6, v1) over v1 (its output is the graph's). v1 = f(v0) writes over v0, the
  // caller's input.
  HandPlan h(8);
  h.step("Relu", {0}, {1})
      .step("Neg", {1}, {2})
      .step("Add", {1, 2}, {3})
      .step("Add", {3, 1}, {4})
      .step("Add", {4, 4}, {5})
      .step("Add", {1, 5}, {6})
      .step("Add", {6, 1}, {7});
  h.plan.inputs = {0};
  h.plan.outputs = {7};
  const std::vector<int> writes_over{0, -1, 1, 0, 0, 0, 1};
  const PlanMemory m = PlanMemory::analyze(h.plan, KernelRegistry::builtin());
  const auto d = descs(h.plan, Shape{1024});
  const size_t size = 4096;
  std::vector<char> bound(8, 0);
  ArenaLayout l = layout_arena(h.plan, m, d, bound, writes_over);
  EXPECT_EQ(l.host[1], -1) << "the caller's input is never written over";
  EXPECT_EQ(l.host[3], 2);
  EXPECT_EQ(l.host[4], 3);
  EXPECT_EQ(l.offsets[3], l.offsets[2]);
  EXPECT_EQ(l.offsets[4], l.offsets[2]);
  EXPECT_EQ(l.host[5], -1) << "v4 is read through both inputs";
  EXPECT_EQ(l.host[6], -1) << "v1 is read after step 5";
  EXPECT_EQ(l.host[7], -1) << "a graph output keeps its own buffer";
  // The shared buffer lives from v2's write to v4's last read: v1 (live throughout) and v5 (written
  // while v4 is read) stay apart from it.
  EXPECT_FALSE(overlap(l, 1, 2, size));
  EXPECT_FALSE(overlap(l, 5, 2, size));
  EXPECT_FALSE(overlap(l, 6, 1, size));
  // Without the kernels' word, or with the output bound to the caller's buffer, nothing is shared.
  EXPECT_EQ(layout_arena(h.plan, m, d, bound).host[3], -1);
  bound[3] = 1;
  l = layout_arena(h.plan, m, d, bound, writes_over);
  EXPECT_EQ(l.host[3], -1);
  EXPECT_EQ(l.host[4], -1) << "v3 is the caller's buffer";
}

// A ResNet block through the context: the FusedConv adding the block's input writes into that
// input's buffer in the planned run and computes what the unplanned run (buffers of their own) did.
TEST(ExecutionContextViews, AResidualConvolutionWritesIntoItsResidual) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{1}, int64_t{5}, int64_t{9}, int64_t{7}});
  auto weights = [&](const std::string& name, int64_t out, int64_t in, int64_t k, float scale) {
    const Tensor t = testing::random_f32(Shape{out, in, k, k}, static_cast<uint32_t>(out * 31 + in * 7 + k), -scale, scale);
    std::vector<float> v(t.as<float>(), t.as<float>() + t.numel());
    b.initializer_f(name, v, {out, in, k, k});
  };
  weights("w1", 12, 5, 1, 0.5f);
  weights("w2", 12, 12, 3, 0.2f);
  weights("w3", 12, 12, 3, 0.2f);
  weights("w4", 4, 12, 1, 0.3f);
  auto conv = [&](const std::string& x, const std::string& w, const std::string& y, int64_t pad) {
    OnnxModelBuilder::ints_attr(b.node("Conv", {x, w}, {y}), "pads", {pad, pad, pad, pad});
  };
  conv("x", "w1", "a", 0);
  b.node("Relu", {"a"}, {"ar"});
  conv("ar", "w2", "c2", 1);
  b.node("Relu", {"c2"}, {"r2"});
  conv("r2", "w3", "c3", 1);
  b.node("Add", {"c3", "ar"}, {"s"});
  b.node("Relu", {"s"}, {"sr"});
  conv("sr", "w4", "y", 0);
  b.output("y");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto plan = build_plan(*g, BuildOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const Plan& p = **plan;
  int step = -1;
  for (size_t s = 0; s < p.steps.size(); ++s)
    if (p.steps[s].op_type == "FusedConv" && p.steps[s].inputs.size() > 3 && p.steps[s].inputs[3] >= 0) step = static_cast<int>(s);
  ASSERT_GE(step, 0) << "conv_epilogue_fusion adds the residual in the convolution";
  auto ctx = ExecutionContext::create(*plan);
  ASSERT_TRUE(ctx.ok());
  const Tensor x = testing::random_f32(Shape{1, 5, 9, 7}, 77);
  ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
  ASSERT_TRUE((*ctx)->run().ok());  // unplanned: every value in a buffer of its own
  const Tensor first = Tensor::copy_of((*ctx)->output(0));
  ASSERT_TRUE((*ctx)->run().ok());  // in the arena
  const PlanStep& fused = p.steps[static_cast<size_t>(step)];
  ASSERT_TRUE((*ctx)->kernel(static_cast<size_t>(step)).writes_over_input(3)) << (*ctx)->kernel(static_cast<size_t>(step)).impl_name();
  EXPECT_EQ((*ctx)->value(fused.outputs[0]).data, (*ctx)->value(fused.inputs[3]).data);
  EXPECT_NE((*ctx)->value(fused.outputs[0]).data, (*ctx)->value(fused.inputs[0]).data);
  testing::expect_close(Tensor::copy_of((*ctx)->output(0)), first, 0, 0, "planned run vs unplanned");
}

// An elementwise step whose input's last reader it is writes into that input's buffer (SiLU over a
// transposed activation, fused into one FusedElementwise); its output still matches the unplanned
// run, and a graph input is never written over.
TEST(ExecutionContextViews, AnElementwiseStepWritesOverItsLastReadInput) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{37}, int64_t{41}});
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"x"}, {"t"}), "perm", {0, 2, 1});
  b.node("Sigmoid", {"t"}, {"s"});
  b.node("Mul", {"t", "s"}, {"u"});
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"u"}, {"y"}), "perm", {0, 2, 1});
  b.node("Exp", {"x"}, {"e"});  // reads the graph input: never in place
  b.output("y");
  b.output("e");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto plan = build_plan(*g, BuildOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const Plan& p = **plan;
  int silu = -1, exp = -1;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    if (p.steps[s].op_type == "FusedElementwise" || p.steps[s].op_type == "Mul") silu = static_cast<int>(s);
    if (p.steps[s].op_type == "Exp") exp = static_cast<int>(s);
  }
  ASSERT_GE(silu, 0);
  ASSERT_GE(exp, 0);
  auto ctx = ExecutionContext::create(*plan);
  ASSERT_TRUE(ctx.ok());
  const Tensor x = testing::random_f32(Shape{2, 37, 41}, 78, -4.0f, 4.0f), x0 = Tensor::copy_of(x.view());
  ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
  ASSERT_TRUE((*ctx)->run().ok());  // unplanned: every value in a buffer of its own
  const Tensor first = Tensor::copy_of((*ctx)->output(0)), first_e = Tensor::copy_of((*ctx)->output(1));
  ASSERT_TRUE((*ctx)->run().ok());  // in the arena
  const PlanStep& step = p.steps[static_cast<size_t>(silu)];
  EXPECT_EQ((*ctx)->value(step.outputs[0]).data, (*ctx)->value(step.inputs[0]).data) << step.op_type;
  EXPECT_NE((*ctx)->value(p.steps[static_cast<size_t>(exp)].outputs[0]).data, x.view().data);
  testing::expect_close(Tensor::copy_of((*ctx)->output(0)), first, 0, 0, "planned run vs unplanned");
  testing::expect_close(Tensor::copy_of((*ctx)->output(1)), first_e, 0, 0, "Exp of the graph input");
  testing::expect_close(x, x0, 0, 0, "the graph input after the runs");
}

// The same chain run: the Concats' outputs match a copy of their parts.
TEST(ExecutionContextViews, PrefixConcatsComputeTheirParts) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{1}, int64_t{2}, int64_t{3}});
  auto cat = [&](const std::vector<std::string>& in, const std::string& out) {
    OnnxModelBuilder::int_attr(b.node("Concat", in, {out}), "axis", 1);
  };
  b.node("Relu", {"x"}, {"a"});
  cat({"a"}, "c1");
  b.node("Neg", {"c1"}, {"y1"});
  cat({"a", "y1"}, "c2");
  b.node("Abs", {"c2"}, {"y2"});
  cat({"a", "y1", "y2"}, "c3");
  b.node("Neg", {"c3"}, {"y"});
  b.output("y");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto plan = build_plan(*g, BuildOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto ctx = ExecutionContext::create(*plan);
  ASSERT_TRUE(ctx.ok());
  const Tensor x = Tensor::from_vector<float>({-1, 2, -3, 4, -5, 6}, Shape{1, 2, 3});
  for (int run = 0; run < 2; ++run) {  // the first run is unplanned, the second in the arena
    ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
    ASSERT_TRUE((*ctx)->run().ok());
    const TensorView& y = (*ctx)->output(0);
    ASSERT_EQ(y.shape, (Shape{1, 8, 3}));
    // a = relu(x); y1 = -a; y2 = |[a, y1]|; y = -[a, y1, y2]
    const float a[6] = {0, 2, 0, 4, 0, 6};
    std::vector<float> want;
    for (float v : a) want.push_back(-v);
    for (float v : a) want.push_back(v);
    for (float v : a) want.push_back(-v);
    for (float v : a) want.push_back(-v);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(y.as<float>()[i], want[i] == 0 ? 0.0f : want[i]) << "run " << run << " element " << i;
  }
}

// A Slice may be a view; a reversed or strided one never is, even when it keeps every dim whole.
TEST(ExecutionContextViews, ReversedSliceCopies) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{1}, int64_t{6}});
  b.initializer("start", {-1}, {1}).initializer("end", {-(int64_t{1} << 40)}, {1}).initializer("ax", {1}, {1});
  b.initializer("back", {-1}, {1}).initializer("zero", {0}, {1}).initializer("big", {int64_t{1} << 40}, {1}).initializer("two", {2}, {1});
  b.node("Relu", {"x"}, {"a"});
  b.node("Slice", {"a", "start", "end", "ax", "back"}, {"r"});  // a[:, ::-1]: [1, 6], copied reversed
  b.node("Slice", {"a", "zero", "big", "ax", "two"}, {"s"});    // a[:, ::2]:  [1, 3], copied strided
  b.node("Neg", {"r"}, {"y"});
  b.node("Neg", {"s"}, {"z"});
  b.output("y").output("z");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  BuildOptions opts;
  opts.disabled_passes = {"constant_folding"};
  auto plan = build_plan(*g, opts);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto ctx = ExecutionContext::create(*plan);
  ASSERT_TRUE(ctx.ok());
  Tensor x = Tensor::zeros(DType::kFloat32, Shape{1, 6});
  for (int i = 0; i < 6; ++i) x.as<float>()[i] = static_cast<float>(i + 1);
  ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE((*ctx)->run().ok());
    const TensorView& y = (*ctx)->output(0);
    ASSERT_EQ(y.shape, (Shape{1, 6}));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(y.as<float>()[i], -static_cast<float>(6 - i)) << "run " << run;
    const TensorView& z = (*ctx)->output(1);
    ASSERT_EQ(z.shape, (Shape{1, 3}));
    for (int i = 0; i < 3; ++i) EXPECT_EQ(z.as<float>()[i], -static_cast<float>(2 * i + 1)) << "run " << run;
  }
}

}  // namespace
}  // namespace kiln
