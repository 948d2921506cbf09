// The AVX-512 build of runtime/kernels/vec_kernels.inc. Chosen at run time, so everything here is
// compiled for AVX-512 through a target pragma and has internal linkage except the one accessor.
#include "runtime/simd/vec_avx512.h"

#include "runtime/kernels/vec_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
// Clang ignores GCC's target pragma; its own attribute pragma does the same.
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))), apply_to = function)
#endif
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
// An internal lambda returning a vector: no ABI is shared with code built without AVX-512.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kiln::vec {
namespace {
using namespace kiln::simd::avx512;
#include "runtime/kernels/vec_kernels.inc"
}  // namespace

Table make_avx512_table() { return make_table("avx512"); }

}  // namespace kiln::vec

#pragma GCC diagnostic pop
#ifdef __clang__
#pragma clang attribute pop
#endif
#pragma GCC pop_options
