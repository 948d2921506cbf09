// The ONE table of plugins built into kiln, exported the way an external plugin library exports
// its own (plugins/plugin_api.h: KilnPluginLibrary), so the runtime's plugin host registers both
// through the same code and this library needs nothing of the runtime but the plugin API.
#include "plugins/attention/attention_plugin.h"
#include "plugins/plugin_api.h"

extern "C" const KilnPluginLibrary* kiln_builtin_plugin_library() {
  // One line per built-in plugin (its creator function is declared in the plugin's own header).
  static kiln::PluginCreator* const creators[] = {
      kiln::attention_plugin_creator(),  // kiln::Attention@1, plugins/attention/CONTRACT.md
  };
  static const KilnPluginLibrary table = {kiln::kKilnPluginApiVersion, "builtin", sizeof creators / sizeof creators[0], creators,
                                          "builtin"};
  return &table;
}
