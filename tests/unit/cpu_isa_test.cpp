// KILN_MAX_CPU_ISA: parsing, and what the cap hides from engine builds and kernels.
#include <gtest/gtest.h>

#include "runtime/cpu_isa.h"
#include "runtime/engine_format.h"
#include "runtime/kernels/panel_gemm.h"

namespace kiln {
namespace {

TEST(CpuIsa, ParsesOneDnnNamesCaseInsensitively) {
  EXPECT_EQ(parse_cpu_isa("avx2").value(), CpuIsa::kAvx2);
  EXPECT_EQ(parse_cpu_isa("AVX512_CORE").value(), CpuIsa::kAvx512Core);
  EXPECT_EQ(parse_cpu_isa("avx512_core_bf16").value(), CpuIsa::kAvx512CoreBf16);
  EXPECT_EQ(parse_cpu_isa("Avx512_Core_Amx").value(), CpuIsa::kAvx512CoreAmx);
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512Core, CpuIsa::kAvx512CoreBf16, CpuIsa::kAvx512CoreAmx})
    EXPECT_EQ(parse_cpu_isa(cpu_isa_name(isa)).value(), isa);
  auto bad = parse_cpu_isa("avx512");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("KILN_MAX_CPU_ISA='avx512'"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("avx512_core_bf16"), std::string::npos);
}

TEST(CpuIsa, CapHidesFeaturesFromBuildsAndKernels) {
  const uint64_t all = host_cpu_features();
  const CpuIsa old = set_max_cpu_isa_for_testing(CpuIsa::kAvx512Core);
  EXPECT_EQ(host_cpu_features() & kCpuAvx512Bf16, 0u);
  EXPECT_EQ(host_cpu_features() & kCpuAvx512f, all & kCpuAvx512f);
  EXPECT_EQ(panel_gemm::supported(), (all & kCpuAvx512f) != 0);
  set_max_cpu_isa_for_testing(CpuIsa::kAvx2);
  EXPECT_EQ(host_cpu_features() & (kCpuAvx512f | kCpuAvx512Bf16), 0u);
  EXPECT_EQ(host_cpu_features() & kCpuAvx2, all & kCpuAvx2);
  EXPECT_FALSE(panel_gemm::supported());
  set_max_cpu_isa_for_testing(old);
  EXPECT_EQ(host_cpu_features(), all);
}

}  // namespace
}  // namespace kiln
