// kiln's internal logging calls (the public side, levels and sinks, is include/kiln/logging.h).
// Messages are built only when their level is enabled: check log_enabled() before building an
// expensive one.
#pragma once

#include <string>

#include "kiln/logging.h"

namespace kiln {

bool log_enabled(LogLevel level);
void log_message(LogLevel level, const std::string& message);

inline void log_debug(const std::string& m) { log_message(LogLevel::kDebug, m); }
inline void log_info(const std::string& m) { log_message(LogLevel::kInfo, m); }
inline void log_warn(const std::string& m) { log_message(LogLevel::kWarn, m); }
inline void log_error(const std::string& m) { log_message(LogLevel::kError, m); }

}  // namespace kiln
