// FusedConv impl "stem_direct" (runtime/kernels/stem_conv_kernels.cpp) against the reference
// FusedConv: first convolutions of 1 to 4 channels at awkward sizes (odd images, 3x3 / 5x5 / 7x7 /
// 4x4 patches, strides 1, 2, 4, asymmetric pads, an image smaller than the kernel), output channel
// counts off the vector width, NHWC and the blocked layout of the CPU's vector width, every
// epilogue activation; both ISAs' register blocks (the AVX2 ones on any machine, AVX-512 where the
// CPU has it); and the cases it leaves to the reference.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/cpu_features.h"
#include "runtime/kernels/stem_conv.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::random_f32;
using testing::to_layout;

struct Case {
  const char* what;
  Shape x, w;
  std::vector<int64_t> strides, pads;
  bool bias;
  const char* act;
};

const Case kCases[] = {
    {"MobileNet/EfficientNet stem 3x3 s2, 32 channels, SiLU", Shape{1, 3, 17, 23}, Shape{32, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}, true, "silu"},
    {"ResNet stem 7x7 s2, 64 channels, batch 2", Shape{2, 3, 20, 19}, Shape{64, 3, 7, 7}, {2, 2}, {3, 3, 3, 3}, true, "relu"},
    {"ConvNeXt stem 4x4 s4, 96 channels", Shape{1, 3, 16, 18}, Shape{96, 3, 4, 4}, {4, 4}, {0, 0, 0, 0}, true, "none"},
    {"one channel 5x5 s1, asymmetric pads, 24 channels", Shape{1, 1, 9, 11}, Shape{24, 1, 5, 5}, {1, 1}, {2, 1, 0, 2}, false, "hardswish"},
    {"image smaller than the kernel, 4 channels -> 40", Shape{1, 4, 3, 3}, Shape{40, 4, 7, 7}, {2, 2}, {3, 3, 3, 3}, true, "clip"},
    {"20 channels (a partial vector), stride 2 x 1", Shape{1, 3, 10, 13}, Shape{20, 3, 3, 3}, {2, 1}, {1, 1, 1, 1}, true, "gelu_tanh"},
    {"16 channels (mnasnet), 3x3 s2", Shape{1, 3, 15, 14}, Shape{16, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}, true, "relu"},
};

AttrMap attrs_of(const Case& c, const char* act, const char* y_layout) {
  AttrMap a{{"strides", Attribute::Ints(c.strides)}, {"pads", Attribute::Ints(c.pads)}, {"y_layout", Attribute::String(y_layout)}};
  testing::set_fused_conv_activation(a, act);
  return a;
}

// The reference's output in `layout`.
Tensor reference(const Case& c, const char* act, const Tensor& x, const Tensor& w, const Tensor& b, const char* layout) {
  std::string ran;
  auto y = testing::run_fused_conv(attrs_of(c, act, "nchw"), {x, w, c.bias ? b : Tensor()}, "reference", &ran);
  EXPECT_TRUE(y.ok()) << y.status().message();
  return y.ok() ? to_layout(*y, layout) : Tensor();
}

const char* blocked_layout() { return cpu_info().avx512 ? "nchw16c" : "nchw8c"; }

TEST(StemConv, MatchesTheReferenceAtAwkwardShapesInBothOutputLayouts) {
  if (!cpu_info().avx2) GTEST_SKIP() << "stem_direct needs AVX2";
  uint32_t seed = 5100;
  for (const Case& c : kCases) {
    const Tensor x = random_f32(c.x, seed++), w = random_f32(c.w, seed++, -0.5f, 0.5f), b = random_f32(Shape{c.w[0]}, seed++);
    const int64_t block = cpu_info().avx512 ? 16 : 8;
    for (const char* layout : {"nhwc", blocked_layout()}) {
      if (std::string(layout) != "nhwc" && c.w[0] % block != 0) continue;  // a blocked layout never pads
      const std::string what = std::string(c.what) + " into " + layout;
      std::string ran;
      auto got = testing::run_fused_conv(attrs_of(c, c.act, layout), {x, w, c.bias ? b : Tensor()}, "stem_direct", &ran);
      ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
      EXPECT_EQ(ran, "stem_direct") << what;
      testing::expect_close(*got, reference(c, c.act, x, w, b, layout), 2e-5, 2e-5, what);
    }
  }
}

TEST(StemConv, EveryActivation) {
  if (!cpu_info().avx2) GTEST_SKIP() << "stem_direct needs AVX2";
  const Case& c = kCases[0];
  const Tensor x = random_f32(c.x, 7), w = random_f32(c.w, 8, -0.5f, 0.5f), b = random_f32(Shape{c.w[0]}, 9);
  for (const char* act : testing::kFusedConvActivations) {
    std::string ran;
    auto got = testing::run_fused_conv(attrs_of(c, act, "nhwc"), {x, w, b}, "stem_direct", &ran);
    ASSERT_TRUE(got.ok()) << act << ": " << got.status().message();
    EXPECT_EQ(ran, "stem_direct") << act;
    testing::expect_close(*got, reference(c, act, x, w, b, "nhwc"), 2e-5, 2e-5, act);
  }
}

