// FLOP counts of plan steps (profiles/flop_count.h) against hand-computed values, and the per-layer
// profile / Chrome trace of profiles/layer_profile.h.
#include <gtest/gtest.h>

#include "builder/plan/build_plan.h"
#include "onnx_model_builder.h"
#include "profiles/flop_count.h"
#include "profiles/layer_profile.h"
#include "runtime/execution_context.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
  return v;
}

std::shared_ptr<Plan> build(const OnnxModelBuilder& b) {
  auto g = b.import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return nullptr;
  auto plan = build_plan(std::move(g).value(), {});
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? *plan : nullptr;
}

// Runs the plan on ramp inputs and returns the per-step counts by step op type (summed).
std::map<std::string, double> run_and_count(const std::shared_ptr<Plan>& plan, FlopCount* total = nullptr) {
  auto ctx = ExecutionContext::create(plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < (*ctx)->num_inputs(); ++i) {
    const PlanValue& pv = plan->values[plan->inputs[i]];
    Tensor t = Tensor::zeros(pv.dtype, Shape(pv.dims));
    auto r = ramp(static_cast<size_t>(t.numel()));
    std::copy(r.begin(), r.end(), t.as<float>());
    inputs.push_back(std::move(t));
    EXPECT_TRUE((*ctx)->set_input(i, inputs.back().view()).ok());
  }
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  auto flops = plan_step_flops(**ctx);
  EXPECT_EQ(flops.size(), plan->steps.size());
  std::map<std::string, double> by_op;
  for (size_t s = 0; s < flops.size(); ++s) by_op[plan->steps[s].op_type] += flops[s].flops;
  if (total) *total = total_flops(flops);
  return by_op;
}

TEST(FlopCount, MatMulAndBatchedMatMul) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{3}, int64_t{5}});
  b.input("y", DType::kFloat32, {int64_t{2}, int64_t{5}, int64_t{4}});
  b.initializer_f("w", ramp(5 * 4), {5, 4});
  b.node("MatMul", {"x", "w"}, {"xw"});   // [2,3,5] x [5,4]: 2*3*4 outputs, K 5 -> 240
  b.node("MatMul", {"x", "y"}, {"xy"});   // [2,3,5] x [2,5,4]: same shapes, batched -> 240
  b.node("Add", {"xw", "xy"}, {"s"});     // elementwise: 0
  b.node("Relu", {"s"}, {"out"});
  b.output("out");
  FlopCount total;
  auto by_op = run_and_count(build(b), &total);
  // x @ w (constant weight) is a FusedMatMul after matmul_epilogue_fusion.
  EXPECT_DOUBLE_EQ(by_op["MatMul"] + by_op["FusedMatMul"], 480.0);
  EXPECT_DOUBLE_EQ(by_op["Add"], 0.0);
  EXPECT_DOUBLE_EQ(total.flops, 480.0);
  EXPECT_FALSE(total.upper_bound);
}

TEST(FlopCount, GemmWithAndWithoutTransposes) {
  OnnxModelBuilder b;
  b.input("a", DType::kFloat32, {int64_t{6}, int64_t{4}});
  b.input("at", DType::kFloat32, {int64_t{4}, int64_t{6}});
  b.initializer_f("bt", ramp(7 * 4), {7, 4});
  b.initializer_f("c", ramp(7), {7});
  auto& g1 = b.node("Gemm", {"a", "bt", "c"}, {"y1"});   // M 6, N 7, K 4 -> 336
  OnnxModelBuilder::int_attr(g1, "transB", 1);
  auto& g2 = b.node("Gemm", {"at", "bt", "c"}, {"y2"});  // transA: K is at's dim 0 = 4 -> 336
  OnnxModelBuilder::int_attr(g2, "transA", 1);
  OnnxModelBuilder::int_attr(g2, "transB", 1);
  b.node("Add", {"y1", "y2"}, {"out"});
  b.output("out");
  // The transB Gemm with a constant weight is a FusedMatMul after matmul_epilogue_fusion.
  auto by_op = run_and_count(build(b));
  EXPECT_DOUBLE_EQ(by_op["Gemm"] + by_op["FusedMatMul"], 672.0);
}

