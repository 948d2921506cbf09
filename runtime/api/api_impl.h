// The public C++ API (include/kiln/engine.h, execution_context.h, session.h, streaming_session.h) is a thin
// layer of handles over the runtime's own classes, which stay private to the library. This header
// defines what each handle holds; only runtime/api/ and the C API include it.
//
// The public classes live in kiln::api and users see them as kiln::Engine & co. through
// using-declarations; inside kiln's own build (KILN_INTERNAL_BUILD) kiln::Engine is the runtime's
// class and the handles are spelled kiln::api::Engine.
#pragma once

#include <memory>

#include "kiln/engine.h"
#include "kiln/execution_context.h"
#include "kiln/session.h"
#include "kiln/streaming_session.h"
#include "runtime/engine.h"
#include "runtime/execution_context.h"
#include "runtime/session.h"
#include "runtime/streaming_session.h"

namespace kiln::api {

struct Engine::Impl {
  std::shared_ptr<const kiln::Engine> engine;
};

struct ExecutionContext::Impl {
  std::unique_ptr<kiln::ExecutionContext> context;
  std::shared_ptr<const kiln::Engine> engine;   // keeps the profile's names alive
};

struct Session::Impl {
  std::unique_ptr<kiln::Session> session;
  std::shared_ptr<const kiln::Engine> engine;
};

struct StreamingSession::Impl {
  std::unique_ptr<kiln::StreamingSession> session;
  std::shared_ptr<const kiln::Engine> engine;
};

}  // namespace kiln::api
