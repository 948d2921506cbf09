// One loaded Engine shared by several threads, each with its own ExecutionContext: on different
// profiles, on the same profile, and creating contexts concurrently. Every result is checked against
// outputs computed single-threaded beforehand.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <latch>
#include <mutex>
#include <thread>

#include "builder/build_profile.h"
#include "builder/engine_writer.h"
#include "builder/optimization_profile.h"
#include "onnx_model_builder.h"
#include "runtime/engine.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

constexpr int64_t kIn = 48, kHidden = 40;
constexpr int kIterations = 50;

// y = Reshape(Relu(x @ w + b), [B, 8, 5]); the reshape target comes from a shape subgraph that folds
// in the fixed profile and runs in the ranged one.
Graph mlp_graph() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {std::string("B"), kIn});
  std::vector<float> w(kIn * kHidden), bias(kHidden);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.013f * static_cast<float>((i * 29) % 97) - 0.6f;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.05f * static_cast<float>(i % 7) - 0.15f;
  b.initializer_f("w", w, {kIn, kHidden}).initializer_f("b", bias, {kHidden});
  b.initializer("idx0", {0}, {}).initializer("axes0", {0}, {1}).initializer("eight_five", {8, 5}, {2});
  b.node("MatMul", {"x", "w"}, {"xw"});
  b.node("Add", {"xw", "b"}, {"h"});
  b.node("Relu", {"h"}, {"r"});
  b.node("Shape", {"r"}, {"r_shape"});
  b.node("Gather", {"r_shape", "idx0"}, {"batch"});
  b.node("Unsqueeze", {"batch", "axes0"}, {"batch1"});
  OnnxModelBuilder::int_attr(b.node("Concat", {"batch1", "eight_five"}, {"target"}), "axis", 0);
  b.node("Reshape", {"r", "target"}, {"y"});
  b.output("y");
  auto g = b.import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::move(g).value();
}

std::shared_ptr<Engine> load_engine() {
  Graph g = mlp_graph();
  EngineWriteInput in;
  in.source_model = "mlp.onnx";
  for (const ProfileConfig& pc : {ProfileConfig{"fixed", {{"B", DimRange{6, 6, 6}}}, {}, 0},
                                  ProfileConfig{"ranged", {{"B", DimRange{1, 8, 32}}}, {}, 0}}) {
    auto rp = resolve_profile(g, pc);
    EXPECT_TRUE(rp.ok()) << rp.status().message();
    if (!rp.ok()) return nullptr;
    auto plan = build_profile_plan(g, *rp, {});
    EXPECT_TRUE(plan.ok()) << plan.status().message();
    if (!plan.ok()) return nullptr;
    in.plans.push_back(*plan);
  }
  auto bytes = serialize_engine(in);
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  if (!bytes.ok()) return nullptr;
  auto e = Engine::load_memory(bytes->data(), bytes->size(), "concurrency");
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? *e : nullptr;
}

Tensor input_x(int64_t batch, int seed) {
  Tensor t = Tensor::zeros(DType::kFloat32, Shape{batch, kIn});
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = std::sin(0.07f * static_cast<float>(i) + 0.9f * static_cast<float>(seed));
  return t;
}

// One iteration's input and its single-threaded output.
struct Case {
  Tensor x;
  std::vector<float> y;
};

StatusOr<std::vector<float>> run_once(ExecutionContext& ctx, const Tensor& x) {
  KILN_RETURN_IF_ERROR(ctx.set_input("x", x.view()));
  KILN_RETURN_IF_ERROR(ctx.run());
  const TensorView& y = ctx.output(0);
  if (y.shape != Shape{x.shape()[0], 8, 5}) return Internal("output shape " + y.shape.str());
  return std::vector<float>(y.as<float>(), y.as<float>() + y.numel());
}

// Inputs for `profile`, with expected outputs from a fresh context on this thread.
std::vector<Case> make_cases(const Engine& e, const std::string& profile, int seed_base) {
  auto ctx = e.create_context(profile);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  std::vector<Case> cases;
  if (!ctx.ok()) return cases;
  for (int i = 0; i < kIterations; ++i) {
    const int64_t batch = profile == "fixed" ? 6 : 1 + (i * 7) % 32;  // varying shapes force re-planning
    Case c{input_x(batch, seed_base + i), {}};
    auto y = run_once(**ctx, c.x);
    EXPECT_TRUE(y.ok()) << y.status().message();
    if (!y.ok()) return {};
    c.y = *y;
    cases.push_back(std::move(c));
  }
  return cases;
}

