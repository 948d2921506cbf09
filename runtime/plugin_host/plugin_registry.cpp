#include "runtime/plugin_host/plugin_registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <exception>
#include <filesystem>

#include "runtime/log.h"

namespace kiln {

namespace {

std::vector<std::string> split_version(const std::string& v) {
  std::vector<std::string> parts(1);
  for (char c : v) {
    if (c == '.') parts.emplace_back();
    else parts.back() += c;
  }
  return parts;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string str_or(const char* s) { return s ? s : ""; }

}  // namespace

int compare_plugin_versions(const std::string& a, const std::string& b) {
  const auto pa = split_version(a), pb = split_version(b);
  for (size_t i = 0; i < std::max(pa.size(), pb.size()); ++i) {
    const std::string x = i < pa.size() ? pa[i] : "0", y = i < pb.size() ? pb[i] : "0";
    if (all_digits(x) && all_digits(y)) {
      // Compare as numbers without overflow: strip leading zeros, then longer is larger.
      const std::string sx = x.substr(std::min(x.find_first_not_of('0'), x.size()));
      const std::string sy = y.substr(std::min(y.find_first_not_of('0'), y.size()));
      if (sx.size() != sy.size()) return sx.size() < sy.size() ? -1 : 1;
      if (const int c = sx.compare(sy)) return c < 0 ? -1 : 1;
    } else if (const int c = x.compare(y)) {
      return c < 0 ? -1 : 1;
    }
  }
  return 0;
}

PluginRegistry& PluginRegistry::global() {
  static PluginRegistry* registry = [] {
    auto* r = new PluginRegistry();  // never destroyed: creators of loaded libraries outlive static destruction order
    const Status st = register_builtin_plugins(*r);
    // Only a broken built-in table can fail here (a unit test guards it); say so rather than hide it.
    if (!st.ok()) log_error("built-in plugins: " + st.message());
    return r;
  }();
  return *registry;
}

std::string PluginRegistry::canonical_library_path(const std::string& path) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(path, ec);
  if (ec) return path;
  auto canon = std::filesystem::weakly_canonical(abs, ec);
  return ec ? abs.lexically_normal().string() : canon.string();
}

Status PluginRegistry::add(const PluginCreator* creator, const std::string& library) {
  std::lock_guard<std::mutex> lock(mu_);
  return add_locked(creator, library);
}

Status PluginRegistry::add_locked(const PluginCreator* creator, const std::string& library) {
  if (!creator) return InvalidArgument("plugin library '" + library + "' has a null plugin creator");
  auto e = std::make_unique<PluginEntry>();
  e->creator = creator;
  e->plugin_namespace = str_or(creator->plugin_namespace());
  e->name = str_or(creator->name());
  e->version = str_or(creator->version());
  e->library = library;
  if (e->name.empty() || e->version.empty())
    return InvalidArgument("plugin library '" + library + "' has a creator with an empty name or version ('" + e->id() + "')");
  for (const auto& other : entries_)
    if (other->plugin_namespace == e->plugin_namespace && other->name == e->name && other->version == e->version)
      return InvalidArgument("plugin '" + e->id() + "' from '" + library + "' is already registered by '" + other->library + "'");
  entries_.push_back(std::move(e));
  return Status::Ok();
}

const PluginEntry* PluginRegistry::find(const std::string& plugin_namespace, const std::string& name, const std::string& version) const {
  std::lock_guard<std::mutex> lock(mu_);
  const PluginEntry* best = nullptr;
  for (const auto& e : entries_) {
    if (e->plugin_namespace != plugin_namespace || e->name != name) continue;
    if (!version.empty()) {
      if (e->version == version) return e.get();
    } else if (!best || compare_plugin_versions(e->version, best->version) > 0) {
      best = e.get();
    }
  }
  return best;
}

Status PluginRegistry::load_library(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return load_locked(path, nullptr);
}

Status PluginRegistry::load_locked(const std::string& path, const PluginLibraryInfo* expect) {
  const std::string lib = canonical_library_path(path);
  auto fail = [&](const std::string& what) { return InvalidArgument("cannot load plugin library '" + lib + "': " + what); };
  for (const auto& l : libraries_)
    if (l.path == lib) return Status::Ok();
  void* handle = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return fail(str_or(::dlerror()));
  // Nothing of a rejected library may stay registered or mapped.
  auto reject = [&](const std::string& what) {
    ::dlclose(handle);
    return fail(what);
  };
  ::dlerror();
  auto entry = reinterpret_cast<KilnPluginLibraryEntry>(::dlsym(handle, KILN_PLUGIN_LIBRARY_ENTRY));
  if (!entry) {
    const std::string err = str_or(::dlerror());
    return reject("it does not export " KILN_PLUGIN_LIBRARY_ENTRY "()" + (err.empty() ? "" : " (" + err + ")"));
  }
  const KilnPluginLibrary* table = nullptr;
  try {
    table = entry();
  } catch (const std::exception& ex) {
    return reject(KILN_PLUGIN_LIBRARY_ENTRY "() threw: " + std::string(ex.what()));
  } catch (...) {
    return reject(KILN_PLUGIN_LIBRARY_ENTRY "() threw an unknown exception");
  }
  if (table && table->api_version == kKilnPluginApiVersion) {
    const std::string name = str_or(table->library_name), version = str_or(table->library_version);
    if (name.empty() || version.empty()) return reject("its table has an empty library_name or library_version");
    for (const auto& l : libraries_)
      if (l.name == name) return reject("a library named '" + name + "' is already loaded from '" + l.path + "'");
    if (expect && (name != expect->name || version != expect->version))
      return reject("it is '" + name + "' version " + version + ", not '" + expect->name + "' version " + expect->version);
  }
  Status st = add_table_locked(table, lib);
  if (!st.ok()) return reject(st.message());
  libraries_.push_back({lib, str_or(table->library_name), str_or(table->library_version)});
  return Status::Ok();
}

StatusOr<PluginLibraryInfo> PluginRegistry::library_info(const std::string& path) const {
  const std::string lib = canonical_library_path(path);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& l : libraries_)
    if (l.path == lib) {
      PluginLibraryInfo info;
      info.name = l.name;
      info.version = l.version;
      info.file_name = std::filesystem::path(l.path).filename().string();
      info.built_from = l.path;
      for (const auto& e : entries_)
        if (e->library == l.path) info.plugins.push_back(e->id());
      return info;
    }
  return NotFound("plugin library '" + lib + "' is not loaded");
}

