// FusedConv in int8 (impl "onednn_int8") against the same quantization computed here in double:
// X per tensor with the calibrated a_scale (s8; or u8 over 255 levels of the same threshold when
// a_unsigned), W per output channel (max |W[m, ...]| -> int8_weight_levels()), the integer products
// summed exactly, dequantized, then bias, residual and the activation, as FusedConv's reference
// orders them. At odd channel counts, groups, depthwise, strides, asymmetric pads, dilation, 1x1,
// 1-D, batch 2, NHWC tensors and every activation; and within the quantization's error of the fp32
// reference kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "runtime/kernel.h"
#include "runtime/kernel_runner.h"
#include "runtime/kernels/fused_conv_common.h"
#include "runtime/kernels/fused_matmul_int8.h"

namespace kiln {
namespace {

Tensor random_f32(const Shape& s, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (float& x : v) x = dist(rng);
  return Tensor::from_vector<float>(v, s);
}

double activation(const std::string& act, double v) {
  if (act == "relu") return std::max(v, 0.0);
  if (act == "silu") return v / (1 + std::exp(-v));
  if (act == "sigmoid") return 1 / (1 + std::exp(-v));
  if (act == "hardswish") return v * std::max(0.0, std::min(1.0, v / 6 + 0.5));
  if (act == "clip") return std::min(0.5, std::max(-0.25, v));
  if (act == "gelu_erf") return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  if (act == "gelu_tanh") return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  return v;
}

struct Case {
  int64_t N, C, H, W, M, kh, kw, stride, dil, group;
  std::vector<int64_t> pads;  // top, left, bottom, right (1-D: left, right)
  bool bias, residual, a_unsigned;
  const char* layout;  // of X, the residual and Y: nchw, nhwc or nchw8c
  std::string act;
  bool one_d = false;
};

// NCHW [N, C, H, W] <-> the case's layout.
Tensor to_layout(const Tensor& t, const char* layout) {
  const ConvLayout l = parse_conv_layout(layout, "layout").value();
  if (l == ConvLayout::kNchw || t.empty()) return t;
  const Shape s = conv_layout_shape(l, t.shape(), "test tensor").value();
  std::vector<float> v(static_cast<size_t>(s.numel()));
  conv_from_nchw(l, t.as<float>(), v.data(), t.shape());
  return Tensor::from_vector<float>(v, s);
}
std::vector<double> from_layout(const float* y, const Shape& nchw, const char* layout) {
  const ConvLayout l = parse_conv_layout(layout, "layout").value();
  std::vector<float> v(y, y + nchw.numel());
  if (l != ConvLayout::kNchw) conv_to_nchw(l, y, v.data(), nchw);
  return std::vector<double>(v.begin(), v.end());
}

// The int8 convolution in double; inputs NCHW (X, W, B or empty, residual or empty).
std::vector<double> expected(const Case& c, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& r, float a_scale,
                             const Shape& ys) {
  const int64_t Cg = c.C / c.group, Mg = c.M / c.group, R = Cg * c.kh * c.kw, OH = ys[2], OW = ys[3];
  const int64_t pt = c.one_d ? 0 : c.pads[0], pl = c.one_d ? c.pads[0] : c.pads[1];
  const float* xf = x.as<float>();
  const float* wf = w.as<float>();
  const float x_step = c.a_unsigned ? a_scale * 127.0f / 255.0f : a_scale;
  const double lo = c.a_unsigned ? 0 : -128, hi = c.a_unsigned ? 255 : 127;
  auto qx = [&](float v) { return std::clamp(std::nearbyint(static_cast<double>(v * (1.0f / x_step))), lo, hi); };
  std::vector<float> ws(static_cast<size_t>(c.M));
  for (int64_t m = 0; m < c.M; ++m) {
    float amax = 0;
    for (int64_t i = 0; i < R; ++i) amax = std::max(amax, std::fabs(wf[m * R + i]));
    ws[m] = amax > 0 ? amax / static_cast<float>(int8_weight_levels()) : 1.0f;
  }
  std::vector<double> y(static_cast<size_t>(ys.numel()));
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t m = 0; m < c.M; ++m) {
      const int64_t g = m / Mg;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = 0;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t i = 0; i < c.kh; ++i)
              for (int64_t j = 0; j < c.kw; ++j) {
                const int64_t ih = oh * c.stride - pt + i * c.dil, iw = ow * c.stride - pl + j * c.dil;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const float xv = xf[((n * c.C + g * Cg + ci) * c.H + ih) * c.W + iw];
                acc += qx(xv) * std::nearbyint(static_cast<double>(wf[((m * Cg + ci) * c.kh + i) * c.kw + j] / ws[m]));
              }
          const int64_t o = ((n * c.M + m) * OH + oh) * OW + ow;
          double v = acc * static_cast<double>(x_step * ws[m]);
          if (!b.empty()) v += b.as<float>()[m];
          if (!r.empty()) v += r.as<float>()[o];
          y[o] = activation(c.act, v);
        }
    }
  return y;
}

