#include "runtime/plugin_host/plugin_kernel.h"

#include <vector>

#include "runtime/plugin_host/plugin_registry.h"
#include "runtime/thread_scratch.h"

namespace kiln {

namespace {

// The plugin workspace is this thread's plugin scratch (runtime/thread_scratch.h): one buffer
// shared by every plugin step the thread runs.
void* thread_workspace(size_t bytes) { return thread_scratch(ScratchSlot::kPluginWorkspace, bytes); }

class PluginKernel final : public Kernel {
 public:
  PluginKernel(std::unique_ptr<PluginBuild> build, std::unique_ptr<PluginRun> run, size_t num_inputs)
      : build_(std::move(build)), run_(std::move(run)), input_descs_(num_inputs) {}

  Status infer(std::span<const TensorView> inputs, std::span<TensorDesc> outputs) override { return run_->infer(inputs, outputs); }

  // Shapes changed: the plugin re-plans, and this thread's workspace grows to what these shapes
  // need. It never shrinks, so alternating shapes settle on one buffer and steady state allocates
  // nothing.
  Status prepare(std::span<const TensorView> inputs, std::span<const TensorView> outputs) override {
    KILN_RETURN_IF_ERROR(run_->on_shape_change(inputs, outputs));
    input_descs_.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) input_descs_[i] = inputs[i].desc();
    workspace_bytes_ = build_->workspace_bytes(input_descs_);
    if (workspace_bytes_ > 0 && !thread_workspace(workspace_bytes_))
      return Internal("out of memory allocating a " + std::to_string(workspace_bytes_) + "-byte plugin workspace");
    return Status::Ok();
  }

  Status run(std::span<const TensorView> inputs, std::span<const TensorView> outputs) override {
    void* workspace = workspace_bytes_ > 0 ? thread_workspace(workspace_bytes_) : nullptr;
    if (workspace_bytes_ > 0 && !workspace)
      return Internal("out of memory allocating a " + std::to_string(workspace_bytes_) + "-byte plugin workspace");
    return run_->run(inputs, outputs, workspace);
  }

  const char* impl_name() const override { return kPluginImplPrefix; }

 private:
  std::unique_ptr<PluginBuild> build_;
  std::unique_ptr<PluginRun> run_;
  std::vector<TensorDesc> input_descs_;
  size_t workspace_bytes_ = 0;
};

}  // namespace

std::string plugin_impl_for_version(const std::string& version) {
  return version.empty() ? std::string(kPluginImplPrefix) : std::string(kPluginImplPrefix) + "@" + version;
}

StatusOr<std::string> plugin_version_from_impl(const PlanStep& step) {
  const std::string prefix = std::string(kPluginImplPrefix) + "@";
  if (step.impl.empty() || step.impl == kPluginImplPrefix) return std::string();
  if (step.impl.rfind(prefix, 0) == 0 && step.impl.size() > prefix.size()) return step.impl.substr(prefix.size());
  return InvalidArgument("node '" + step.name + "' (" + step.domain + "::" + step.op_type + "): implementation '" + step.impl +
                         "' is not a plugin implementation (expected 'plugin@<version>')");
}

StatusOr<std::unique_ptr<Kernel>> create_plugin_kernel(const PlanStep& step) {
  KILN_ASSIGN_OR_RETURN(std::string version, plugin_version_from_impl(step));
  const std::string id = step.domain + "::" + step.op_type + (version.empty() ? "" : "@" + version);
  const std::string where = "node '" + step.name + "' (plugin " + id + ")";
  const PluginEntry* entry = PluginRegistry::global().find(step.domain, step.op_type, version);
  if (!entry)
    return NotFound(where + ": no such plugin is registered; load the plugin library that provides it "
                    "(plugins: {load: [...]} in the build config; an engine loads the libraries it records)");
  auto build = entry->creator->create(step.attrs);
  if (!build.ok()) return build.status().with_context(where);
  if (!build.value()) return Internal(where + ": creator returned no plugin");
  auto run = build.value()->create_run();
  if (!run.ok()) return run.status().with_context(where);
  if (!run.value()) return Internal(where + ": create_run() returned no run-time half");
  return std::unique_ptr<Kernel>(new PluginKernel(std::move(build).value(), std::move(run).value(), step.inputs.size()));
}

}  // namespace kiln
