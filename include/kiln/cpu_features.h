// kiln's one CPU-feature detector: what the host can run, read once, capped by an ISA limit so a
// machine with AMX can test the paths other CPUs take.
//
// KILN_MAX_CPU_ISA (or, when it is unset, oneDNN's DNNL_MAX_CPU_ISA, so one variable caps both)
// takes oneDNN's names: avx2, avx512_core, avx512_core_vnni, avx512_core_bf16, avx512_core_amx
// (case-insensitive; "all" or unset = no cap). A value kiln does not know is ignored with the cap
// off, as oneDNN does.
//
// Header-only: kernels, the engine loader and plugins (through plugins/plugin_api.h) all ask the
// same question the same way, and an external plugin library needs no kiln symbol to do so.
#pragma once

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <string>

namespace kiln {

// ISA levels in oneDNN's order; each includes the ones before it.
enum class CpuIsa { kAvx2 = 0, kAvx512Core, kAvx512CoreVnni, kAvx512CoreBf16, kAvx512CoreAmx, kAll };

struct CpuInfo {
  bool avx2 = false;         // AVX2 + FMA (kiln's baseline: the runtime is built for x86-64-v3)
  bool avx512 = false;       // AVX-512 F, BW, DQ, VL (oneDNN's avx512_core)
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool amx_bf16 = false;     // AMX-TILE + AMX-BF16, with Linux's permission to use the tile state
  bool amx_int8 = false;     // AMX-TILE + AMX-INT8, likewise
  CpuIsa cap = CpuIsa::kAll; // the cap that was applied
};

namespace cpu_detail {

inline CpuIsa parse_isa_cap() {
  const char* v = std::getenv("KILN_MAX_CPU_ISA");
  if (!v || !*v) v = std::getenv("DNNL_MAX_CPU_ISA");
  if (!v || !*v) return CpuIsa::kAll;
  std::string s(v);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "avx2" || s == "avx2_vnni" || s == "avx2_vnni_2") return CpuIsa::kAvx2;
  if (s == "avx512_core") return CpuIsa::kAvx512Core;
  if (s == "avx512_core_vnni") return CpuIsa::kAvx512CoreVnni;
  if (s == "avx512_core_bf16" || s == "avx512_core_fp16") return CpuIsa::kAvx512CoreBf16;
  if (s == "avx512_core_amx" || s == "avx512_core_amx_fp16" || s == "avx10_1_512_amx" || s == "avx10_1_512_amx_fp16")
    return CpuIsa::kAvx512CoreAmx;
  return CpuIsa::kAll;
}

// Linux gives a process the AMX tile data state only once it asks (arch_prctl ARCH_REQ_XCOMP_PERM).
inline bool request_amx_permission() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

inline CpuInfo detect() {
  CpuInfo c;
  __builtin_cpu_init();
  c.cap = parse_isa_cap();
  const auto allowed = [&](CpuIsa level) { return static_cast<int>(level) <= static_cast<int>(c.cap); };
  c.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  c.avx512 = c.avx2 && allowed(CpuIsa::kAvx512Core) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  c.avx512_vnni = c.avx512 && allowed(CpuIsa::kAvx512CoreVnni) && __builtin_cpu_supports("avx512vnni");
  c.avx512_bf16 = c.avx512 && allowed(CpuIsa::kAvx512CoreBf16) && __builtin_cpu_supports("avx512bf16");
  unsigned a = 0, b = 0, ecx = 0, edx = 0;
  if (c.avx512_bf16 && allowed(CpuIsa::kAvx512CoreAmx) && __get_cpuid_count(7, 0, &a, &b, &ecx, &edx)) {
    const bool tile = edx & (1u << 24), bf16 = edx & (1u << 22), int8 = edx & (1u << 25);
    if (tile && (bf16 || int8) && request_amx_permission()) {
      c.amx_bf16 = bf16;
      c.amx_int8 = int8;
    }
  }
  return c;
}

}  // namespace cpu_detail

// The host's features under the cap; detected on first use, then constant for the process.
inline const CpuInfo& cpu_info() {
  static const CpuInfo info = cpu_detail::detect();
  return info;
}

inline const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512Core: return "avx512_core";
    case CpuIsa::kAvx512CoreVnni: return "avx512_core_vnni";
    case CpuIsa::kAvx512CoreBf16: return "avx512_core_bf16";
    case CpuIsa::kAvx512CoreAmx: return "avx512_core_amx";
    case CpuIsa::kAll: return "all";
  }
  return "all";
}

}  // namespace kiln
