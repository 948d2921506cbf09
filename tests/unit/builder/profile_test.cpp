// Optimization profiles: resolving dims/shapes into per-input ranges, the errors for incomplete or
// contradictory profiles, and the ranged plan running anywhere in its range exactly like a plan
// built for those exact shapes.
//
// The model is attention-like, so the graph itself ties the dims together:
//   keys   = Concat(cache[C, 8], k[N, 8], axis 0)      -> [C+N, 8]
//   scores = MatMul(q[N, 8], Transpose(keys))           -> [N, C+N]
//   y      = Where(mask[N, T], scores, -1e9)            -> requires T == C+N (T > 1)
// and, in the variant with values (no Where, the mask input is unused),
//   out    = MatMul(scores, vals[T, 8])                 -> requires T == C+N
#include <gtest/gtest.h>

#include <cmath>

#include "builder/build_profile.h"
#include "builder/plan/build_plan.h"
#include "builder/optimization_profile.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Graph attention_graph(bool with_values = false) {
  OnnxModelBuilder b;
  b.input("q", DType::kFloat32, {std::string("N"), int64_t{8}});
  b.input("k", DType::kFloat32, {std::string("N"), int64_t{8}});
  b.input("cache", DType::kFloat32, {std::string("C"), int64_t{8}});
  b.input("mask", DType::kBool, {std::string("N"), std::string("T")});
  b.initializer_f("neg", {-1e9f}, {});
  OnnxModelBuilder::int_attr(b.node("Concat", {"cache", "k"}, {"keys"}, "concat_keys"), "axis", 0);
  b.node("Transpose", {"keys"}, {"keys_t"}, "transpose_keys");
  b.node("MatMul", {"q", "keys_t"}, {"scores"}, "qk_matmul");
  if (!with_values) {
    b.node("Where", {"mask", "scores", "neg"}, {"y"}, "mask_where");
    b.output("y");
  } else {
    b.input("vals", DType::kFloat32, {std::string("T"), int64_t{8}});
    b.node("MatMul", {"scores", "vals"}, {"out"}, "av_matmul");
    b.output("out");
  }
  auto g = b.import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::move(g).value();
}

ProfileConfig valid_profile(const std::string& name = "decode") {
  ProfileConfig p;
  p.name = name;
  p.dims["N"] = DimRange{1, 2, 4};
  p.dims["C"] = DimRange{2, 4, 8};
  p.dims["T"] = DimRange{3, 6, 12};
  return p;
}

struct Inputs {
  Tensor q, k, cache, mask;
  std::map<std::string, Shape> shapes() const {
    return {{"q", q.shape()}, {"k", k.shape()}, {"cache", cache.shape()}, {"mask", mask.shape()}};
  }
};

Tensor ramp(const Shape& s, float scale, float offset) {
  Tensor t = Tensor::zeros(DType::kFloat32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = std::sin(scale * static_cast<float>(i) + offset);
  return t;
}

Inputs make_inputs(int64_t n, int64_t c) {
  Inputs in;
  in.q = ramp(Shape{n, 8}, 0.37f, 0.1f);
  in.k = ramp(Shape{n, 8}, 0.71f, 0.5f);
  in.cache = ramp(Shape{c, 8}, 0.23f, 1.3f);
  const int64_t t = c + n;
  in.mask = Tensor::zeros(DType::kBool, Shape{n, t});
  // Causal over the new tokens: row r sees the cache and new tokens 0..r.
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < t; ++j) in.mask.as<bool>()[r * t + j] = j <= c + r;
  return in;
}

Status bind_and_run(ExecutionContext& ctx, const Inputs& in) {
  KILN_RETURN_IF_ERROR(ctx.set_input("q", in.q.view()));
  KILN_RETURN_IF_ERROR(ctx.set_input("k", in.k.view()));
  KILN_RETURN_IF_ERROR(ctx.set_input("cache", in.cache.view()));
  KILN_RETURN_IF_ERROR(ctx.set_input("mask", in.mask.view()));
  return ctx.run();
}

