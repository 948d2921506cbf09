// FusedConv impl "winograd_f4x3" (runtime/kernels/winograd_conv_kernels.cpp) against the reference
// FusedConv: partial tiles at the right and bottom edges, inputs smaller than one tile, pads 0, 1, 2
// and asymmetric, channel counts that fill no whole vector or 64-column panel, batch 3, no bias,
// every epilogue activation, a residual, NCHW / NHWC / nChw8c, both schedules (blocks of tiles, and
// all tiles per step), and a prepare at a second shape.
// Winograd's transforms round differently from a direct convolution, so the bound is relative to the
// output's scale (Errors below); every other geometry runs the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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
  std::vector<int64_t> pads;
  bool bias, residual;
};

const Case kCases[] = {
    {"7x7, pad 1, 19 -> 70 channels (partial tiles, lane and panel tails)", Shape{1, 19, 7, 7}, Shape{70, 19, 3, 3}, {1, 1, 1, 1}, true, true},
    {"asymmetric pads, batch 2", Shape{2, 8, 11, 9}, Shape{13, 8, 3, 3}, {0, 2, 1, 0}, true, false},
    {"pad 0, batch 3, no bias", Shape{3, 6, 13, 10}, Shape{9, 6, 3, 3}, {0, 0, 0, 0}, false, true},
    {"input smaller than a tile", Shape{1, 4, 2, 3}, Shape{8, 4, 3, 3}, {1, 1, 1, 1}, true, false},
    {"pad 2 (output larger than the input)", Shape{1, 16, 5, 6}, Shape{24, 16, 3, 3}, {2, 2, 2, 2}, true, true},
    {"32 -> 64 at 30x30 (whole panels, many tiles)", Shape{1, 32, 30, 30}, Shape{64, 32, 3, 3}, {1, 1, 1, 1}, true, true},
    // Transformed weights over 1 MB and 4 tiles: all tiles per step instead of blocks of tiles.
    {"96 -> 104 at 7x6 (the unblocked schedule)", Shape{1, 96, 7, 6}, Shape{104, 96, 3, 3}, {1, 1, 1, 1}, true, true},
};

AttrMap attrs_of(const Case& c, const char* act, const char* layout) {
  AttrMap a{{"pads", Attribute::Ints(c.pads)},
            {"x_layout", Attribute::String(layout)},
            {"residual_layout", Attribute::String(layout)},
            {"y_layout", Attribute::String(layout)}};
  testing::set_fused_conv_activation(a, act);
  return a;
}

// Errors: Winograd's error grows with the sum's terms (C * 9) and the transforms' constants. The
// bound is 1.5e-5 x sqrt(C * 9) x the inputs' scale (1 here; the outputs' spread is sqrt(C * 9) / 3)
// plus 1e-5 relative. The test prints the largest error seen as a fraction of the bound (0.66).
double bound(const Case& c) { return 1.5e-5 * std::sqrt(static_cast<double>(c.w[1] * 9)); }

TEST(WinogradConv, MatchesTheReferenceAtAwkwardGeometryEveryActivationAndLayout) {
  uint32_t seed = 7100;
  int checked = 0;
  double worst = 0;
  for (const Case& c : kCases) {
    const Tensor x = random_f32(c.x, seed++), w = random_f32(c.w, seed++), b = random_f32(Shape{c.w[0]}, seed++);
    std::string ran;
    auto y0 = testing::run_fused_conv(attrs_of(c, "none", "nchw"), {x, w}, "reference", &ran);
    ASSERT_TRUE(y0.ok()) << c.what << ": " << y0.status().message();
    const Tensor res = random_f32(y0->shape(), seed++);
    for (const char* act : testing::kFusedConvActivations)
      for (const std::string layout : {"nchw", "nhwc", "nchw8c"}) {
        if (layout == "nchw8c" && (c.x[1] % 8 != 0 || c.w[0] % 8 != 0)) continue;
        std::vector<Tensor> in{testing::to_layout(x, layout), w, c.bias ? b : Tensor(),
                               c.residual ? testing::to_layout(res, layout) : Tensor()};
        while (in.back().empty()) in.pop_back();
        const AttrMap attrs = attrs_of(c, act, layout.c_str());
        const std::string what = std::string(c.what) + ", " + act + ", " + layout;
        auto want = testing::run_fused_conv(attrs, in, "reference", &ran);
        ASSERT_TRUE(want.ok()) << what << ": " << want.status().message();
        auto got = testing::run_fused_conv(attrs, in, "winograd_f4x3", &ran);
        ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
        EXPECT_EQ(ran, "winograd_f4x3") << what;
        testing::expect_close(*got, *want, bound(c), 1e-5, what);
        for (int64_t i = 0; i < want->numel(); ++i)
          worst = std::max(worst, std::abs(static_cast<double>(got->as<float>()[i]) - want->as<float>()[i]) / bound(c));
        ++checked;
      }
  }
  EXPECT_EQ(checked, 7 * 8 * 2 + 3 * 8);
  std::printf("largest error: %.3f of the bound\n", worst);
}

// One kernel prepared at a small shape and then a larger one (a dynamic profile's min and max):
// its tile buffers grow, and the second run matches the reference.
TEST(WinogradConv, APrepareAtALargerShapeGrowsTheScratch) { testing::expect_fused_conv_regrows("winograd_f4x3", 3e-5); }

// Geometry F(4x4, 3x3) does not cover runs the reference (tactic selection reports it unavailable).
TEST(WinogradConv, OtherGeometryRunsTheReference) {
  struct Other {
    const char* what;
    AttrMap attrs;
    Shape x, w;
  };
  const Other others[] = {
      {"stride 2", {{"strides", Attribute::Ints({2, 2})}}, Shape{1, 4, 9, 9}, Shape{8, 4, 3, 3}},
      {"dilation 2", {{"dilations", Attribute::Ints({2, 2})}}, Shape{1, 4, 9, 9}, Shape{8, 4, 3, 3}},
      {"group 2", {{"group", Attribute::Int(2)}}, Shape{1, 4, 9, 9}, Shape{8, 2, 3, 3}},
      {"5x5 kernel", {}, Shape{1, 4, 9, 9}, Shape{8, 4, 5, 5}},
      {"1-D", {}, Shape{1, 4, 9}, Shape{8, 4, 3}},
  };
  for (const Other& o : others) testing::expect_fused_conv_runs_reference("winograd_f4x3", o.attrs, o.x, o.w, 1, o.what);
}

}  // namespace
}  // namespace kiln
