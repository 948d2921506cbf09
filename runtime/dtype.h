// Moved to the public headers: include/kiln/dtype.h (kiln's installed API).
#pragma once

#include "kiln/dtype.h"
