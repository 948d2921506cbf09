// Moved to the public headers: include/kiln/cpu_features.h (kiln's installed API).
#pragma once

#include "kiln/cpu_features.h"
