// Moved to the public headers: include/kiln/tensor.h (kiln's installed API).
#pragma once

#include "kiln/tensor.h"
