// kiln::Attention (version 1): the fused attention plugin (CONTRACT.md).
#pragma once

#include "plugins/plugin_api.h"

namespace kiln {

// The process-wide creator, for the built-in plugin table.
PluginCreator* attention_plugin_creator();

}  // namespace kiln
