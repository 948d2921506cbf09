// libFuzzer target: the engine loader. Bytes -> load from memory -> validate -> a context per
// profile, run at the profile's min shapes on zero inputs. Engines carry checksums that almost
// every mutation breaks, so when the first byte is odd the harness recomputes them after
// mutation (the rest of the input is the engine): the fuzzer then reaches the metadata parser,
// the plan validation and the kernels' checks, as a crafted file would.
#include <cstring>

#include "runtime/engine.h"
#include "runtime/engine_format.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

void fix_checksums(std::string& bytes) {
  if (bytes.size() < sizeof(kiln::EngineHeader)) return;
  kiln::EngineHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  auto in = [&](uint64_t off, uint64_t len) { return off <= bytes.size() && len <= bytes.size() - off; };
  if (in(h.metadata_offset, h.metadata_size)) h.metadata_checksum = kiln::checksum64(bytes.data() + h.metadata_offset, h.metadata_size);
  if (in(h.weights_offset, h.weights_size)) h.weights_checksum = kiln::checksum64(bytes.data() + h.weights_offset, h.weights_size);
  h.file_size = bytes.size();
  std::memcpy(bytes.data(), &h, sizeof h);
  h.header_checksum = kiln::checksum64(bytes.data(), offsetof(kiln::EngineHeader, header_checksum));
  std::memcpy(bytes.data(), &h, sizeof h);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::cap_memory();
  if (size < 1) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) fix_checksums(bytes);
  kiln::LoadOptions options;
  options.prefault = false;
  auto engine = kiln::Engine::load_memory(bytes.data(), bytes.size(), "fuzz", options);
  if (!engine.ok()) return 0;
  for (const auto& p : (*engine)->profiles()) {
    auto ctx = (*engine)->create_context(p.name);
    if (!ctx.ok()) continue;
    std::vector<kiln::Tensor> inputs;
    bool bound = true;
    for (const auto& b : p.inputs) {
      auto t = kiln::Tensor::try_zeros(b.dtype, b.min, "fuzz input");
      if (!t.ok()) {
        bound = false;
        break;
      }
      inputs.push_back(std::move(t).value());
      if (!(*ctx)->set_input(b.name, inputs.back().view()).ok()) bound = false;
    }
    if (bound) (void)(*ctx)->run();
  }
  return 0;
}
