// libFuzzer target: the YAML build config (builder/build_config.cpp), text to BuildConfig,
// including the --set override path.
#include "builder/build_config.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::cap_memory();
  const std::string text(reinterpret_cast<const char*>(data), size);
  // The part after a 0 byte, if any, is a --set KEY=VALUE override.
  const size_t nul = text.find('\0');
  std::vector<std::pair<std::string, std::string>> overrides;
  std::string yaml = text;
  if (nul != std::string::npos) {
    yaml = text.substr(0, nul);
    const std::string kv = text.substr(nul + 1);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos && eq > 0) overrides.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  auto cfg = kiln::parse_build_config(yaml, "/nonexistent/fuzz.yaml", overrides);
  (void)cfg;
  return 0;
}
