// The YAML build config reader. yaml-cpp parses the text, --set overrides edit that tree, and one
// walk turns the tree into a BuildConfig, checking every key and value on the way so that every
// error names the dotted key path and where it came from (a line of the file, or a --set KEY).
#include "builder/build_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "builder/build_profile.h"
#include "runtime/shape.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

// Where a value came from. Values given by --set have no line in the file, so errors name the
// override instead.
struct Site {
  int line = 0;         // 1-based; 0 = unknown
  std::string set_key;  // non-empty for values that came from --set KEY=VALUE
};

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string shorten(std::string s) {
  constexpr size_t kMaxShown = 70;
  if (s.size() > kMaxShown) s = s.substr(0, kMaxShown - 3) + "...";
  return s;
}

// The value as the user wrote it (roughly): scalars verbatim, collections in flow style.
std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "";
  if (n.IsScalar()) return shorten(n.Scalar());
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  out << n;
  return shorten(out.good() ? out.c_str() : "<unprintable>");
}

// Decimal only: yaml-cpp's own conversion reads "010" as octal and "0x10" as hex.
std::optional<int64_t> parse_int(const YAML::Node& n) {
  if (!n.IsScalar()) return std::nullopt;
  std::string_view s = n.Scalar();
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<double> parse_double(const YAML::Node& n) {
  if (!n.IsScalar()) return std::nullopt;
  std::string_view s = n.Scalar();
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// The upper bound is mostly a storage limit, so it is only mentioned to values beyond it.
std::string int_expectation(int64_t lo, int64_t hi, bool above_hi) {
  if (above_hi) return "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  if (lo == std::numeric_limits<int64_t>::min()) return "an integer";
  return "an integer >= " + std::to_string(lo);
}

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
    config_dir_ = fs::path(file_).parent_path();
  }

  Status apply_override(YAML::Node& root, const std::string& key, const std::string& value_text);
  Status read(const YAML::Node& root, BuildConfig& cfg);

 private:
  std::string file_;
  fs::path config_dir_;
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

  Status read_profiles(const Entry& e, BuildConfig& cfg) const;
  Status read_dim(const Entry& e, DimRange* out) const;
  Status read_shape(const Entry& e, ShapeRange* out) const;
  Status read_inputs(const Entry& e, BuildConfig& cfg) const;
  Status read_benchmark(const Entry& e, BenchmarkConfig* out) const;
  Status read_streaming(const Entry& e, BuildConfig& cfg) const;
  Status read_calibration(const Entry& e, BuildConfig& cfg) const;

  std::string resolve(const std::string& p) const {
    fs::path q(p);
    if (q.is_relative()) q = config_dir_ / q;
    return q.lexically_normal().string();
  }
};

Site ConfigReader::site_of(const Site& parent, const YAML::Node& anchor, const YAML::Node& value) const {
  for (const auto& [node, key] : set_nodes_)
    if (node.is(value)) return Site{0, key};
  if (!parent.set_key.empty()) return parent;
  int line = anchor.Mark().line;
  return Site{line >= 0 ? line + 1 : parent.line, ""};
}

Status ConfigReader::open_map(const YAML::Node& n, const Site& site, const std::string& path,
                              const std::string& expected, MapView* out) const {
  out->path = path;
  out->site = site;
  out->entries.clear();
  if (n.IsNull()) return Status::Ok();
  if (!n.IsMap()) return type_error(site, path.empty() ? "(top level)" : path, expected, n);
  for (auto it = n.begin(); it != n.end(); ++it) {
    Entry e;
    e.value = it->second;
    e.site = site_of(site, it->first, it->second);
    if (!it->first.IsScalar())
      return error(e.site, "'" + (path.empty() ? "(top level)" : path) + "': expected plain keys, got '" +
                               describe(it->first) + "'");
    e.key = it->first.Scalar();
    e.path = child_path(path, e.key);
    for (const auto& prev : out->entries)
      if (prev.key == e.key) return error(e.site, "duplicate key '" + e.path + "'");
    out->entries.push_back(std::move(e));
  }
  return Status::Ok();
}

