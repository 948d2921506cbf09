// FusedConv impl "nchw_direct" (runtime/kernels/nchw_conv_kernels.cpp) against the reference
// FusedConv: 1x1 and depthwise convolutions of NCHW data at awkward shapes (ShuffleNet's 58
// channels, 1-pixel images, one input or output channel, kernels wider than the image, strides 2
// and 3, asymmetric pads, odd widths, batch 3), with and without bias and residual, under every
// epilogue activation; and the cases it does not cover, which run the reference and report so.
#include <gtest/gtest.h>

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
  const char* what;
  Shape x, w;
  int64_t group;
  std::vector<int64_t> strides, pads;
  bool bias, residual;
};

const Case kCases[] = {
    {"58 -> 58 at 28x28", Shape{1, 58, 28, 28}, Shape{58, 58, 1, 1}, 1, {1, 1}, {0, 0, 0, 0}, true, false},
    {"3 -> 5, batch 3, 1x7", Shape{3, 3, 1, 7}, Shape{5, 3, 1, 1}, 1, {1, 1}, {0, 0, 0, 0}, false, true},
    {"116 -> 24 at 1x1, batch 2", Shape{2, 116, 1, 1}, Shape{24, 116, 1, 1}, 1, {1, 1}, {0, 0, 0, 0}, true, true},
    {"232 -> 1 at 7x9", Shape{1, 232, 7, 9}, Shape{1, 232, 1, 1}, 1, {1, 1}, {0, 0, 0, 0}, true, true},
    {"1 -> 70 at 13x11, batch 2", Shape{2, 1, 13, 11}, Shape{70, 1, 1, 1}, 1, {1, 1}, {0, 0, 0, 0}, false, false},
    {"depthwise 3x3 stride 1 pad 1", Shape{1, 58, 28, 28}, Shape{58, 1, 3, 3}, 58, {1, 1}, {1, 1, 1, 1}, true, false},
    {"depthwise 3x3 stride 2 pad 1, odd sizes", Shape{2, 13, 15, 11}, Shape{13, 1, 3, 3}, 13, {2, 2}, {1, 1, 1, 1}, true, true},
    {"depthwise 3x3 stride 2 on 56x56 (vector deinterleave)", Shape{1, 8, 56, 56}, Shape{8, 1, 3, 3}, 8, {2, 2}, {1, 1, 1, 1}, true, false},
    {"depthwise 5x5 stride 2 pad 2", Shape{1, 24, 14, 14}, Shape{24, 1, 5, 5}, 24, {2, 2}, {2, 2, 2, 2}, false, false},
    {"depthwise 3x2 stride (1, 3), asymmetric pads", Shape{3, 5, 9, 10}, Shape{5, 1, 3, 2}, 5, {1, 3}, {0, 2, 2, 1}, true, true},
    {"depthwise kernel wider than the image", Shape{1, 7, 2, 1}, Shape{7, 1, 5, 5}, 7, {1, 1}, {2, 2, 2, 2}, true, false},
    {"depthwise no padding, stride 2, odd width", Shape{1, 9, 8, 19}, Shape{9, 1, 3, 3}, 9, {2, 2}, {0, 0, 0, 0}, false, true},
    {"depthwise 7x7 stride 2 pad (3, 0, 1, 2)", Shape{2, 3, 17, 23}, Shape{3, 1, 7, 7}, 3, {2, 2}, {3, 0, 1, 2}, true, false},
};

AttrMap attrs_of(const Case& c, const char* act) {
  AttrMap a{{"strides", Attribute::Ints(c.strides)}, {"pads", Attribute::Ints(c.pads)}, {"group", Attribute::Int(c.group)}};
  testing::set_fused_conv_activation(a, act);
  return a;
}

