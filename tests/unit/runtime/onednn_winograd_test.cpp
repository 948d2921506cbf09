// FusedConv on oneDNN's Winograd convolution (impl "onednn_winograd") against a float64 reference at
// awkward shapes (odd and non-square H/W, channels that are not multiples of 16, batch 2, valid and
// asymmetric pads, residual and Relu, NCHW and NHWC), its clean Unimplemented where oneDNN has no
// Winograd kernel, the empty-batch fallback, and the nchw16c layout on every FusedConv impl.
//
// Tolerance. Winograd computes Y = A^T [(G W G^T) . (B^T X B)] A: the products are taken on
// transformed tiles whose entries are sums of inputs scaled by 1/4..4 (F(4x4,3x3); 1/2..1 for
// F(2x2,3x3)), so an output's rounding error is that of a length-K dot product (K = C*9) times a
// growth factor of the transforms. With inputs and weights uniform in [-1, 1] the outputs have a
// standard deviation of sqrt(K)/3, and float32 round-off of either algorithm grows like sqrt(K).
// Measured against float64 on the AVX-512 Xeon these tests were written on (oneDNN 2.6 picks
// F(2x2,3x3) for most cases and F(4x4,3x3) for the 33- and 256-channel ones): F(2x2,3x3) is within
// 3.3e-6 .. 1.3e-5, below the direct convolution on every case (its shorter sums); F(4x4,3x3)
// reaches 2.25e-4 at K = 2304 where the direct convolution reaches 1.31e-4 (outputs of standard
// deviation 16 there: a relative 1.4e-5). The bound, 2e-5 * sqrt(K) absolute (9.6e-4 at K = 2304,
// 3.4e-4 at K = 297), leaves 4x room for other CPUs' blocking and accumulation orders and stays
// three orders of magnitude below any real defect (a wrong tap, a missing residual or bias is O(1)).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/engine_format.h"
#include "runtime/kernel.h"
#include "runtime/kernel_runner.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::make_kernel;
using testing::random_f32;

Tensor to_f64(const Tensor& t) {
  std::vector<double> v(t.as<float>(), t.as<float>() + t.numel());
  return Tensor::from_vector<double>(v, t.shape());
}

// [N, C, H, W] -> [N, H, W, C], written out here rather than taken from the code under test.
template <typename T>
Tensor to_nhwc(const Tensor& t) {
  const Shape& s = t.shape();
  Tensor o = Tensor::zeros(t.dtype(), Shape{s[0], s[2], s[3], s[1]});
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t w = 0; w < s[3]; ++w)
          o.as<T>()[((n * s[2] + h) * s[3] + w) * s[1] + c] = t.as<T>()[((n * s[1] + c) * s[2] + h) * s[3] + w];
  return o;
}

struct RunResult {
  Status status;
  Tensor y;
  std::string impl;
};

RunResult run_fused(const AttrMap& attrs, const std::vector<Tensor>& in, const std::string& impl) {
  auto k = make_kernel("FusedConv", attrs, static_cast<int>(in.size()), impl);
  if (!k) return {Internal("no kernel"), {}, {}};
  std::vector<TensorView> views;
  for (const auto& t : in) views.push_back(t.view());
  auto got = run_kernel_once(*k, views, 1);
  if (!got.ok()) return {got.status(), {}, k->impl_name()};
  return {Status::Ok(), (*got)[0], k->impl_name()};
}

// float64 reference: Conv, + residual, Relu, on the NCHW tensors.
Tensor reference(const AttrMap& conv_attrs, const std::vector<Tensor>& nchw, bool residual, bool relu) {
  auto y = run_op_once("Conv", conv_attrs, {to_f64(nchw[0]), to_f64(nchw[1]), to_f64(nchw[2])}, 1, "reference");
  EXPECT_TRUE(y.ok()) << y.status().message();
  Tensor t = (*y)[0];
  double* p = t.as<double>();
  const Tensor r = residual ? to_f64(nchw[3]) : Tensor();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (residual) p[i] += r.as<double>()[i];
    if (relu && p[i] < 0) p[i] = 0;
  }
  return t;
}

