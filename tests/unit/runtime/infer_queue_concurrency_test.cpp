// kiln::InferQueue: many producers against worker contexts, dynamic batching, deadlines,
// back-pressure and shutdown. Results are checked against single runs of the same engine. A worker
// is held still where a test needs a known queue state by a completion callback that waits on a
// latch (the callback runs on the worker thread). ctest label "concurrency" (ThreadSanitizer runs).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <latch>
#include <thread>

#include "engine_file_fixture.h"
#include "kiln/engine.h"
#include "kiln/infer_queue.h"

namespace kiln {
namespace {

using namespace engine_file_fixture;
using namespace std::chrono_literals;

std::shared_ptr<api::Engine> engine() {
  static std::shared_ptr<api::Engine> e = [] {
    auto loaded = api::Engine::load_memory(fixture().bytes.data(), fixture().bytes.size(), "mlp");
    EXPECT_TRUE(loaded.ok()) << loaded.status().message();
    return loaded.ok() ? std::move(loaded).value() : nullptr;
  }();
  return e;
}

// The output of one run of `x` on a context of its own: what every queued result must equal.
Tensor single_run(const Tensor& x) {
  auto ctx = engine()->create_context("ranged");
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  EXPECT_TRUE((*ctx)->set_input("x", x.view()).ok());
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  return Tensor::copy_of((*ctx)->output(0));
}

::testing::AssertionResult same_tensor(const InferResult& r, const Tensor& want, float tol = 0) {
  if (!r.ok()) return ::testing::AssertionFailure() << r.status().message();
  auto it = r->find("y");
  if (it == r->end()) return ::testing::AssertionFailure() << "no output y";
  const Tensor& got = it->second;
  if (got.shape() != want.shape()) return ::testing::AssertionFailure() << got.shape().str() << " vs " << want.shape().str();
  for (int64_t i = 0; i < got.numel(); ++i)
    if (std::fabs(got.as<float>()[i] - want.as<float>()[i]) > tol)
      return ::testing::AssertionFailure() << "element " << i << ": " << got.as<float>()[i] << " vs " << want.as<float>()[i];
  return ::testing::AssertionSuccess();
}

TensorMap request(const Tensor& x) { return {{"x", x}}; }

// Holds a worker inside a completion callback until release() (the request it completes is done).
struct Gate {
  std::latch entered{1}, release_latch{1};
  InferQueue::Callback callback() {
    return [this](InferResult&&) {
      entered.count_down();
      release_latch.wait();
    };
  }
  void release() { release_latch.count_down(); }
};

TEST(InferQueue, FourProducersOf250RequestsEachGetTheirSingleRunResults) {
  constexpr int kProducers = 4, kPerProducer = 250, kDistinct = 12;
  std::vector<Tensor> inputs, expected;
  for (int k = 0; k < kDistinct; ++k) {
    inputs.push_back(input_x(1 + k % 4, 0.37f * static_cast<float>(k)));
    expected.push_back(single_run(inputs.back()));
  }
  auto q = InferQueue::create(engine(), "ranged", {.workers = 3, .capacity = 16});
  ASSERT_TRUE(q.ok()) << q.status().message();
  std::atomic<int> mismatches{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      std::vector<std::pair<int, std::future<InferResult>>> futures;
      for (int i = 0; i < kPerProducer; ++i) {
        const int k = (p * 7 + i) % kDistinct;
        futures.emplace_back(k, (*q)->submit(request(inputs[k])));
      }
      for (auto& [k, f] : futures)
        if (!same_tensor(f.get(), expected[k])) ++mismatches;
    });
  for (auto& t : producers) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  const InferQueueStats s = (*q)->stats();
  EXPECT_EQ(s.submitted, uint64_t{kProducers * kPerProducer});
  EXPECT_EQ(s.completed, uint64_t{kProducers * kPerProducer});
  EXPECT_EQ(s.rejected + s.expired + s.cancelled, 0u);
}

TEST(InferQueue, BatchesRequestsAlongDim0AndSplitsTheOutputs) {
  std::vector<Tensor> inputs, expected;
  for (int k = 0; k < 6; ++k) {
    inputs.push_back(input_x(k % 3 == 0 ? 2 : 1, 0.21f * static_cast<float>(k)));
    expected.push_back(single_run(inputs.back()));
  }
  auto q = InferQueue::create(engine(), "ranged", {.workers = 1, .max_batch = 8, .max_delay_us = 200000});
  ASSERT_TRUE(q.ok()) << q.status().message();
  // Hold the worker so all six wait together, then let it take them as one batch.
  Gate gate;
  (*q)->submit(request(inputs[0]), gate.callback());
  gate.entered.wait();
  std::vector<std::future<InferResult>> futures;
  for (const auto& x : inputs) futures.push_back((*q)->submit(request(x)));
  gate.release();
  for (size_t k = 0; k < inputs.size(); ++k) EXPECT_TRUE(same_tensor(futures[k].get(), expected[k], 1e-5f)) << k;
  const InferQueueStats s = (*q)->stats();
  EXPECT_EQ(s.largest_batch, 6u);   // 8 rows: 2 + 1 + 1 + 2 + 1 + 1
  EXPECT_EQ(s.runs, 2u);            // the gate's request, then the batch
}

TEST(InferQueue, BatchingNeedsARangedDim0) {
  auto q = InferQueue::create(engine(), "fixed", {.max_batch = 4});
  ASSERT_FALSE(q.ok());
  EXPECT_TRUE(contains(q.status().message(), "input 'x' has dim 0 3..3")) << q.status().message();
  auto big = InferQueue::create(engine(), "ranged", {.max_batch = 32});   // the profile stops at 16
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(contains(big.status().message(), "cannot batch 32 rows")) << big.status().message();
}

TEST(InferQueue, ARequestWhoseDeadlinePassedBeforeItStartsIsNotRun) {
  auto q = InferQueue::create(engine(), "ranged", {.workers = 1});
  ASSERT_TRUE(q.ok()) << q.status().message();
  Gate gate;
  (*q)->submit(request(input_x(1, 0)), gate.callback());
  gate.entered.wait();
  auto late = (*q)->submit(request(input_x(1, 1)), InferQueue::Clock::now() + 1ms);
  auto in_time = (*q)->submit(request(input_x(1, 2)), InferQueue::Clock::now() + 60s);
  std::this_thread::sleep_for(20ms);
  gate.release();
  InferResult r = late.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(contains(r.status().message(), "deadline exceeded")) << r.status().message();
  EXPECT_TRUE(contains(r.status().message(), "it was not run")) << r.status().message();
  EXPECT_TRUE(same_tensor(in_time.get(), single_run(input_x(1, 2))));
  const InferQueueStats s = (*q)->stats();
  EXPECT_EQ(s.expired, 1u);
  EXPECT_EQ(s.completed, 2u);   // the gate's request and the one in time
}

TEST(InferQueue, AFullQueueFailsFastWhenAskedTo) {
  auto q = InferQueue::create(engine(), "ranged", {.workers = 1, .capacity = 2, .block_when_full = false});
  ASSERT_TRUE(q.ok()) << q.status().message();
  Gate gate;
  (*q)->submit(request(input_x(1, 0)), gate.callback());
  gate.entered.wait();
  auto a = (*q)->submit(request(input_x(1, 1)));
  auto b = (*q)->submit(request(input_x(1, 2)));
  auto refused = (*q)->submit(request(input_x(1, 3)));
  ASSERT_EQ(refused.wait_for(0s), std::future_status::ready);   // completed at once
  InferResult r = refused.get();
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(r.status().message(), "the queue is full (2 requests waiting)")) << r.status().message();
  gate.release();
  EXPECT_TRUE(a.get().ok());
  EXPECT_TRUE(b.get().ok());
  EXPECT_EQ((*q)->stats().rejected, 1u);
}