TEST(FlopCount, ConvPlainAndGrouped) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{6}});
  b.input("z", DType::kFloat32, {int64_t{1}, int64_t{4}, int64_t{6}, int64_t{5}});
  b.initializer_f("w", ramp(4 * 3 * 3 * 2), {4, 3, 3, 2});
  b.initializer_f("wg", ramp(6 * 2 * 3 * 3), {6, 2, 3, 3});
  b.node("Conv", {"x", "w"}, {"y"});          // out [1,4,5,5] = 100, 3*3*2 = 18 MACs each -> 3600
  auto& cg = b.node("Conv", {"z", "wg"}, {"yg"});  // group 2: out [1,6,4,3] = 72, 2*3*3 = 18 MACs -> 2592
  OnnxModelBuilder::int_attr(cg, "group", 2);
  b.output("y");
  b.output("yg");
  auto by_op = run_and_count(build(b));  // constant-weight Convs are FusedConvs after conv_epilogue_fusion
  EXPECT_DOUBLE_EQ(by_op["Conv"] + by_op["FusedConv"], 3600.0 + 2592.0);
}

TEST(FlopCount, ConvTransposeCountsPerInputElement) {
  PlanStep step;
  step.op_type = "ConvTranspose";
  // x [1,4,3,3], W [4, 2, 2, 2] (Cout/group 2, kernel 2x2): 36 inputs x 8 MACs -> 576.
  const TensorView in[2] = {TensorView{nullptr, DType::kFloat32, Shape{1, 4, 3, 3}}, TensorView{nullptr, DType::kFloat32, Shape{4, 2, 2, 2}}};
  const TensorView out[1] = {TensorView{nullptr, DType::kFloat32, Shape{1, 2, 4, 4}}};
  EXPECT_DOUBLE_EQ(step_flops(step, in, out).flops, 576.0);
}

PlanStep attention(const std::string& layout, const std::string& mask, int64_t block = 0, bool kv_cache = false) {
  PlanStep s;
  s.domain = "kiln";
  s.op_type = "Attention";
  s.attrs["num_heads"] = Attribute::Int(2);
  s.attrs["scale"] = Attribute::Float(0.5f);
  s.attrs["layout"] = Attribute::String(layout);
  s.attrs["mask"] = Attribute::String(mask);
  if (block) s.attrs["block"] = Attribute::Int(block);
  if (kv_cache) s.attrs["kv_cache"] = Attribute::Int(1);
  return s;
}

TensorView desc(Shape s, DType dt = DType::kFloat32) { return TensorView{nullptr, dt, s}; }

// An unfused attention's batched products after matmul_transpose_folding: K is the permuted A's last
// axis, wherever it is stored.
TEST(FlopCount, StridedMatMulTakesKFromThePermutedA) {
  PlanStep qk;
  qk.op_type = "StridedMatMul";
  qk.domain = "ai.kiln";
  qk.attrs["perm_a"] = Attribute::Ints({1, 0, 2});  // q [S 5, H 2, D 3] read as [H, S, D]: K = D = 3
  qk.attrs["perm_b"] = Attribute::Ints({1, 2, 0});  // k [S, H, D] read as [H, D, S]
  const TensorView in[2] = {desc(Shape{5, 2, 3}), desc(Shape{5, 2, 3})};
  const TensorView scores[1] = {desc(Shape{2, 5, 5})};
  EXPECT_DOUBLE_EQ(step_flops(qk, in, scores).flops, 2.0 * 3 * 50);
  PlanStep pv;  // p [H 2, S 5, S 5] (no perm: K = its last axis, 5) times v [S, H, D] read as [H, S, D]
  pv.op_type = "StridedMatMul";
  pv.domain = "ai.kiln";
  pv.attrs["perm_b"] = Attribute::Ints({1, 0, 2});
  pv.attrs["perm_y"] = Attribute::Ints({1, 0, 2});
  const TensorView pin[2] = {desc(Shape{2, 5, 5}), desc(Shape{5, 2, 3})};
  const TensorView ctx[1] = {desc(Shape{5, 2, 3})};
  EXPECT_DOUBLE_EQ(step_flops(pv, pin, ctx).flops, 2.0 * 5 * 30);
  qk.attrs["perm_a"] = Attribute::Ints({1, 2, 7});  // an axis out of range counts nothing
  EXPECT_DOUBLE_EQ(step_flops(qk, in, scores).flops, 0.0);
}


