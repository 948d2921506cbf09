// kiln::StreamingSession: the control loop of an engine built with a `streaming` section. The
// first step runs the cold-start profile, every later one the step profile; state outputs (a KV
// cache) feed the next step's state inputs in place, and the window slides without copying.
//
//   auto session = kiln::StreamingSession::create(engine).value();
//   session->step({{"camera", cam_view}, {"speed", speed_view}});   // per-step inputs only
//   auto predictions = session->output("predictions");              // valid until the next step
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>

#include "kiln/engine.h"
#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/streaming_spec.h"
#include "kiln/tensor.h"

namespace kiln::api {

class KILN_API StreamingSession {
 public:
  // With the streaming spec the engine records, or an explicit one. Both profiles' contexts are
  // created and prepared here, so no step allocates.
  static StatusOr<std::unique_ptr<StreamingSession>> create(std::shared_ptr<const Engine> engine);
  static StatusOr<std::unique_ptr<StreamingSession>> create(std::shared_ptr<const Engine> engine, const StreamingSpec& spec);
  ~StreamingSession();
  StreamingSession(const StreamingSession&) = delete;
  StreamingSession& operator=(const StreamingSession&) = delete;

  // One control step with the per-step inputs by name (everything but the state inputs and a
  // session-generated mask). The first step after create() or reset() is a cold start.
  Status step(std::span<const std::pair<std::string, TensorView>> inputs);
  // A non-state output of the last step (valid until the next step).
  StatusOr<TensorView> output(const std::string& name) const;
  // A contiguous copy of a state output of the last step.
  StatusOr<Tensor> state(const std::string& output) const;
  const StreamingStepStats& last_stats() const;
  int64_t cached_rows() const;
  int64_t steps_run() const;
  // The next step is a cold start again.
  void reset();

  struct Impl;

 private:
  explicit StreamingSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::api

#ifndef KILN_INTERNAL_BUILD
namespace kiln {
using api::StreamingSession;
}
#endif
