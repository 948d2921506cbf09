// Moved to the public headers: include/kiln/streaming_spec.h (kiln's installed API).
#pragma once

#include "kiln/streaming_spec.h"
