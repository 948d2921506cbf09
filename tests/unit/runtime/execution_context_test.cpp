// ExecutionContext: arena planning, re-planning on shape change, input validation, and no heap
// allocation in a steady-state run (counted through a replaced global operator new).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>

#include "builder/plan/build_plan.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"

// Global (not static): tests/unit/runtime/streaming_session_test.cpp counts with them too.
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};

// The replaced global operator new counts allocations while g_counting is set (and, with
// KILN_ABORT_ON_ALLOC set, aborts so a debugger shows who allocated). The matching deletes free what
// it malloc'd; GCC's -Wmismatched-new-delete does not see that the two are replaced together.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (std::getenv("KILN_ABORT_ON_ALLOC")) std::abort();
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
// Default visibility by hand: <new> declares the sized delete (with default visibility) only
// where sized deallocation is on, which clang 14 leaves off, and the build hides symbols by
// default. Hidden, the libraries would bind to the sanitizer runtime's sized delete and free
// this file's mallocs there (an alloc-dealloc mismatch under the shared ASan runtime).
__attribute__((visibility("default"))) void operator delete(void* p, size_t) noexcept { std::free(p); }
// The nothrow forms too (std::stable_sort's temporary buffer uses them): AddressSanitizer would
// otherwise pair its own nothrow new with the free above and report a mismatch.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

// y = Softmax(Relu(x @ w + b)) over a dynamic batch dim "N".
Graph mlp_graph() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {std::string("N"), int64_t{5}});
  std::vector<float> w(5 * 3), bias = {0.1f, -0.2f, 0.3f};
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * static_cast<float>(i) - 0.3f;
  b.initializer_f("w", w, {5, 3}).initializer_f("b", bias, {3});
  b.node("MatMul", {"x", "w"}, {"xw"});
  b.node("Add", {"xw", "b"}, {"h"});
  b.node("Relu", {"h"}, {"r"});
  b.node("Softmax", {"r"}, {"y"});
  b.output("y");
  auto g = b.import();
  EXPECT_TRUE(g.ok());
  return std::move(g).value();
}

std::vector<float> reference_mlp(const Tensor& x) {
  const int64_t n = x.shape()[0];
  std::vector<float> out(static_cast<size_t>(n * 3));
  for (int64_t r = 0; r < n; ++r) {
    float h[3], mx = -1e30f, sum = 0;
    for (int c = 0; c < 3; ++c) {
      float acc = c == 0 ? 0.1f : c == 1 ? -0.2f : 0.3f;
      for (int k = 0; k < 5; ++k) acc += x.as<float>()[r * 5 + k] * (0.05f * static_cast<float>(k * 3 + c) - 0.3f);
      h[c] = std::max(acc, 0.0f);
      mx = std::max(mx, h[c]);
    }
    for (int c = 0; c < 3; ++c) sum += (h[c] = std::exp(h[c] - mx));
    for (int c = 0; c < 3; ++c) out[static_cast<size_t>(r * 3 + c)] = h[c] / sum;
  }
  return out;
}

Tensor input(int64_t n) {
  Tensor t = Tensor::zeros(DType::kFloat32, Shape{n, 5});
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = std::sin(static_cast<float>(i));
  return t;
}

std::shared_ptr<Plan> dynamic_plan() {
  auto plan = build_plan(mlp_graph(), {});
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? *plan : nullptr;
}

void expect_matches(const TensorView& y, const Tensor& x) {
  auto want = reference_mlp(x);
  ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y.as<float>()[i], want[i], 1e-5) << i;
}

TEST(ExecutionContext, RunsAcrossShapeChangesAndReplans) {
  auto plan = dynamic_plan();
  ASSERT_NE(plan, nullptr);
  auto ctx = ExecutionContext::create(plan);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  for (int64_t n : {4, 4, 7, 1, 7, 0, 4}) {
    Tensor x = input(n);
    ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
    Status st = (*ctx)->run();
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ((*ctx)->output(0).shape, (Shape{n, 3}));
    expect_matches((*ctx)->output(0), x);
  }
  EXPECT_GT((*ctx)->arena_bytes(), 0u);
}