Status ConfigReader::check_keys(const MapView& m, const std::vector<std::string>& allowed) const {
  for (const auto& e : m.entries)
    if (std::find(allowed.begin(), allowed.end(), e.key) == allowed.end())
      return error(e.site, "unknown key '" + e.path + "' (expected one of: " +
                               (allowed.empty() ? std::string("nothing") : join(allowed, ", ")) + ")");
  return Status::Ok();
}

Status ConfigReader::open_seq(const Entry& e, const std::string& expected, std::vector<Entry>* out) const {
  out->clear();
  if (!e.value.IsSequence()) return type_error(e.site, e.path, expected, e.value);
  for (size_t i = 0; i < e.value.size(); ++i) {
    Entry el;
    el.value = e.value[i];
    el.key = std::to_string(i);
    el.path = e.path + "[" + el.key + "]";
    el.site = site_of(e.site, el.value, el.value);
    out->push_back(std::move(el));
  }
  return Status::Ok();
}

Status ConfigReader::get_int(const Entry& e, int64_t lo, int64_t hi, int64_t* out) const {
  auto v = parse_int(e.value);
  if (!v || *v < lo || *v > hi) return type_error(e.site, e.path, int_expectation(lo, hi, v && *v > hi), e.value);
  *out = *v;
  return Status::Ok();
}

Status ConfigReader::get_double(const MapView& m, const char* key, bool positive, double* out) const {
  const Entry* e = m.find(key);
  if (!e) return Status::Ok();
  auto v = parse_double(e->value);
  if (!v || (positive && *v <= 0)) return type_error(e->site, e->path, positive ? "a number > 0" : "a number", e->value);
  *out = *v;
  return Status::Ok();
}

Status ConfigReader::get_string(const Entry& e, const std::string& expected, std::string* out) const {
  if (!e.value.IsScalar() || e.value.Scalar().empty()) return type_error(e.site, e.path, expected, e.value);
  *out = e.value.Scalar();
  return Status::Ok();
}

Status ConfigReader::get_choice(const Entry& e, const std::vector<std::string>& choices, std::string* out) const {
  if (!e.value.IsScalar() || std::find(choices.begin(), choices.end(), e.value.Scalar()) == choices.end())
    return type_error(e.site, e.path, "one of " + join(choices, ", "), e.value);
  *out = e.value.Scalar();
  return Status::Ok();
}

Status ConfigReader::get_string_list(const MapView& m, const char* key, const std::string& expected,
                                     std::vector<std::pair<std::string, Entry>>* out) const {
  const Entry* e = m.find(key);
  if (!e) return Status::Ok();
  std::vector<Entry> items;
  KILN_RETURN_IF_ERROR(open_seq(*e, "a list of " + expected + "s", &items));
  for (const auto& item : items) {
    std::string s;
    KILN_RETURN_IF_ERROR(get_string(item, expected, &s));
    out->emplace_back(s, item);
  }
  return Status::Ok();
}

Status ConfigReader::read_calibration(const Entry& e, BuildConfig& cfg) const {
  MapView m;
  KILN_RETURN_IF_ERROR(open_checked(e, {"method", "percentile", "batches", "holdout", "cache", "profile", "tolerance", "inputs"}, &m));
  CalibrationConfig& c = cfg.calibration;
  if (const Entry* x = m.find("method")) KILN_RETURN_IF_ERROR(get_choice(*x, {"minmax", "percentile", "entropy"}, &c.method));
  if (const Entry* x = m.find("inputs")) {
    std::string inputs;
    KILN_RETURN_IF_ERROR(get_choice(*x, {"generators"}, &inputs));  // the config's generators, a seed per batch
  }
  KILN_RETURN_IF_ERROR(get_double(m, "percentile", true, &c.percentile));
  if (c.percentile > 100) return type_error(m.find("percentile")->site, m.find("percentile")->path, "a percentile in (0, 100]",
                                            m.find("percentile")->value);
  KILN_RETURN_IF_ERROR(get_int(m, "batches", 1, 100000, &c.batches));
  KILN_RETURN_IF_ERROR(get_int(m, "holdout", 1, 100000, &c.holdout));
  KILN_RETURN_IF_ERROR(get_double(m, "tolerance", true, &c.tolerance));
  if (const Entry* x = m.find("cache")) {
    KILN_RETURN_IF_ERROR(get_string(*x, "a path for the calibration cache file", &c.cache));
    c.cache = resolve(c.cache);
  }
  if (const Entry* x = m.find("profile")) KILN_RETURN_IF_ERROR(get_string(*x, "a profile name", &c.profile));
  return Status::Ok();
}

