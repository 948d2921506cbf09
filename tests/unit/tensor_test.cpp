#include <gtest/gtest.h>

#include "runtime/kernels/kernel_util.h"
#include "runtime/tensor.h"

namespace kiln {

TEST(Shape, NumelAndStrides) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(contiguous_strides(s), (Shape{12, 4, 1}));
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ((Shape{3, 0, 2}).numel(), 0);
}

TEST(Broadcast, Shapes) {
  auto r = broadcast_shapes(Shape{2, 1, 4}, Shape{3, 1});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (Shape{2, 3, 4}));
  EXPECT_FALSE(broadcast_shapes(Shape{2, 3}, Shape{4}).ok());
}

TEST(DType, HalfRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1e-5f, 1e-7f}) {
    float back = half_to_float(float_to_half(f));
    EXPECT_NEAR(back, f, std::abs(f) * 1e-3 + 6e-8) << f;
  }
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.5f)), 1.5f);
}

}  // namespace kiln
