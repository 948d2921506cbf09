// The process-wide plugin registry: built-in plugins (plugins/builtin_plugins.cpp) and those of
// external libraries loaded with dlopen. Thread-safe. Creators are never removed and libraries are
// never unloaded, so a creator pointer handed out stays valid for the life of the process.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/engine_info.h"
#include "kiln/plugin_api.h"

namespace kiln {

struct PluginEntry {
  const PluginCreator* creator = nullptr;
  std::string plugin_namespace, name, version;
  std::string library;  // absolute path of the library, or "builtin"

  std::string id() const { return plugin_namespace + "::" + name + "@" + version; }
};

class PluginRegistry {
 public:
  // The registry the builder and runtime use; the built-in plugins are registered on first use.
  static PluginRegistry& global();

  // Registers a creator (not owned: it must outlive the registry). A creator whose
  // namespace::name@version is already registered is an error naming both libraries.
  Status add(const PluginCreator* creator, const std::string& library);

  // The creator of namespace::name at `version`; an empty version means the highest registered
  // (versions compare numerically part by part: "10" > "9", "1.2" > "1.1"). nullptr if absent.
  const PluginEntry* find(const std::string& plugin_namespace, const std::string& name, const std::string& version = {}) const;

  // dlopens a plugin library and registers its creators. Loading an already loaded path (after
  // resolving it to an absolute, canonical path) is a no-op. Errors are one line naming the path.
  // The registry lock is held meanwhile: a library's static initializers must not call into it
  // (registration goes through the returned table only).
  Status load_library(const std::string& path);

  // What an engine records of a loaded library (name, version, file name, path), by its path.
  StatusOr<PluginLibraryInfo> library_info(const std::string& path) const;

  // Makes the library an engine recorded available: nothing to do when a library of that name and
  // version is loaded (an error when another version is); otherwise `lib.file_name` is looked for in
  // `search_dirs`, in order, and the first file whose table has the recorded name and version is
  // loaded. No other file is ever dlopened. Errors are one line naming the library, its version,
  // the folders searched and the path it was built with.
  Status require_library(const PluginLibraryInfo& lib, const std::vector<std::string>& search_dirs);

  // Absolute paths of the libraries loaded so far, in load order.
  std::vector<std::string> loaded_libraries() const;
  // Every registered plugin, as namespace::name@version, sorted.
  std::vector<std::string> plugin_ids() const;

  // Canonical form of a library path (absolute; symlinks resolved when the file exists): the
  // identity of a library in the registry and in engine files.
  static std::string canonical_library_path(const std::string& path);

 private:
  friend Status register_builtin_plugins(PluginRegistry& registry);
  Status add_locked(const PluginCreator* creator, const std::string& library);
  // Registers a library's table (API version checked, all or nothing); errors name no library.
  Status add_table_locked(const KilnPluginLibrary* table, const std::string& library);
  // load_library's work; with `expect`, a table of another name or version is rejected (unloaded).
  Status load_locked(const std::string& path, const PluginLibraryInfo* expect);

  struct Library {
    std::string path, name, version;
  };
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<PluginEntry>> entries_;  // stable addresses
  std::vector<Library> libraries_;
};

// Compares plugin versions: numeric parts numerically, others lexicographically. <0, 0, >0.
int compare_plugin_versions(const std::string& a, const std::string& b);

// Registers every built-in plugin from the table in plugins/builtin_plugins.cpp.
Status register_builtin_plugins(PluginRegistry& registry);

}  // namespace kiln

// The built-in plugins' table, defined by libkiln_plugins (plugins/builtin_plugins.cpp), which is
// linked into the runtime: declared here rather than included so the runtime sees nothing of
// plugins/ but the plugin API.
extern "C" const KilnPluginLibrary* kiln_builtin_plugin_library();
