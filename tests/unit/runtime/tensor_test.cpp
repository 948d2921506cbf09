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

// Large buffers are 2 MiB aligned (so they can be backed by huge pages) and zeroed to the end of
// the rounded size; small ones keep the tensor alignment.
TEST(AlignedAlloc, LargeBuffersAreHugePageAligned) {
  constexpr size_t kHugePage = size_t{2} << 20;
  for (size_t bytes : {kHugePage, kHugePage + 4, 3 * kHugePage + 100}) {
    auto p = aligned_alloc_shared(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % kHugePage, 0u) << bytes;
    const auto* b = static_cast<const unsigned char*>(p.get());
    EXPECT_EQ(b[0], 0);
    EXPECT_EQ(b[bytes - 1], 0);
  }
  auto small = aligned_alloc_shared(1000);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.get()) % kTensorAlignment, 0u);
  Tensor t = Tensor::zeros(DType::kFloat32, Shape{1024, 1024});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % kHugePage, 0u);
}

}  // namespace kiln