Status ConfigReader::read(const YAML::Node& root, BuildConfig& cfg) {
  MapView top;
  KILN_RETURN_IF_ERROR(open_map(root, Site{1, ""}, "", "a map of settings", &top));
  KILN_RETURN_IF_ERROR(check_keys(top, {"model", "output", "precision", "threads", "profiles", "inputs", "benchmark",
                                        "plugins", "fusions", "passes", "streaming", "tactics", "history",
                                        "calibration", "precision_overrides"}));
  cfg.config_path = file_;

  const Entry* e = top.find("model");
  if (!e) return missing(top.site, "model");
  KILN_RETURN_IF_ERROR(get_string(*e, "a path to an .onnx model", &cfg.model));
  cfg.model = resolve(cfg.model);
  if ((e = top.find("output"))) {
    KILN_RETURN_IF_ERROR(get_string(*e, "a path for the engine file", &cfg.output));
    cfg.output = resolve(cfg.output);
  } else {
    cfg.output = (config_dir_ / (fs::path(cfg.model).stem().string() + ".engine")).lexically_normal().string();
  }
  if ((e = top.find("precision"))) KILN_RETURN_IF_ERROR(get_choice(*e, {"fp32", "bf16", "int8"}, &cfg.precision));
  if ((e = top.find("calibration"))) KILN_RETURN_IF_ERROR(read_calibration(*e, cfg));
  if ((e = top.find("precision_overrides"))) {
    MapView m;
    KILN_RETURN_IF_ERROR(open_map(e->value, e->site, e->path, "a map of step name globs to fp32 or bf16", &m));
    for (const auto& o : m.entries) {
      PrecisionOverride po;
      po.pattern = o.key;
      KILN_RETURN_IF_ERROR(get_choice(o, {"fp32", "bf16"}, &po.precision));
      cfg.precision_overrides.push_back(po);
    }
  }
  KILN_RETURN_IF_ERROR(get_int(top, "threads", 0, INT_MAX, &cfg.threads));

  if (!(e = top.find("profiles"))) return missing(top.site, "profiles");
  KILN_RETURN_IF_ERROR(read_profiles(*e, cfg));
  if ((e = top.find("inputs"))) KILN_RETURN_IF_ERROR(read_inputs(*e, cfg));
  if ((e = top.find("benchmark"))) KILN_RETURN_IF_ERROR(read_benchmark(*e, &cfg.benchmark));

  MapView m;
  if ((e = top.find("plugins"))) {
    KILN_RETURN_IF_ERROR(open_checked(*e, {"load"}, &m));
    std::vector<std::pair<std::string, Entry>> libs;
    KILN_RETURN_IF_ERROR(get_string_list(m, "load", "plugin library path", &libs));
    for (const auto& [lib, entry] : libs) cfg.plugin_libraries.push_back(resolve(lib));
  }
  if ((e = top.find("fusions"))) {
    // The fusions the builder knows; a misspelt one must not silently build an unfused engine.
    KILN_RETURN_IF_ERROR(open_checked(*e, {"attention"}, &m));
    for (const auto& f : m.entries) {
      if (f.null()) continue;
      KILN_RETURN_IF_ERROR(get_choice(f, {"required", "auto", "off"}, &cfg.fusions[f.key]));
    }
  }
  if ((e = top.find("passes"))) {
    KILN_RETURN_IF_ERROR(open_checked(*e, {"disable"}, &m));
    std::vector<std::pair<std::string, Entry>> names;
    KILN_RETURN_IF_ERROR(get_string_list(m, "disable", "pass name", &names));
    const std::vector<std::string> known = all_pass_names();
    for (const auto& [name, entry] : names) {
      if (std::find(known.begin(), known.end(), name) == known.end())
        return type_error(entry.site, entry.path, "a pass name (one of: " + join(known, ", ") + ")", entry.value);
      cfg.disabled_passes.push_back(name);
    }
  }
  if ((e = top.find("streaming"))) KILN_RETURN_IF_ERROR(read_streaming(*e, cfg));
  if ((e = top.find("history"))) {
    KILN_RETURN_IF_ERROR(open_checked(*e, {"db", "label"}, &m));
    if (const Entry* d = m.find("db")) {
      KILN_RETURN_IF_ERROR(get_string(*d, "a path to a history database", &cfg.history.db));
      cfg.history.db = resolve(cfg.history.db);
    }
    if (const Entry* l = m.find("label")) KILN_RETURN_IF_ERROR(get_string(*l, "a label for the recorded runs", &cfg.history.label));
  }
  if ((e = top.find("tactics"))) {
    KILN_RETURN_IF_ERROR(open_checked(*e, {"select", "timing_cache"}, &m));
    if (const Entry* sel = m.find("select")) {
      std::string choice;
      KILN_RETURN_IF_ERROR(get_choice(*sel, {"true", "false"}, &choice));
      cfg.select_tactics = choice == "true";
    }
    if (const Entry* tc = m.find("timing_cache")) {
      KILN_RETURN_IF_ERROR(get_string(*tc, "a path for the timing cache file", &cfg.timing_cache));
      cfg.timing_cache = resolve(cfg.timing_cache);
    }
  }
  return Status::Ok();
}

