// Moved to the public headers: include/kiln/shape.h (kiln's installed API).
#pragma once

#include "kiln/shape.h"
