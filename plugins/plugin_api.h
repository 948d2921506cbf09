// The plugin API is public: include/kiln/plugin_api.h.
#pragma once

#include "kiln/plugin_api.h"
