// FusedMatMul in int8 (impl "onednn_int8") against the same quantization computed here in double:
// A per tensor with the calibrated a_scale (round to nearest, saturated to s8), W per output column
// (max |W[:, n]| -> 127, or 63 on a CPU without VNNI: int8_weight_levels()), the s8 products summed
// exactly, dequantized, then bias, GELU and residual. At shapes that divide no tile, with every
// epilogue; and within the quantization's error of fp32. A QDQ model's own full-range weights on a
// CPU without VNNI take the emulated path, which must give the same numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "runtime/kernel.h"
#include "runtime/kernel_runner.h"
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

double gelu(double v, const std::string& act) {
  if (act == "gelu_erf") return v * 0.5 * (1.0 + std::erf(v * 0.70710678118654752));
  if (act == "gelu_tanh") return 0.5 * v * (1.0 + std::tanh(0.79788456080286536 * (v + 0.044715 * v * v * v)));
  return v;
}

// The int8 computation in double; `quantize` false gives the fp32 result for comparison. `w_scale`
// empty: the kernel's own per-column scales; else the model's.
std::vector<double> expected(const std::vector<Tensor>& in, const std::string& act, float a_scale, bool quantize,
                             const std::vector<float>& w_scale = {}) {
  const int64_t K = in[1].shape()[0], N = in[1].shape()[1], M = in[0].numel() / K;
  const float* a = in[0].as<float>();
  const float* w = in[1].as<float>();
  std::vector<double> ws(static_cast<size_t>(N), 1.0);
  for (int64_t n = 0; n < N; ++n) {
    float amax = 0;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(w[k * N + n]));
    ws[n] = amax > 0 ? amax / static_cast<float>(int8_weight_levels()) : 1.0f;  // the kernel's float scale
    if (!w_scale.empty()) ws[n] = w_scale[n];
  }
  auto qa = [&](float x) { return std::clamp(std::nearbyint(static_cast<double>(x * (1.0f / a_scale))), -128.0, 127.0); };
  auto qw = [&](int64_t k, int64_t n) { return std::nearbyint(static_cast<double>(w[k * N + n] / static_cast<float>(ws[n]))); };
  std::vector<double> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += quantize ? qa(a[m * K + k]) * qw(k, n) : static_cast<double>(a[m * K + k]) * w[k * N + n];
      double v = quantize ? acc * static_cast<float>(a_scale * static_cast<float>(ws[n])) : acc;
      if (in.size() > 2 && !in[2].empty()) v += in[2].as<float>()[n];
      v = gelu(v, act);
      if (in.size() > 3) v += in[3].as<float>()[m * N + n];
      y[m * N + n] = v;
    }
  return y;
}

std::pair<Tensor, std::string> run_int8(const std::vector<Tensor>& in, const std::string& act, float a_scale,
                                        const std::vector<float>& w_scale = {}) {
  KernelArgs args;
  args.op_type = "FusedMatMul";
  args.node_name = "test";
  args.num_inputs = static_cast<int>(in.size());
  args.num_outputs = 1;
  AttrMap attrs{{"activation", Attribute::String(act)}, {"a_scale", Attribute::Float(a_scale)}};
  if (!w_scale.empty()) attrs["w_scale"] = Attribute::Floats(w_scale);
  auto k = KernelRegistry::builtin().create(args, attrs, "onednn_int8");
  EXPECT_TRUE(k.ok()) << k.status().message();
  if (!k.ok()) return {};
  std::vector<TensorView> views;
  for (const auto& t : in) views.push_back(t.empty() ? TensorView() : t.view());
  auto got = run_kernel_once(**k, views, 1);
  EXPECT_TRUE(got.ok()) << got.status().message();
  if (!got.ok()) return {};
  return {(*got)[0], (*k)->impl_name()};
}

struct Case {
  int64_t M, K, N;
  bool bias, residual;
  std::string act;
};