// Each ISA's register blocks called directly, so an AVX-512 machine checks the AVX2 ones too.
TEST(StemConv, BothIsasRegisterBlocks) {
  if (!cpu_info().avx2) GTEST_SKIP() << "stem_direct needs AVX2";
  // 64 channels (whole blocks of 4 AVX-512 and 2 AVX2 vectors) and 20 (a partial vector).
  for (const Case* k : {&kCases[1], &kCases[5]}) {
    const Case& cs = *k;
    const Tensor x = random_f32(cs.x, 21), w = random_f32(cs.w, 22, -0.5f, 0.5f), b = random_f32(Shape{cs.w[0]}, 23);
    const Tensor want = reference(cs, "relu", x, w, b, "nhwc");
    stem::Geom g{};
    g.C = cs.x[1], g.H = cs.x[2], g.W = cs.x[3], g.OC = cs.w[0], g.OCp = (g.OC + 15) / 16 * 16;
    g.KH = cs.w[2], g.KW = cs.w[3], g.sh = cs.strides[0], g.sw = cs.strides[1], g.ph = cs.pads[0], g.pw = cs.pads[1];
    g.OH = want.shape()[1], g.OW = want.shape()[2];
    g.pixel_stride = g.OC, g.image_stride = g.OC * g.OH * g.OW;
    // W [OC, C, KH, KW] as [C][KH][KW][OCp], written out here.
    std::vector<float> packed(static_cast<size_t>(g.C * g.KH * g.KW * g.OCp), 0.0f), bias(static_cast<size_t>(g.OCp), 0.0f);
    const int64_t taps = g.C * g.KH * g.KW;
    for (int64_t oc = 0; oc < g.OC; ++oc) {
      for (int64_t t = 0; t < taps; ++t) packed[static_cast<size_t>(t * g.OCp + oc)] = w.as<float>()[oc * taps + t];
      bias[static_cast<size_t>(oc)] = cs.bias ? b.as<float>()[oc] : 0.0f;
    }
    struct Isa { const char* name; stem::RowsFn fn; int64_t lanes; };
    std::vector<Isa> isas{{"avx2", stem::rows_avx2(ConvAct::kRelu), 8}};
    if (cpu_info().avx512) isas.push_back({"avx512", stem::rows_avx512(ConvAct::kRelu), 16});
    for (const Isa& isa : isas) {
      g.vector_stride = isa.lanes;
      Tensor y = Tensor::zeros(DType::kFloat32, want.shape());
      const int64_t rows = cs.x[0] * g.OH;
      isa.fn(g, x.as<float>(), packed.data(), bias.data(), y.as<float>(), 0, rows / 2);  // two calls: rows split anywhere
      isa.fn(g, x.as<float>(), packed.data(), bias.data(), y.as<float>(), rows / 2, rows);
      testing::expect_close(y, want, 2e-5, 2e-5, std::string(isa.name) + " " + cs.what);
    }
  }
}

TEST(StemConv, LeavesOtherConvolutionsToTheReference) {
  const AttrMap nhwc{{"pads", Attribute::Ints({1, 1, 1, 1})}, {"y_layout", Attribute::String("nhwc")}};
  testing::expect_fused_conv_runs_reference("stem_direct", nhwc, Shape{1, 8, 9, 9}, Shape{16, 8, 3, 3}, 1, "8 input channels");
  AttrMap nchw = nhwc;
  nchw["y_layout"] = Attribute::String("nchw");
  testing::expect_fused_conv_runs_reference("stem_direct", nchw, Shape{1, 3, 9, 9}, Shape{16, 3, 3, 3}, 2, "NCHW output");
  AttrMap dilated = nhwc;
  dilated["dilations"] = Attribute::Ints({2, 2});
  testing::expect_fused_conv_runs_reference("stem_direct", dilated, Shape{1, 3, 9, 9}, Shape{16, 3, 3, 3}, 3, "dilation 2");
  AttrMap grouped = nhwc;
  grouped["group"] = Attribute::Int(3);
  testing::expect_fused_conv_runs_reference("stem_direct", grouped, Shape{1, 3, 9, 9}, Shape{24, 1, 3, 3}, 4, "3 groups");
  // A residual: the stem has none, so the impl does not take one.
  const Tensor x = random_f32(Shape{1, 3, 6, 6}, 5), w = random_f32(Shape{16, 3, 3, 3}, 6), b = random_f32(Shape{16}, 7);
  const Tensor res = random_f32(Shape{1, 6, 6, 16}, 8);
  AttrMap with_res = nhwc;
  with_res["residual_layout"] = Attribute::String("nhwc");
  std::string ran;
  auto got = testing::run_fused_conv(with_res, {x, w, b, res}, "stem_direct", &ran);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(ran, "reference");
}

}  // namespace
}  // namespace kiln
