// FusedConv's residual shared with its output (Kernel::writes_over_input): an implementation that
// says it may write Y into the residual's buffer must compute, with Y and the residual one buffer,
// what it computes into a buffer of its own, and one that cannot (it stores the convolution before
// adding the residual) must say so. Each case runs one kernel of the impl twice: into a fresh
// output, then into a copy of the residual passed as both the residual and the output. Awkward
// shapes: channel counts off the vector width, odd spatial sizes, batch 2, strides and pads.
#include <gtest/gtest.h>

#include "runtime/kernel.h"
#include "runtime/kernel_runner.h"
#include "runtime/thread_pool.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::make_kernel;
using testing::random_f32;
using testing::to_layout;

struct Case {
  const char* impl;
  const char* layout;
  Shape x, w;
  int64_t group;
  int64_t stride, pad;
  const char* act;
  bool shares;  // whether the impl may write over the residual in this case
  double atol;  // in place vs a buffer of its own (a GEMM accumulating onto the residual rounds differently)
};

const Case kCases[] = {
    {"onednn", "nhwc", Shape{1, 16, 7, 5}, Shape{24, 16, 1, 1}, 1, 1, 0, "relu", true, 0},
    {"onednn", "nchw", Shape{2, 8, 9, 11}, Shape{12, 8, 3, 3}, 1, 1, 1, "none", true, 0},
    {"onednn", "nchw8c", Shape{1, 16, 6, 7}, Shape{24, 16, 3, 3}, 1, 2, 1, "silu", true, 0},
    {"onednn", "nhwc", Shape{1, 32, 6, 6}, Shape{32, 4, 3, 3}, 8, 1, 1, "relu", true, 0},
    {"onednn_split", "nchw8c", Shape{1, 16, 13, 11}, Shape{40, 16, 3, 3}, 1, 1, 1, "relu", true, 0},
    {"depthwise_direct", "nhwc", Shape{1, 20, 9, 13}, Shape{20, 1, 3, 3}, 20, 1, 1, "relu", true, 0},
    {"depthwise_direct", "nchw8c", Shape{2, 24, 10, 7}, Shape{24, 1, 5, 5}, 24, 2, 2, "none", true, 0},
    {"depthwise_nchw", "nchw", Shape{1, 6, 11, 13}, Shape{6, 1, 3, 3}, 6, 1, 1, "relu", true, 0},
    {"depthwise_nchw", "nchw", Shape{2, 5, 14, 9}, Shape{5, 1, 3, 3}, 5, 2, 1, "none", true, 0},
    {"nchw_direct", "nchw", Shape{2, 12, 5, 7}, Shape{20, 12, 1, 1}, 1, 1, 0, "relu", true, 1e-5},
    {"nchw_direct", "nchw", Shape{1, 7, 9, 10}, Shape{7, 1, 3, 3}, 7, 1, 1, "relu", false, 0},
    {"im2col_panel", "nhwc", Shape{1, 8, 6, 7}, Shape{20, 8, 3, 3}, 1, 1, 1, "relu", true, 0},
    {"im2col_panel", "nchw8c", Shape{2, 8, 5, 9}, Shape{16, 8, 3, 3}, 1, 1, 1, "none", true, 0},
    {"winograd_f4x3", "nhwc", Shape{1, 16, 10, 9}, Shape{24, 16, 3, 3}, 1, 1, 1, "relu", true, 0},
    {"winograd_f4x3", "nchw", Shape{1, 8, 7, 11}, Shape{12, 8, 3, 3}, 1, 1, 1, "none", true, 0},
    {"reference", "nhwc", Shape{1, 8, 5, 6}, Shape{12, 8, 3, 3}, 1, 1, 1, "relu", false, 0},
};

AttrMap attrs_of(const Case& c) {
  AttrMap a{{"group", Attribute::Int(c.group)},
            {"strides", Attribute::Ints({c.stride, c.stride})},
            {"pads", Attribute::Ints({c.pad, c.pad, c.pad, c.pad})},
            {"x_layout", Attribute::String(c.layout)},
            {"residual_layout", Attribute::String(c.layout)},
            {"y_layout", Attribute::String(c.layout)}};
  testing::set_fused_conv_activation(a, c.act);
  return a;
}

TEST(FusedConvInPlace, AnImplWritingOverTheResidualComputesWhatItComputesApart) {
  uint32_t seed = 4200;
  int shared = 0;
  for (const Case& c : kCases) {
    const std::string what = std::string(c.impl) + " " + c.layout + " " + c.x.str() + " * " + c.w.str();
    SCOPED_TRACE(what);
    if (std::string(c.impl) == "onednn_split" && ThreadPool::global().max_threads() < 2) continue;  // one part per thread
    const AttrMap attrs = attrs_of(c);
    const Tensor x = random_f32(c.x, seed++), w = random_f32(c.w, seed++), b = random_f32(Shape{c.w[0]}, seed++);
    // The residual has Y's shape: Y's NCHW shape from the reference without one.
    std::string ran;
    auto y_nchw = testing::run_fused_conv(attrs_of(Case{"reference", "nchw", c.x, c.w, c.group, c.stride, c.pad, "none", false, 0}),
                                          {x, w}, "reference", &ran);
    ASSERT_TRUE(y_nchw.ok()) << y_nchw.status().message();
    const Tensor res = to_layout(random_f32(y_nchw->shape(), seed++), c.layout);
    const Tensor xl = to_layout(x, c.layout);

    auto k = make_kernel("FusedConv", attrs, 4, c.impl);
    ASSERT_TRUE(k);
    const TensorView apart[] = {xl.view(), w.view(), b.view(), res.view()};
    auto want = run_kernel_once(*k, apart, 1);
    if (!want.ok() && want.status().code() == StatusCode::kUnimplemented) continue;  // not on this CPU
    ASSERT_TRUE(want.ok()) << want.status().message();
    ASSERT_EQ(std::string(k->impl_name()), c.impl) << "the case must run the impl it tests";
    EXPECT_EQ(k->writes_over_input(3), c.shares);
    EXPECT_FALSE(k->writes_over_input(0) || k->writes_over_input(1) || k->writes_over_input(2));
    if (!c.shares) continue;

    const Tensor one = Tensor::copy_of(res.view());
    const TensorView in_place[] = {xl.view(), w.view(), b.view(), one.view()};
    const TensorView out[] = {one.view()};
    ASSERT_TRUE(k->run(in_place, out).ok());
    testing::expect_close(one, (*want)[0], c.atol, c.atol, what);
    ++shared;
  }
  EXPECT_GE(shared, 8) << "most cases must have run in place on any CPU";
}

}  // namespace
}  // namespace kiln