struct Outcome {
  std::atomic<int> runs{0};
  std::atomic<int> failures{0};
  std::mutex mu;
  std::string first_failure;
  void fail(const std::string& what) {
    if (failures.fetch_add(1) == 0) {
      std::lock_guard<std::mutex> lock(mu);
      first_failure = what;
    }
  }
};

void worker(const Engine& e, const std::string& profile, const std::vector<Case>& cases, std::latch& start, Outcome& out) {
  auto ctx = e.create_context(profile);
  start.arrive_and_wait();
  if (!ctx.ok()) return out.fail(ctx.status().message());
  for (int i = 0; i < kIterations; ++i) {
    const Case& c = cases[static_cast<size_t>(i)];
    auto y = run_once(**ctx, c.x);
    out.runs.fetch_add(1);
    if (!y.ok()) return out.fail(profile + " iteration " + std::to_string(i) + ": " + y.status().message());
    if (y->size() != c.y.size()) return out.fail(profile + " iteration " + std::to_string(i) + ": size differs");
    for (size_t k = 0; k < c.y.size(); ++k)
      if (!(std::fabs((*y)[k] - c.y[k]) <= 1e-5f * std::max(1.0f, std::fabs(c.y[k]))))
        return out.fail(profile + " iteration " + std::to_string(i) + " element " + std::to_string(k) + ": got " +
                        std::to_string((*y)[k]) + ", want " + std::to_string(c.y[k]));
  }
}

TEST(EngineConcurrency, TwoThreadsOnDifferentProfiles) {
  auto engine = load_engine();
  ASSERT_NE(engine, nullptr);
  const std::vector<Case> fixed = make_cases(*engine, "fixed", 0);
  const std::vector<Case> ranged = make_cases(*engine, "ranged", 1000);
  ASSERT_EQ(fixed.size(), static_cast<size_t>(kIterations));
  ASSERT_EQ(ranged.size(), static_cast<size_t>(kIterations));
  Outcome out;
  std::latch start(2);
  std::thread a(worker, std::cref(*engine), "fixed", std::cref(fixed), std::ref(start), std::ref(out));
  std::thread b(worker, std::cref(*engine), "ranged", std::cref(ranged), std::ref(start), std::ref(out));
  a.join();
  b.join();
  EXPECT_EQ(out.failures.load(), 0) << out.first_failure;
  EXPECT_EQ(out.runs.load(), 2 * kIterations);
}

TEST(EngineConcurrency, TwoThreadsOnTheSameProfile) {
  auto engine = load_engine();
  ASSERT_NE(engine, nullptr);
  const std::vector<Case> first = make_cases(*engine, "ranged", 0);
  const std::vector<Case> second = make_cases(*engine, "ranged", 500);
  ASSERT_EQ(first.size(), static_cast<size_t>(kIterations));
  ASSERT_EQ(second.size(), static_cast<size_t>(kIterations));
  Outcome out;
  std::latch start(2);
  std::thread a(worker, std::cref(*engine), "ranged", std::cref(first), std::ref(start), std::ref(out));
  std::thread b(worker, std::cref(*engine), "ranged", std::cref(second), std::ref(start), std::ref(out));
  a.join();
  b.join();
  EXPECT_EQ(out.failures.load(), 0) << out.first_failure;
  EXPECT_EQ(out.runs.load(), 2 * kIterations);
}

// Four threads, two per profile, creating their contexts at the same moment; only the threads hold
// the engine (the test thread drops its references before they finish).
TEST(EngineConcurrency, FourThreadsOwningTheEngine) {
  auto engine = load_engine();
  ASSERT_NE(engine, nullptr);
  const std::vector<Case> cases[4] = {make_cases(*engine, "fixed", 0), make_cases(*engine, "ranged", 100),
                                      make_cases(*engine, "fixed", 200), make_cases(*engine, "ranged", 300)};
  Outcome out;
  std::latch start(4);
  std::vector<std::thread> threads;
  std::shared_ptr<Engine> keep = engine;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t, keep] {
      worker(*keep, t % 2 == 0 ? "fixed" : "ranged", cases[t], start, out);
    });
  engine.reset();
  keep.reset();
  for (auto& th : threads) th.join();
  EXPECT_EQ(out.failures.load(), 0) << out.first_failure;
  EXPECT_EQ(out.runs.load(), 4 * kIterations);
}

}  // namespace
}  // namespace kiln
