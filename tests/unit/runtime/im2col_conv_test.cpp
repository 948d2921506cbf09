// FusedConv impl "im2col_panel" (runtime/kernels/im2col_conv_kernels.cpp) against the reference
// FusedConv at awkward geometry: dilation, asymmetric pads, stride 3, 1-D, kernels wider than the
// input's padding, output channels that fill no whole 64-column panel, batch 3, no bias, every
// epilogue activation, and a prepare at a second shape (the scratch buffers grow). Every layout
// combination is covered by conv_blocked_layout_test.cpp; here X and Y are NCHW or NHWC (the
// direct-A and direct-Y paths). A group other than 1 runs the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/kernel.h"
#include "runtime/kernel_runner.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::make_kernel;
using testing::random_f32;
using testing::to_nhwc;

struct Case {
  const char* what;
  Shape x, w;
  std::vector<int64_t> strides, pads, dilations;
  bool bias, residual;
};

const Case kCases[] = {
    {"3x3 pad 1, 70 out channels", Shape{1, 19, 7, 7}, Shape{70, 19, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, true, true},
    {"dilation 2, asymmetric pads", Shape{2, 5, 11, 9}, Shape{13, 5, 3, 3}, {1, 1}, {0, 2, 3, 1}, {2, 2}, true, false},
    {"5x4 kernel, stride 3, batch 3, no bias", Shape{3, 6, 13, 10}, Shape{9, 6, 5, 4}, {3, 3}, {2, 1, 2, 1}, {1, 1}, false, true},
    {"kernel wider than the input", Shape{1, 4, 3, 2}, Shape{8, 4, 5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, true, false},
    {"1x1 stride 1 (X read as A)", Shape{2, 24, 5, 3}, Shape{130, 24, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, true, true},
    {"1x1 stride 2", Shape{1, 16, 9, 9}, Shape{32, 16, 1, 1}, {2, 2}, {0, 0, 0, 0}, {1, 1}, false, false},
    {"1-D, dilation 3", Shape{2, 7, 29}, Shape{11, 7, 4}, {2}, {3, 1}, {3}, true, true},
};

AttrMap attrs_of(const Case& c, const char* act, const char* x_layout, const char* y_layout) {
  AttrMap a{{"strides", Attribute::Ints(c.strides)},
            {"pads", Attribute::Ints(c.pads)},
            {"dilations", Attribute::Ints(c.dilations)},
            {"x_layout", Attribute::String(x_layout)},
            {"residual_layout", Attribute::String(y_layout)},
            {"y_layout", Attribute::String(y_layout)}};
  testing::set_fused_conv_activation(a, act);
  return a;
}

TEST(Im2colConv, MatchesTheReferenceAtAwkwardGeometryAndEveryActivation) {
  uint32_t seed = 4100;
  int checked = 0;
  for (const Case& c : kCases) {
    const bool two_d = c.x.rank() == 4;
    const Tensor x = random_f32(c.x, seed++), w = random_f32(c.w, seed++), b = random_f32(Shape{c.w[0]}, seed++);
    // The output shape, from a plain reference run.
    std::string ran;
    auto y0 = testing::run_fused_conv(attrs_of(c, "none", "nchw", "nchw"), {x, w}, "reference", &ran);
    ASSERT_TRUE(y0.ok()) << c.what << ": " << y0.status().message();
    const Tensor res = random_f32(y0->shape(), seed++);
    const double atol = 2e-6 * std::sqrt(static_cast<double>(c.w.numel() / c.w[0]));
    for (const char* act : testing::kFusedConvActivations)
      for (const char* layout : {"nchw", "nhwc"}) {
        if (!two_d && std::string(layout) == "nhwc") continue;
        const bool nhwc = std::string(layout) == "nhwc";
        std::vector<Tensor> in{nhwc ? to_nhwc(x) : x, w, c.bias ? b : Tensor(), c.residual ? (nhwc ? to_nhwc(res) : res) : Tensor()};
        while (in.back().empty()) in.pop_back();
        const AttrMap attrs = attrs_of(c, act, layout, layout);
        const std::string what = std::string(c.what) + ", " + act + ", " + layout;
        auto want = testing::run_fused_conv(attrs, in, "reference", &ran);
        ASSERT_TRUE(want.ok()) << what << ": " << want.status().message();
        auto got = testing::run_fused_conv(attrs, in, "im2col_panel", &ran);
        ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
        EXPECT_EQ(ran, "im2col_panel") << what;
        testing::expect_close(*got, *want, atol, 1e-5, what);
        ++checked;
      }
  }
  EXPECT_EQ(checked, 6 * 8 * 2 + 8);
}

// One kernel prepared at a small shape and then a larger one (a dynamic profile's min and max):
// its im2col and output scratch grow, and the second run matches the reference.
TEST(Im2colConv, APrepareAtALargerShapeGrowsTheScratch) { testing::expect_fused_conv_regrows("im2col_panel", 2e-5); }

// A batch whose A and GEMM output pass 8 MB (28800 rows of 147 + 16 floats: 18.8 MB) runs in
// chunks of rows: every chunk's rows land in the right place, in the direct-Y (NHWC, residual in
// the GEMM) and the epilogue (NCHW) paths.
TEST(Im2colConv, ABatchLargerThanAChunkRunsInChunks) {
  const Case c{"stem 7x7, batch 2 at 120x120", Shape{2, 3, 120, 120}, Shape{16, 3, 7, 7}, {1, 1}, {3, 3, 3, 3}, {1, 1}, true, true};
  const Tensor x = random_f32(c.x, 11), w = random_f32(c.w, 12), b = random_f32(Shape{16}, 13), res = random_f32(Shape{2, 16, 120, 120}, 14);
  for (const char* layout : {"nchw", "nhwc"}) {
    const bool nhwc = std::string(layout) == "nhwc";
    const std::vector<Tensor> in{nhwc ? to_nhwc(x) : x, w, b, nhwc ? to_nhwc(res) : res};
    const AttrMap attrs = attrs_of(c, "relu", layout, layout);
    std::string ran;
    auto want = testing::run_fused_conv(attrs, in, "reference", &ran);
    auto got = testing::run_fused_conv(attrs, in, "im2col_panel", &ran);
    ASSERT_TRUE(want.ok() && got.ok()) << layout;
    EXPECT_EQ(ran, "im2col_panel");
    testing::expect_close(*got, *want, 2e-6 * std::sqrt(147.0), 1e-5, layout);
  }
}

TEST(Im2colConv, GroupsRunTheReference) {
  const AttrMap attrs{{"group", Attribute::Int(2)}};
  const Tensor x = random_f32(Shape{1, 4, 5, 5}, 1), w = random_f32(Shape{6, 2, 3, 3}, 2);
  auto k = make_kernel("FusedConv", attrs, 2, "im2col_panel");
  ASSERT_TRUE(k);
  const TensorView v[] = {x.view(), w.view()};
  auto got = run_kernel_once(*k, v, 1);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_STREQ(k->impl_name(), "reference");
}

}  // namespace
}  // namespace kiln
