#include "runtime/memory_budget.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kiln {

namespace {

std::atomic<uint64_t> g_in_use{0};

uint64_t initial_cap() {
  const char* env = std::getenv("KILN_MAX_MEMORY");
  if (!env || !*env) return 0;
  auto v = parse_memory_size(env);
  return v.ok() ? *v : 0;  // a malformed value is reported by the tools (kiln::memory_cap_warning)
}

std::atomic<uint64_t>& cap() {
  static std::atomic<uint64_t> c{initial_cap()};
  return c;
}

std::string mib(uint64_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

void set_max_memory(uint64_t bytes) { cap().store(bytes); }
uint64_t max_memory() { return cap().load(); }
uint64_t memory_in_use() { return g_in_use.load(std::memory_order_relaxed); }

Status check_memory(uint64_t bytes, const std::string& what) {
  const uint64_t c = max_memory(), used = memory_in_use();
  if (c == 0 || (bytes <= c && used <= c - bytes)) return Status::Ok();
  return ResourceExhausted(what + " needs " + std::to_string(bytes) + " bytes (" + mib(bytes) + ") with " + std::to_string(used) +
                           " in use: over the memory cap of " + std::to_string(c) + " bytes (" + mib(c) +
                           "; --max-memory / KILN_MAX_MEMORY)");
}

bool try_charge_memory(uint64_t bytes) {
  const uint64_t c = max_memory();
  uint64_t used = g_in_use.load(std::memory_order_relaxed);
  for (;;) {
    if (c != 0 && (bytes > c || used > c - bytes)) return false;
    if (g_in_use.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed)) return true;
  }
}

Status charge_memory(uint64_t bytes, const std::string& what) {
  if (try_charge_memory(bytes)) return Status::Ok();
  return check_memory(bytes, what);
}

void release_memory(uint64_t bytes) { g_in_use.fetch_sub(bytes, std::memory_order_relaxed); }

StatusOr<uint64_t> parse_memory_size(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(v >= 0) || !std::isfinite(v))
    return InvalidArgument("memory size '" + text + "' is not a number of bytes (e.g. 512M, 2G)");
  double scale = 1;
  std::string suffix(end);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix == "K" || suffix == "k" || suffix == "Ki") scale = 1024.0;
  else if (suffix == "M" || suffix == "m" || suffix == "Mi") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g" || suffix == "Gi") scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "t" || suffix == "Ti") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!suffix.empty()) return InvalidArgument("memory size '" + text + "': unknown unit '" + suffix + "' (use K, M, G or T)");
  const double bytes = v * scale;
  if (bytes >= 1.8e19) return InvalidArgument("memory size '" + text + "' is too large");
  return static_cast<uint64_t>(bytes);
}

}  // namespace kiln