// kiln's own code (executor and kernels) must not allocate in a steady-state run. oneDNN's
// primitive::execute builds a small argument map on the heap inside the library on every call,
// which kiln cannot avoid through its API, so this test pins the reference kernels (kiln's own
// FusedElementwise, which the Softmax here joins, has one implementation).
TEST(ExecutionContext, SteadyStateRunDoesNotAllocate) {
  auto built = dynamic_plan();
  ASSERT_NE(built, nullptr);
  auto plan = std::make_shared<Plan>(*built);
  for (auto& step : plan->steps)
    if (step.op_type != "FusedElementwise") step.impl = "reference";
  auto ctx = ExecutionContext::create(plan);
  ASSERT_TRUE(ctx.ok());
  Tensor x = input(33);
  ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
  ASSERT_TRUE((*ctx)->run().ok());  // unplanned run: records shapes, plans the arena
  ASSERT_TRUE((*ctx)->run().ok());  // first arena run
  g_allocations = 0;
  g_counting = true;
  Status st = (*ctx)->run();
  g_counting = false;
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(g_allocations.load(), 0) << "operator new called in a steady-state run";
  expect_matches((*ctx)->output(0), x);
}

// An unfused attention's QK^T through its head Transposes and scale becomes one StridedMatMul
// (matmul_transpose_folding); its panel kernel and its infer() allocate nothing in a steady-state run.
TEST(ExecutionContext, SteadyStateStridedMatMulDoesNotAllocate) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{5}, int64_t{3}, int64_t{8}});
  b.initializer_f("two", {2.0f}, {});
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"x"}, {"q"}), "perm", {0, 2, 1, 3});
  b.node("Div", {"q", "two"}, {"qs"});
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"x"}, {"kt"}), "perm", {0, 2, 3, 1});
  b.node("MatMul", {"qs", "kt"}, {"y"});
  b.output("y");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto built = build_plan(*g, BuildOptions{});
  ASSERT_TRUE(built.ok()) << built.status().message();
  auto plan = std::make_shared<Plan>(**built);
  int strided = 0;
  for (auto& step : plan->steps) {
    strided += step.op_type == "StridedMatMul";
    step.impl = step.op_type == "StridedMatMul" ? "panel" : "reference";
  }
  ASSERT_EQ(strided, 1) << "matmul_transpose_folding takes the Transposes and the scale";
  auto ctx = ExecutionContext::create(plan);
  ASSERT_TRUE(ctx.ok());
  Tensor x = Tensor::zeros(DType::kFloat32, Shape{2, 5, 3, 8});
  for (int64_t i = 0; i < x.numel(); ++i) x.as<float>()[i] = 0.01f * static_cast<float>(i % 37) - 0.2f;
  ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
  ASSERT_TRUE((*ctx)->run().ok());
  ASSERT_TRUE((*ctx)->run().ok());
  g_allocations = 0;
  g_counting = true;
  Status st = (*ctx)->run();
  g_counting = false;
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(g_allocations.load(), 0) << "operator new called in a steady-state run";
  // y[n, h, i, j] = sum_d x[n, i, h, d] / 2 * x[n, j, h, d]
  const TensorView& y = (*ctx)->output(0);
  ASSERT_EQ(y.shape, (Shape{2, 3, 5, 5}));
  const float* xv = x.as<float>();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          double want = 0;
          for (int64_t d = 0; d < 8; ++d) want += xv[((n * 5 + i) * 3 + h) * 8 + d] / 2.0 * xv[((n * 5 + j) * 3 + h) * 8 + d];
          EXPECT_NEAR(y.as<float>()[((n * 3 + h) * 5 + i) * 5 + j], want, 1e-5);
        }
}