std::vector<float> output_values(const ExecutionContext& ctx) {
  const TensorView& y = ctx.output(0);
  return std::vector<float>(y.as<float>(), y.as<float>() + y.numel());
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4f * std::max(1.0f, std::fabs(want[i]))) << i;
}

// Hand-computed y for the inputs above.
std::vector<float> reference(const Inputs& in) {
  const int64_t n = in.q.shape()[0], c = in.cache.shape()[0], t = c + n;
  std::vector<float> out(static_cast<size_t>(n * t));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < t; ++j) {
      const float* key = j < c ? in.cache.as<float>() + j * 8 : in.k.as<float>() + (j - c) * 8;
      float acc = 0;
      for (int d = 0; d < 8; ++d) acc += in.q.as<float>()[r * 8 + d] * key[d];
      out[static_cast<size_t>(r * t + j)] = in.mask.as<bool>()[r * t + j] ? acc : -1e9f;
    }
  return out;
}

TEST(Profile, ResolvesDimsIntoPerInputRanges) {
  Graph g = attention_graph();
  auto rp = resolve_profile(g, valid_profile());
  ASSERT_TRUE(rp.ok()) << rp.status().message();
  EXPECT_EQ(rp->name, "decode");
  EXPECT_EQ(rp->input_order, (std::vector<std::string>{"q", "k", "cache", "mask"}));
  EXPECT_EQ(rp->inputs.at("q").min, (Shape{1, 8}));
  EXPECT_EQ(rp->inputs.at("q").opt, (Shape{2, 8}));
  EXPECT_EQ(rp->inputs.at("q").max, (Shape{4, 8}));
  EXPECT_EQ(rp->inputs.at("cache").max, (Shape{8, 8}));
  EXPECT_EQ(rp->inputs.at("mask").min, (Shape{1, 3}));
  EXPECT_EQ(rp->inputs.at("mask").opt, (Shape{2, 6}));
  EXPECT_EQ(rp->inputs.at("mask").max, (Shape{4, 12}));
  auto at_max = rp->shapes_at(ResolvedProfile::Point::kMax);
  EXPECT_EQ(at_max.at("k"), (Shape{4, 8}));
  EXPECT_TRUE(check_profile_against_graph(g, *rp).ok());
}

TEST(Profile, ExplicitShapesWorkLikeDims) {
  Graph g = attention_graph();
  ProfileConfig p;
  p.name = "shaped";
  p.dims["N"] = DimRange{1, 1, 1};
  p.dims["C"] = DimRange{2, 5, 7};
  p.shapes["mask"] = ShapeRange{{1, 3}, {1, 6}, {1, 8}};
  auto rp = resolve_profile(g, p);
  ASSERT_TRUE(rp.ok()) << rp.status().message();
  EXPECT_EQ(rp->inputs.at("mask").opt, (Shape{1, 6}));
  EXPECT_TRUE(check_profile_against_graph(g, *rp).ok());
}