// Largest |got - want| (got float32, want float64, same shape).
double max_abs_err(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return INFINITY;
  double m = 0;
  for (int64_t i = 0; i < want.numel(); ++i) m = std::max(m, std::abs(static_cast<double>(got.as<float>()[i]) - want.as<double>()[i]));
  return m;
}

bool host_has_avx512() { return (host_cpu_features() & kCpuAvx512f) != 0; }

struct WinoCase {
  Shape x, w;
  std::vector<int64_t> pads;  // empty: none
};

const WinoCase kCases[] = {
    {Shape{2, 20, 7, 9}, Shape{24, 20, 3, 3}, {1, 1, 1, 1}},       // batch 2, channels not multiples of 16, odd non-square
    {Shape{1, 13, 13, 13}, Shape{16, 13, 3, 3}, {1, 1, 1, 1}},     // 13x13, C = 13
    {Shape{2, 37, 11, 6}, Shape{19, 37, 3, 3}, {}},                // valid (no pads), M = 19
    {Shape{1, 33, 9, 7}, Shape{48, 33, 3, 3}, {0, 1, 1, 0}},       // asymmetric pads
    {Shape{2, 64, 13, 13}, Shape{64, 64, 3, 3}, {1, 1, 1, 1}},     // ResNet-like, odd size
    {Shape{2, 256, 14, 14}, Shape{256, 256, 3, 3}, {1, 1, 1, 1}},  // large K: oneDNN picks F(4x4,3x3) here
};

AttrMap attrs_of(const WinoCase& c) {
  AttrMap a;
  if (!c.pads.empty()) a["pads"] = Attribute::Ints(c.pads);
  return a;
}

TEST(FusedConvWinograd, MatchesFloat64ReferenceAtAwkwardShapes) {
  if (!host_has_avx512()) GTEST_SKIP() << "oneDNN's Winograd convolution needs AVX-512";
  uint32_t seed = 1200;
  double worst_wino = 0, worst_direct = 0;
  for (const auto& c : kCases) {
    const AttrMap conv = attrs_of(c);
    auto ys = run_op_once("Conv", conv, {random_f32(c.x, 1), random_f32(c.w, 2)}, 1, "reference");
    ASSERT_TRUE(ys.ok()) << ys.status().message();
    const Shape y_shape = (*ys)[0].shape();
    const double K = static_cast<double>(c.w[1] * 9);
    for (int variant = 0; variant < 4; ++variant) {
      const bool residual = variant & 1, relu = variant & 2;
      const std::vector<Tensor> nchw{random_f32(c.x, seed++), random_f32(c.w, seed++), random_f32(Shape{c.w[0]}, seed++),
                                     random_f32(y_shape, seed++)};
      const Tensor want = reference(conv, nchw, residual, relu);
      for (int nhwc = 0; nhwc < 2; ++nhwc) {
        AttrMap attrs = conv;
        attrs["activation"] = Attribute::String(relu ? "relu" : "none");
        std::vector<Tensor> in{nchw[0], nchw[1], nchw[2]};
        if (residual) in.push_back(nchw[3]);
        if (nhwc) {
          in[0] = to_nhwc<float>(in[0]);
          if (residual) in[3] = to_nhwc<float>(in[3]);
          for (const char* a : {"x_layout", "residual_layout", "y_layout"}) attrs[a] = Attribute::String("nhwc");
        }
        const std::string what = c.x.str() + " * " + c.w.str() + (residual ? " residual" : "") + (relu ? " relu" : "") + (nhwc ? " nhwc" : " nchw");
        const Tensor w = nhwc ? to_nhwc<double>(want) : want;
        const RunResult wino = run_fused(attrs, in, "onednn_winograd");
        ASSERT_TRUE(wino.status.ok()) << what << ": " << wino.status.message();
        EXPECT_EQ(wino.impl, "onednn_winograd") << what;
        const double err = max_abs_err(wino.y, w);
        EXPECT_LE(err, 2e-5 * std::sqrt(K)) << what;
        worst_wino = std::max(worst_wino, err);
        const RunResult direct = run_fused(attrs, in, "onednn");
        ASSERT_TRUE(direct.status.ok()) << what << ": " << direct.status.message();
        worst_direct = std::max(worst_direct, max_abs_err(direct.y, w));
      }
    }
  }
  // For the record (the tolerance comment quotes these).
  std::printf("max abs error vs float64: winograd %.3g, direct %.3g\n", worst_wino, worst_direct);
}