Status PluginRegistry::require_library(const PluginLibraryInfo& lib, const std::vector<std::string>& search_dirs) {
  const std::string what = "plugin library '" + lib.name + "' version " + lib.version + " (" + lib.file_name + ")";
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& l : libraries_)
    if (l.name == lib.name) {
      if (l.version == lib.version) return Status::Ok();
      return FailedPrecondition(what + " is needed, but version " + l.version + " is already loaded from '" + l.path + "'");
    }
  // Only a plain file name is searched for: a recorded name with a folder in it never escapes the search path.
  if (lib.file_name.empty() || lib.file_name.find('/') != std::string::npos || lib.file_name == "." || lib.file_name == "..")
    return InvalidArgument(what + ": the engine records an invalid file name");
  std::string searched, rejected;
  for (const auto& dir : search_dirs) {
    if (dir.empty()) continue;
    searched += (searched.empty() ? "" : ", ") + dir;
    const std::filesystem::path candidate = std::filesystem::path(dir) / lib.file_name;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(candidate, ec)) continue;
    Status st = load_locked(candidate.string(), &lib);
    if (st.ok()) return st;
    rejected += "; " + st.message();
  }
  return NotFound(what + " was not found on the plugin search path (" + (searched.empty() ? "empty" : searched) +
                  "; add folders with KILN_PLUGIN_PATH or the API's plugin search path); it was built from '" + lib.built_from + "'" +
                  rejected);
}

Status PluginRegistry::add_table_locked(const KilnPluginLibrary* table, const std::string& library) {
  if (!table) return InvalidArgument(KILN_PLUGIN_LIBRARY_ENTRY "() returned null");
  if (table->api_version != kKilnPluginApiVersion)
    return InvalidArgument("it was built against plugin API version " + std::to_string(table->api_version) +
                           " but this kiln implements version " + std::to_string(kKilnPluginApiVersion) +
                           "; rebuild the library against this kiln's plugins/plugin_api.h");
  if (table->num_creators > 0 && !table->creators) return InvalidArgument("its creator table is null");
  // Validate the whole table before registering any of it, so a failure leaves the registry as it was.
  const size_t before = entries_.size();
  for (uint32_t i = 0; i < table->num_creators; ++i) {
    Status st = add_locked(table->creators[i], library);
    if (!st.ok()) {
      entries_.resize(before);
      return st;
    }
  }
  return Status::Ok();
}

Status register_builtin_plugins(PluginRegistry& registry) {
  std::lock_guard<std::mutex> lock(registry.mu_);
  return registry.add_table_locked(kiln_builtin_plugin_library(), "builtin");
}

std::vector<std::string> PluginRegistry::loaded_libraries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> paths;
  for (const auto& l : libraries_) paths.push_back(l.path);
  return paths;
}

std::vector<std::string> PluginRegistry::plugin_ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> ids;
  for (const auto& e : entries_) ids.push_back(e->id());
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace kiln
