// kiln::InferQueue (include/kiln/infer_queue.h): a bounded request queue served by worker threads,
// each running its own execution context, with deadlines and optional dynamic batching along dim 0.
// Built on the public API only.
#include "kiln/infer_queue.h"

#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/log.h"

namespace kiln {

namespace {

using Clock = InferQueue::Clock;

struct Request {
  TensorMap inputs;
  InferQueue::Callback done;
  Clock::time_point deadline;
  Clock::time_point submitted;
  int64_t rows = 0;   // dim 0 of its inputs, when batching
};

void complete(Request& r, InferResult&& result) noexcept {
  try {
    r.done(std::move(result));
  } catch (...) {
    log_error("InferQueue: a completion callback threw; the exception was dropped");
  }
}

double ms_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

// Two requests batch together when they bind the same inputs with the same dtypes and the same
// dims after dim 0.
bool compatible(const Request& a, const Request& b) {
  if (a.inputs.size() != b.inputs.size()) return false;
  for (auto ia = a.inputs.begin(), ib = b.inputs.begin(); ia != a.inputs.end(); ++ia, ++ib) {
    const TensorView &va = ia->second.view(), &vb = ib->second.view();
    if (ia->first != ib->first || va.dtype != vb.dtype || va.shape.rank() != vb.shape.rank()) return false;
    for (int d = 1; d < va.shape.rank(); ++d)
      if (va.shape[d] != vb.shape[d]) return false;
  }
  return true;
}

}  // namespace

// Hidden like everything not in the public headers (the class around it is exported).
struct __attribute__((visibility("hidden"))) InferQueue::Impl {
  std::shared_ptr<const api::Engine> engine;
  std::string profile;
  InferQueueOptions options;
  std::vector<std::string> input_names;
  std::vector<std::unique_ptr<api::ExecutionContext>> contexts;

  mutable std::mutex mu;
  std::condition_variable not_empty, not_full;
  std::deque<Request> queue;
  bool stopping = false;
  InferQueueStats stats;

  std::mutex shutdown_mu;
  std::vector<std::thread> workers;
  bool joined = false;

  // What a worker keeps between batches: the concatenated inputs (grown, never shrunk).
  struct Scratch {
    std::vector<Tensor> inputs;
  };

