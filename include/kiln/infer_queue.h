// kiln::InferQueue: asynchronous inference over one profile of an engine (seed 004's "commit returns
// a future"): worker threads, each with its own execution context, take requests from a bounded
// queue and complete a std::future (or call a callback) with the outputs.
//
//   auto queue = kiln::InferQueue::create(engine, "batch", {.workers = 2, .max_batch = 8, .max_delay_us = 500}).value();
//   std::future<kiln::InferResult> f = queue->submit({{"x", kiln::Tensor::copy_of(view)}});
//   kiln::InferResult r = f.get();          // StatusOr<TensorMap>: r.ok(), r->at("y")
//
// - Back-pressure: at most `capacity` requests wait; submit() then blocks until one starts, or with
//   block_when_full = false completes at once with a ResourceExhausted status.
// - Deadlines: a request whose deadline has passed when a worker takes it completes with
//   StatusCode::kDeadlineExceeded ("deadline exceeded") and is not run.
// - Dynamic batching (max_batch > 1, for profiles whose inputs all have a ranged dim 0): a worker
//   takes the oldest request, waits up to max_delay_us for more with the same dims past dim 0, runs
//   them as one batch concatenated along dim 0 and splits every output back along dim 0.
// - shutdown(kDrain) runs everything already queued; shutdown(kCancel) completes the queued
//   requests with StatusCode::kCancelled. Requests already running finish either way; later
//   submits fail with FailedPrecondition. The destructor drains.
// Results own their memory (they stay valid after later requests). Callbacks run on a worker thread
// (or on the submitting thread when a request fails at once) and must not throw or block long.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>

#include "kiln/engine.h"
#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

using TensorMap = std::map<std::string, Tensor>;
using InferResult = StatusOr<TensorMap>;

struct InferQueueOptions {
  int workers = 1;               // threads, each with its own execution context
  size_t capacity = 64;          // requests waiting to start
  bool block_when_full = true;   // false: submit fails fast (ResourceExhausted) when full
  int max_batch = 1;             // > 1: dynamic batching along dim 0, up to this many rows
  int64_t max_delay_us = 0;      // how long a batch waits for more requests after its first
  int threads_per_worker = 0;    // OpenMP threads for each worker's kernels (0: OpenMP's default)
  bool prepare = true;           // prepare each context for the profile's range at creation
};

enum class ShutdownMode { kDrain, kCancel };

struct InferQueueStats {
  uint64_t submitted = 0;     // accepted into the queue
  uint64_t rejected = 0;      // refused by submit (full with fail-fast, or shut down)
  uint64_t completed = 0;     // ran (successfully or with an error status)
  uint64_t expired = 0;       // deadline passed before start
  uint64_t cancelled = 0;     // dropped by shutdown(kCancel)
  uint64_t runs = 0;          // context runs (a batch is one)
  uint64_t largest_batch = 0; // most requests in one run
};

class KILN_API InferQueue {
 public:
  using Clock = std::chrono::steady_clock;
  using Callback = std::function<void(InferResult&&)>;
  static constexpr Clock::time_point kNoDeadline = Clock::time_point::max();

  static StatusOr<std::unique_ptr<InferQueue>> create(std::shared_ptr<const api::Engine> engine, const std::string& profile,
                                                      const InferQueueOptions& options = {});
  ~InferQueue();
  InferQueue(const InferQueue&) = delete;
  InferQueue& operator=(const InferQueue&) = delete;

  std::future<InferResult> submit(TensorMap inputs, Clock::time_point deadline = kNoDeadline);
  void submit(TensorMap inputs, Callback done, Clock::time_point deadline = kNoDeadline);
  // Stops accepting requests and waits for the workers; see the header comment. Idempotent.
  void shutdown(ShutdownMode mode = ShutdownMode::kDrain);

  size_t pending() const;   // requests waiting to start
  InferQueueStats stats() const;

  struct Impl;

 private:
  explicit InferQueue(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
