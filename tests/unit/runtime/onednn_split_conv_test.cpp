// FusedConv impl "onednn_split" (runtime/kernels/onednn_split_conv_kernels.cpp) against the
// reference FusedConv: group-1 and depthwise convolutions in nChw8c and nChw16c, output channel
// counts that split into equal and unequal parts (2, 3, 5 blocks), strides and asymmetric pads,
// with and without bias and residual, every epilogue activation; then the cases it leaves to the
// reference. It needs two threads (one part each); on one it is unavailable.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "runtime/kernel.h"
#include "runtime/kernel_runner.h"
#include "runtime/thread_pool.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::make_kernel;
using testing::random_f32;

bool two_threads() { return ThreadPool::global().max_threads() > 1 && omp_get_max_threads() > 1; }

struct Case {
  const char* what;
  Shape x, w;
  int64_t group;
  std::vector<int64_t> strides, pads;
  bool bias, residual;
  const char* layout;
};

const Case kCases[] = {
    {"3x3 pad 1, 16 -> 40 (5 blocks: parts of 2 and 3)", Shape{1, 16, 13, 11}, Shape{40, 16, 3, 3}, 1, {1, 1}, {1, 1, 1, 1}, true, true, "nchw8c"},
    {"1x1, 24 -> 16", Shape{1, 24, 7, 5}, Shape{16, 24, 1, 1}, 1, {1, 1}, {0, 0, 0, 0}, false, true, "nchw8c"},
    {"3x3 stride 2, asymmetric pads, 8 -> 24", Shape{1, 8, 12, 9}, Shape{24, 8, 3, 3}, 1, {2, 2}, {0, 1, 1, 0}, true, false, "nchw8c"},
    {"depthwise 3x3, 24 channels", Shape{1, 24, 10, 10}, Shape{24, 1, 3, 3}, 24, {1, 1}, {1, 1, 1, 1}, true, true, "nchw8c"},
    {"depthwise 5x5 stride 2, 40 channels", Shape{1, 40, 9, 14}, Shape{40, 1, 5, 5}, 40, {2, 2}, {2, 2, 2, 2}, true, false, "nchw8c"},
    {"nChw16c, 32 -> 48", Shape{1, 32, 6, 6}, Shape{48, 32, 3, 3}, 1, {1, 1}, {1, 1, 1, 1}, true, true, "nchw16c"},
};

AttrMap attrs_of(const Case& c, const char* act, const char* layout) {
  AttrMap a{{"group", Attribute::Int(c.group)},
            {"strides", Attribute::Ints(c.strides)},
            {"pads", Attribute::Ints(c.pads)},
            {"x_layout", Attribute::String(layout)},
            {"residual_layout", Attribute::String(layout)},
            {"y_layout", Attribute::String(layout)}};
  testing::set_fused_conv_activation(a, act);
  return a;
}

TEST(OnednnSplitConv, MatchesTheReferenceForGroupOneAndDepthwiseEveryActivation) {
  if (!two_threads()) GTEST_SKIP() << "onednn_split needs two threads";
  uint32_t seed = 9100;
  int checked = 0;
  for (const Case& c : kCases) {
    const Tensor x = random_f32(c.x, seed++), w = random_f32(c.w, seed++), b = random_f32(Shape{c.w[0]}, seed++);
    std::string ran;
    auto y0 = testing::run_fused_conv(attrs_of(c, "none", "nchw"), {x, w}, "reference", &ran);
    ASSERT_TRUE(y0.ok()) << c.what << ": " << y0.status().message();
    const Tensor res = random_f32(y0->shape(), seed++);
    const double K = static_cast<double>(c.w.numel() / c.w[0]);
    for (const char* act : testing::kFusedConvActivations) {
      std::vector<Tensor> in{testing::to_layout(x, c.layout), w, c.bias ? b : Tensor(), c.residual ? testing::to_layout(res, c.layout) : Tensor()};
      while (in.back().empty()) in.pop_back();
      const AttrMap attrs = attrs_of(c, act, c.layout);
      const std::string what = std::string(c.what) + ", " + act;
      auto want = testing::run_fused_conv(attrs, in, "reference", &ran);
      ASSERT_TRUE(want.ok()) << what << ": " << want.status().message();
      // Twice: the second run reuses the parts' bound memory.
      for (int run = 0; run < 2; ++run) {
        auto got = testing::run_fused_conv(attrs, in, "onednn_split", &ran);
        ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
        EXPECT_EQ(ran, "onednn_split") << what;
        testing::expect_close(*got, *want, 1e-5 * std::sqrt(K), 1e-5, what);
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6 * 8);
}

// Batch > 1, NCHW / NHWC, grouped (not depthwise) convolutions and a single output block run the
// reference (tactic selection reports the impl unavailable there).
TEST(OnednnSplitConv, OtherCasesRunTheReference) {
  struct Other {
    const char* what;
    AttrMap attrs;
    Shape x, w;
  };
  const AttrMap blocked{{"x_layout", Attribute::String("nchw8c")}, {"y_layout", Attribute::String("nchw8c")}};
  auto with = [&](AttrMap a) {
    for (const auto& [k, v] : blocked) a.emplace(k, v);
    return a;
  };
  const Other others[] = {
      {"batch 2", blocked, Shape{2, 1, 5, 5, 8}, Shape{16, 8, 3, 3}},
      {"NCHW", {}, Shape{1, 8, 5, 5}, Shape{16, 8, 3, 3}},
      {"NHWC", {{"x_layout", Attribute::String("nhwc")}, {"y_layout", Attribute::String("nhwc")}}, Shape{1, 5, 5, 8}, Shape{16, 8, 3, 3}},
      {"group 2 of 8 channels", with({{"group", Attribute::Int(2)}}), Shape{1, 2, 5, 5, 8}, Shape{16, 8, 3, 3}},
      {"one output block", blocked, Shape{1, 2, 5, 5, 8}, Shape{8, 16, 3, 3}},
  };
  for (const Other& o : others) testing::expect_fused_conv_runs_reference("onednn_split", o.attrs, o.x, o.w, 1, o.what);
}

}  // namespace
}  // namespace kiln
