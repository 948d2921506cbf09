// The kiln logger: one spdlog::logger whose one sink forwards to the program's ILogger when one is
// installed and writes to stderr otherwise. spdlog is compiled in header-only (with fmt
// header-only), so the runtime library depends on neither at run time and its copy stays private.
#include "runtime/log.h"

#include <spdlog/logger.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "runtime/status.h"

namespace kiln {

ILogger::~ILogger() = default;

namespace {

spdlog::level::level_enum to_spdlog(LogLevel l) { return static_cast<spdlog::level::level_enum>(static_cast<int>(l)); }
LogLevel from_spdlog(spdlog::level::level_enum l) { return static_cast<LogLevel>(static_cast<int>(l)); }

// Writes to stderr, or hands the bare message to the program's logger. The user logger is read
// under the sink's lock, so set_logger() never races a message in flight.
class KilnSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void set_user(std::shared_ptr<ILogger> user) {
    std::lock_guard<std::mutex> lock(mutex_);
    user_ = std::move(user);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (user_) {
      std::string text(msg.payload.data(), msg.payload.size());
      user_->log(from_spdlog(msg.level), text.c_str());
      return;
    }
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    std::fwrite(formatted.data(), 1, formatted.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }

 private:
  std::shared_ptr<ILogger> user_;
};

struct Log {
  std::shared_ptr<KilnSink> sink = std::make_shared<KilnSink>();
  spdlog::logger logger{"kiln", sink};
  Log() {
    LogLevel level = LogLevel::kInfo;
    if (const char* env = std::getenv("KILN_LOG_LEVEL"); env && *env && !parse_log_level(env, &level))
      std::fprintf(stderr, "[kiln] warning: KILN_LOG_LEVEL='%s' is not one of trace, debug, info, warn, error, off; using info\n", env);
    logger.set_level(to_spdlog(level));
    logger.flush_on(spdlog::level::trace);   // progress lines must appear when they happen
    set_name("kiln");
  }
  // Warnings and errors carry their level, info and below read as progress lines.
  void set_name(const std::string& name) { logger.set_pattern("[" + name + "] %^%v%$"); }
};

Log& the_log() {
  static Log* log = new Log();  // never destroyed: static destructors of other objects may still log
  return *log;
}

}  // namespace

bool log_enabled(LogLevel level) { return the_log().logger.should_log(to_spdlog(level)); }

void log_message(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  const char* prefix = level == LogLevel::kWarn ? "warning: " : level == LogLevel::kError ? "error: " : "";
  // Messages are one line, as Status messages are.
  std::string line = Status::one_line(message);
  if (*prefix && line.find(prefix) == std::string::npos) line = prefix + line;
  the_log().logger.log(to_spdlog(level), "{}", line);
}

void set_logger(std::shared_ptr<ILogger> logger) { the_log().sink->set_user(std::move(logger)); }
void set_log_level(LogLevel level) { the_log().logger.set_level(to_spdlog(level)); }
LogLevel log_level() { return from_spdlog(the_log().logger.level()); }
void set_log_name(const std::string& name) { the_log().set_name(name); }

bool parse_log_level(const std::string& text, LogLevel* level) {
  static const std::pair<const char*, LogLevel> kNames[] = {{"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug},
                                                            {"info", LogLevel::kInfo},   {"warn", LogLevel::kWarn},
                                                            {"warning", LogLevel::kWarn}, {"error", LogLevel::kError},
                                                            {"off", LogLevel::kOff}};
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& [name, l] : kNames)
    if (t == name) {
      *level = l;
      return true;
    }
  return false;
}

}  // namespace kiln
