// The YAML walker under the build config reader (builder/build_config.cpp): where a value came from,
// keys with their dotted paths, and the typed getters whose errors name the key path and the line
// of the file (or the --set KEY) a value came from. The schema itself (which keys, what they mean)
// lives in build_config.cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "builder/build_config.h"

namespace kiln::config {

inline constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

// Where a value came from. Values given by --set have no line in the file, so errors name the
// override instead.
struct Site {
  int line = 0;         // 1-based; 0 = unknown
  std::string set_key;  // non-empty for values that came from --set KEY=VALUE
};


std::string join(const std::vector<std::string>& v, const char* sep);
std::string child_path(const std::string& parent, const std::string& key);
std::string shorten(std::string s);
std::string describe(const YAML::Node& n);
std::optional<int64_t> parse_int(const YAML::Node& n);
std::optional<double> parse_double(const YAML::Node& n);
std::string int_expectation(int64_t lo, int64_t hi, bool above_hi);

// One key of a YAML map, with its dotted path and its site.
struct Entry {
  std::string key, path;
  YAML::Node value;
  Site site;
  bool null() const { return !value.IsDefined() || value.IsNull(); }
};

struct MapView {
  std::string path;
  Site site;
  std::vector<Entry> entries;
  // Keys written with no value ("benchmark:") count as absent, so that a commented-out block or
  // --set KEY= falls back to the default.
  const Entry* find(const std::string& key) const {
    for (const auto& e : entries)
      if (e.key == key) return e.null() ? nullptr : &e;
    return nullptr;
  }
};

class ConfigReader {
 public:
  explicit ConfigReader(std::string file) : file_(std::move(file)) {
    config_dir_ = std::filesystem::path(file_).parent_path();
  }

  Status apply_override(YAML::Node& root, const std::string& key, const std::string& value_text);
  Status read(const YAML::Node& root, BuildConfig& cfg);

 private:
  std::string file_;
  std::filesystem::path config_dir_;
  std::vector<std::pair<YAML::Node, std::string>> set_nodes_;  // nodes placed by --set, with its KEY

  Status error(const Site& s, const std::string& msg) const {
    if (!s.set_key.empty()) return InvalidArgument(file_ + ": --set " + s.set_key + ": " + msg);
    if (s.line > 0) return InvalidArgument(file_ + ":" + std::to_string(s.line) + ": " + msg);
    return InvalidArgument(file_ + ": " + msg);
  }
  Status type_error(const Site& s, const std::string& path, const std::string& expected, const YAML::Node& got) const {
    return error(s, "'" + path + "': expected " + expected + ", got '" + describe(got) + "'");
  }
  Status missing(const Site& s, const std::string& path) const {
    return error(s, "missing required key '" + path + "'");
  }

  Site site_of(const Site& parent, const YAML::Node& anchor, const YAML::Node& value) const;
  Status open_map(const YAML::Node& n, const Site& site, const std::string& path, const std::string& expected,
                  MapView* out) const;
  Status check_keys(const MapView& m, const std::vector<std::string>& allowed) const;
  Status open_checked(const Entry& e, const std::vector<std::string>& allowed, MapView* out) const {
    KILN_RETURN_IF_ERROR(open_map(e.value, e.site, e.path, "a map", out));
    return check_keys(*out, allowed);
  }
  Status open_seq(const Entry& e, const std::string& expected, std::vector<Entry>* out) const;

  Status get_int(const Entry& e, int64_t lo, int64_t hi, int64_t* out) const;
  template <typename T>
  Status get_int(const MapView& m, const char* key, int64_t lo, int64_t hi, T* out) const {
    const Entry* e = m.find(key);
    if (!e) return Status::Ok();
    int64_t v = 0;
    KILN_RETURN_IF_ERROR(get_int(*e, lo, hi, &v));
    *out = static_cast<T>(v);
    return Status::Ok();
  }
  Status get_double(const MapView& m, const char* key, bool positive, double* out) const;
  Status get_string(const Entry& e, const std::string& expected, std::string* out) const;
  Status get_choice(const Entry& e, const std::vector<std::string>& choices, std::string* out) const;
  Status get_string_list(const MapView& m, const char* key, const std::string& expected,
                         std::vector<std::pair<std::string, Entry>>* out) const;

  Status read_profiles(const Entry& e, std::vector<ProfileConfig>* out) const;
  Status read_entries(const Entry& e, BuildConfig& cfg) const;
  Status read_state(const Entry& e, BuildConfig& cfg) const;
  Status read_dim(const Entry& e, DimRange* out) const;
  Status read_shape(const Entry& e, ShapeRange* out) const;
  Status read_inputs(const Entry& e, BuildConfig& cfg) const;
  Status read_benchmark(const Entry& e, BenchmarkConfig* out) const;
  Status read_streaming(const Entry& e, BuildConfig& cfg) const;
  Status read_calibration(const Entry& e, BuildConfig& cfg) const;
  Status read_calibration_folder(const Entry& inputs, const Entry* batches, const std::string& dir, CalibrationConfig& c) const;

  std::string resolve(const std::string& p) const {
    std::filesystem::path q(p);
    if (q.is_relative()) q = config_dir_ / q;
    return q.lexically_normal().string();
  }
};

}  // namespace kiln::config