TEST(InferQueue, AFullQueueBlocksTheProducerUntilThereIsRoom) {
  auto q = InferQueue::create(engine(), "ranged", {.workers = 1, .capacity = 1});
  ASSERT_TRUE(q.ok()) << q.status().message();
  Gate gate;
  (*q)->submit(request(input_x(1, 0)), gate.callback());
  gate.entered.wait();
  auto queued = (*q)->submit(request(input_x(1, 1)));   // fills the queue
  std::atomic<bool> returned{false};
  std::future<InferResult> blocked;
  std::thread producer([&] {
    blocked = (*q)->submit(request(input_x(1, 2)));
    returned = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(returned.load());   // still waiting for room
  gate.release();
  producer.join();
  EXPECT_TRUE(returned.load());
  EXPECT_TRUE(same_tensor(queued.get(), single_run(input_x(1, 1))));
  EXPECT_TRUE(same_tensor(blocked.get(), single_run(input_x(1, 2))));
}

TEST(InferQueue, ShutdownCancelsQueuedRequestsOrDrainsThem) {
  for (ShutdownMode mode : {ShutdownMode::kCancel, ShutdownMode::kDrain}) {
    auto q = InferQueue::create(engine(), "ranged", {.workers = 1});
    ASSERT_TRUE(q.ok()) << q.status().message();
    Gate gate;
    std::promise<bool> first_ran;
    (*q)->submit(request(input_x(1, 0)), [&](InferResult&& r) {
      first_ran.set_value(r.ok());
      gate.callback()(std::move(r));
    });
    gate.entered.wait();
    auto a = (*q)->submit(request(input_x(1, 1)));
    auto b = (*q)->submit(request(input_x(2, 2)));
    std::thread stopper([&] { (*q)->shutdown(mode); });
    if (mode == ShutdownMode::kCancel) {
      // Cancelled at once, while the running request is still held.
      for (auto* f : {&a, &b}) {
        InferResult r = f->get();
        EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().message();
      }
      gate.release();
    } else {
      gate.release();
      EXPECT_TRUE(same_tensor(a.get(), single_run(input_x(1, 1))));
      EXPECT_TRUE(same_tensor(b.get(), single_run(input_x(2, 2))));
    }
    stopper.join();
    EXPECT_TRUE(first_ran.get_future().get());   // the request already running finished either way
    InferResult after = (*q)->submit(request(input_x(1, 3))).get();
    EXPECT_EQ(after.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ((*q)->stats().cancelled, mode == ShutdownMode::kCancel ? 2u : 0u);
  }
}

TEST(InferQueue, BadRequestsFailWithOneLine) {
  auto q = InferQueue::create(engine(), "ranged", {.workers = 1});
  ASSERT_TRUE(q.ok()) << q.status().message();
  InferResult missing = (*q)->submit(TensorMap{}).get();
  EXPECT_TRUE(contains(missing.status().message(), "missing input 'x'")) << missing.status().message();
  InferResult unknown = (*q)->submit(TensorMap{{"x", input_x(1, 0)}, {"z", input_x(1, 0)}}).get();
  EXPECT_TRUE(contains(unknown.status().message(), "no input named 'z'")) << unknown.status().message();
  InferResult wrong = (*q)->submit(TensorMap{{"x", Tensor::zeros(DType::kFloat32, Shape{1, 5})}}).get();
  EXPECT_FALSE(wrong.ok());
  EXPECT_TRUE(contains(wrong.status().message(), "'x'")) << wrong.status().message();
  auto no_profile = InferQueue::create(engine(), "nope");
  ASSERT_FALSE(no_profile.ok());
  EXPECT_TRUE(contains(no_profile.status().message(), "ranged")) << no_profile.status().message();
}

}  // namespace
}  // namespace kiln
