// KILN_MAX_CPU_ISA: a cap on the instruction sets kiln's own kernels use, so one machine can run
// and test the paths of smaller CPUs (an AMX Xeon the AVX512_BF16-only path an AMD EPYC takes, an
// AVX-512 CPU the AVX2 path). Values, from smallest to largest (oneDNN's names):
//
//   avx2 | avx512_core | avx512_core_bf16 | avx512_core_amx   (case-insensitive; unset = no cap)
//
// Read once, at the first query. It caps kiln's kernels (attention, the panel GEMM) and the CPU
// features an engine build sees (so `precision: bf16` under `avx512_core` builds fp32, as on a CPU
// without AVX512_BF16). When DNNL_MAX_CPU_ISA is not set, kiln passes the same cap to oneDNN
// before its first primitive; when it is, oneDNN follows its own variable.
#pragma once

#include <string>

#include "runtime/status.h"

namespace kiln {

enum class CpuIsa { kAvx2 = 0, kAvx512Core = 1, kAvx512CoreBf16 = 2, kAvx512CoreAmx = 3 };

const char* cpu_isa_name(CpuIsa isa);
// Parses a KILN_MAX_CPU_ISA value; the error names the variable, the value and the choices.
StatusOr<CpuIsa> parse_cpu_isa(const std::string& value);

// The cap (kAvx512CoreAmx when KILN_MAX_CPU_ISA is unset or invalid).
CpuIsa max_cpu_isa();
// Whether kernels may use `isa` (the CPU must still have it: this only caps).
inline bool cpu_isa_allowed(CpuIsa isa) { return static_cast<int>(isa) <= static_cast<int>(max_cpu_isa()); }
// The environment's KILN_MAX_CPU_ISA is valid (or unset). Tools call it first and exit with its
// message; kernels treat an invalid value as unset.
Status check_max_cpu_isa_env();

// For tests: replaces the cap and returns the previous one (pass it back to restore).
CpuIsa set_max_cpu_isa_for_testing(CpuIsa isa);

}  // namespace kiln
