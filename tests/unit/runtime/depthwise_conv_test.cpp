// FusedConv impl "depthwise_direct" (runtime/kernels/depthwise_conv_kernels.cpp) against the
// reference FusedConv: depthwise convolutions in nChw8c, nChw16c and NHWC at awkward shapes
// (kernels 3x3, 5x5 and 1x7, strides 1, 2 and 3, symmetric and asymmetric pads, images of 1, 2, 5
// and 13 pixels a side, images narrower than the kernel, 3 and 13 NHWC channels with a masked last
// vector, batch 2), with and without bias and residual, under every epilogue activation; mixed
// layouts; and the cases it does not cover, which run the reference and report so.
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
  Shape x;  // NCHW
  int64_t kh, kw;
  std::vector<int64_t> strides, pads;
  bool bias, residual;
};

const Case kCases[] = {
    {"8ch 13x14 3x3 s1 p1 (8 + 4 interior columns)", Shape{1, 8, 13, 14}, 3, 3, {1, 1}, {1, 1, 1, 1}, true, true},
    {"24ch 5x5 5x5 s2 p2", Shape{1, 24, 5, 5}, 5, 5, {2, 2}, {2, 2, 2, 2}, true, false},
    {"40ch 2x13 3x3 s2 asymmetric pads", Shape{1, 40, 2, 13}, 3, 3, {2, 2}, {0, 1, 1, 0}, false, true},
    {"16ch 1x1 image 3x3 p1, batch 2", Shape{2, 16, 1, 1}, 3, 3, {1, 1}, {1, 1, 1, 1}, true, true},
    {"8ch 13x2, 5x5 wider than the image", Shape{1, 8, 13, 2}, 5, 5, {1, 1}, {2, 2, 2, 2}, false, false},
    {"32ch 5x13 1x7 p(0,3)", Shape{1, 32, 5, 13}, 1, 7, {1, 1}, {0, 3, 0, 3}, true, false},
    {"13ch 13x5 3x3 s2 asymmetric pads, batch 2", Shape{2, 13, 13, 5}, 3, 3, {2, 2}, {1, 0, 2, 1}, true, true},
    {"3ch 2x2 5x5 p2, batch 2", Shape{2, 3, 2, 2}, 5, 5, {1, 1}, {2, 2, 2, 2}, true, false},
    {"48ch 14x14 5x5 s1 p2, batch 2", Shape{2, 48, 14, 14}, 5, 5, {1, 1}, {2, 2, 2, 2}, true, true},
    {"24ch 11x29 3x3 stride (2, 3) unpadded", Shape{1, 24, 11, 29}, 3, 3, {2, 3}, {0, 0, 0, 0}, false, true},
    {"13ch 5x37 3x3 s1 pad (0, 2, 1, 0)", Shape{1, 13, 5, 37}, 3, 3, {1, 1}, {0, 2, 1, 0}, true, false},
    {"8ch 1x13 (unit height) 1x5 s2 p2", Shape{1, 8, 1, 13}, 1, 5, {1, 2}, {0, 2, 0, 2}, true, true},
    // Blocks of 7 columns read nChw8c's X directly between a left and a right edge from the ring.
    {"8ch 5x37 3x3 s1 p1 (inner blocks 1..4)", Shape{1, 8, 5, 37}, 3, 3, {1, 1}, {1, 1, 1, 1}, true, true},
    {"16ch 9x45 5x5 s2 p2 (inner blocks 1..2), batch 2", Shape{2, 16, 9, 45}, 5, 5, {2, 2}, {2, 2, 2, 2}, true, false},
    // Wider rows, stride 1 and 2.
    {"8ch 4x50 3x3 s1 p1 (inner blocks 1..6)", Shape{1, 8, 4, 50}, 3, 3, {1, 1}, {1, 1, 1, 1}, false, true},
    {"24ch 5x56 3x3 s2 p1 (inner blocks 1..3)", Shape{1, 24, 5, 56}, 3, 3, {2, 2}, {1, 1, 1, 1}, true, true},
};

