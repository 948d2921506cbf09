// Moved to the public headers: include/kiln/entry_spec.h (kiln's installed API).
#pragma once

#include "kiln/entry_spec.h"
