// Status-style errors: every fallible call returns a Status (or StatusOr<T>) that carries one line
// naming what went wrong. No exception is thrown across module boundaries; the KILN_RETURN_IF_ERROR
// and KILN_ASSIGN_OR_RETURN macros pass errors up, optionally prefixed with context.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace kiln {

// The values are the C API's (include/kiln/kiln.h: KILN_OK, KILN_ERROR_*): append, never renumber.
enum class StatusCode {
  kOk = 0, kInvalidArgument, kNotFound, kUnimplemented, kOutOfRange, kDataLoss, kInternal, kIo, kFailedPrecondition,
  kResourceExhausted, kDeadlineExceeded, kCancelled
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  // Messages are one line: newlines in quoted names (a node called "a\nb") are escaped.
  Status(StatusCode code, std::string message) : code_(code), message_(one_line(std::move(message))) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message starts with `context: `, so errors read outermost-first.
  Status with_context(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

  static std::string one_line(std::string m) {
    for (size_t i = 0; i < m.size(); ++i)
      if (m[i] == '\n' || m[i] == '\r') m.replace(i, 1, m[i] == '\n' ? "\\n" : "\\r");
    return m;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
inline Status NotFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status Unimplemented(std::string m) { return Status(StatusCode::kUnimplemented, std::move(m)); }
inline Status OutOfRange(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
inline Status DataLoss(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
inline Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
inline Status IoError(std::string m) { return Status(StatusCode::kIo, std::move(m)); }
// The call is valid but the object is not in a state that allows it (a caller may fall back).
inline Status FailedPrecondition(std::string m) { return Status(StatusCode::kFailedPrecondition, std::move(m)); }
inline Status ResourceExhausted(std::string m) { return Status(StatusCode::kResourceExhausted, std::move(m)); }
// A request whose deadline passed before it started (kiln::InferQueue); it was not run.
inline Status DeadlineExceeded(std::string m) { return Status(StatusCode::kDeadlineExceeded, std::move(m)); }
// A request dropped by a shutdown that cancels (kiln::InferQueue); it was not run.
inline Status Cancelled(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}                      // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {              // NOLINT: implicit by design
    if (status_.ok()) status_ = Internal("StatusOr constructed from an OK status without a value");
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace kiln

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)

#define KILN_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::kiln::Status _kiln_status = (expr);     \
    if (!_kiln_status.ok()) return _kiln_status; \
  } while (0)

#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define KILN_ASSIGN_OR_RETURN(lhs, expr) KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(_kiln_or_, __LINE__), lhs, expr)

// Fails the enclosing function with InvalidArgument(message) when `cond` is false.
#define KILN_CHECK_ARG(cond, message)                         \
  do {                                                        \
    if (!(cond)) return ::kiln::InvalidArgument(message);     \
  } while (0)
