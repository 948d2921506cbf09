// kiln::api::Engine and kiln::api::ExecutionContext: the public handles over the runtime's classes.
#include "runtime/api/api_impl.h"

namespace kiln::api {

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

namespace {
StatusOr<std::shared_ptr<Engine>> wrap(StatusOr<std::shared_ptr<kiln::Engine>> loaded, std::shared_ptr<Engine> (*make)(std::unique_ptr<Engine::Impl>)) {
  if (!loaded.ok()) return loaded.status();
  auto impl = std::make_unique<Engine::Impl>();
  impl->engine = std::move(loaded).value();
  return make(std::move(impl));
}
}  // namespace

StatusOr<std::shared_ptr<Engine>> Engine::load_file(const std::string& path, const LoadOptions& options) {
  return wrap(kiln::Engine::load_file(path, options), [](std::unique_ptr<Impl> i) { return std::shared_ptr<Engine>(new Engine(std::move(i))); });
}

StatusOr<std::shared_ptr<Engine>> Engine::load_memory(const void* data, size_t size, const std::string& name, const LoadOptions& options) {
  if (!data && size) return InvalidArgument("load_memory: data is null");
  return wrap(kiln::Engine::load_memory(data, size, name, options),
              [](std::unique_ptr<Impl> i) { return std::shared_ptr<Engine>(new Engine(std::move(i))); });
}

const EngineInfo& Engine::info() const { return impl_->engine->info(); }
const std::vector<ProfileInfo>& Engine::profiles() const { return impl_->engine->profiles(); }
int Engine::find_profile(const std::string& name) const { return impl_->engine->find_profile(name); }

StatusOr<std::unique_ptr<ExecutionContext>> Engine::create_context(const std::string& profile, bool prepare) const {
  KILN_ASSIGN_OR_RETURN(auto ctx, impl_->engine->create_context(profile, prepare));
  auto impl = std::make_unique<ExecutionContext::Impl>();
  impl->context = std::move(ctx);
  impl->engine = impl_->engine;
  return std::unique_ptr<ExecutionContext>(new ExecutionContext(std::move(impl)));
}

ExecutionContext::ExecutionContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ExecutionContext::~ExecutionContext() = default;

Status ExecutionContext::set_input(const std::string& name, const TensorView& view) { return impl_->context->set_input(name, view); }
Status ExecutionContext::set_input(size_t index, const TensorView& view) {
  if (index >= num_inputs())
    return OutOfRange("input index " + std::to_string(index) + " is out of range: the profile has " + std::to_string(num_inputs()) + " inputs");
  return impl_->context->set_input(index, view);
}
Status ExecutionContext::bind_output(const std::string& name, const TensorView& buffer) { return impl_->context->bind_output(name, buffer); }
Status ExecutionContext::run() { return impl_->context->run(); }
Status ExecutionContext::prepare_for_profile() { return impl_->context->prepare_for_profile(); }
const std::string& ExecutionContext::profile() const { return impl_->context->plan().profile; }
size_t ExecutionContext::num_inputs() const { return impl_->context->num_inputs(); }
size_t ExecutionContext::num_outputs() const { return impl_->context->num_outputs(); }
const std::string& ExecutionContext::input_name(size_t i) const { return impl_->context->input_name(i); }
const std::string& ExecutionContext::output_name(size_t i) const { return impl_->context->output_name(i); }
const TensorView& ExecutionContext::output(size_t i) const { return impl_->context->output(i); }
size_t ExecutionContext::arena_bytes() const { return impl_->context->arena_bytes(); }

int ExecutionContext::find_input(const std::string& name) const {
  for (size_t i = 0; i < num_inputs(); ++i)
    if (input_name(i) == name) return static_cast<int>(i);
  return -1;
}

int ExecutionContext::find_output(const std::string& name) const {
  for (size_t i = 0; i < num_outputs(); ++i)
    if (output_name(i) == name) return static_cast<int>(i);
  return -1;
}

StatusOr<TensorView> ExecutionContext::output(const std::string& name) const {
  const int i = find_output(name);
  if (i < 0) {
    std::string known;
    for (size_t o = 0; o < num_outputs(); ++o) known += (known.empty() ? "" : ", ") + output_name(o);
    return NotFound("profile '" + profile() + "' has no output named '" + name + "' (outputs: " + known + ")");
  }
  return output(static_cast<size_t>(i));
}

}  // namespace kiln::api
