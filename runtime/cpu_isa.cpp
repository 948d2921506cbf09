#include "runtime/cpu_isa.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>

namespace kiln {
namespace {

constexpr const char* kNames[] = {"avx2", "avx512_core", "avx512_core_bf16", "avx512_core_amx"};

StatusOr<CpuIsa> env_cap() {
  const char* v = std::getenv("KILN_MAX_CPU_ISA");
  if (!v || !*v) return CpuIsa::kAvx512CoreAmx;
  return parse_cpu_isa(v);
}

std::atomic<int>& cap() {
  static std::atomic<int> c{[] {
    const StatusOr<CpuIsa> isa = env_cap();
    return static_cast<int>(isa.ok() ? isa.value() : CpuIsa::kAvx512CoreAmx);
  }()};
  return c;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) { return kNames[static_cast<int>(isa)]; }

StatusOr<CpuIsa> parse_cpu_isa(const std::string& value) {
  std::string v = value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (int i = 0; i < 4; ++i)
    if (v == kNames[i]) return static_cast<CpuIsa>(i);
  return InvalidArgument("KILN_MAX_CPU_ISA='" + value + "' is not one of avx2, avx512_core, avx512_core_bf16, avx512_core_amx");
}

CpuIsa max_cpu_isa() { return static_cast<CpuIsa>(cap().load(std::memory_order_relaxed)); }

Status check_max_cpu_isa_env() { return env_cap().status(); }

CpuIsa set_max_cpu_isa_for_testing(CpuIsa isa) { return static_cast<CpuIsa>(cap().exchange(static_cast<int>(isa))); }

}  // namespace kiln