Status ConfigReader::read_profiles(const Entry& e, BuildConfig& cfg) const {
  MapView profiles;
  KILN_RETURN_IF_ERROR(open_map(e.value, e.site, e.path, "a map of profile name -> {dims, shapes}", &profiles));
  if (profiles.entries.empty()) return type_error(e.site, e.path, "at least one profile", e.value);
  for (const auto& p : profiles.entries) {
    ProfileConfig prof;
    prof.name = p.key;
    prof.line = p.site.line;
    MapView body;
    KILN_RETURN_IF_ERROR(open_map(p.value, p.site, p.path, "a map with dims and/or shapes", &body));
    KILN_RETURN_IF_ERROR(check_keys(body, {"dims", "shapes"}));
    MapView items;
    if (const Entry* d = body.find("dims")) {
      KILN_RETURN_IF_ERROR(open_map(d->value, d->site, d->path, "a map of dim name -> size", &items));
      for (const auto& dim : items.entries) KILN_RETURN_IF_ERROR(read_dim(dim, &prof.dims[dim.key]));
    }
    if (const Entry* s = body.find("shapes")) {
      KILN_RETURN_IF_ERROR(open_map(s->value, s->site, s->path, "a map of input name -> {min, opt, max}", &items));
      for (const auto& shape : items.entries) KILN_RETURN_IF_ERROR(read_shape(shape, &prof.shapes[shape.key]));
    }
    cfg.profiles.push_back(std::move(prof));
  }
  return Status::Ok();
}

Status ConfigReader::read_dim(const Entry& e, DimRange* out) const {
  if (e.value.IsScalar()) {
    if (!parse_int(e.value)) return type_error(e.site, e.path, "an integer or {min, opt, max}", e.value);
    int64_t v = 0;
    KILN_RETURN_IF_ERROR(get_int(e, 0, kNoMax, &v));
    *out = DimRange{v, v, v};
    return Status::Ok();
  }
  if (!e.value.IsMap()) return type_error(e.site, e.path, "an integer or {min, opt, max}", e.value);
  MapView m;
  KILN_RETURN_IF_ERROR(open_checked(e, {"min", "opt", "max"}, &m));
  int64_t* fields[] = {&out->min, &out->opt, &out->max};
  const char* names[] = {"min", "opt", "max"};
  for (int i = 0; i < 3; ++i) {
    if (!m.find(names[i])) return missing(e.site, child_path(e.path, names[i]));
    KILN_RETURN_IF_ERROR(get_int(m, names[i], 0, kNoMax, fields[i]));
  }
  if (out->min > out->opt || out->opt > out->max)
    return type_error(e.site, e.path, "min <= opt <= max", e.value);
  return Status::Ok();
}

