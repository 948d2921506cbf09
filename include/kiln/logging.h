// kiln's log: one logger with levels (spdlog inside the library). By default messages at or above
// the level go to stderr; a program installs its own sink, as with TensorRT's ILogger, to route
// them into its own logging. The level starts at KILN_LOG_LEVEL (trace, debug, info, warn, error,
// off) or, without it, info.
//
// What is logged: progress of builds and engine checks (info), things a user should know but that
// do not fail the call (warn: a missing plugin library on a fallback path, a thread count other than
// the one an engine's tactics were timed at), and detail for debugging (debug). Errors are never
// only logged: every failing call returns its one-line Status.
#pragma once

#include <memory>
#include <string>

#include "kiln/export.h"

namespace kiln {

// Values match the C API's kiln_log_level (and spdlog's levels).
enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 6 };

class KILN_API ILogger {
 public:
  virtual ~ILogger();
  // Called for each message at or above the level, from whichever thread logs it (possibly several
  // at once); `message` is one line without a trailing newline.
  virtual void log(LogLevel level, const char* message) noexcept = 0;
};

// Routes every later message to `logger` (nullptr: back to stderr).
KILN_API void set_logger(std::shared_ptr<ILogger> logger);
KILN_API void set_log_level(LogLevel level);
KILN_API LogLevel log_level();
// "trace", "debug", "info", "warn" (or "warning"), "error", "off"; false for anything else.
KILN_API bool parse_log_level(const std::string& text, LogLevel* level);
// The stderr sink's line format, "[%n] %v"-style as spdlog's patterns with the logger named
// `name` (the tools use their own names: "[engine-build] ...").
KILN_API void set_log_name(const std::string& name);

}  // namespace kiln
