// Moved to the public headers: include/kiln/status.h (kiln's installed API).
#pragma once

#include "kiln/status.h"
