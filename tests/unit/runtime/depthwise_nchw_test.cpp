// FusedConv impl "depthwise_nchw" (runtime/kernels/depthwise_nchw_kernels.cpp) against the
// reference FusedConv: depthwise convolutions of NCHW planes at every width 1..17 (partial last
// vectors, rows narrower than a vector), heights that leave 1..3 rows after the 4-row blocks,
// strides 1 and 2 (and the generic path: stride 3, a 3x2 kernel, 7x7, mixed strides), symmetric
// and asymmetric pads 0..2, 3x3, 5x5 and 7x7, batch 2, bias and residual on and off, every activation;
// then ShuffleNet's shapes, the cases it does not cover, and re-preparing at other shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/kernel_runner.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::make_kernel;
using testing::random_f32;

struct Case {
  Shape x;
  int64_t k_h, k_w;
  std::vector<int64_t> strides, pads;  // pads: top, left, bottom, right
  bool bias, residual;
};

std::string name_of(const Case& c) {
  std::string s = c.x.str() + " k " + std::to_string(c.k_h) + "x" + std::to_string(c.k_w) + " s " + std::to_string(c.strides[0]) + "," +
                  std::to_string(c.strides[1]) + " p";
  for (int64_t p : c.pads) s += " " + std::to_string(p);
  return s + (c.bias ? " bias" : "") + (c.residual ? " residual" : "");
}

// Compares depthwise_nchw with the reference on case `c` under each activation of `acts`.
void check(const Case& c, const std::vector<const char*>& acts, uint32_t seed, int* checked) {
  const int64_t C = c.x[1];
  const Shape ws{C, 1, c.k_h, c.k_w};
  AttrMap base{{"strides", Attribute::Ints(c.strides)}, {"pads", Attribute::Ints(c.pads)}, {"group", Attribute::Int(C)}};
  const Tensor x = random_f32(c.x, seed), w = random_f32(ws, seed + 1), b = random_f32(Shape{C}, seed + 2);
  std::string ran;
  auto y0 = testing::run_fused_conv(base, {x, w}, "reference", &ran);
  ASSERT_TRUE(y0.ok()) << name_of(c) << ": " << y0.status().message();
  const Tensor res = random_f32(y0->shape(), seed + 3);
  for (const char* act : acts) {
    AttrMap attrs = base;
    testing::set_fused_conv_activation(attrs, act);
    std::vector<Tensor> in{x, w, c.bias ? b : Tensor(), c.residual ? res : Tensor()};
    while (in.back().empty()) in.pop_back();
    const std::string what = name_of(c) + ", " + act;
    auto want = testing::run_fused_conv(attrs, in, "reference", &ran);
    ASSERT_TRUE(want.ok()) << what << ": " << want.status().message();
    auto got = testing::run_fused_conv(attrs, in, "depthwise_nchw", &ran);
    ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
    EXPECT_EQ(ran, "depthwise_nchw") << what;
    testing::expect_close(*got, *want, 2e-6 * std::sqrt(static_cast<double>(c.k_h * c.k_w)), 1e-5, what);
    ++*checked;
  }
}

TEST(DepthwiseNchw, EveryWidthStrideAndPadMatchesTheReference) {
  int checked = 0;
  uint32_t seed = 7100;
  const std::vector<const char*> all(std::begin(testing::kFusedConvActivations), std::end(testing::kFusedConvActivations));
  for (int64_t W = 1; W <= 17; ++W)
    for (int64_t s : {1, 2})
      for (int64_t k : {3, 5, 7}) {
        // Heights and pads vary with the width: 1..3 rows past the 4-row blocks, every pad 0..2
        // on each side, symmetric and not.
        const int64_t H = 4 + (W * 3 + s + k) % 9;
        const std::vector<int64_t> pads{W % 3, (W + 1) % 3, (W / 3) % 3, (W + s) % 3};
        if (H + pads[0] + pads[2] < k || W + pads[1] + pads[3] < k) continue;
        // 16 planes or more: whole planes per item (fewer split into bands of rows, tested below).
        const Case c{Shape{W % 4 == 0 ? 2 : 1, 16 + W % 4, H, W}, k, k, {s, s}, pads, W % 2 == 1, W % 3 != 1};
        // Every activation on some widths, one (cycling) on the others.
        const std::vector<const char*> acts = W % 5 == 0 ? all : std::vector<const char*>{all[static_cast<size_t>(W + s + k) % all.size()]};
        check(c, acts, seed, &checked);
        seed += 4;
      }
  EXPECT_GT(checked, 100);
}

