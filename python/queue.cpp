// kiln.InferQueue: the asynchronous queue from Python. submit() returns a
// concurrent.futures.Future completed from a worker thread; inputs are copied at submit (the queue
// may run them after the caller has reused its arrays), outputs are handed over without a copy.
#include <pybind11/stl.h>

#include <chrono>

#include "kiln/infer_queue.h"
#include "py_common.h"

namespace kiln::python {

namespace {

class Queue {
 public:
  Queue(std::shared_ptr<api::Engine> engine, const std::string& profile, int workers, size_t capacity, bool block, int max_batch,
        int64_t max_delay_us, int threads_per_worker)
      : engine_(std::move(engine)) {
    InferQueueOptions o;
    o.workers = workers;
    o.capacity = capacity;
    o.block_when_full = block;
    o.max_batch = max_batch;
    o.max_delay_us = max_delay_us;
    o.threads_per_worker = threads_per_worker;
    StatusOr<std::unique_ptr<InferQueue>> q = Status();
    {
      py::gil_scoped_release release;
      q = InferQueue::create(engine_, profile, o);
    }
    check(q.status());
    queue_ = std::move(q).value();
    const ProfileInfo& p = engine_->profiles()[engine_->find_profile(profile)];
    for (const auto& b : p.inputs) dtypes_[b.name] = b.dtype;
  }

  ~Queue() {
    py::gil_scoped_release release;   // workers completing futures need the GIL
    queue_.reset();
  }

  py::object submit(const py::dict& inputs, py::object deadline_ms) {
    TensorMap map;
    std::vector<py::array> held;
    for (const auto& [key, value] : inputs) {
      const std::string name = py::str(key);
      auto dt = dtypes_.find(name);
      if (dt == dtypes_.end()) check(NotFound("the queue's profile has no input named '" + name + "'"));
      map.emplace(name, Tensor::copy_of(input_view(value, dt->second, name, held)));
    }
    auto deadline = InferQueue::kNoDeadline;
    if (!deadline_ms.is_none())
      deadline = InferQueue::Clock::now() + std::chrono::microseconds(static_cast<int64_t>(deadline_ms.cast<double>() * 1000.0));
    py::object future = py::module_::import("concurrent.futures").attr("Future")();
    future.attr("set_running_or_notify_cancel")();
    // The callback holds a reference to the future; it runs on a worker thread without the GIL.
    auto* handle = new py::object(future);
    auto done = [handle](InferResult&& r) {
      py::gil_scoped_acquire gil;
      std::unique_ptr<py::object> f(handle);
      try {
        if (r.ok()) {
          py::dict out;
          for (auto& [name, t] : *r) out[py::str(name)] = tensor_to_numpy(std::move(t));
          f->attr("set_result")(out);
        } else {
          f->attr("set_exception")(error_object(r.status()));
        }
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("kiln.InferQueue completion");
      }
    };
    {
      py::gil_scoped_release release;   // a blocking submit waits for room without the GIL
      queue_->submit(std::move(map), std::move(done), deadline);
    }
    return future;
  }

  void shutdown(bool cancel) {
    py::gil_scoped_release release;
    queue_->shutdown(cancel ? ShutdownMode::kCancel : ShutdownMode::kDrain);
  }

  py::dict stats() const {
    const InferQueueStats s = queue_->stats();
    py::dict d;
    d["submitted"] = s.submitted;
    d["rejected"] = s.rejected;
    d["completed"] = s.completed;
    d["expired"] = s.expired;
    d["cancelled"] = s.cancelled;
    d["runs"] = s.runs;
    d["largest_batch"] = s.largest_batch;
    return d;
  }

 private:
  std::shared_ptr<api::Engine> engine_;
  std::unique_ptr<InferQueue> queue_;
  std::map<std::string, DType> dtypes_;
};

}  // namespace

void register_queue(py::module_& m) {
  py::class_<Queue>(m, "InferQueue",
                    "Asynchronous inference: submit(inputs) -> concurrent.futures.Future of {name: array}. Workers each run their own "
                    "context; with max_batch > 1 requests are batched along dim 0.")
      .def(py::init<std::shared_ptr<api::Engine>, const std::string&, int, size_t, bool, int, int64_t, int>(), py::arg("engine"),
           py::arg("profile"), py::arg("workers") = 1, py::arg("capacity") = 64, py::arg("block") = true, py::arg("max_batch") = 1,
           py::arg("max_delay_us") = 0, py::arg("threads_per_worker") = 0)
      .def("submit", &Queue::submit, py::arg("inputs"), py::arg("deadline_ms") = py::none(),
           "Queues a request; a request not started within deadline_ms fails with kiln.Error (code 'deadline_exceeded').")
      .def("shutdown", &Queue::shutdown, py::arg("cancel") = false,
           "Stops accepting requests and waits: queued ones run (or, with cancel, fail with code 'cancelled').")
      .def_property_readonly("stats", &Queue::stats)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Queue& q, py::args) { q.shutdown(false); });
}

}  // namespace kiln::python