// [N, C, H, W] -> [N, C/16, H, W, 16], written out here rather than taken from the code under test.
template <typename T>
Tensor to_nchw16c(const Tensor& t) {
  const Shape& s = t.shape();
  Tensor o = Tensor::zeros(t.dtype(), Shape{s[0], s[1] / 16, s[2], s[3], 16});
  const int64_t hw = s[2] * s[3];
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t p = 0; p < hw; ++p) o.as<T>()[((n * (s[1] / 16) + c / 16) * hw + p) * 16 + c % 16] = t.as<T>()[(n * s[1] + c) * hw + p];
  return o;
}

TEST(FusedConvWinograd, Nchw16cLayoutsOnEveryImpl) {
  if (!host_has_avx512()) GTEST_SKIP() << "oneDNN's Winograd convolution needs AVX-512";
  const AttrMap conv{{"pads", Attribute::Ints({1, 1, 1, 1})}};
  const Shape xs{2, 32, 9, 7}, ws{48, 32, 3, 3}, ys{2, 48, 9, 7};
  const std::vector<Tensor> nchw{random_f32(xs, 70), random_f32(ws, 71), random_f32(Shape{48}, 72), random_f32(ys, 73)};
  const Tensor want = reference(conv, nchw, true, true);
  // Every combination of X / residual / Y in nchw16c, the rest NHWC or NCHW.
  for (int combo = 0; combo < 8; ++combo) {
    AttrMap attrs = conv;
    attrs["activation"] = Attribute::String("relu");
    std::vector<Tensor> in = nchw;
    const bool xb = combo & 1, rb = combo & 2, yb = combo & 4;
    attrs["x_layout"] = Attribute::String(xb ? "nchw16c" : "nhwc");
    in[0] = xb ? to_nchw16c<float>(in[0]) : to_nhwc<float>(in[0]);
    attrs["residual_layout"] = Attribute::String(rb ? "nchw16c" : "nchw");
    if (rb) in[3] = to_nchw16c<float>(in[3]);
    attrs["y_layout"] = Attribute::String(yb ? "nchw16c" : "nchw");
    const Tensor w = yb ? to_nchw16c<double>(want) : want;
    for (const char* impl : {"onednn_winograd", "onednn", "reference"}) {
      const RunResult r = run_fused(attrs, in, impl);
      ASSERT_TRUE(r.status.ok()) << impl << " combo " << combo << ": " << r.status.message();
      EXPECT_EQ(r.impl, impl);
      EXPECT_LE(max_abs_err(r.y, w), 2e-5 * std::sqrt(32.0 * 9)) << impl << " combo " << combo;
    }
  }
  // nchw16c needs whole 16-channel blocks: 24 output channels, or a block of 8, are errors at infer.
  AttrMap bad_y = conv;
  bad_y["y_layout"] = Attribute::String("nchw16c");
  const RunResult r24 = run_fused(bad_y, {random_f32(xs, 74), random_f32(Shape{24, 32, 3, 3}, 75)}, "onednn_winograd");
  EXPECT_EQ(r24.status.code(), StatusCode::kInvalidArgument) << r24.status.message();
  EXPECT_NE(r24.status.message().find("divisible by 16"), std::string::npos) << r24.status.message();
  AttrMap bad_x = conv;
  bad_x["x_layout"] = Attribute::String("nchw16c");
  const RunResult r8 = run_fused(bad_x, {random_f32(Shape{2, 4, 9, 7, 8}, 76), random_f32(ws, 77)}, "onednn");
  EXPECT_EQ(r8.status.code(), StatusCode::kInvalidArgument) << r8.status.message();
  EXPECT_NE(r8.status.message().find("[N, C/16, H, W, 16]"), std::string::npos) << r8.status.message();
}