  Status check_request(Request& r) const;
  void worker_main(size_t index);
  void take_batch(std::unique_lock<std::mutex>& lock, std::vector<Request>& batch);
  InferResult run_one(api::ExecutionContext& ctx, const TensorMap& inputs);
  Status run_batch(api::ExecutionContext& ctx, std::vector<Request>& batch, Scratch& scratch, std::vector<TensorMap>& results);
  Status bind_all(api::ExecutionContext& ctx, const TensorMap& inputs) const;
};

Status InferQueue::Impl::check_request(Request& r) const {
  for (const auto& name : input_names)
    if (!r.inputs.count(name)) return InvalidArgument("profile '" + profile + "': missing input '" + name + "'");
  if (r.inputs.size() != input_names.size())
    for (const auto& [name, t] : r.inputs)
      if (std::find(input_names.begin(), input_names.end(), name) == input_names.end())
        return NotFound("profile '" + profile + "' has no input named '" + name + "'");
  if (options.max_batch <= 1) return Status::Ok();
  r.rows = -1;
  for (const auto& [name, t] : r.inputs) {
    if (t.shape().rank() == 0) return InvalidArgument("input '" + name + "' is a scalar; batching needs dim 0 on every input");
    if (r.rows >= 0 && t.shape()[0] != r.rows)
      return InvalidArgument("input '" + name + "' has dim 0 = " + std::to_string(t.shape()[0]) + " but another input has " +
                             std::to_string(r.rows) + "; batched inputs share dim 0");
    r.rows = t.shape()[0];
  }
  return Status::Ok();
}

Status InferQueue::Impl::bind_all(api::ExecutionContext& ctx, const TensorMap& inputs) const {
  for (const auto& [name, t] : inputs) KILN_RETURN_IF_ERROR(ctx.set_input(name, t.view()));
  return Status::Ok();
}

InferResult InferQueue::Impl::run_one(api::ExecutionContext& ctx, const TensorMap& inputs) {
  KILN_RETURN_IF_ERROR(bind_all(ctx, inputs));
  KILN_RETURN_IF_ERROR(ctx.run());
  TensorMap out;
  for (size_t i = 0; i < ctx.num_outputs(); ++i) out.emplace(ctx.output_name(i), Tensor::copy_of(ctx.output(i)));
  return out;
}

Status InferQueue::Impl::run_batch(api::ExecutionContext& ctx, std::vector<Request>& batch, Scratch& scratch,
                                   std::vector<TensorMap>& results) {
  int64_t total = 0;
  for (const auto& r : batch) total += r.rows;
  const TensorMap& first = batch[0].inputs;
  scratch.inputs.resize(first.size());
  size_t i = 0;
  for (const auto& [name, t0] : first) {
    Shape shape = t0.shape();
    shape[0] = total;
    KILN_ASSIGN_OR_RETURN(const uint64_t bytes, checked_nbytes(t0.dtype(), shape, "batched input '" + name + "'"));
    Tensor& buf = scratch.inputs[i++];
    if (buf.empty() || buf.nbytes() < bytes || buf.dtype() != t0.dtype()) {
      KILN_ASSIGN_OR_RETURN(buf, Tensor::try_zeros(t0.dtype(), shape, "batched input '" + name + "'"));
    }
    char* dst = static_cast<char*>(buf.data());
    for (const auto& r : batch) {
      const Tensor& t = r.inputs.at(name);
      if (t.nbytes()) std::memcpy(dst, t.data(), t.nbytes());
      dst += t.nbytes();
    }
    KILN_RETURN_IF_ERROR(ctx.set_input(name, TensorView{buf.data(), t0.dtype(), shape}));
  }
  KILN_RETURN_IF_ERROR(ctx.run());
  results.assign(batch.size(), TensorMap{});
  for (size_t o = 0; o < ctx.num_outputs(); ++o) {
    const TensorView& out = ctx.output(o);
    const std::string& name = ctx.output_name(o);
    if (out.shape.rank() == 0 || out.shape[0] != total)
      return FailedPrecondition("output '" + name + "' is " + out.shape.str() + ", without the batch of " + std::to_string(total) +
                                " rows as dim 0; this profile cannot batch requests (max_batch 1)");
    const size_t row_bytes = total ? out.nbytes() / static_cast<size_t>(total) : 0;
    const char* src = static_cast<const char*>(out.data);
    for (size_t k = 0; k < batch.size(); ++k) {
      Shape shape = out.shape;
      shape[0] = batch[k].rows;
      Tensor part = Tensor::zeros(out.dtype, shape);
      const size_t bytes = row_bytes * static_cast<size_t>(batch[k].rows);
      if (bytes) std::memcpy(part.data(), src, bytes);
      src += bytes;
      results[k].emplace(name, std::move(part));
    }
  }
  return Status::Ok();
}

// Called with the lock held and the queue non-empty: the oldest request, and with batching the
// compatible ones behind it, waiting up to max_delay_us for more.
void InferQueue::Impl::take_batch(std::unique_lock<std::mutex>& lock, std::vector<Request>& batch) {
  batch.push_back(std::move(queue.front()));
  queue.pop_front();
  if (options.max_batch <= 1) return;
  int64_t rows = batch[0].rows;
  const auto until = Clock::now() + std::chrono::microseconds(options.max_delay_us);
  for (;;) {
    while (!queue.empty() && rows + queue.front().rows <= options.max_batch && compatible(batch[0], queue.front())) {
      rows += queue.front().rows;
      batch.push_back(std::move(queue.front()));
      queue.pop_front();
    }
    // Full, or the next request cannot join (it starts the next batch), or no more time.
    if (rows >= options.max_batch || !queue.empty() || stopping || Clock::now() >= until) return;
    not_full.notify_all();
    not_empty.wait_until(lock, until);
  }
}

void InferQueue::Impl::worker_main(size_t index) {
  if (options.threads_per_worker > 0) omp_set_num_threads(options.threads_per_worker);
  api::ExecutionContext& ctx = *contexts[index];
  Scratch scratch;
  std::vector<Request> batch, live, expired;
  std::vector<TensorMap> results;
  for (;;) {
    batch.clear();
    {
      std::unique_lock<std::mutex> lock(mu);
      not_empty.wait(lock, [&] { return !queue.empty() || stopping; });
      if (queue.empty()) return;   // shutting down and drained
      take_batch(lock, batch);
    }
    not_full.notify_all();
    // A request whose deadline passed while it waited is not run.
    live.clear();
    expired.clear();
    const auto start = Clock::now();
    for (auto& r : batch) (start > r.deadline ? expired : live).push_back(std::move(r));
    std::vector<InferResult> out;
    if (live.size() == 1) {
      out.push_back(run_one(ctx, live[0].inputs));
    } else if (!live.empty()) {
      Status st = run_batch(ctx, live, scratch, results);
      for (size_t k = 0; k < live.size(); ++k) out.push_back(st.ok() ? InferResult(std::move(results[k])) : InferResult(st));
    }
    {
      // Counted before the callbacks run, so whoever sees a result sees it counted.
      std::lock_guard<std::mutex> lock(mu);
      stats.expired += expired.size();
      stats.completed += live.size();
      if (!live.empty()) ++stats.runs;
      stats.largest_batch = std::max<uint64_t>(stats.largest_batch, live.size());
    }
    for (auto& r : expired)
      complete(r, DeadlineExceeded("deadline exceeded: the request waited " + std::to_string(ms_between(r.submitted, start)) +
                                   " ms and its deadline passed " + std::to_string(ms_between(r.deadline, start)) +
                                   " ms before it could start; it was not run"));
    for (size_t k = 0; k < live.size(); ++k) complete(live[k], std::move(out[k]));
  }
}

InferQueue::InferQueue(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

InferQueue::~InferQueue() { shutdown(ShutdownMode::kDrain); }

StatusOr<std::unique_ptr<InferQueue>> InferQueue::create(std::shared_ptr<const api::Engine> engine, const std::string& profile,
                                                         const InferQueueOptions& options) {
  if (!engine) return InvalidArgument("InferQueue: engine is null");
  if (options.workers < 1 || options.workers > 256) return InvalidArgument("InferQueue: workers must be 1..256, got " + std::to_string(options.workers));
  if (options.capacity < 1) return InvalidArgument("InferQueue: capacity must be at least 1");
  if (options.max_batch < 1) return InvalidArgument("InferQueue: max_batch must be at least 1, got " + std::to_string(options.max_batch));
  if (options.max_delay_us < 0) return InvalidArgument("InferQueue: max_delay_us must not be negative");
  const int p = engine->find_profile(profile);
  if (p < 0) {
    auto probe = engine->create_context(profile);   // its error names the known profiles
    return probe.ok() ? InvalidArgument("InferQueue: no profile '" + profile + "'") : probe.status();
  }
  auto impl = std::make_unique<Impl>();
  const ProfileInfo& info = engine->profiles()[p];
  for (const auto& b : info.inputs) {
    impl->input_names.push_back(b.name);
    if (options.max_batch > 1 && (b.min.rank() == 0 || b.max.rank() == 0 || b.min[0] == b.max[0] || b.max[0] < options.max_batch))
      return InvalidArgument("InferQueue: profile '" + profile + "' cannot batch " + std::to_string(options.max_batch) + " rows: input '" +
                             b.name + "' has dim 0 " + (b.min.rank() ? std::to_string(b.min[0]) + ".." + std::to_string(b.max[0]) : "(none)") +
                             "; batching needs a ranged dim 0 on every input reaching max_batch");
  }
  impl->engine = engine;
  impl->profile = profile;
  impl->options = options;
  for (int w = 0; w < options.workers; ++w) {
    KILN_ASSIGN_OR_RETURN(auto ctx, engine->create_context(profile, options.prepare));
    impl->contexts.push_back(std::move(ctx));
  }
  std::unique_ptr<InferQueue> q(new InferQueue(std::move(impl)));
  for (int w = 0; w < options.workers; ++w) q->impl_->workers.emplace_back(&Impl::worker_main, q->impl_.get(), static_cast<size_t>(w));
  return q;
}

std::future<InferResult> InferQueue::submit(TensorMap inputs, Clock::time_point deadline) {
  auto promise = std::make_shared<std::promise<InferResult>>();
  std::future<InferResult> future = promise->get_future();
  submit(std::move(inputs), [promise](InferResult&& r) { promise->set_value(std::move(r)); }, deadline);
  return future;
}

void InferQueue::submit(TensorMap inputs, Callback done, Clock::time_point deadline) {
  Impl& q = *impl_;
  Request r{std::move(inputs), std::move(done), deadline, Clock::now(), 0};
  Status bad = q.check_request(r);
  auto refuse = [&](std::unique_lock<std::mutex>& lock, Status st) {
    ++q.stats.rejected;
    lock.unlock();
    complete(r, std::move(st));
  };
  std::unique_lock<std::mutex> lock(q.mu);
  if (!bad.ok()) return refuse(lock, bad);
  if (q.stopping) return refuse(lock, FailedPrecondition("the queue is shut down"));
  if (q.queue.size() >= q.options.capacity) {
    if (!q.options.block_when_full)
      return refuse(lock, ResourceExhausted("the queue is full (" + std::to_string(q.options.capacity) + " requests waiting)"));
    q.not_full.wait(lock, [&] { return q.queue.size() < q.options.capacity || q.stopping; });
    if (q.stopping) return refuse(lock, FailedPrecondition("the queue is shut down"));
  }
  q.queue.push_back(std::move(r));
  ++q.stats.submitted;
  lock.unlock();
  q.not_empty.notify_one();
}

void InferQueue::shutdown(ShutdownMode mode) {
  Impl& q = *impl_;
  std::lock_guard<std::mutex> serial(q.shutdown_mu);
  std::deque<Request> dropped;
  {
    std::lock_guard<std::mutex> lock(q.mu);
    q.stopping = true;
    if (mode == ShutdownMode::kCancel) {
      dropped.swap(q.queue);
      q.stats.cancelled += dropped.size();
    }
  }
  q.not_empty.notify_all();
  q.not_full.notify_all();
  for (auto& r : dropped) complete(r, Cancelled("cancelled: the queue was shut down before the request started"));
  if (q.joined) return;
  for (const auto& t : q.workers)
    if (t.get_id() == std::this_thread::get_id()) return;   // from a callback: the destructor joins
  for (auto& t : q.workers) t.join();
  q.joined = true;
}

size_t InferQueue::pending() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->queue.size();
}

InferQueueStats InferQueue::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

}  // namespace kiln