TEST(Profile, UnsetDynamicDimNamesProfileInputDimIndexAndName) {
  Graph g = attention_graph();
  ProfileConfig p = valid_profile("prefill");
  p.dims.erase("T");
  auto rp = resolve_profile(g, p);
  ASSERT_FALSE(rp.ok());
  const std::string& m = rp.status().message();
  EXPECT_EQ(rp.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(m, "profile 'prefill'")) << m;
  EXPECT_TRUE(contains(m, "input 'mask'")) << m;
  EXPECT_TRUE(contains(m, "dim 1")) << m;
  EXPECT_TRUE(contains(m, "'T'")) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(Profile, UnknownDimNameIsNamedAndModelDimsListed) {
  Graph g = attention_graph();
  ProfileConfig p = valid_profile();
  p.dims["timesteps"] = DimRange{1, 1, 1};
  auto rp = resolve_profile(g, p);
  ASSERT_FALSE(rp.ok());
  const std::string& m = rp.status().message();
  EXPECT_TRUE(contains(m, "'timesteps'")) << m;
  EXPECT_TRUE(contains(m, "C, N, T")) << m;
  EXPECT_TRUE(contains(m, "profile 'decode'")) << m;
}

TEST(Profile, ShapesForUnknownInputIsAnError) {
  Graph g = attention_graph();
  ProfileConfig p = valid_profile();
  p.shapes["nope"] = ShapeRange{{1}, {1}, {1}};
  auto rp = resolve_profile(g, p);
  ASSERT_FALSE(rp.ok());
  EXPECT_TRUE(contains(rp.status().message(), "'nope'")) << rp.status().message();
}

TEST(Profile, MinAboveOptIsAnError) {
  Graph g = attention_graph();
  ProfileConfig p = valid_profile();
  p.dims["C"] = DimRange{5, 4, 8};
  auto rp = resolve_profile(g, p);
  ASSERT_FALSE(rp.ok());
  const std::string& m = rp.status().message();
  EXPECT_TRUE(contains(m, "input 'cache' dim 0")) << m;
  EXPECT_TRUE(contains(m, "min <= opt <= max")) << m;
  EXPECT_TRUE(contains(m, "{5, 4, 8}")) << m;

  p.dims["C"] = DimRange{2, 9, 8};  // opt > max
  EXPECT_FALSE(resolve_profile(g, p).ok());
  p.dims["C"] = DimRange{-1, 4, 8};  // negative
  EXPECT_FALSE(resolve_profile(g, p).ok());
}

TEST(Profile, ShapesWithWrongRankIsAnError) {
  Graph g = attention_graph();
  ProfileConfig p = valid_profile();
  p.dims.erase("T");
  p.shapes["mask"] = ShapeRange{{1, 3, 1}, {2, 6, 1}, {4, 12, 1}};
  auto rp = resolve_profile(g, p);
  ASSERT_FALSE(rp.ok());
  const std::string& m = rp.status().message();
  EXPECT_TRUE(contains(m, "'mask'")) << m;
  EXPECT_TRUE(contains(m, "rank 2")) << m;

  // min/opt/max of different ranks are just as wrong.
  p.shapes["mask"] = ShapeRange{{1, 3}, {2, 6}, {4}};
  EXPECT_FALSE(resolve_profile(g, p).ok());
}

TEST(Profile, ShapesContradictingDimsOrStaticDimsAreErrors) {
  Graph g = attention_graph();
  ProfileConfig p = valid_profile();
  p.shapes["q"] = ShapeRange{{1, 8}, {3, 8}, {4, 8}};  // N opt 3, dims say 2
  auto rp = resolve_profile(g, p);
  ASSERT_FALSE(rp.ok());
  EXPECT_TRUE(contains(rp.status().message(), "'N'")) << rp.status().message();

  p.shapes["q"] = ShapeRange{{1, 8}, {2, 8}, {4, 9}};  // dim 1 is fixed at 8 by the model
  rp = resolve_profile(g, p);
  ASSERT_FALSE(rp.ok());
  EXPECT_TRUE(contains(rp.status().message(), "fixed at 8")) << rp.status().message();
}

// T must equal C+N at min (3), opt (6) and max (12): each case breaks it at one point.
struct Contradiction {
  DimRange t;
  const char* point;
};
const Contradiction kContradictions[] = {
    {DimRange{4, 6, 12}, "at min"}, {DimRange{3, 7, 12}, "at opt"}, {DimRange{3, 6, 13}, "at max"}};

void expect_contradiction(const Graph& g, const std::string& node) {
  for (const Contradiction& c : kContradictions) {
    SCOPED_TRACE(c.point);
    ProfileConfig p = valid_profile("kv");
    p.dims["T"] = c.t;
    auto rp = resolve_profile(g, p);
    ASSERT_TRUE(rp.ok()) << rp.status().message();  // each input on its own is fine
    Status st = check_profile_against_graph(g, *rp);
    ASSERT_FALSE(st.ok()) << "profile with T = {" << c.t.min << ", " << c.t.opt << ", " << c.t.max
                          << "} passed the graph check; it contradicts " << node;
    const std::string& m = st.message();
    EXPECT_TRUE(contains(m, "profile 'kv'")) << m;
    EXPECT_TRUE(contains(m, c.point)) << m;
    EXPECT_TRUE(contains(m, node)) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(Profile, ValidProfilePassesTheGraphCheckWithValues) {
  Graph g = attention_graph(true);
  auto rp = resolve_profile(g, valid_profile());
  ASSERT_TRUE(rp.ok()) << rp.status().message();
  Status st = check_profile_against_graph(g, *rp);
  EXPECT_TRUE(st.ok()) << st.message();
}

// The contradiction is visible at a MatMul ([N, C+N] x [T, 8]).
TEST(Profile, DimsContradictingAMatMulFailAtTheOffendingPoint) { expect_contradiction(attention_graph(true), "av_matmul"); }

// The contradiction is visible only at the broadcasting Where ([N, T] against [N, C+N]).
TEST(Profile, DimsContradictingABroadcastFailAtTheOffendingPoint) { expect_contradiction(attention_graph(false), "mask_where"); }

TEST(Profile, RangedPlanInputsCarryTheRange) {
  Graph g = attention_graph();
  auto rp = resolve_profile(g, valid_profile());
  ASSERT_TRUE(rp.ok());
  auto plan = build_profile_plan(g, *rp, {});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ((*plan)->profile, "decode");
  ASSERT_EQ((*plan)->inputs.size(), 4u);
  std::map<std::string, const PlanValue*> by_name;
  for (int v : (*plan)->inputs) by_name[(*plan)->values[v].name] = &(*plan)->values[v];
  ASSERT_EQ(by_name.size(), 4u);
  const PlanValue& mask = *by_name.at("mask");
  EXPECT_EQ(mask.dtype, DType::kBool);
  EXPECT_EQ(mask.range_min, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(mask.range_opt, (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(mask.range_max, (std::vector<int64_t>{4, 12}));
  EXPECT_EQ(mask.dim_names, (std::vector<std::string>{"N", "T"}));
  const PlanValue& cache = *by_name.at("cache");
  EXPECT_EQ(cache.range_min, (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(cache.range_opt, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(cache.range_max, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(cache.dims, (std::vector<int64_t>{-1, 8}));
}

TEST(Profile, FixedDimsBecomeStaticInThePlan) {
  Graph g = attention_graph();
  ProfileConfig p = valid_profile("step");
  p.dims["N"] = DimRange{1, 1, 1};
  p.dims["T"] = DimRange{3, 5, 9};
  p.dims["C"] = DimRange{2, 4, 8};
  auto rp = resolve_profile(g, p);
  ASSERT_TRUE(rp.ok()) << rp.status().message();
  ASSERT_TRUE(check_profile_against_graph(g, *rp).ok());
  auto plan = build_profile_plan(g, *rp, {});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const PlanValue& q = (*plan)->values[(*plan)->find_value("q")];
  EXPECT_EQ(q.dims, (std::vector<int64_t>{1, 8}));
  const PlanValue& mask = (*plan)->values[(*plan)->find_value("mask")];
  EXPECT_EQ(mask.dims, (std::vector<int64_t>{1, -1}));

  auto ctx = ExecutionContext::create(*plan);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  Inputs in = make_inputs(1, 6);
  ASSERT_TRUE(bind_and_run(**ctx, in).ok());
  expect_close(output_values(**ctx), reference(in));
  Inputs two = make_inputs(2, 4);
  EXPECT_FALSE((*ctx)->set_input("q", two.q.view()).ok());  // N is fixed at 1
}

TEST(Profile, SetInputOutsideTheRangeIsOutOfRange) {
  Graph g = attention_graph();
  auto rp = resolve_profile(g, valid_profile());
  ASSERT_TRUE(rp.ok());
  auto plan = build_profile_plan(g, *rp, {});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto ctx = ExecutionContext::create(*plan);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();

  Tensor big_mask = Tensor::zeros(DType::kBool, Shape{2, 13});
  Status st = (*ctx)->set_input("mask", big_mask.view());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  const std::string& m = st.message();
  EXPECT_TRUE(contains(m, "input 'mask'")) << m;
  EXPECT_TRUE(contains(m, "dim 1")) << m;
  EXPECT_TRUE(contains(m, "'T'")) << m;
  EXPECT_TRUE(contains(m, "13")) << m;
  EXPECT_TRUE(contains(m, "[3, 12]")) << m;
  EXPECT_TRUE(contains(m, "profile 'decode'")) << m;

  Tensor small_cache = Tensor::zeros(DType::kFloat32, Shape{1, 8});
  st = (*ctx)->set_input("cache", small_cache.view());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(contains(st.message(), "input 'cache' dim 0")) << st.message();
  EXPECT_TRUE(contains(st.message(), "[2, 8]")) << st.message();

  Tensor no_rows = Tensor::zeros(DType::kFloat32, Shape{0, 8});  // N min is 1
  EXPECT_EQ((*ctx)->set_input("q", no_rows.view()).code(), StatusCode::kOutOfRange);
}

// Inside the range, inputs whose dims disagree with each other (T != C+N) fail in run(), cleanly.
TEST(Profile, InconsistentDimsInsideTheRangeFailAtRun) {
  Graph g = attention_graph();
  auto rp = resolve_profile(g, valid_profile());
  ASSERT_TRUE(rp.ok());
  auto plan = build_profile_plan(g, *rp, {});
  ASSERT_TRUE(plan.ok());
  auto ctx = ExecutionContext::create(*plan);
  ASSERT_TRUE(ctx.ok());
  Inputs in = make_inputs(2, 4);
  in.mask = Tensor::zeros(DType::kBool, Shape{2, 7});
  Status st = bind_and_run(**ctx, in);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "mask_where")) << st.message();
  // And the context still works afterwards.
  Inputs good = make_inputs(2, 4);
  ASSERT_TRUE(bind_and_run(**ctx, good).ok());
  expect_close(output_values(**ctx), reference(good));
}

// At min, opt and max (and between), the ranged plan gives what a plan built by build_plan() for
// those exact shapes gives.
TEST(Profile, RangedPlanMatchesExactShapePlansAcrossTheRange) {
  Graph g = attention_graph();
  auto rp = resolve_profile(g, valid_profile());
  ASSERT_TRUE(rp.ok());
  auto ranged = build_profile_plan(g, *rp, {});
  ASSERT_TRUE(ranged.ok()) << ranged.status().message();
  auto ctx = ExecutionContext::create(*ranged);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();

  // (N, C): min, opt, max, then points in between and back to min (re-planning both ways).
  const std::pair<int64_t, int64_t> points[] = {{1, 2}, {2, 4}, {4, 8}, {3, 5}, {1, 8}, {4, 2}, {1, 2}};
  for (const auto& [n, c] : points) {
    SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c));
    Inputs in = make_inputs(n, c);
    BuildOptions exact_opts;
    exact_opts.input_shapes = in.shapes();
    auto exact = build_plan(g, exact_opts);
    ASSERT_TRUE(exact.ok()) << exact.status().message();
    auto exact_ctx = ExecutionContext::create(*exact);
    ASSERT_TRUE(exact_ctx.ok()) << exact_ctx.status().message();
    ASSERT_TRUE(bind_and_run(**exact_ctx, in).ok());

    Status st = bind_and_run(**ctx, in);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ((*ctx)->output(0).shape, (Shape{n, c + n}));
    EXPECT_EQ((*exact_ctx)->output(0).shape, (Shape{n, c + n}));
    const std::vector<float> got = output_values(**ctx), want = output_values(**exact_ctx), ref = reference(in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5f * std::max(1.0f, std::fabs(want[i]))) << i;
      EXPECT_NEAR(got[i], ref[i], 1e-4f * std::max(1.0f, std::fabs(ref[i]))) << i;
    }
  }
}

}  // namespace
}  // namespace kiln
