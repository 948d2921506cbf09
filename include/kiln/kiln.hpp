// kiln's C++ API in one include: engines, execution contexts, sessions, streaming sessions, the asynchronous
// queue, tensors and dtypes, Status, logging and the plugin API. (kiln/kiln.h is the C API;
// kiln/builder.h, for programs that build engines, comes with libkiln_builder.)
#pragma once

#include "kiln/dtype.h"
#include "kiln/engine.h"
#include "kiln/engine_info.h"
#include "kiln/execution_context.h"
#include "kiln/infer_queue.h"
#include "kiln/logging.h"
#include "kiln/plugin_api.h"
#include "kiln/session.h"
#include "kiln/shape.h"
#include "kiln/status.h"
#include "kiln/streaming_session.h"
#include "kiln/tensor.h"
#include "kiln/version.h"
