// Tiny shared libraries for the plugin loader tests, one per compile definition:
//   KILN_TEST_BAD_API_VERSION: a table stamped with API version 999;
//   KILN_TEST_THROWING_ENTRY: an entry point that throws;
//   KILN_TEST_WRONG_VERSION: the example library's name at version 2.0 (no creators).
#include <stdexcept>

#include "plugins/plugin_api.h"

KILN_PLUGIN_EXPORT const KilnPluginLibrary* kiln_plugin_library() {
#if defined(KILN_TEST_BAD_API_VERSION)
  static const KilnPluginLibrary library = {999, "bad api version", 0, nullptr, "1"};
  return &library;
#elif defined(KILN_TEST_WRONG_VERSION)
  static const KilnPluginLibrary library = {kiln::kKilnPluginApiVersion, "kiln example plugins", 0, nullptr, "2.0"};
  return &library;
#elif defined(KILN_TEST_THROWING_ENTRY)
  throw std::runtime_error("boom from the entry point");
#else
#error "define KILN_TEST_BAD_API_VERSION, KILN_TEST_WRONG_VERSION or KILN_TEST_THROWING_ENTRY"
#endif
}