Status ConfigReader::read_shape(const Entry& e, ShapeRange* out) const {
  auto read_dims = [&](const Entry& list, std::vector<int64_t>* dims) -> Status {
    std::vector<Entry> items;
    KILN_RETURN_IF_ERROR(open_seq(list, "a list of dims", &items));
    if (!Shape::fits_rank(items.size()))
      return type_error(list.site, list.path, "at most " + std::to_string(kMaxRank) + " dims", list.value);
    for (const auto& item : items) {
      int64_t v = 0;
      KILN_RETURN_IF_ERROR(get_int(item, 0, kNoMax, &v));
      dims->push_back(v);
    }
    return Status::Ok();
  };
  // A plain list is a fixed shape.
  if (e.value.IsSequence()) {
    KILN_RETURN_IF_ERROR(read_dims(e, &out->min));
    out->opt = out->max = out->min;
    return Status::Ok();
  }
  if (!e.value.IsMap()) return type_error(e.site, e.path, "a shape list or {min, opt, max}", e.value);
  MapView m;
  KILN_RETURN_IF_ERROR(open_checked(e, {"min", "opt", "max"}, &m));
  std::vector<int64_t>* fields[] = {&out->min, &out->opt, &out->max};
  const char* names[] = {"min", "opt", "max"};
  for (int i = 0; i < 3; ++i) {
    const Entry* f = m.find(names[i]);
    if (!f) return missing(e.site, child_path(e.path, names[i]));
    KILN_RETURN_IF_ERROR(read_dims(*f, fields[i]));
  }
  if (out->min.size() != out->opt.size() || out->opt.size() != out->max.size())
    return type_error(e.site, e.path, "min, opt and max of the same rank", e.value);
  for (size_t i = 0; i < out->min.size(); ++i)
    if (out->min[i] > out->opt[i] || out->opt[i] > out->max[i])
      return type_error(e.site, e.path, "min <= opt <= max in every dim (dim " + std::to_string(i) + " is not)",
                        e.value);
  return Status::Ok();
}

Status ConfigReader::read_inputs(const Entry& e, BuildConfig& cfg) const {
  // Keys each generator understands, in the order the error message lists them.
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kKinds = {
      {"uniform", {"generator", "low", "high", "seed"}}, {"randint", {"generator", "low", "high", "seed"}},
      {"zeros", {"generator"}},                          {"ones", {"generator"}},
      {"block_causal", {"generator", "block"}},          {"causal", {"generator"}},
  };
  MapView inputs;
  KILN_RETURN_IF_ERROR(open_map(e.value, e.site, e.path, "a map of input name -> {generator, ...}", &inputs));
  for (const auto& in : inputs.entries) {
    MapView m;
    KILN_RETURN_IF_ERROR(open_map(in.value, in.site, in.path, "a map with a generator", &m));
    const Entry* g = m.find("generator");
    if (!g) return missing(in.site, child_path(in.path, "generator"));
    InputGenerator gen;
    std::vector<std::string> kind_names;
    for (const auto& [kind, keys] : kKinds) kind_names.push_back(kind);
    KILN_RETURN_IF_ERROR(get_choice(*g, kind_names, &gen.kind));
    for (const auto& [kind, keys] : kKinds)
      if (kind == gen.kind) KILN_RETURN_IF_ERROR(check_keys(m, keys));

    if (gen.kind == "randint") {
      int64_t low = 0, high = 1;
      KILN_RETURN_IF_ERROR(get_int(m, "low", std::numeric_limits<int64_t>::min(), kNoMax, &low));
      KILN_RETURN_IF_ERROR(get_int(m, "high", std::numeric_limits<int64_t>::min(), kNoMax, &high));
      if (low >= high) return type_error(in.site, in.path, "low < high", in.value);
      gen.low = static_cast<double>(low);
      gen.high = static_cast<double>(high);
    } else if (gen.kind == "uniform") {
      KILN_RETURN_IF_ERROR(get_double(m, "low", false, &gen.low));
      KILN_RETURN_IF_ERROR(get_double(m, "high", false, &gen.high));
      if (gen.low > gen.high) return type_error(in.site, in.path, "low <= high", in.value);
    } else if (gen.kind == "block_causal") {
      if (!m.find("block")) return missing(in.site, child_path(in.path, "block"));
      KILN_RETURN_IF_ERROR(get_int(m, "block", 1, kNoMax, &gen.block));
    }
    if (const Entry* s = m.find("seed")) {
      // uint64 seeds above INT64_MAX are not worth a second parser.
      int64_t seed = 0;
      KILN_RETURN_IF_ERROR(get_int(*s, 0, kNoMax, &seed));
      gen.seed = static_cast<uint64_t>(seed);
    }
    cfg.inputs[in.key] = gen;
  }
  return Status::Ok();
}

