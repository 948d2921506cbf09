#include "runtime/engine_format.h"

#include <cstring>

#include "runtime/cpu_features.h"

namespace kiln {

uint64_t checksum64(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t lane[4] = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL, 0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL};
  size_t i = 0;
  // Four independent lanes so the multiply latency does not serialize the loop.
  for (; i + 32 <= n; i += 32) {
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * l, 8);
      lane[l] = (lane[l] ^ w) * kPrime;
      lane[l] ^= lane[l] >> 29;
    }
  }
  uint64_t h = lane[0] ^ (lane[1] * 3) ^ (lane[2] * 5) ^ (lane[3] * 7) ^ n;
  for (; i < n; ++i) h = (h ^ p[i]) * kPrime;
  h ^= h >> 31;
  return h;
}

uint64_t host_cpu_features() {
  const CpuInfo& cpu = cpu_info();
  uint64_t f = 0;
  if (cpu.avx2) f |= kCpuAvx2 | kCpuFma;
  if (cpu.avx512) f |= kCpuAvx512f;
  if (cpu.avx512_bf16) f |= kCpuAvx512Bf16;
  return f;
}

std::string cpu_feature_names(uint64_t features) {
  static const std::pair<uint64_t, const char*> names[] = {
      {kCpuAvx2, "avx2"}, {kCpuFma, "fma"}, {kCpuAvx512f, "avx512f"}, {kCpuAvx512Bf16, "avx512_bf16"}};
  std::string s;
  for (const auto& [bit, name] : names)
    if (features & bit) s += (s.empty() ? "" : ", ") + std::string(name);
  if (features & ~uint64_t{0xf}) s += (s.empty() ? "" : ", ") + std::string("unknown feature bits");
  return s.empty() ? "none" : s;
}

}  // namespace kiln
