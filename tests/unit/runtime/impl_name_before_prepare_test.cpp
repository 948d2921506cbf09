// A kernel's impl_name() before prepare() is the impl it was made as: `engine-run --inspect` lists
// the kernels of a fresh context, and reported GlobalAveragePool's "vectorized" and StridedMatMul's
// "panel" (the recorded tactic choices) as "reference" before their prepare() had run.
#include <gtest/gtest.h>

#include "runtime/kernel.h"
#include "runtime/kernel_runner.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::make_kernel;
using testing::random_f32;

TEST(ImplNameBeforePrepare, GlobalAveragePoolVectorized) {
  auto k = make_kernel("GlobalAveragePool", {}, 1, "vectorized");
  ASSERT_TRUE(k);
  EXPECT_STREQ(k->impl_name(), "vectorized");
  const Tensor x = random_f32(Shape{1, 3, 5, 4}, 31);
  const TensorView v[] = {x.view()};
  ASSERT_TRUE(run_kernel_once(*k, v, 1).ok());
  EXPECT_STREQ(k->impl_name(), "vectorized");
}

TEST(ImplNameBeforePrepare, StridedMatMulPanel) {
  auto k = make_kernel("StridedMatMul", {}, 2, "panel");
  ASSERT_TRUE(k);
  EXPECT_STREQ(k->impl_name(), "panel");
  auto ref = make_kernel("StridedMatMul", {}, 2, "reference");
  ASSERT_TRUE(ref);
  EXPECT_STREQ(ref->impl_name(), "reference");
}

}  // namespace
}  // namespace kiln