TEST(ExecutionContext, InputValidationNamesInputDimAndValue) {
  auto plan = dynamic_plan();
  ASSERT_NE(plan, nullptr);
  auto ctx = ExecutionContext::create(plan);
  ASSERT_TRUE(ctx.ok());
  Tensor bad = Tensor::zeros(DType::kFloat32, Shape{2, 6});
  Status st = (*ctx)->set_input("x", bad.view());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("input 'x' dim 1 must be 5, got 6"), std::string::npos) << st.message();
  Tensor wrong_type = Tensor::zeros(DType::kInt64, Shape{2, 5});
  st = (*ctx)->set_input("x", wrong_type.view());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("float32"), std::string::npos);
  EXPECT_FALSE((*ctx)->set_input("nope", bad.view()).ok());
  EXPECT_FALSE((*ctx)->run().ok());  // x never bound
}

TEST(ExecutionContext, TwoContextsShareOnePlan) {
  auto plan = dynamic_plan();
  ASSERT_NE(plan, nullptr);
  auto a = ExecutionContext::create(plan);
  auto b = ExecutionContext::create(plan);
  ASSERT_TRUE(a.ok() && b.ok());
  Tensor xa = input(3), xb = input(9);
  ASSERT_TRUE((*a)->set_input("x", xa.view()).ok());
  ASSERT_TRUE((*b)->set_input("x", xb.view()).ok());
  ASSERT_TRUE((*a)->run().ok());
  ASSERT_TRUE((*b)->run().ok());
  expect_matches((*a)->output(0), xa);
  expect_matches((*b)->output(0), xb);
}
}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(ExecutionContext, BoundOutputIsWrittenInPlace) {
  auto plan = dynamic_plan();
  ASSERT_NE(plan, nullptr);
  auto ctx = ExecutionContext::create(plan);
  ASSERT_TRUE(ctx.ok());
  Tensor x = input(6);
  Tensor y = Tensor::zeros(DType::kFloat32, Shape{6, 3});
  ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
  ASSERT_TRUE((*ctx)->bind_output("y", y.view()).ok());
  for (int rep = 0; rep < 3; ++rep) {
    ASSERT_TRUE((*ctx)->run().ok());
    EXPECT_EQ((*ctx)->output(0).data, y.data());
    expect_matches(y.view(), x);
  }
  Tensor wrong = Tensor::zeros(DType::kFloat32, Shape{5, 3});
  ASSERT_TRUE((*ctx)->bind_output("y", wrong.view()).ok());
  Status st = (*ctx)->run();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("output 'y'"), std::string::npos) << st.message();
  EXPECT_FALSE((*ctx)->bind_output("nope", y.view()).ok());
}