TEST(DepthwiseNchw, GenericShapesAndShuffleNetShapesMatchTheReference) {
  const std::vector<const char*> all(std::begin(testing::kFusedConvActivations), std::end(testing::kFusedConvActivations));
  const Case cases[] = {
      {Shape{1, 58, 56, 56}, 3, 3, {2, 2}, {1, 1, 1, 1}, true, false},   // ShuffleNet-V2 stage 2, stride 2
      {Shape{1, 58, 28, 28}, 3, 3, {1, 1}, {1, 1, 1, 1}, true, false},
      {Shape{1, 116, 14, 14}, 3, 3, {1, 1}, {1, 1, 1, 1}, true, true},
      {Shape{1, 232, 14, 14}, 3, 3, {2, 2}, {1, 1, 1, 1}, true, false},
      {Shape{2, 5, 9, 10}, 3, 2, {1, 3}, {0, 2, 2, 1}, true, true},      // generic: 3x2, stride (1, 3)
      {Shape{2, 3, 17, 23}, 7, 7, {2, 2}, {3, 0, 1, 2}, true, false},    // generic: 7x7
      {Shape{1, 20, 14, 14}, 7, 7, {1, 1}, {3, 3, 3, 3}, true, true},    // ConvNeXt's 7x7 (unrolled)
      {Shape{1, 4, 11, 19}, 3, 3, {3, 3}, {1, 1, 1, 1}, false, true},    // generic: stride 3
      {Shape{1, 6, 12, 13}, 3, 3, {1, 2}, {1, 1, 0, 0}, true, true},     // generic: strides (1, 2)
      {Shape{1, 7, 2, 1}, 5, 5, {1, 1}, {2, 2, 2, 2}, true, false},      // kernel larger than the image
      {Shape{1, 2, 70, 9}, 3, 3, {1, 1}, {1, 1, 1, 1}, true, true},      // few planes: bands of rows
      {Shape{1, 1, 37, 40}, 5, 5, {2, 2}, {2, 2, 2, 2}, true, false},
  };
  int checked = 0;
  uint32_t seed = 7500;
  for (const Case& c : cases) {
    check(c, all, seed, &checked);
    seed += 4;
  }
  EXPECT_EQ(checked, 12 * 8);
}

// Row tails are stored 8 lanes wide where the extra lanes land on a later row of the same item:
// nothing may land outside the output (guard floats before and after it), whatever the widths,
// bands and residual.
TEST(DepthwiseNchw, WritesNothingOutsideItsOutput) {
  const Case cases[] = {
      {Shape{1, 2, 9, 3}, 3, 3, {1, 1}, {1, 1, 1, 1}, true, false},    // rows of 3: a vector spans 3 rows
      {Shape{1, 3, 13, 14}, 3, 3, {2, 2}, {1, 1, 1, 1}, true, false},  // 7-wide rows, bands
      {Shape{1, 20, 6, 13}, 5, 5, {1, 1}, {2, 2, 2, 2}, false, false},
      {Shape{2, 17, 7, 11}, 3, 3, {1, 1}, {1, 1, 1, 1}, true, true},
      {Shape{1, 1, 5, 1}, 3, 3, {1, 1}, {1, 1, 1, 1}, true, false},    // 1-wide rows, one plane
  };
  constexpr int64_t kGuard = 16;
  const float sentinel = 12345.0f;
  uint32_t seed = 7700;
  for (const Case& c : cases) {
    const int64_t C = c.x[1];
    AttrMap attrs{{"strides", Attribute::Ints(c.strides)}, {"pads", Attribute::Ints(c.pads)}, {"group", Attribute::Int(C)}};
    const Tensor x = random_f32(c.x, seed), w = random_f32(Shape{C, 1, c.k_h, c.k_w}, seed + 1), b = random_f32(Shape{C}, seed + 2);
    std::string ran;
    auto y0 = testing::run_fused_conv(attrs, {x, w}, "reference", &ran);
    ASSERT_TRUE(y0.ok());
    const Tensor res = random_f32(y0->shape(), seed + 3);
    std::vector<Tensor> in{x, w, c.bias ? b : Tensor(), c.residual ? res : Tensor()};
    while (in.back().empty()) in.pop_back();
    auto want = testing::run_fused_conv(attrs, in, "reference", &ran);
    ASSERT_TRUE(want.ok());
    auto k = make_kernel("FusedConv", attrs, static_cast<int>(in.size()), "depthwise_nchw");
    ASSERT_TRUE(k);
    std::vector<TensorView> views;
    for (const Tensor& t : in) views.push_back(t.empty() ? TensorView{} : t.view());
    const int64_t n = y0->numel();
    std::vector<float> guarded(static_cast<size_t>(n + 2 * kGuard), sentinel);
    const TensorView out{guarded.data() + kGuard, DType::kFloat32, y0->shape()};
    ASSERT_TRUE(k->prepare(views, {&out, 1}).ok());
    ASSERT_TRUE(k->run(views, {&out, 1}).ok());
    EXPECT_STREQ(k->impl_name(), "depthwise_nchw");
    const std::string what = name_of(c);
    for (int64_t i = 0; i < kGuard; ++i) {
      EXPECT_EQ(guarded[static_cast<size_t>(i)], sentinel) << what << ": guard before, " << i;
      EXPECT_EQ(guarded[static_cast<size_t>(n + kGuard + i)], sentinel) << what << ": guard after, " << i;
    }
    Tensor got = Tensor::zeros(DType::kFloat32, y0->shape());
    std::copy(guarded.begin() + kGuard, guarded.begin() + kGuard + n, got.as<float>());
    testing::expect_close(got, *want, 2e-6 * c.k_h, 1e-5, what);
    seed += 4;
  }
}

