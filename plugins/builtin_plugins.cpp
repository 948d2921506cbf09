// The ONE table of plugins built into kiln. Each entry returns a creator with static storage
// duration; the registry does not own it.
#include <initializer_list>

#include "plugins/attention/attention_plugin.h"
#include "plugins/plugin_registry.h"

namespace kiln {

Status register_builtin_plugins(PluginRegistry& registry) {
  using BuiltinCreatorFn = const PluginCreator& (*)();
  // One line per built-in plugin (its creator function is declared in the plugin's own header).
  const std::initializer_list<BuiltinCreatorFn> table = {
      []() -> const PluginCreator& { return *attention_plugin_creator(); },  // kiln::Attention@1, plugins/attention/CONTRACT.md
  };
  for (BuiltinCreatorFn fn : table) KILN_RETURN_IF_ERROR(registry.add(&fn(), "builtin"));
  return Status::Ok();
}

}  // namespace kiln