StatusOr<std::unique_ptr<Kernel>> make(const Case& c, const std::string& impl, int num_inputs, float a_scale) {
  KernelArgs args;
  args.op_type = "FusedConv";
  args.node_name = "test";
  args.num_inputs = num_inputs;
  args.num_outputs = 1;
  AttrMap attrs{{"activation", Attribute::String(c.act)}, {"group", Attribute::Int(c.group)}};
  if (impl == "onednn_int8") {
    attrs["a_scale"] = Attribute::Float(a_scale);
    attrs["a_unsigned"] = Attribute::Int(c.a_unsigned ? 1 : 0);
  }
  if (c.one_d) {
    attrs["kernel_shape"] = Attribute::Ints({c.kw});
    attrs["strides"] = Attribute::Ints({c.stride});
    attrs["dilations"] = Attribute::Ints({c.dil});
  } else {
    attrs["kernel_shape"] = Attribute::Ints({c.kh, c.kw});
    attrs["strides"] = Attribute::Ints({c.stride, c.stride});
    attrs["dilations"] = Attribute::Ints({c.dil, c.dil});
  }
  attrs["pads"] = Attribute::Ints(c.pads);
  if (c.act == "clip") {
    attrs["activation_alpha"] = Attribute::Float(-0.25f);
    attrs["activation_beta"] = Attribute::Float(0.5f);
  }
  for (const char* a : {"x_layout", "residual_layout", "y_layout"}) attrs[a] = Attribute::String(c.layout);
  return KernelRegistry::builtin().create(args, attrs, impl);
}