AttrMap attrs_of(const Case& c, const char* act) {
  AttrMap a{{"strides", Attribute::Ints(c.strides)}, {"pads", Attribute::Ints(c.pads)}, {"group", Attribute::Int(c.x[1])}};
  testing::set_fused_conv_activation(a, act);
  return a;
}

void set_layouts(AttrMap& a, const std::string& x, const std::string& res, const std::string& y) {
  a["x_layout"] = Attribute::String(x);
  a["residual_layout"] = Attribute::String(res);
  a["y_layout"] = Attribute::String(y);
}

bool fits(const std::string& layout, int64_t C) { return layout == "nhwc" || C % (layout == "nchw8c" ? 8 : 16) == 0; }

TEST(DepthwiseConv, MatchesTheReferenceAtAwkwardShapesEveryLayoutAndActivation) {
  uint32_t seed = 7100;
  int checked = 0;
  for (const Case& c : kCases) {
    const int64_t C = c.x[1];
    const Tensor x = random_f32(c.x, seed++), w = random_f32(Shape{C, 1, c.kh, c.kw}, seed++), b = random_f32(Shape{C}, seed++);
    std::string ran;
    auto y0 = testing::run_fused_conv(attrs_of(c, "none"), {x, w}, "reference", &ran);
    ASSERT_TRUE(y0.ok()) << c.what << ": " << y0.status().message();
    const Tensor res = random_f32(y0->shape(), seed++);
    const double atol = 2e-6 * std::sqrt(static_cast<double>(c.kh * c.kw));
    for (const char* act : testing::kFusedConvActivations) {
      std::vector<Tensor> in{x, w, c.bias ? b : Tensor(), c.residual ? res : Tensor()};
      while (in.back().empty()) in.pop_back();
      auto want = testing::run_fused_conv(attrs_of(c, act), in, "reference", &ran);
      ASSERT_TRUE(want.ok()) << c.what << ": " << want.status().message();
      for (const std::string layout : {"nchw8c", "nchw16c", "nhwc"}) {
        if (!fits(layout, C)) continue;
        AttrMap attrs = attrs_of(c, act);
        set_layouts(attrs, layout, layout, layout);
        std::vector<Tensor> lin = in;
        lin[0] = testing::to_layout(x, layout);
        if (c.residual) lin[3] = testing::to_layout(res, layout);
        const std::string what = std::string(c.what) + ", " + layout + ", " + act;
        auto got = testing::run_fused_conv(attrs, lin, "depthwise_direct", &ran);
        ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
        EXPECT_EQ(ran, "depthwise_direct") << what;
        testing::expect_close(*got, testing::to_layout(*want, layout), atol, 1e-5, what);
        ++checked;
      }
    }
  }
  // Per activation: 13 cases in 8c and NHWC, 4 of them in 16c too; 3 cases in NHWC only.
  EXPECT_EQ(checked, 8 * (13 * 2 + 4 + 3));
}

// X, the residual and Y each in their own channels-inner layout.
TEST(DepthwiseConv, MixedLayouts) {
  const Case c{"16ch 9x11 3x3 s2 p1", Shape{2, 16, 9, 11}, 3, 3, {2, 2}, {1, 1, 1, 1}, true, true};
  const Tensor x = random_f32(c.x, 1), w = random_f32(Shape{16, 1, 3, 3}, 2), b = random_f32(Shape{16}, 3);
  std::string ran;
  auto y0 = testing::run_fused_conv(attrs_of(c, "none"), {x, w}, "reference", &ran);
  ASSERT_TRUE(y0.ok());
  const Tensor res = random_f32(y0->shape(), 4);
  auto want = testing::run_fused_conv(attrs_of(c, "silu"), {x, w, b, res}, "reference", &ran);
  ASSERT_TRUE(want.ok());
  const char* combos[][3] = {{"nhwc", "nchw8c", "nchw16c"}, {"nchw16c", "nhwc", "nchw8c"}, {"nchw8c", "nchw16c", "nhwc"}};
  for (const auto& l : combos) {
    AttrMap attrs = attrs_of(c, "silu");
    set_layouts(attrs, l[0], l[1], l[2]);
    auto got = testing::run_fused_conv(attrs, {testing::to_layout(x, l[0]), w, b, testing::to_layout(res, l[1])}, "depthwise_direct", &ran);
    const std::string what = std::string(l[0]) + " " + l[1] + " " + l[2];
    ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
    EXPECT_EQ(ran, "depthwise_direct") << what;
    testing::expect_close(*got, testing::to_layout(*want, l[2]), 6e-6, 1e-5, what);
  }
}