// B 1, H 2, Dh 3, Sq 4: each visible (query, key) pair costs 4 * Dh = 12 FLOPs per head.
TEST(FlopCount, AttentionWithoutMaskCountsAllKeys) {
  const TensorView bsd[3] = {desc({1, 4, 6}), desc({1, 4, 6}), desc({1, 4, 6})};
  const TensorView out[1] = {desc({1, 4, 6})};
  FlopCount f = step_flops(attention("bsd", "none"), bsd, out);
  EXPECT_DOUBLE_EQ(f.flops, 2 * 12 * 16.0);
  EXPECT_FALSE(f.upper_bound);
  const TensorView bhsd[3] = {desc({1, 2, 4, 3}), desc({1, 2, 4, 3}), desc({1, 2, 4, 3})};
  EXPECT_DOUBLE_EQ(step_flops(attention("bhsd", "none"), bhsd, out).flops, 2 * 12 * 16.0);
  // sbd [S, B, D]: B 3, Sq 1 (a narrowed class token), Sk 5 -> 3 batches x 2 heads x 5 pairs.
  const TensorView sbd[3] = {desc({1, 3, 6}), desc({5, 3, 6}), desc({5, 3, 6})};
  const TensorView sbd_out[1] = {desc({1, 3, 6})};
  EXPECT_DOUBLE_EQ(step_flops(attention("sbd", "none"), sbd, sbd_out).flops, 3 * 2 * 12 * 5.0);
}

TEST(FlopCount, AttentionCausalCountsVisibleKeys) {
  const TensorView in[3] = {desc({1, 4, 6}), desc({1, 4, 6}), desc({1, 4, 6})};
  const TensorView out[1] = {desc({1, 4, 6})};
  // Queries at positions 0..3 see 1, 2, 3, 4 keys.
  FlopCount f = step_flops(attention("bsd", "causal"), in, out);
  EXPECT_DOUBLE_EQ(f.flops, 2 * 12 * 10.0);
  EXPECT_FALSE(f.upper_bound);
}

TEST(FlopCount, AttentionBlockCausalWithCache) {
  // 4 cached + 4 new keys, 4 queries at positions 4..7, blocks of 2: they see 6, 6, 8, 8 keys.
  const TensorView in[6] = {desc({1, 4, 6}), desc({1, 4, 6}), desc({1, 4, 6}), TensorView{}, desc({1, 4, 6}), desc({1, 4, 6})};
  const TensorView out[3] = {desc({1, 4, 6}), desc({1, 8, 6}), desc({1, 8, 6})};
  EXPECT_DOUBLE_EQ(step_flops(attention("bsd", "block_causal", 2, true), in, out).flops, 2 * 12 * 28.0);
}

TEST(FlopCount, AttentionBoolMaskCountsTrueEntriesWhenReadable) {
  Tensor mask = Tensor::zeros(DType::kBool, Shape{4, 4});
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j <= i; ++j) static_cast<uint8_t*>(mask.view().data)[i * 4 + j] = 1;  // 10 of 16
  const TensorView out[1] = {desc({1, 4, 6})};
  const TensorView with_data[4] = {desc({1, 4, 6}), desc({1, 4, 6}), desc({1, 4, 6}), mask.view()};
  FlopCount f = step_flops(attention("bsd", "bool"), with_data, out);
  EXPECT_DOUBLE_EQ(f.flops, 2 * 12 * 10.0);
  EXPECT_FALSE(f.upper_bound);
  // A mask computed inside the plan (no data): all keys, flagged.
  const TensorView shape_only[4] = {desc({1, 4, 6}), desc({1, 4, 6}), desc({1, 4, 6}), desc({4, 4}, DType::kBool)};
  f = step_flops(attention("bsd", "bool"), shape_only, out);
  EXPECT_DOUBLE_EQ(f.flops, 2 * 12 * 16.0);
  EXPECT_TRUE(f.upper_bound);
}