TEST(FusedConvInt8, MatchesTheSimulatedQuantizationAtAwkwardShapes) {
  const Case cases[] = {
      // resnet's first conv: 3 channels, 7x7, stride 2, signed input
      {1, 3, 17, 15, 5, 7, 7, 2, 1, 1, {3, 3, 3, 3}, true, false, false, "nchw", "relu"},
      {2, 5, 9, 11, 17, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, true, true, "nchw", "none"},
      // depthwise
      {2, 17, 8, 9, 17, 3, 3, 1, 1, 17, {1, 1, 1, 1}, true, false, false, "nchw", "clip"},
      {1, 16, 11, 10, 32, 3, 3, 2, 1, 16, {1, 1, 1, 1}, false, true, true, "nchw", "relu"},
      // groups, stride 2, dilation 2, asymmetric pads
      {1, 12, 10, 13, 18, 3, 3, 2, 2, 3, {1, 0, 2, 1}, false, true, true, "nchw", "silu"},
      // 1x1 (the downsample of a residual block), NHWC between convs
      {2, 32, 7, 7, 64, 1, 1, 2, 1, 1, {0, 0, 0, 0}, true, true, true, "nhwc", "relu"},
      {1, 16, 6, 5, 24, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, false, false, "nchw", "hardswish"},
      {2, 24, 9, 9, 40, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, true, true, "nhwc", "none"},
      {1, 8, 5, 6, 9, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, false, false, "nchw", "sigmoid"},
      {1, 8, 5, 6, 9, 3, 3, 1, 1, 1, {0, 0, 0, 0}, true, true, true, "nchw", "gelu_erf"},
      {2, 6, 1, 20, 7, 1, 5, 2, 1, 1, {2, 2}, true, true, false, "nchw", "gelu_tanh", true},
      // nChw8c between convs (AVX2 builds): u8 1x1 with a residual, s8 3x3
      {2, 16, 7, 7, 32, 1, 1, 2, 1, 1, {0, 0, 0, 0}, true, true, true, "nchw8c", "relu"},
      {1, 8, 6, 7, 16, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, false, false, "nchw8c", "silu"},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE("N=" + std::to_string(c.N) + " C=" + std::to_string(c.C) + " M=" + std::to_string(c.M) + " k=" + std::to_string(c.kh) +
                 "x" + std::to_string(c.kw) + " s=" + std::to_string(c.stride) + " d=" + std::to_string(c.dil) +
                 " g=" + std::to_string(c.group) + " " + c.act + (c.a_unsigned ? " u8" : " s8") + " " + c.layout);
    const Shape xs = c.one_d ? Shape{c.N, c.C, c.W} : Shape{c.N, c.C, c.H, c.W};
    const Shape wsh = c.one_d ? Shape{c.M, c.C / c.group, c.kw} : Shape{c.M, c.C / c.group, c.kh, c.kw};
    const Tensor x = random_f32(xs, seed++, c.a_unsigned ? 0.0f : -1.0f, 1.0f);
    const Tensor w = random_f32(wsh, seed++, -0.3f, 0.3f);
    const Tensor b = c.bias ? random_f32({c.M}, seed++) : Tensor();
    // The output's shape, from the fp32 reference.
    const int num_inputs = c.residual ? 4 : c.bias ? 3 : 2;
    // The calibrated range clips a little: some |X| exceed the threshold 0.9 and saturate.
    const float a_scale = 0.9f / 127.0f;
    auto probe = make({c.N, c.C, c.H, c.W, c.M, c.kh, c.kw, c.stride, c.dil, c.group, c.pads, c.bias, false, false, "nchw", "none", c.one_d},
                      "reference", 3, a_scale);
    ASSERT_TRUE(probe.ok()) << probe.status().message();
    std::vector<TensorView> pv{x.view(), w.view(), b.empty() ? TensorView() : b.view()};
    auto py = run_kernel_once(**probe, pv, 1);
    ASSERT_TRUE(py.ok()) << py.status().message();
    const Shape ys4 = c.one_d ? Shape{c.N, c.M, 1, (*py)[0].shape()[2]} : (*py)[0].shape();
    const Tensor r = c.residual ? random_f32((*py)[0].shape(), seed++) : Tensor();

    const Case c4 = [&] {
      Case k = c;
      if (k.one_d) k.pads = {0, k.pads[0], 0, k.pads[1]};
      k.one_d = false;
      return k;
    }();
    const std::vector<double> want = expected(c4, x, w, b, r, a_scale, ys4);

    std::vector<Tensor> in{to_layout(x, c.layout), w, b, to_layout(r, c.layout)};
    std::vector<TensorView> views;
    for (int i = 0; i < num_inputs; ++i) views.push_back(in[i].empty() ? TensorView() : in[i].view());
    auto k = make(c, "onednn_int8", num_inputs, a_scale);
    ASSERT_TRUE(k.ok()) << k.status().message();
    auto got = run_kernel_once(**k, views, 1);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_STREQ((*k)->impl_name(), "onednn_int8");
    auto ref = make(c, "reference", num_inputs, a_scale);
    ASSERT_TRUE(ref.ok()) << ref.status().message();
    auto f32 = run_kernel_once(**ref, views, 1);
    ASSERT_TRUE(f32.ok()) << f32.status().message();
    const Shape& ys = (*py)[0].shape();
    const std::vector<double> y = from_layout(got->at(0).as<float>(), ys, c.layout);
    const std::vector<double> yf = from_layout(f32->at(0).as<float>(), ys, c.layout);
    double worst = 0, worst_vs_f32 = 0, scale = 1;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::fabs(y[i] - want[i]) / std::max(1.0, std::fabs(want[i])));
      worst_vs_f32 = std::max(worst_vs_f32, std::fabs(y[i] - yf[i]));
      scale = std::max(scale, std::fabs(yf[i]));
    }
    // Exact integer sums; only float rounding of the scales and epilogue remains.
    EXPECT_LT(worst, 2e-5);
    // And int8 approximates fp32 (the clipped inputs at 0.9 included).
    EXPECT_LT(worst_vs_f32 / scale, 0.05);
    EXPECT_GT(worst_vs_f32, 0.0);
  }
}

TEST(FusedConvInt8, BadAttributesAreErrors) {
  const Case c{1, 4, 5, 5, 4, 3, 3, 1, 1, 1, {1, 1, 1, 1}, false, false, false, "nchw", "none"};
  for (float bad : {0.0f, -1.0f, NAN}) {
    auto k = make(c, "onednn_int8", 2, bad);
    ASSERT_FALSE(k.ok());
    EXPECT_NE(k.status().message().find("'a_scale'"), std::string::npos) << k.status().message();
  }
  KernelArgs args;
  args.op_type = "FusedConv";
  args.node_name = "conv";
  args.num_inputs = 2;
  args.num_outputs = 1;
  auto k = KernelRegistry::builtin().create(args, {{"a_scale", Attribute::Float(0.01f)}, {"a_unsigned", Attribute::Int(2)}}, "onednn_int8");
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("'a_unsigned'"), std::string::npos) << k.status().message();
}

}  // namespace
}  // namespace kiln
