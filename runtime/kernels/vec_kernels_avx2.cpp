// The AVX2 build of runtime/kernels/vec_kernels.inc (kiln's baseline ISA), and the run-time choice
// between it and the AVX-512 build.
#include <cstdlib>
#include <cstring>

#include "runtime/cpu_features.h"
#include "runtime/simd/vec_avx2.h"

#include "runtime/kernels/vec_kernels.h"

namespace kiln::vec {
namespace {
using namespace kiln::simd::avx2;
#include "runtime/kernels/vec_kernels.inc"

// kiln's one CPU-feature detector (capped by KILN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA like the rest).
bool cpu_has_avx512() { return cpu_info().avx512; }
}  // namespace

Table make_avx512_table();  // vec_kernels_avx512.cpp

const Table& avx2_table() {
  static const Table t = make_table("avx2");
  return t;
}

const Table* avx512_table() {
  // Built only on a CPU that has AVX-512: make_avx512_table itself is AVX-512 code.
  static const Table* t = cpu_has_avx512() ? new Table(make_avx512_table()) : nullptr;
  return t;
}

const Table& table() {
  static const Table* chosen = [] {
    const char* pin = std::getenv("KILN_SIMD");
    const Table* t512 = avx512_table();
    if (t512 && !(pin && std::strcmp(pin, "avx2") == 0)) return t512;
    return &avx2_table();
  }();
  return *chosen;
}

}  // namespace kiln::vec
