// kiln::api::Session: the public handle over the runtime's Session.
#include "runtime/api/api_impl.h"

namespace kiln::api {

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

StatusOr<std::unique_ptr<Session>> Session::create(std::shared_ptr<const Engine> engine) {
  if (!engine) return InvalidArgument("Session::create: engine is null");
  auto impl = std::make_unique<Impl>();
  impl->engine = engine->impl().engine;
  KILN_ASSIGN_OR_RETURN(impl->session, kiln::Session::create(impl->engine));
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

StatusOr<std::span<const std::pair<std::string, TensorView>>> Session::run(const std::string& entry,
                                                                           std::span<const std::pair<std::string, TensorView>> inputs,
                                                                           const std::string& profile) {
  return impl_->session->run(entry, inputs, profile);
}
StatusOr<TensorView> Session::output(const std::string& name) const { return impl_->session->output(name); }
void Session::reset() { impl_->session->reset(); }
StatusOr<Tensor> Session::read_state(const std::string& name) const { return impl_->session->read_state(name); }
Status Session::write_state(const std::string& name, const TensorView& value) { return impl_->session->write_state(name, value); }
const SessionRunStats& Session::last_stats() const { return impl_->session->last_stats(); }

}  // namespace kiln::api