TEST(NchwConv, MatchesTheReferenceAtAwkwardShapesAndEveryActivation) {
  uint32_t seed = 5100;
  int checked = 0;
  for (const Case& c : kCases) {
    const Tensor x = random_f32(c.x, seed++), w = random_f32(c.w, seed++), b = random_f32(Shape{c.w[0]}, seed++);
    std::string ran;
    auto y0 = testing::run_fused_conv(attrs_of(c, "none"), {x, w}, "reference", &ran);
    ASSERT_TRUE(y0.ok()) << c.what << ": " << y0.status().message();
    const Tensor res = random_f32(y0->shape(), seed++);
    const double atol = 2e-6 * std::sqrt(static_cast<double>(c.w.numel() / c.w[0]));
    for (const char* act : testing::kFusedConvActivations) {
      std::vector<Tensor> in{x, w, c.bias ? b : Tensor(), c.residual ? res : Tensor()};
      while (in.back().empty()) in.pop_back();
      const AttrMap attrs = attrs_of(c, act);
      const std::string what = std::string(c.what) + ", " + act;
      auto want = testing::run_fused_conv(attrs, in, "reference", &ran);
      ASSERT_TRUE(want.ok()) << what << ": " << want.status().message();
      auto got = testing::run_fused_conv(attrs, in, "nchw_direct", &ran);
      ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
      EXPECT_EQ(ran, "nchw_direct") << what;
      testing::expect_close(*got, *want, atol, 1e-5, what);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 13 * 8);
}

// Blocked layouts, groups, dilation, a depthwise multiplier, 3x3, 1x1 with stride or padding, and
// 1-D run the reference
// (tactic selection then reports the impl unavailable); the results still match.
TEST(NchwConv, UncoveredCasesRunTheReference) {
  struct Other {
    const char* what;
    Shape x, w;
    AttrMap attrs;
  };
  const Other others[] = {
      {"nchw8c input", Shape{1, 2, 5, 5, 8}, Shape{16, 16, 1, 1}, {{"x_layout", Attribute::String("nchw8c")}}},
      {"group 2", Shape{1, 4, 5, 5}, Shape{6, 2, 3, 3}, {{"group", Attribute::Int(2)}}},
      {"depthwise, dilation 2", Shape{1, 4, 7, 7}, Shape{4, 1, 3, 3}, {{"group", Attribute::Int(4)}, {"dilations", Attribute::Ints({2, 2})}}},
      {"depthwise multiplier 2", Shape{1, 4, 5, 5}, Shape{8, 1, 3, 3}, {{"group", Attribute::Int(4)}}},
      {"3x3", Shape{1, 4, 7, 7}, Shape{6, 4, 3, 3}, {}},
      {"1x1 stride 2", Shape{1, 4, 6, 6}, Shape{8, 4, 1, 1}, {{"strides", Attribute::Ints({2, 2})}}},
      {"1x1 padded", Shape{1, 4, 6, 6}, Shape{8, 4, 1, 1}, {{"pads", Attribute::Ints({1, 0, 1, 0})}}},
      {"1-D", Shape{1, 4, 9}, Shape{4, 1, 3}, {{"group", Attribute::Int(4)}}},
  };
  for (const Other& o : others) testing::expect_fused_conv_runs_reference("nchw_direct", o.attrs, o.x, o.w, 5300, o.what);
}

// One kernel prepared at two shapes (a dynamic profile's min and max) and at a 1x1 image: the
// depthwise plan and plane buffer follow the shape.
TEST(NchwConv, PreparesAtEachShape) {
  const AttrMap pointwise{{"activation", Attribute::String("relu")}};
  const AttrMap depthwise{{"activation", Attribute::String("relu")}, {"group", Attribute::Int(8)},
                          {"strides", Attribute::Ints({2, 2})}, {"pads", Attribute::Ints({1, 1, 1, 1})}};
  for (const bool dw : {false, true}) {
    const AttrMap& attrs = dw ? depthwise : pointwise;
    const Tensor w = random_f32(dw ? Shape{8, 1, 3, 3} : Shape{12, 8, 1, 1}, 1), b = random_f32(Shape{dw ? 8 : 12}, 2);
    auto k = make_kernel("FusedConv", attrs, 3, "nchw_direct");
    auto ref = make_kernel("FusedConv", attrs, 3, "reference");
    ASSERT_TRUE(k && ref);
    for (const Shape& xs : {Shape{1, 8, 4, 5}, Shape{3, 8, 37, 41}, Shape{1, 8, 1, 1}}) {
      const Tensor x = random_f32(xs, 3);
      const TensorView v[] = {x.view(), w.view(), b.view()};
      auto got = run_kernel_once(*k, v, 1);
      auto want = run_kernel_once(*ref, v, 1);
      ASSERT_TRUE(got.ok() && want.ok());
      EXPECT_STREQ(k->impl_name(), "nchw_direct");
      testing::expect_close((*got)[0], (*want)[0], 2e-6, 1e-5, xs.str() + (dw ? " depthwise" : " 1x1"));
    }
  }
}

}  // namespace
}  // namespace kiln