TEST(ExecutionContext, PrepareForProfileNeedsRanges) {
  auto plan = dynamic_plan();
  ASSERT_NE(plan, nullptr);
  auto ranged = std::make_shared<Plan>(*plan);
  PlanValue& x = ranged->values[ranged->inputs[0]];
  x.range_min = {1, 5};
  x.range_opt = {4, 5};
  x.range_max = {9, 5};
  ranged->profile = "p";
  auto ctx = ExecutionContext::create(ranged);
  ASSERT_TRUE(ctx.ok());
  ASSERT_TRUE((*ctx)->prepare_for_profile().ok());
  const size_t arena = (*ctx)->arena_bytes();
  EXPECT_GE(arena, 9u * 3 * sizeof(float));  // sized for max
  Tensor in = input(4);
  ASSERT_TRUE((*ctx)->set_input("x", in.view()).ok());
  ASSERT_TRUE((*ctx)->run().ok());
  EXPECT_EQ((*ctx)->arena_bytes(), arena);  // opt was planned inside the max arena
  expect_matches((*ctx)->output(0), in);
  Tensor too_big = input(10);
  Status st = (*ctx)->set_input("x", too_big.view());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("outside profile 'p' range [1, 9]"), std::string::npos) << st.message();
  auto plain = ExecutionContext::create(plan);
  EXPECT_FALSE((*plain)->prepare_for_profile().ok());
}
}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Reshape and Unsqueeze are views: the arena holds only the Relu output, and the outputs are right.
TEST(ExecutionContext, ReshapeLikeStepsAreViewsNotCopies) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{4}, int64_t{6}});
  b.initializer("shape", {3, 8}, {2}).initializer("axes", {0}, {1});
  b.node("Relu", {"x"}, {"r"});
  b.node("Reshape", {"r", "shape"}, {"rs"});
  b.node("Unsqueeze", {"rs", "axes"}, {"y"});
  b.output("y");
  auto g = b.import();
  ASSERT_TRUE(g.ok());
  BuildOptions opts;
  opts.disabled_passes = {"constant_folding"};
  auto plan = build_plan(*g, opts);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto ctx = ExecutionContext::create(*plan);
  ASSERT_TRUE(ctx.ok());
  Tensor x = Tensor::zeros(DType::kFloat32, Shape{4, 6});
  for (int i = 0; i < 24; ++i) x.as<float>()[i] = static_cast<float>(i % 5) - 2.0f;
  ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
  for (int rep = 0; rep < 2; ++rep) {
    ASSERT_TRUE((*ctx)->run().ok());
    const TensorView& y = (*ctx)->output(0);
    EXPECT_EQ(y.shape, (Shape{1, 3, 8}));
    for (int i = 0; i < 24; ++i) EXPECT_EQ(y.as<float>()[i], std::max(0.0f, x.as<float>()[i]));
  }
  EXPECT_EQ((*ctx)->arena_bytes(), 128u);  // 24 floats rounded up to 64 bytes: one buffer, not three
}
}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Gather on axis 0 with a constant index is a view at an offset; an out-of-range index is still an
// error (the kernel's own check is skipped by the view).
TEST(ExecutionContext, LeadingGatherIsAViewAndStillChecksItsIndex) {
  for (int64_t index : {int64_t{1}, int64_t{-1}, int64_t{3}}) {
    OnnxModelBuilder b;
    b.input("x", DType::kFloat32, {int64_t{3}, int64_t{4}});
    b.initializer("i", {index}, {});
    b.node("Relu", {"x"}, {"r"});
    b.node("Gather", {"r", "i"}, {"y"});
    b.output("y");
    auto g = b.import();
    ASSERT_TRUE(g.ok());
    BuildOptions opts;
    opts.disabled_passes = {"constant_folding"};
    auto plan = build_plan(*g, opts);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    auto ctx = ExecutionContext::create(*plan);
    ASSERT_TRUE(ctx.ok());
    Tensor x = Tensor::zeros(DType::kFloat32, Shape{3, 4});
    for (int i = 0; i < 12; ++i) x.as<float>()[i] = static_cast<float>(i);
    ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
    Status st = (*ctx)->run();
    if (index == 3) {
      ASSERT_FALSE(st.ok());
      EXPECT_NE(st.message().find("index 3 is out of range"), std::string::npos) << st.message();
      continue;
    }
    ASSERT_TRUE(st.ok()) << st.message();
    const int64_t row = index < 0 ? index + 3 : index;
    const TensorView& y = (*ctx)->output(0);
    EXPECT_EQ(y.shape, (Shape{4}));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(y.as<float>()[i], static_cast<float>(row * 4 + i));
  }
}
}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Concat without copies: the arena places the Relu outputs inside the stacked output, the Concats
// skip them. The values must be right on arena runs too (run 2 onwards), when a placed input is
// read again after the Concat (its buffer lives as long as the Concat's), and when one value is
// concatenated twice (only one copy can be in place).
TEST(ExecutionContext, ConcatInputsWrittenInPlaceGiveTheSameValues) {
  testing::OnnxModelBuilder b;
  b.input("a", DType::kFloat32, {std::string("N"), int64_t{3}}).input("c", DType::kFloat32, {std::string("N"), int64_t{3}});
  b.initializer("ax0", {0}, {1});
  b.node("Relu", {"a"}, {"ra"});
  b.node("Neg", {"c"}, {"nc"});
  b.node("Unsqueeze", {"ra", "ax0"}, {"ua"});
  b.node("Unsqueeze", {"nc", "ax0"}, {"uc"});
  testing::OnnxModelBuilder::int_attr(b.node("Concat", {"ua", "uc", "ua"}, {"stack"}), "axis", 0);   // [3, N, 3]
  testing::OnnxModelBuilder::int_attr(b.node("Concat", {"stack", "stack"}, {"twice"}), "axis", 1);  // [3, 2N, 3]
  b.node("Mul", {"ra", "nc"}, {"late"});  // reads the placed values after the Concats
  b.output("twice").output("late");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto plan = build_plan(*g, {});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto ctx = ExecutionContext::create(*plan);
  ASSERT_TRUE(ctx.ok());
  for (int64_t n : {2, 2, 2, 5, 5, 1}) {
    Tensor a = Tensor::zeros(DType::kFloat32, Shape{n, 3}), c = Tensor::zeros(DType::kFloat32, Shape{n, 3});
    for (int64_t i = 0; i < 3 * n; ++i) {
      a.as<float>()[i] = static_cast<float>(i % 5) - 2.0f + 0.125f * static_cast<float>(n);
      c.as<float>()[i] = 0.5f * static_cast<float>(i) - 1.0f;
    }
    ASSERT_TRUE((*ctx)->set_input("a", a.view()).ok());
    ASSERT_TRUE((*ctx)->set_input("c", c.view()).ok());
    Status st = (*ctx)->run();
    ASSERT_TRUE(st.ok()) << st.message();
    const TensorView twice = (*ctx)->output(0), late = (*ctx)->output(1);
    ASSERT_EQ(twice.shape, (Shape{3, 2 * n, 3}));
    for (int64_t k = 0; k < 3; ++k)
      for (int64_t r = 0; r < 2 * n; ++r)
        for (int64_t j = 0; j < 3; ++j) {
          const int64_t i = (r % n) * 3 + j;
          const float want = k == 1 ? -c.as<float>()[i] : std::max(0.0f, a.as<float>()[i]);
          ASSERT_EQ(twice.as<float>()[(k * 2 * n + r) * 3 + j], want) << "n " << n << " k " << k << " r " << r << " j " << j;
        }
    for (int64_t i = 0; i < 3 * n; ++i) ASSERT_EQ(late.as<float>()[i], std::max(0.0f, a.as<float>()[i]) * -c.as<float>()[i]) << i;
  }
}
}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Nested: a Concat of kernel outputs is itself placed, through a Reshape, in a Concat whose first
// input is a graph input (the ControlTransformer's projected_embeddings = cat(cache, encoder(x))).
TEST(ExecutionContext, NestedConcatPlacementBehindAGraphInput) {
  testing::OnnxModelBuilder b;
  b.input("cache", DType::kFloat32, {int64_t{1}, std::string("S"), int64_t{4}})
      .input("a", DType::kFloat32, {int64_t{1}, int64_t{3}, int64_t{4}})
      .input("c", DType::kFloat32, {int64_t{1}, int64_t{2}, int64_t{4}});
  b.initializer("shape", {1, -1, 4}, {3});
  b.node("Relu", {"a"}, {"ra"});
  b.node("Neg", {"c"}, {"nc"});
  testing::OnnxModelBuilder::int_attr(b.node("Concat", {"ra", "nc"}, {"enc"}), "axis", 1);  // [1, 5, 4]
  b.node("Reshape", {"enc", "shape"}, {"new"});
  testing::OnnxModelBuilder::int_attr(b.node("Concat", {"cache", "new"}, {"proj"}), "axis", 1);
  b.node("Sigmoid", {"proj"}, {"sp"});
  b.output("proj").output("sp");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto plan = build_plan(*g, {});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto ctx = ExecutionContext::create(*plan);
  ASSERT_TRUE(ctx.ok());
  for (int run = 0; run < 3; ++run) {
    Tensor cache = Tensor::zeros(DType::kFloat32, Shape{1, 6, 4}), a = Tensor::zeros(DType::kFloat32, Shape{1, 3, 4}),
           c = Tensor::zeros(DType::kFloat32, Shape{1, 2, 4});
    for (int64_t i = 0; i < 24; ++i) cache.as<float>()[i] = 100.0f + static_cast<float>(i);
    for (int64_t i = 0; i < 12; ++i) a.as<float>()[i] = static_cast<float>(i) - 5.0f;
    for (int64_t i = 0; i < 8; ++i) c.as<float>()[i] = static_cast<float>(i) + 0.5f;
    ASSERT_TRUE((*ctx)->set_input("cache", cache.view()).ok());
    ASSERT_TRUE((*ctx)->set_input("a", a.view()).ok());
    ASSERT_TRUE((*ctx)->set_input("c", c.view()).ok());
    ASSERT_TRUE((*ctx)->run().ok());
    const TensorView proj = (*ctx)->output(0);
    ASSERT_EQ(proj.shape, (Shape{1, 11, 4}));
    for (int64_t i = 0; i < 44; ++i) {
      const float want = i < 24 ? cache.as<float>()[i] : i < 36 ? std::max(0.0f, a.as<float>()[i - 24]) : -c.as<float>()[i - 36];
      ASSERT_EQ(proj.as<float>()[i], want) << "run " << run << " element " << i;
    }
  }
}
// The plan's value id of `name` (-1 if absent), for looking at a value's buffer after a run.
int value_id(const Plan& plan, const std::string& name) {
  for (size_t v = 0; v < plan.values.size(); ++v)
    if (plan.values[v].name == name) return static_cast<int>(v);
  return -1;
}