Status ConfigReader::read_benchmark(const Entry& e, BenchmarkConfig* out) const {
  MapView m;
  KILN_RETURN_IF_ERROR(open_checked(e, {"rate_hz", "budget_ms", "warmup", "iterations", "rounds", "enforce_budget"}, &m));
  KILN_RETURN_IF_ERROR(get_double(m, "rate_hz", true, &out->rate_hz));
  out->budget_ms = 1000.0 / out->rate_hz;
  KILN_RETURN_IF_ERROR(get_double(m, "budget_ms", true, &out->budget_ms));
  KILN_RETURN_IF_ERROR(get_int(m, "warmup", 0, INT_MAX, &out->warmup));
  KILN_RETURN_IF_ERROR(get_int(m, "iterations", 1, INT_MAX, &out->iterations));
  KILN_RETURN_IF_ERROR(get_int(m, "rounds", 1, INT_MAX, &out->rounds));
  if (const Entry* en = m.find("enforce_budget")) {
    std::string choice;
    KILN_RETURN_IF_ERROR(get_choice(*en, {"true", "false"}, &choice));
    out->enforce_budget = choice == "true";
  }
  return Status::Ok();
}

Status ConfigReader::read_streaming(const Entry& e, BuildConfig& cfg) const {
  StreamingConfig& st = cfg.streaming;
  MapView m;
  KILN_RETURN_IF_ERROR(open_checked(e, {"cold_start", "step", "steps", "state", "window"}, &m));
  st.present = true;
  std::vector<std::string> profile_names;
  for (const auto& p : cfg.profiles) profile_names.push_back(p.name);
  for (const char* key : {"cold_start", "step"}) {
    const Entry* p = m.find(key);
    if (!p) return missing(e.site, child_path(e.path, key));
    std::string* out = std::string(key) == "step" ? &st.step : &st.cold_start;
    if (!p->value.IsScalar() ||
        std::find(profile_names.begin(), profile_names.end(), p->value.Scalar()) == profile_names.end())
      return type_error(p->site, p->path, "the name of a profile (one of: " + join(profile_names, ", ") + ")",
                        p->value);
    *out = p->value.Scalar();
  }
  KILN_RETURN_IF_ERROR(get_int(m, "steps", 1, INT_MAX, &st.steps));
  if (const Entry* s = m.find("state")) {
    std::vector<Entry> items;
    KILN_RETURN_IF_ERROR(open_seq(*s, "a list of {output, input, axis}", &items));
    for (const auto& item : items) {
      MapView sm;
      KILN_RETURN_IF_ERROR(open_map(item.value, item.site, item.path, "a map {output, input, axis}", &sm));
      KILN_RETURN_IF_ERROR(check_keys(sm, {"output", "input", "axis"}));
      StateConfig sc;
      for (const char* key : {"output", "input", "axis"})
        if (!sm.find(key)) return missing(item.site, child_path(item.path, key));
      KILN_RETURN_IF_ERROR(get_string(*sm.find("output"), "an output name", &sc.output));
      KILN_RETURN_IF_ERROR(get_string(*sm.find("input"), "an input name", &sc.input));
      KILN_RETURN_IF_ERROR(get_int(sm, "axis", -kMaxRank, kMaxRank - 1, &sc.axis));
      st.state.push_back(std::move(sc));
    }
  }
  if (const Entry* w = m.find("window")) {
    MapView wm;
    KILN_RETURN_IF_ERROR(open_checked(*w, {"tokens_per_step", "max_steps"}, &wm));
    KILN_RETURN_IF_ERROR(get_int(wm, "tokens_per_step", 1, kNoMax, &st.tokens_per_step));
    KILN_RETURN_IF_ERROR(get_int(wm, "max_steps", 1, kNoMax, &st.max_steps));
  }
  return Status::Ok();
}