TEST(FusedMatMulInt8, MatchesTheSimulatedQuantizationAtAwkwardShapes) {
  const Case cases[] = {{1, 1, 1, false, false, "none"},     {7, 13, 5, true, false, "none"},    {37, 100, 67, true, true, "gelu_erf"},
                        {274, 384, 129, true, true, "none"}, {65, 257, 31, false, true, "gelu_tanh"}, {3, 64, 1536, true, false, "gelu_erf"}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE("M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) + " N=" + std::to_string(c.N) + " " + c.act);
    std::vector<Tensor> in{random_f32({c.M, c.K}, seed++), random_f32({c.K, c.N}, seed++, -0.3f, 0.3f)};
    in.push_back(c.bias ? random_f32({c.N}, seed++) : Tensor());
    if (c.residual) in.push_back(random_f32({c.M, c.N}, seed++));
    if (!c.residual && !c.bias) in.pop_back();
    // The calibrated range clips a little: some |A| exceed 127 * a_scale and saturate.
    const float a_scale = 0.9f / 127.0f;
    auto [y, impl] = run_int8(in, c.act, a_scale);
    ASSERT_EQ(impl, "onednn_int8");
    const std::vector<double> want = expected(in, c.act, a_scale, true), f32 = expected(in, c.act, a_scale, false);
    double worst = 0, worst_vs_f32 = 0, scale = 1;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::fabs(y.as<float>()[i] - want[i]) / std::max(1.0, std::fabs(want[i])));
      worst_vs_f32 = std::max(worst_vs_f32, std::fabs(y.as<float>()[i] - f32[i]));
      scale = std::max(scale, std::fabs(f32[i]));
    }
    // Exact integer sums; only float rounding of the scales and epilogue remains.
    EXPECT_LT(worst, 2e-5);
    // And int8 is an approximation of fp32, not something else: a few percent of the output scale
    // (the clipped inputs at 0.9 included).
    EXPECT_LT(worst_vs_f32 / scale, 0.05);
    EXPECT_GT(worst_vs_f32, 0.0);
  }
}

TEST(FusedMatMulInt8, BadScaleIsAnError) {
  KernelArgs args;
  args.op_type = "FusedMatMul";
  args.node_name = "proj";
  args.num_inputs = 2;
  args.num_outputs = 1;
  for (float bad : {0.0f, -1.0f, NAN}) {
    auto k = KernelRegistry::builtin().create(args, {{"a_scale", Attribute::Float(bad)}}, "onednn_int8");
    ASSERT_FALSE(k.ok());
    EXPECT_NE(k.status().message().find("'a_scale'"), std::string::npos) << k.status().message();
    EXPECT_NE(k.status().message().find("'proj'"), std::string::npos) << k.status().message();
  }
}

// A QDQ model's weights: W = W_q * w_scale with W_q over the whole s8 range. Where oneDNN has no
// VNNI they cannot run on its int8 matmul without saturating: the emulated path must still give
// the QDQ arithmetic (q(A) * W_q summed exactly, then scaled).
TEST(FusedMatMulInt8, ModelScalesOverSevenBitsKeepTheQdqArithmetic) {
  const int64_t M = 19, K = 70, N = 33;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> q(-127, 127);
  std::vector<float> w_scale(static_cast<size_t>(N)), w(static_cast<size_t>(K * N));
  for (int64_t n = 0; n < N; ++n) w_scale[n] = 0.002f + 0.0001f * static_cast<float>(n);
  for (int64_t i = 0; i < K * N; ++i) w[i] = static_cast<float>(q(rng)) * w_scale[i % N];
  w[0] = 127.0f * w_scale[0];  // at least one weight beyond 7 bits
  std::vector<Tensor> in{random_f32({M, K}, 3), Tensor::from_vector<float>(w, {K, N}), random_f32({N}, 4), random_f32({M, N}, 5)};
  const float a_scale = 0.9f / 127.0f;
  auto [y, impl] = run_int8(in, "gelu_erf", a_scale, w_scale);
  EXPECT_EQ(impl, int8_weight_levels() == 127 ? "onednn_int8" : "onednn_int8_emulated");
  const std::vector<double> want = expected(in, "gelu_erf", a_scale, true, w_scale);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(y.as<float>()[i] - want[i]) / std::max(1.0, std::fabs(want[i])));
  EXPECT_LT(worst, 2e-5);
}

}  // namespace
}  // namespace kiln