// Other layouts, dilation, a depthwise multiplier, groups, 1-D and huge kernels run the
// reference (tactic selection then reports the impl unavailable); the results still match.
TEST(DepthwiseNchw, UncoveredCasesRunTheReference) {
  struct Other {
    const char* what;
    Shape x, w;
    AttrMap attrs;
  };
  const Other others[] = {
      {"nchw8c input", Shape{1, 1, 5, 5, 8}, Shape{8, 1, 3, 3}, {{"x_layout", Attribute::String("nchw8c")}, {"group", Attribute::Int(8)}}},
      {"dilation 2", Shape{1, 4, 7, 7}, Shape{4, 1, 3, 3}, {{"group", Attribute::Int(4)}, {"dilations", Attribute::Ints({2, 2})}}},
      {"multiplier 2", Shape{1, 4, 5, 5}, Shape{8, 1, 3, 3}, {{"group", Attribute::Int(4)}}},
      {"group 2", Shape{1, 4, 5, 5}, Shape{4, 2, 3, 3}, {{"group", Attribute::Int(2)}}},
      {"dense 3x3", Shape{1, 4, 7, 7}, Shape{6, 4, 3, 3}, {}},
      {"1-D", Shape{1, 4, 9}, Shape{4, 1, 3}, {{"group", Attribute::Int(4)}}},
      {"9x9 kernel", Shape{1, 2, 12, 12}, Shape{2, 1, 9, 9}, {{"group", Attribute::Int(2)}}},
  };
  for (const Other& o : others) testing::expect_fused_conv_runs_reference("depthwise_nchw", o.attrs, o.x, o.w, 7300, o.what);
}

// One kernel prepared at several shapes (a dynamic profile's min and max, a 1x1 image): the plan
// and the padded buffer follow the shape.
TEST(DepthwiseNchw, PreparesAtEachShape) {
  const AttrMap attrs{{"activation", Attribute::String("relu")}, {"group", Attribute::Int(8)},
                      {"strides", Attribute::Ints({2, 2})}, {"pads", Attribute::Ints({1, 1, 1, 1})}};
  const Tensor w = random_f32(Shape{8, 1, 3, 3}, 1), b = random_f32(Shape{8}, 2);
  auto k = make_kernel("FusedConv", attrs, 3, "depthwise_nchw");
  auto ref = make_kernel("FusedConv", attrs, 3, "reference");
  ASSERT_TRUE(k && ref);
  for (const Shape& xs : {Shape{1, 8, 4, 5}, Shape{3, 8, 37, 41}, Shape{1, 8, 1, 1}, Shape{2, 8, 9, 9}}) {
    const Tensor x = random_f32(xs, 3);
    const TensorView v[] = {x.view(), w.view(), b.view()};
    auto got = run_kernel_once(*k, v, 1);
    auto want = run_kernel_once(*ref, v, 1);
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_STREQ(k->impl_name(), "depthwise_nchw");
    testing::expect_close((*got)[0], (*want)[0], 2e-6, 1e-5, xs.str());
  }
}

}  // namespace
}  // namespace kiln