TEST(FusedConvWinograd, FailsCleanlyWhereOnednnHasNoWinograd) {
  struct Bad {
    Shape x, w;
    AttrMap attrs;
    const char* why;
  };
  const Bad bad[] = {
      {Shape{1, 16, 9, 9}, Shape{16, 16, 5, 5}, {{"pads", Attribute::Ints({2, 2, 2, 2})}}, "5x5 kernel"},
      {Shape{1, 16, 9, 9}, Shape{16, 16, 3, 3}, {{"strides", Attribute::Ints({2, 2})}, {"pads", Attribute::Ints({1, 1, 1, 1})}}, "stride 2"},
      {Shape{1, 16, 9, 9}, Shape{16, 16, 3, 3}, {{"dilations", Attribute::Ints({2, 2})}, {"pads", Attribute::Ints({2, 2, 2, 2})}}, "dilation 2"},
      {Shape{1, 32, 9, 9}, Shape{32, 16, 3, 3}, {{"group", Attribute::Int(2)}, {"pads", Attribute::Ints({1, 1, 1, 1})}}, "2 groups"},
      {Shape{1, 16, 9, 9}, Shape{16, 16, 3, 3}, {{"pads", Attribute::Ints({2, 2, 2, 2})}}, "pads 2"},
      {Shape{1, 16, 9, 9}, Shape{16, 16, 1, 1}, {}, "1x1 kernel"},
      {Shape{2, 16, 29}, Shape{16, 16, 3}, {{"pads", Attribute::Ints({1, 1})}}, "1-D"},
  };
  for (const auto& b : bad) {
    const RunResult r = run_fused(b.attrs, {random_f32(b.x, 3), random_f32(b.w, 4)}, "onednn_winograd");
    ASSERT_FALSE(r.status.ok()) << b.why;
    EXPECT_EQ(r.status.code(), StatusCode::kUnimplemented) << b.why << ": " << r.status.message();
    EXPECT_NE(r.status.message().find("Winograd"), std::string::npos) << r.status.message();
  }
  // float64 is not something oneDNN computes at all.
  const RunResult f64 = run_fused({{"pads", Attribute::Ints({1, 1, 1, 1})}},
                                  {to_f64(random_f32(Shape{1, 16, 5, 5}, 5)), to_f64(random_f32(Shape{16, 16, 3, 3}, 6))}, "onednn_winograd");
  EXPECT_EQ(f64.status.code(), StatusCode::kUnimplemented) << f64.status.message();
}

TEST(FusedConvWinograd, EmptyBatchRunsOnTheReferenceAndShapesCanChange) {
  if (!host_has_avx512()) GTEST_SKIP() << "oneDNN's Winograd convolution needs AVX-512";
  const AttrMap attrs{{"pads", Attribute::Ints({1, 1, 1, 1})}, {"activation", Attribute::String("relu")}};
  auto k = make_kernel("FusedConv", attrs, 4, "onednn_winograd");
  ASSERT_TRUE(k);
  const Tensor w = random_f32(Shape{21, 5, 3, 3}, 7), b = random_f32(Shape{21}, 8);
  uint32_t seed = 60;
  for (int64_t n : {2, 0, 1, 3}) {
    const std::vector<Tensor> in{random_f32(Shape{n, 5, 9, 7}, seed++), w, b, random_f32(Shape{n, 21, 9, 7}, seed++)};
    std::vector<TensorView> views;
    for (const auto& t : in) views.push_back(t.view());
    auto got = run_kernel_once(*k, views, 1);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_STREQ(k->impl_name(), n == 0 ? "reference" : "onednn_winograd") << n;
    EXPECT_LE(max_abs_err((*got)[0], reference({{"pads", Attribute::Ints({1, 1, 1, 1})}}, in, true, true)), 1e-4) << n;
  }
}

}  // namespace
}  // namespace kiln