TEST(LayerProfile, OneTimedEventPerStepAndProfilingOffAfterwards) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{3}, int64_t{5}});
  b.initializer_f("w", ramp(5 * 4), {5, 4});
  b.node("MatMul", {"x", "w"}, {"xw"}, "proj");
  b.node("Relu", {"xw"}, {"r"});
  b.node("Softmax", {"r"}, {"y"});
  b.output("y");
  auto plan = build(b);
  auto ctx = ExecutionContext::create(plan);
  ASSERT_TRUE(ctx.ok());
  Tensor x = Tensor::zeros(DType::kFloat32, Shape{3, 5});
  ASSERT_TRUE((*ctx)->set_input(0, x.view()).ok());
  ASSERT_TRUE((*ctx)->run().ok());
  auto p = profile_layers(**ctx, 2);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->steps.size(), plan->steps.size());
  for (size_t s = 0; s < p->steps.size(); ++s) {
    EXPECT_GE(p->steps[s].ms, 0.0);
    EXPECT_GE(p->steps[s].begin_ms, 0.0);
    if (s) {
      EXPECT_GE(p->steps[s].begin_ms, p->steps[s - 1].begin_ms);
    }
  }
  EXPECT_EQ(p->steps[0].name, "proj");
  EXPECT_EQ(p->steps[0].inputs[0], "float32[3,5]");
  EXPECT_EQ(p->steps[0].outputs[0], "float32[3,4]");
  EXPECT_DOUBLE_EQ(p->flops.flops, 2.0 * 5 * 12);
  // Profiling is off again: further runs accumulate nothing.
  ASSERT_TRUE((*ctx)->run().ok());
  for (double ms : (*ctx)->step_ms()) EXPECT_EQ(ms, 0.0);
  const std::string trace = chrome_trace_json(*p, {{"model", "m \"quoted\""}});
  size_t events = 0;
  for (size_t at = trace.find("\"ph\": \"X\""); at != std::string::npos; at = trace.find("\"ph\": \"X\"", at + 1)) ++events;
  EXPECT_EQ(events, plan->steps.size());
  EXPECT_NE(trace.find("\"model\": \"m \\\"quoted\\\"\""), std::string::npos);
  const std::string summary = layer_summary_json(*p, 2);
  EXPECT_NE(summary.find("\"by_op_type\": {"), std::string::npos);
  EXPECT_EQ(slowest_steps(*p, 2).size(), 2u);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// The roofline per precision: each step's FLOPs count against its own precision's peak.
TEST(FlopCount, StepPrecisionFollowsTheKernelThatRan) {
  PlanStep mm;
  mm.op_type = "FusedMatMul";
  EXPECT_EQ(step_precision(mm, "onednn"), FlopPrecision::kF32);
  EXPECT_EQ(step_precision(mm, "panel"), FlopPrecision::kF32);
  EXPECT_EQ(step_precision(mm, "onednn_bf16"), FlopPrecision::kBf16);
  EXPECT_EQ(step_precision(mm, "onednn_int8"), FlopPrecision::kInt8);
  EXPECT_EQ(step_precision(mm, "reference"), FlopPrecision::kF32);  // a fallback runs f32
  PlanStep att;
  att.domain = "kiln";
  att.op_type = "Attention";
  EXPECT_EQ(step_precision(att, "plugin"), FlopPrecision::kF32);
  att.attrs["precision"] = Attribute::String("bf16");
  EXPECT_EQ(step_precision(att, "plugin"), FlopPrecision::kBf16);
}

TEST(LayerProfile, IdealTimeUsesEachPrecisionsPeak) {
  LayerProfile p;
  auto step = [&](const char* op, double gflop, FlopPrecision prec, double ms) {
    LayerTiming t;
    t.op_type = op;
    t.flops.flops = gflop * 1e9;
    t.precision = prec;
    t.ms = ms;
    p.steps.push_back(t);
  };
  step("FusedMatMul", 2.0, FlopPrecision::kBf16, 4.0);   // 2 GFLOP at 1000 GFLOP/s: 2 ms ideal
  step("FusedMatMul", 1.0, FlopPrecision::kF32, 4.0);    // 1 GFLOP at 500: 2 ms
  step("kiln::Attention", 1.0, FlopPrecision::kBf16, 2.0);  // 1 ms
  step("LayerNormalization", 0.0, FlopPrecision::kF32, 1.0);
  const std::array<double, kFlopPrecisions> peaks = {500.0, 1000.0, 0.0};
  EXPECT_DOUBLE_EQ(ideal_ms(p, peaks), 5.0);
  EXPECT_DOUBLE_EQ(ideal_ms(p, peaks, "FusedMatMul"), 4.0);
  const auto g = gflop_by_precision(p);
  EXPECT_DOUBLE_EQ(g[0], 1.0);
  EXPECT_DOUBLE_EQ(g[1], 3.0);
  EXPECT_DOUBLE_EQ(g[2], 0.0);
  const auto frac = peak_fraction_by_op_type(p, peaks);
  ASSERT_EQ(frac.size(), 2u);
  for (const auto& [op, f] : frac) EXPECT_DOUBLE_EQ(f, 0.5) << op;
  // An int8 step with no int8 peak measured: the roofline is unknown (0), never a wrong peak.
  step("FusedMatMul", 1.0, FlopPrecision::kInt8, 1.0);
  EXPECT_DOUBLE_EQ(ideal_ms(p, peaks), 0.0);
  const std::string json = layer_summary_json(p, 3, &peaks);
  EXPECT_NE(json.find("\"gflop_by_precision\": {\"f32\": 1, \"bf16\": 3, \"int8\": 1}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"peak_fraction_by_op_type\": {\"kiln::Attention\": 0.5}"), std::string::npos) << json;
}

}  // namespace
}  // namespace kiln