// A Slice whose block is contiguous (every dim before the sliced one is 1, or the first dim) is a
// view into its input, also through a chain of Slices; one that is not contiguous copies. The
// viewed buffer must outlive every read of the view: values made after the Slices (the same size
// as the viewed one, so the arena would like to reuse its slot) must not overwrite it.
TEST(ExecutionContext, SliceIsAViewWhenContiguousAndCopiesOtherwise) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{5}, int64_t{4}});
  b.initializer("one", {1}, {1}).initializer("two", {2}, {1}).initializer("three", {3}, {1});
  b.initializer("minus2", {-2}, {1}).initializer("big", {int64_t{1} << 40}, {1});
  b.initializer("ax0", {0}, {1}).initializer("ax1", {1}, {1});
  b.node("Relu", {"x"}, {"a"});
  b.node("Slice", {"a", "one", "two", "ax0"}, {"s1"});       // a[1:2]       [1, 5, 4]: a view
  b.node("Slice", {"s1", "minus2", "big", "ax1"}, {"s2"});   // s1[:, -2:]   [1, 2, 4]: a view of a view
  b.node("Slice", {"a", "one", "three", "ax1"}, {"s3"});     // a[:, 1:3]    [2, 2, 4]: copied
  b.node("Exp", {"x"}, {"t"});
  b.node("Abs", {"t"}, {"u"});
  b.node("Neg", {"s2"}, {"y"});
  b.node("Neg", {"s3"}, {"z"});
  b.output("y").output("z").output("u");
  auto g = b.import();
  ASSERT_TRUE(g.ok());
  BuildOptions opts;
  opts.disabled_passes = {"constant_folding"};
  auto plan = build_plan(*g, opts);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto ctx = ExecutionContext::create(*plan);
  ASSERT_TRUE(ctx.ok());
  Tensor x = Tensor::zeros(DType::kFloat32, Shape{2, 5, 4});
  for (int i = 0; i < 40; ++i) x.as<float>()[i] = static_cast<float>(i) - 3.0f;
  ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
  for (int run = 0; run < 3; ++run) {  // the first run plans the arena; later runs use it
    ASSERT_TRUE((*ctx)->run().ok());
    const char* a = static_cast<const char*>((*ctx)->value(value_id(**plan, "a")).data);
    EXPECT_EQ((*ctx)->value(value_id(**plan, "s1")).data, a + 20 * sizeof(float));
    EXPECT_EQ((*ctx)->value(value_id(**plan, "s2")).data, a + (20 + 12) * sizeof(float));
    const char* s3 = static_cast<const char*>((*ctx)->value(value_id(**plan, "s3")).data);
    EXPECT_TRUE(s3 < a || s3 >= a + 40 * sizeof(float)) << "a non-contiguous Slice has its own buffer";
    const TensorView& y = (*ctx)->output(0);
    ASSERT_EQ(y.shape, (Shape{1, 2, 4}));
    for (int i = 0; i < 8; ++i) EXPECT_EQ(y.as<float>()[i], -std::max(0.0f, x.as<float>()[32 + i])) << "run " << run;
    const TensorView& z = (*ctx)->output(1);
    ASSERT_EQ(z.shape, (Shape{2, 2, 4}));
    for (int n = 0; n < 2; ++n)
      for (int i = 0; i < 8; ++i) EXPECT_EQ(z.as<float>()[n * 8 + i], -std::max(0.0f, x.as<float>()[n * 20 + 4 + i]));
  }
}

