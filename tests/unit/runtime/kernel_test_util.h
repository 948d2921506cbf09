// Helpers shared by the kernel tests: random float32 tensors, a kernel of a named implementation,
// NCHW -> NHWC written out by hand (not taken from the code under test), and an elementwise
// comparison that reports the first few mismatches.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/kernel_runner.h"
#include "runtime/tensor.h"

namespace kiln::testing {

// Uniform in [lo, hi), reproducible from `seed`.
inline Tensor random_f32(const Shape& s, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (float& x : v) x = dist(rng);
  return Tensor::from_vector<float>(v, s);
}

// The builtin registry's `impl` of `op` (one output); null, with a test failure, when it has none.
inline std::unique_ptr<Kernel> make_kernel(const std::string& op, const AttrMap& attrs, int num_inputs, const std::string& impl) {
  KernelArgs args;
  args.op_type = op;
  args.node_name = "test";
  args.num_inputs = num_inputs;
  args.num_outputs = 1;
  auto k = KernelRegistry::builtin().create(args, attrs, impl);
  EXPECT_TRUE(k.ok()) << k.status().message();
  return k.ok() ? std::move(k.value()) : nullptr;
}

// float32 [N, C, H, W] in FusedConv layout `layout` ("nchw", "nhwc", "nchw8c" or "nchw16c": [N, H,
// W, C] or [N, C/b, H, W, b]), written out here rather than taken from the code under test.
inline Tensor to_layout(const Tensor& t, const std::string& layout) {
  if (layout == "nchw") return t;
  const Shape& s = t.shape();
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  const int64_t block = layout == "nchw8c" ? 8 : layout == "nchw16c" ? 16 : 0;
  Tensor o = Tensor::zeros(DType::kFloat32, block ? Shape{N, C / block, H, W, block} : Shape{N, H, W, C});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          const int64_t to = block ? (((n * (C / block) + c / block) * H + h) * W + w) * block + c % block : ((n * H + h) * W + w) * C + c;
          o.as<float>()[to] = t.as<float>()[((n * C + c) * H + h) * W + w];
        }
  return o;
}

// float32 [N, C, H, W] -> [N, H, W, C].
inline Tensor to_nhwc(const Tensor& t) { return to_layout(t, "nhwc"); }

// Every FusedConv epilogue activation.
inline constexpr const char* kFusedConvActivations[] = {"none", "relu", "silu", "sigmoid", "hardswish", "clip", "gelu_erf", "gelu_tanh"};

// Sets FusedConv's attribute activation to `act`, with clip's bounds (-0.5, 0.75) for "clip".
inline void set_fused_conv_activation(AttrMap& a, const char* act) {
  a["activation"] = Attribute::String(act);
  if (std::string(act) == "clip") {
    a["activation_alpha"] = Attribute::Float(-0.5f);
    a["activation_beta"] = Attribute::Float(0.75f);
  }
}

// Runs the FusedConv `impl` on `in` (an empty tensor is an absent input); the output stays in its
// layout, and *ran is the implementation that ran it.
inline StatusOr<Tensor> run_fused_conv(const AttrMap& attrs, const std::vector<Tensor>& in, const std::string& impl, std::string* ran) {
  std::vector<TensorView> views;
  for (const Tensor& t : in) views.push_back(t.empty() ? TensorView{} : t.view());
  auto k = make_kernel("FusedConv", attrs, static_cast<int>(in.size()), impl);
  if (!k) return Internal("no kernel");
  KILN_ASSIGN_OR_RETURN(auto out, run_kernel_once(*k, views, 1));
  *ran = k->impl_name();
  return std::move(out[0]);
}

// |got - want| <= atol + rtol * |want| elementwise (float32, equal shapes); NaN never passes.
inline void expect_close(const Tensor& got, const Tensor& want, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int bad = 0;
  for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
    const double g = got.as<float>()[i], w = want.as<float>()[i];
    if (!(std::abs(g - w) <= atol + rtol * std::abs(w))) {
      ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
      ++bad;
    }
  }
}

// A FusedConv case `impl` does not cover: it runs as "reference" (tactic selection then reports
// the impl unavailable) and gives the reference's result.
inline void expect_fused_conv_runs_reference(const std::string& impl, const AttrMap& attrs, const Shape& x, const Shape& w,
                                             uint32_t seed, const std::string& what) {
  const Tensor xt = random_f32(x, seed), wt = random_f32(w, seed + 1);
  std::string ran;
  auto got = run_fused_conv(attrs, {xt, wt}, impl, &ran);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
  EXPECT_EQ(ran, "reference") << what;
  auto want = run_fused_conv(attrs, {xt, wt}, "reference", &ran);
  ASSERT_TRUE(want.ok()) << what;
  expect_close(*got, *want, 0, 0, what);
}

// One FusedConv kernel of `impl` prepared at a small shape and then a larger one (a dynamic
// profile's min and max): its scratch grows, it still runs as `impl`, and both runs match the
// reference within `atol`.
inline void expect_fused_conv_regrows(const std::string& impl, double atol) {
  const AttrMap attrs{{"pads", Attribute::Ints({1, 1, 1, 1})}, {"activation", Attribute::String("relu")}};
  const Tensor w = random_f32(Shape{24, 8, 3, 3}, 1), b = random_f32(Shape{24}, 2);
  auto k = make_kernel("FusedConv", attrs, 3, impl);
  auto ref = make_kernel("FusedConv", attrs, 3, "reference");
  ASSERT_TRUE(k && ref);
  for (const Shape& xs : {Shape{1, 8, 4, 5}, Shape{3, 8, 17, 13}}) {
    const Tensor x = random_f32(xs, 3);
    const TensorView v[] = {x.view(), w.view(), b.view()};
    auto got = run_kernel_once(*k, v, 1);
    auto want = run_kernel_once(*ref, v, 1);
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_EQ(k->impl_name(), impl);
    expect_close((*got)[0], (*want)[0], atol, 1e-5, xs.str());
  }
}

}  // namespace kiln::testing
