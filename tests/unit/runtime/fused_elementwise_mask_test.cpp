// FusedElementwise (runtime/kernels/fused_elementwise_kernels.cpp) on the unfused attention's mask
// step: scores / scale, then Where(mask, fill, scaled) with a bool mask broadcast over the heads,
// against the scalar formula. Rows that fill no vector and span several 512-element blocks; mask
// bytes other than 0 and 1 read as true; the result computed straight into the output and a
// program whose last value is a broadcast constant (filled, not copied).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/tensor.h"

namespace kiln {
namespace {

Tensor run_fused(const std::vector<int64_t>& program, const std::vector<float>& imm, const std::vector<Tensor>& inputs) {
  KernelArgs args;
  args.op_type = "FusedElementwise";
  args.node_name = "mask_test";
  args.num_inputs = static_cast<int>(inputs.size());
  args.num_outputs = 1;
  AttrMap attrs;
  attrs["program"] = Attribute::Ints(program);
  attrs["immediates"] = Attribute::Floats(imm);
  auto k = KernelRegistry::builtin().create(args, attrs);
  EXPECT_TRUE(k.ok()) << k.status().message();
  if (!k.ok()) return {};
  std::vector<TensorView> in;
  for (const Tensor& t : inputs) in.push_back(t.view());
  std::vector<TensorDesc> desc(1);
  EXPECT_TRUE((*k)->infer(in, desc).ok());
  Tensor y = Tensor::zeros(DType::kFloat32, desc[0].shape);
  const TensorView ov = y.view();
  EXPECT_TRUE((*k)->prepare(in, {&ov, 1}).ok());
  const Status s = (*k)->run(in, {&ov, 1});
  EXPECT_TRUE(s.ok()) << s.message();
  return y;
}

TEST(FusedElementwiseMask, ScaleThenWhereOverABroadcastBoolMask) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (auto [heads, rows, cols] : {std::tuple<int64_t, int64_t, int64_t>{2, 3, 37}, {3, 5, 1100}, {1, 2, 8}, {2, 1, 1}}) {
    Tensor x = Tensor::zeros(DType::kFloat32, Shape{1, heads, rows, cols});
    for (int64_t i = 0; i < x.numel(); ++i) x.as<float>()[i] = u(rng);
    Tensor mask = Tensor::zeros(DType::kBool, Shape{rows, cols});
    uint8_t* mb = reinterpret_cast<uint8_t*>(mask.as<bool>());
    // Mostly 0 / 1, some other nonzero bytes (true to C++ and to the vector conversion alike).
    for (int64_t i = 0; i < mask.numel(); ++i) mb[i] = i % 7 == 3 ? static_cast<uint8_t>(2 + i % 200) : static_cast<uint8_t>((i * 2654435761u >> 9) & 1);
    // r4 = x / 8 (vec::Binary kDiv = 3); r5 = mask ? -inf : r4.
    const Tensor y = run_fused({100 + 3, 4, 0, 2, -1, 200, 5, 1, 3, 4}, {8.0f, -INFINITY}, {x, mask});
    ASSERT_EQ(y.shape(), x.shape());
    for (int64_t i = 0; i < y.numel(); ++i) {
      const int64_t m = i % (rows * cols);
      const float want = mb[m] != 0 ? -INFINITY : x.as<float>()[i] / 8.0f;
      ASSERT_EQ(y.as<float>()[i], want) << "shape " << x.shape().str() << " element " << i;
    }
    // The last value a constant along every block (mask ? 1 : 2 with a mask of one element).
    Tensor one = Tensor::zeros(DType::kBool, Shape{1});
    reinterpret_cast<uint8_t*>(one.as<bool>())[0] = 1;
    const Tensor c = run_fused({100 + 0, 4, 0, 2, -1, 200, 5, 1, 2, 3}, {1.0f, 2.0f}, {x, one});
    for (int64_t i = 0; i < c.numel(); ++i) ASSERT_EQ(c.as<float>()[i], 1.0f) << i;
  }
}

}  // namespace
}  // namespace kiln
