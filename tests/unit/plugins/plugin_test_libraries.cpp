// Tiny shared libraries for the plugin loader tests, one per compile definition:
//   KILN_TEST_BAD_API_VERSION: a table stamped with API version 999;
//   KILN_TEST_THROWING_ENTRY: an entry point that throws.
#include <stdexcept>

#include "plugins/plugin_api.h"

extern "C" const KilnPluginLibrary* kiln_plugin_library() {
#if defined(KILN_TEST_BAD_API_VERSION)
  static const KilnPluginLibrary library = {999, "bad api version", 0, nullptr};
  return &library;
#elif defined(KILN_TEST_THROWING_ENTRY)
  throw std::runtime_error("boom from the entry point");
#else
#error "define KILN_TEST_BAD_API_VERSION or KILN_TEST_THROWING_ENTRY"
#endif
}
