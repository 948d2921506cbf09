// Runs a plugin step of a plan: a kiln::Kernel around the plugin's PluginRun.
#pragma once

#include <memory>
#include <string>

#include "plugins/plugin_api.h"
#include "runtime/kernel.h"
#include "runtime/plan.h"

namespace kiln {

// PlanStep::impl of a plugin step is "plugin@<version>" (the builder writes the version it
// resolved); "plugin" or empty means the highest registered version.
inline constexpr const char* kPluginImplPrefix = "plugin";

std::string plugin_impl_for_version(const std::string& version);
// The version named by a plugin step's impl ("" = highest); an error for any other impl.
StatusOr<std::string> plugin_version_from_impl(const PlanStep& step);

// Finds the step's creator (namespace = step.domain, name = step.op_type) in the global registry,
// creates the PluginBuild from step.attrs and the PluginRun from it.
StatusOr<std::unique_ptr<Kernel>> create_plugin_kernel(const PlanStep& step);

}  // namespace kiln
