// Moved to the public headers: include/kiln/attributes.h (kiln's installed API).
#pragma once

#include "kiln/attributes.h"
