// kiln::api::StreamingSession: the public handle over the runtime's StreamingSession.
#include "runtime/api/api_impl.h"

namespace kiln::api {

StreamingSession::StreamingSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StreamingSession::~StreamingSession() = default;

namespace {
StatusOr<std::unique_ptr<StreamingSession::Impl>> make_impl(const std::shared_ptr<const Engine>& engine, const StreamingSpec* spec) {
  if (!engine) return InvalidArgument("StreamingSession::create: engine is null");
  auto impl = std::make_unique<StreamingSession::Impl>();
  impl->engine = engine->impl().engine;
  auto session = spec ? kiln::StreamingSession::create(impl->engine, *spec) : kiln::StreamingSession::create(impl->engine);
  if (!session.ok()) return session.status();
  impl->session = std::move(session).value();
  return impl;
}
}  // namespace

StatusOr<std::unique_ptr<StreamingSession>> StreamingSession::create(std::shared_ptr<const Engine> engine) {
  KILN_ASSIGN_OR_RETURN(auto impl, make_impl(engine, nullptr));
  return std::unique_ptr<StreamingSession>(new StreamingSession(std::move(impl)));
}

StatusOr<std::unique_ptr<StreamingSession>> StreamingSession::create(std::shared_ptr<const Engine> engine, const StreamingSpec& spec) {
  KILN_ASSIGN_OR_RETURN(auto impl, make_impl(engine, &spec));
  return std::unique_ptr<StreamingSession>(new StreamingSession(std::move(impl)));
}

Status StreamingSession::step(std::span<const std::pair<std::string, TensorView>> inputs) { return impl_->session->step(inputs); }
StatusOr<TensorView> StreamingSession::output(const std::string& name) const { return impl_->session->output(name); }
StatusOr<Tensor> StreamingSession::state(const std::string& output) const { return impl_->session->state(output); }
const StreamingStepStats& StreamingSession::last_stats() const { return impl_->session->last_stats(); }
int64_t StreamingSession::cached_rows() const { return impl_->session->cached_rows(); }
int64_t StreamingSession::steps_run() const { return impl_->session->steps_run(); }
void StreamingSession::reset() { impl_->session->reset(); }

}  // namespace kiln::api
