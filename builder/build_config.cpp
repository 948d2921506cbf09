// The YAML build config reader. yaml-cpp parses the text, --set overrides edit that tree, and one
// walk turns the tree into a BuildConfig, checking every key and value on the way so that every
// error names the dotted key path and where it came from (a line of the file, or a --set KEY).
#include "builder/build_config.h"

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
#include "builder/config_reader.h"
#include "runtime/shape.h"
#include "yaml-cpp/eventhandler.h"

namespace kiln {
namespace config {

namespace fs = std::filesystem;

Status ConfigReader::read_calibration(const Entry& e, BuildConfig& cfg) const {
  MapView m;
  KILN_RETURN_IF_ERROR(open_checked(e, {"method", "percentile", "batches", "holdout", "cache", "profile", "tolerance", "inputs"}, &m));
  CalibrationConfig& c = cfg.calibration;
  if (const Entry* x = m.find("method")) KILN_RETURN_IF_ERROR(get_choice(*x, {"minmax", "percentile", "entropy"}, &c.method));
  std::string inputs = "generators";  // the config's generators, a seed per batch
  if (const Entry* x = m.find("inputs"))
    KILN_RETURN_IF_ERROR(get_string(*x, "generators or a folder of .npy batch subfolders", &inputs));
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
  if (inputs != "generators") KILN_RETURN_IF_ERROR(read_calibration_folder(*m.find("inputs"), m.find("batches"), inputs, c));
  return Status::Ok();
}

// calibration.inputs: DIR, one subfolder per batch (sorted by name): the last `holdout` are held
// out, the first `batches` of the others calibrate (all of them when batches is not given). The
// files themselves are checked when calibration reads them (their shapes need the plan).
Status ConfigReader::read_calibration_folder(const Entry& inputs, const Entry* batches, const std::string& dir, CalibrationConfig& c) const {
  c.folder = resolve(dir);
  std::error_code ec;
  if (!fs::is_directory(c.folder, ec))
    return error(inputs.site, "'" + inputs.path + "': '" + c.folder + "' is not a folder (expected generators or a folder of .npy batch subfolders)");
  for (fs::directory_iterator it(c.folder, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) c.batch_folders.push_back(it->path().string());
  if (ec) return error(inputs.site, "'" + inputs.path + "': cannot list '" + c.folder + "': " + ec.message());
  std::sort(c.batch_folders.begin(), c.batch_folders.end());
  const int n = static_cast<int>(c.batch_folders.size());
  if (n <= c.holdout)
    return error(inputs.site, "'" + inputs.path + "': '" + c.folder + "' has " + std::to_string(n) + " batch subfolders, needs at least " +
                                  std::to_string(c.holdout + 1) + " (the last " + std::to_string(c.holdout) + " are held out, calibration.holdout)");
  if (!batches) c.batches = n - c.holdout;
  else if (c.batches > n - c.holdout)
    return error(batches->site, "'" + batches->path + "': " + std::to_string(c.batches) + " exceeds the " + std::to_string(n - c.holdout) +
                                    " calibrating subfolders of '" + c.folder + "' (" + std::to_string(n) + ", the last " +
                                    std::to_string(c.holdout) + " held out)");
  return Status::Ok();
}

Status ConfigReader::read(const YAML::Node& root, BuildConfig& cfg) {
  MapView top;
  KILN_RETURN_IF_ERROR(open_map(root, Site{1, ""}, "", "a map of settings", &top));
  KILN_RETURN_IF_ERROR(check_keys(top, {"model", "output", "precision", "threads", "profiles", "inputs", "benchmark",
                                        "plugins", "fusions", "passes", "streaming", "tactics", "history",
                                        "calibration", "precision_overrides", "entries", "state"}));
  cfg.config_path = file_;

  const Entry* e = top.find("entries");
  if (e) {
    for (const char* key : {"model", "profiles"})
      if (const Entry* m = top.find(key))
        return error(m->site, "'" + std::string(key) + "' cannot be used with 'entries' (each entry has its own model and profiles)");
    KILN_RETURN_IF_ERROR(read_entries(*e, cfg));
    cfg.model = cfg.entries.front().model;
  } else {
    if (!(e = top.find("model"))) return missing(top.site, "model");
    KILN_RETURN_IF_ERROR(get_string(*e, "a path to an .onnx model", &cfg.model));
    cfg.model = resolve(cfg.model);
  }
  if ((e = top.find("state"))) {
    if (cfg.entries.empty()) return error(e->site, "'state' needs 'entries' (it binds buffers to entry inputs and outputs)");
    KILN_RETURN_IF_ERROR(read_state(*e, cfg));
  }
  if ((e = top.find("output"))) {
    KILN_RETURN_IF_ERROR(get_string(*e, "a path for the engine file", &cfg.output));
    cfg.output = resolve(cfg.output);
  } else {
    const fs::path named_by = cfg.entries.empty() ? fs::path(cfg.model) : fs::path(file_);  // entries: the config's name
    cfg.output = (config_dir_ / (named_by.stem().string() + ".engine")).lexically_normal().string();
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

  if (cfg.entries.empty()) {
    if (!(e = top.find("profiles"))) return missing(top.site, "profiles");
    KILN_RETURN_IF_ERROR(read_profiles(*e, &cfg.profiles));
  }
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

Status ConfigReader::read_profiles(const Entry& e, std::vector<ProfileConfig>* out) const {
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
    out->push_back(std::move(prof));
  }
  return Status::Ok();
}

Status ConfigReader::read_entries(const Entry& e, BuildConfig& cfg) const {
  MapView entries;
  KILN_RETURN_IF_ERROR(open_map(e.value, e.site, e.path, "a map of entry name -> {model, profiles}", &entries));
  if (entries.entries.empty()) return type_error(e.site, e.path, "at least one entry", e.value);
  for (const auto& en : entries.entries) {
    if (en.key.find('/') != std::string::npos) return type_error(en.site, en.path, "an entry name without '/'", YAML::Node(en.key));
    EntryConfig ec;
    ec.name = en.key;
    ec.line = en.site.line;
    MapView body;
    KILN_RETURN_IF_ERROR(open_checked(en, {"model", "profiles"}, &body));
    for (const char* key : {"model", "profiles"})
      if (!body.find(key)) return missing(en.site, child_path(en.path, key));
    KILN_RETURN_IF_ERROR(get_string(*body.find("model"), "a path to an .onnx model", &ec.model));
    ec.model = resolve(ec.model);
    KILN_RETURN_IF_ERROR(read_profiles(*body.find("profiles"), &ec.profiles));
    cfg.entries.push_back(std::move(ec));
  }
  return Status::Ok();
}

Status ConfigReader::read_state(const Entry& e, BuildConfig& cfg) const {
  MapView buffers;
  KILN_RETURN_IF_ERROR(open_map(e.value, e.site, e.path, "a map of state name -> [{entry, input, output}, ...]", &buffers));
  for (const auto& b : buffers.entries) {
    StateBufferConfig sb;
    sb.name = b.key;
    sb.line = b.site.line;
    std::vector<Entry> items;
    KILN_RETURN_IF_ERROR(open_seq(b, "a list of {entry, input, output}", &items));
    if (items.empty()) return type_error(b.site, b.path, "at least one binding", b.value);
    for (const auto& item : items) {
      MapView m;
      KILN_RETURN_IF_ERROR(open_checked(item, {"entry", "input", "output"}, &m));
      StateBindingConfig bc;
      bc.line = item.site.line;
      if (!m.find("entry")) return missing(item.site, child_path(item.path, "entry"));
      KILN_RETURN_IF_ERROR(get_string(*m.find("entry"), "an entry name", &bc.entry));
      bool known = false;
      for (const auto& en : cfg.entries) known = known || en.name == bc.entry;
      if (!known) return type_error(m.find("entry")->site, m.find("entry")->path, "the name of an entry", m.find("entry")->value);
      if (const Entry* in = m.find("input")) KILN_RETURN_IF_ERROR(get_string(*in, "an input name", &bc.input));
      if (const Entry* out = m.find("output")) KILN_RETURN_IF_ERROR(get_string(*out, "an output name", &bc.output));
      if (bc.input.empty() && bc.output.empty()) return error(item.site, "'" + item.path + "': expected an input, an output or both");
      for (const auto& prev : sb.bindings)
        if (prev.entry == bc.entry) return error(item.site, "'" + item.path + "': entry '" + bc.entry + "' is bound to this state twice");
      sb.bindings.push_back(std::move(bc));
    }
    cfg.state.push_back(std::move(sb));
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
  if (!cfg.entries.empty()) return error(e.site, "'streaming' cannot be used with 'entries' (use a Session over the entries)");
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

}  // namespace config

using config::ConfigReader;
using config::describe;
namespace fs = std::filesystem;

namespace {

// Counts a YAML text's documents, up to two, by walking parser events. YAML::LoadAll is not used:
// yaml-cpp 0.7 turns some malformed texts (found by the fuzz target) into an endless run of empty
// documents, which LoadAll collects until memory runs out. Stopping at the second document bounds
// the work; the event cap guards a single document that never ends.
class DocumentCounter : public YAML::EventHandler {
 public:
  explicit DocumentCounter(size_t text_bytes) : max_events_(16 * text_bytes + 64) {}
  int documents = 0;
  int second_line = 0;  // 1-based line where the second document starts
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents == 2) second_line = mark.line + 1;
    tick();
  }
  void OnDocumentEnd() override { tick(); }
  void OnNull(const YAML::Mark&, YAML::anchor_t) override { tick(); }
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { tick(); }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override { tick(); }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override { tick(); }
  void OnSequenceEnd() override { tick(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override { tick(); }
  void OnMapEnd() override { tick(); }

 private:
  void tick() {
    if (++events_ > max_events_) throw std::length_error("the YAML parser does not come to an end");
  }
  size_t events_ = 0, max_events_;
};

}  // namespace

StatusOr<BuildConfig> parse_build_config(const std::string& yaml_text, const std::string& path,
                                         const std::vector<std::pair<std::string, std::string>>& overrides) {
  try {
    YAML::Node root;
    try {
      std::istringstream stream(yaml_text);
      YAML::Parser parser(stream);
      DocumentCounter counter(yaml_text.size());
      while (counter.documents < 2 && parser.HandleNextDocument(counter)) {
      }
      if (counter.documents > 1)
        return InvalidArgument(path + ":" + std::to_string(counter.second_line) +
                               ": expected a single YAML document, found more than one");
      root = YAML::Load(yaml_text);
    } catch (const YAML::ParserException& ex) {
      return InvalidArgument(path + ":" + std::to_string(ex.mark.line + 1) + ": invalid YAML: " + ex.msg);
    } catch (const std::length_error& ex) {
      return InvalidArgument(path + ": invalid YAML: " + ex.what());
    }
    if (!root || root.IsNull()) return InvalidArgument(path + ": the config is empty");
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