// A Transpose that moves only dims of size 1 keeps the bytes in order: a view. One that swaps two
// dims larger than 1 copies.
TEST(ExecutionContext, TransposeOfUnitDimsIsAView) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{3}, int64_t{1}, int64_t{4}});
  b.node("Relu", {"x"}, {"a"});
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"a"}, {"t"}), "perm", {1, 0, 2});   // [1, 3, 4]: a view
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"a"}, {"u"}), "perm", {2, 1, 0});   // [4, 1, 3]: copied
  b.node("Neg", {"t"}, {"y"});
  b.node("Neg", {"u"}, {"z"});
  b.output("y").output("z");
  auto g = b.import();
  ASSERT_TRUE(g.ok());
  auto plan = build_plan(*g, BuildOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto ctx = ExecutionContext::create(*plan);
  ASSERT_TRUE(ctx.ok());
  Tensor x = Tensor::zeros(DType::kFloat32, Shape{3, 1, 4});
  for (int i = 0; i < 12; ++i) x.as<float>()[i] = static_cast<float>(i) - 2.0f;
  ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE((*ctx)->run().ok());
    EXPECT_EQ((*ctx)->value(value_id(**plan, "t")).data, (*ctx)->value(value_id(**plan, "a")).data);
    EXPECT_NE((*ctx)->value(value_id(**plan, "u")).data, (*ctx)->value(value_id(**plan, "a")).data);
    const TensorView& y = (*ctx)->output(0);
    ASSERT_EQ(y.shape, (Shape{1, 3, 4}));
    for (int i = 0; i < 12; ++i) EXPECT_EQ(y.as<float>()[i], -std::max(0.0f, x.as<float>()[i]));
    const TensorView& z = (*ctx)->output(1);
    ASSERT_EQ(z.shape, (Shape{4, 1, 3}));
    for (int c = 0; c < 4; ++c)
      for (int r = 0; r < 3; ++r) EXPECT_EQ(z.as<float>()[c * 3 + r], -std::max(0.0f, x.as<float>()[r * 4 + c]));
  }
  // Deciding the view at run time allocates nothing in a steady-state run.
  g_allocations = 0;
  g_counting = true;
  const Status st = (*ctx)->run();
  g_counting = false;
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(g_allocations.load(), 0);
}

}  // namespace
}  // namespace kiln
