#include "builder/config_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace kiln::config {

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


}  // namespace kiln::config
