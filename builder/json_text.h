// Small helpers for the JSON that the report writers emit by hand.
#pragma once

#include <cstdio>
#include <string>

namespace kiln {

// `s` as a JSON string literal (quotes, backslashes and control characters escaped).
inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// A number with 6 significant digits (JSON has no NaN/Inf: those become null).
inline std::string json_number(double v) {
  if (v != v || v > 1e308 || v < -1e308) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace kiln