// NCHW (nchw_direct's), a channels-inner input with an NCHW output, dilation, a depthwise
// multiplier, a grouped non-depthwise convolution and 1-D run the reference (tactic selection
// then reports the impl unavailable); the results still match.
TEST(DepthwiseConv, UncoveredCasesRunTheReference) {
  struct Other {
    const char* what;
    Shape x, w;
    AttrMap attrs;
  };
  const AttrMap blocked{{"x_layout", Attribute::String("nchw8c")}, {"y_layout", Attribute::String("nchw8c")}};
  auto with = [&](AttrMap a, std::initializer_list<std::pair<const std::string, Attribute>> extra) {
    for (const auto& [k, v] : extra) a[k] = v;
    return a;
  };
  const Other others[] = {
      {"nchw", Shape{1, 8, 5, 5}, Shape{8, 1, 3, 3}, {{"group", Attribute::Int(8)}}},
      {"nchw8c in, nchw out", Shape{1, 1, 5, 5, 8}, Shape{8, 1, 3, 3}, {{"group", Attribute::Int(8)}, {"x_layout", Attribute::String("nchw8c")}}},
      {"dilation 2", Shape{1, 1, 7, 7, 8}, Shape{8, 1, 3, 3}, with(blocked, {{"group", Attribute::Int(8)}, {"dilations", Attribute::Ints({2, 2})}})},
      {"multiplier 2", Shape{1, 1, 5, 5, 8}, Shape{16, 1, 3, 3}, with(blocked, {{"group", Attribute::Int(8)}})},
      {"group 2", Shape{1, 1, 5, 5, 8}, Shape{8, 4, 3, 3}, with(blocked, {{"group", Attribute::Int(2)}})},
      {"1-D", Shape{1, 8, 9}, Shape{8, 1, 3}, {{"group", Attribute::Int(8)}}},
  };
  for (const Other& o : others) testing::expect_fused_conv_runs_reference("depthwise_direct", o.attrs, o.x, o.w, 7300, o.what);
}

// One kernel prepared at two shapes (a dynamic profile's min and max) and at a 1x1 image: the
// geometry and the row bands follow the shape.
TEST(DepthwiseConv, PreparesAtEachShape) {
  AttrMap attrs{{"activation", Attribute::String("relu")}, {"group", Attribute::Int(16)}, {"strides", Attribute::Ints({2, 2})},
                {"pads", Attribute::Ints({1, 1, 1, 1})}};
  set_layouts(attrs, "nchw8c", "nchw8c", "nchw8c");
  const Tensor w = random_f32(Shape{16, 1, 3, 3}, 1), b = random_f32(Shape{16}, 2);
  auto k = make_kernel("FusedConv", attrs, 3, "depthwise_direct");
  auto ref = make_kernel("FusedConv", attrs, 3, "reference");
  ASSERT_TRUE(k && ref);
  for (const Shape& xs : {Shape{1, 2, 4, 5, 8}, Shape{3, 2, 37, 41, 8}, Shape{1, 2, 1, 1, 8}}) {
    const Tensor x = random_f32(xs, 3);
    const TensorView v[] = {x.view(), w.view(), b.view()};
    auto got = run_kernel_once(*k, v, 1);
    auto want = run_kernel_once(*ref, v, 1);
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_STREQ(k->impl_name(), "depthwise_direct");
    testing::expect_close((*got)[0], (*want)[0], 6e-6, 1e-5, xs.str());
  }
}

}  // namespace
}  // namespace kiln