// Walks KEY's dotted segments down the tree, creating maps where the path does not exist yet. A
// segment may also be a list index (streaming.state.0.axis), and since input names may contain dots,
// the longest run of segments that names an existing key wins.
Status ConfigReader::apply_override(YAML::Node& root, const std::string& key, const std::string& value_text) {
  const Site site{0, key};
  std::vector<std::string> segs;
  for (size_t start = 0;;) {
    size_t dot = key.find('.', start);
    segs.push_back(key.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const auto& s : segs)
    if (s.empty()) return error(site, "expected a dotted key path such as benchmark.iterations");
  YAML::Node value;
  try {
    value = YAML::Load(value_text);
  } catch (const YAML::ParserException& ex) {
    return error(site, "invalid YAML value '" + value_text + "': " + ex.msg);
  }

  YAML::Node cur = root;
  std::string path;
  for (size_t i = 0; i < segs.size();) {
    size_t j = i;
    std::string k = segs[i];
    bool exists = false;
    if (cur.IsSequence()) {
      auto idx = parse_int(YAML::Node(segs[i]));
      if (!idx || *idx < 0 || *idx >= static_cast<int64_t>(cur.size()))
        return error(site, "'" + path + "' is a list of " + std::to_string(cur.size()) +
                               " entries; expected an index from 0 after it, got '" + segs[i] + "'");
      exists = true;
    } else {
      for (size_t end = segs.size(); end-- > i;) {
        std::vector<std::string> run(segs.begin() + i, segs.begin() + end + 1);
        std::string candidate = join(run, ".");
        for (auto it = cur.begin(); it != cur.end() && !exists; ++it)
          if (it->first.IsScalar() && it->first.Scalar() == candidate) exists = true;
        if (exists) {
          j = end;
          k = candidate;
          break;
        }
      }
    }
    path = child_path(path, k);
    const bool last = j + 1 == segs.size();
    auto child_of = [&]() { return cur.IsSequence() ? cur[std::stoul(k)] : cur[k]; };
    if (last) {
      child_of() = value;
      set_nodes_.emplace_back(child_of(), key);
      return Status::Ok();
    }
    YAML::Node child = child_of();
    // Anything that cannot hold the rest of the path is replaced by a map; if that map is not valid
    // there, validation reports it as it would report the same map written in the file.
    if (!exists || !(child.IsMap() || child.IsSequence())) {
      child_of() = YAML::Node(YAML::NodeType::Map);
      child.reset(child_of());
      set_nodes_.emplace_back(child, key);
    }
    cur.reset(child);
    i = j + 1;
  }
  return Status::Ok();
}

}  // namespace

StatusOr<BuildConfig> parse_build_config(const std::string& yaml_text, const std::string& path,
                                         const std::vector<std::pair<std::string, std::string>>& overrides) {
  try {
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(yaml_text);
    } catch (const YAML::ParserException& ex) {
      return InvalidArgument(path + ":" + std::to_string(ex.mark.line + 1) + ": invalid YAML: " + ex.msg);
    }
    if (docs.size() > 1)
      return InvalidArgument(path + ":" + std::to_string(docs[1].Mark().line + 1) +
                             ": expected a single YAML document, found " + std::to_string(docs.size()));
    if (docs.empty() || docs[0].IsNull()) return InvalidArgument(path + ": the config is empty");
    YAML::Node root = docs[0];
    if (!root.IsMap())
      return InvalidArgument(path + ":" + std::to_string(root.Mark().line + 1) +
                             ": expected a map of settings at the top level, got '" + describe(root) + "'");
    ConfigReader reader(path);
    for (const auto& [key, value] : overrides) KILN_RETURN_IF_ERROR(reader.apply_override(root, key, value));
    BuildConfig cfg;
    KILN_RETURN_IF_ERROR(reader.read(root, cfg));
    return cfg;
  } catch (const YAML::Exception& ex) {
    return Internal(path + ": YAML error: " + ex.what());
  } catch (const std::exception& ex) {
    return Internal(path + ": " + ex.what());
  }
}

StatusOr<BuildConfig> load_build_config(const std::string& path,
                                        const std::vector<std::pair<std::string, std::string>>& overrides) {
  try {
    std::error_code ec;
    if (fs::is_directory(path, ec)) return InvalidArgument(path + ": is a directory, expected a YAML config file");
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      int err = errno;
      std::string why = err ? std::strerror(err) : "cannot open";
      if (err == ENOENT) return NotFound(path + ": cannot read the config: " + why);
      return IoError(path + ": cannot read the config: " + why);
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) return IoError(path + ": error while reading the config");
    return parse_build_config(text.str(), path, overrides);
  } catch (const std::exception& ex) {
    return Internal(path + ": " + ex.what());
  }
}

}  // namespace kiln
