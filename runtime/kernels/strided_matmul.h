// StridedMatMul's geometry (runtime/kernels/strided_matmul_kernels.cpp), shared by its impls.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/kernel.h"

namespace kiln {

// Element offsets of every product (the output's batch index in C order) and the strides inside
// one, for operands and output stored densely; a broadcast batch dim has offset step 0.
struct StridedDims {
  int64_t M = 0, K = 0, N = 0;
  int64_t a_m = 0, a_k = 0, b_k = 0, b_n = 0, y_m = 0, y_n = 0;  // strides inside a product
  std::vector<int64_t> a_off, b_off, y_off;                     // per product
  Shape batch;                                                  // the output's batch dims
  std::vector<int64_t> a_batch, b_batch, y_batch;               // their strides (0: broadcast)
};

// Validates the perms (empty: identity) against the stored shapes `as` and `bs`; sets the output
// shape `y` and the geometry `d` (either may be null).
Status strided_matmul_dims(const Shape& as, const Shape& bs, const std::vector<int64_t>& perm_a, const std::vector<int64_t>& perm_b,
                           const std::vector<int64_t>& perm_y, Shape* y, StridedDims* d);

StatusOr<std::unique_ptr<Kernel>> make_reference_strided_matmul(const KernelArgs& args, AttrReader& attrs);

}  // namespace kiln
