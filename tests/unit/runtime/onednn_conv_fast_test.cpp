// FusedConv (act(Conv + residual) on one oneDNN convolution with prepacked weights, NCHW or NHWC
// activations) against the unfused reference (reference Conv, Add and Relu kernels), MaxPool's and
// GlobalAveragePool's vectorized kernels against the reference pools, all at awkward shapes; and
// conv_epilogue_fusion and conv_channels_last asserted on the rewritten graph and run with the
// passes on and off.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "builder/plan/build_plan.h"
#include "builder/engine_writer.h"
#include "onnx_model_builder.h"
#include "runtime/engine.h"
#include "runtime/engine_format.h"
#include "runtime/execution_context.h"
#include "runtime/kernel_runner.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::expect_close;
using testing::make_kernel;
using testing::random_f32;
using testing::to_nhwc;

using testing::OnnxModelBuilder;

// Reference Conv, then reference Add of the residual and reference Relu.
Tensor unfused(const AttrMap& conv_attrs, const std::vector<Tensor>& in, bool relu) {
  std::vector<Tensor> conv_in{in[0], in[1]};
  if (in.size() > 2 && !in[2].empty()) conv_in.push_back(in[2]);
  auto y = run_op_once("Conv", conv_attrs, conv_in, 1, "reference");
  EXPECT_TRUE(y.ok()) << y.status().message();
  Tensor t = (*y)[0];
  if (in.size() > 3) {
    auto s = run_op_once("Add", {}, {t, in[3]}, 1, "reference");
    EXPECT_TRUE(s.ok()) << s.status().message();
    t = (*s)[0];
  }
  if (relu) {
    auto r = run_op_once("Relu", {}, {t}, 1, "reference");
    EXPECT_TRUE(r.ok()) << r.status().message();
    t = (*r)[0];
  }
  return t;
}

// Runs FusedConv with `impl`; returns the output and the implementation that ran.
std::pair<Tensor, std::string> fused(const AttrMap& attrs, const std::vector<Tensor>& in, const std::string& impl) {
  auto k = make_kernel("FusedConv", attrs, static_cast<int>(in.size()), impl);
  if (!k) return {};
  std::vector<TensorView> views;
  for (const auto& t : in) views.push_back(t.empty() ? TensorView() : t.view());
  auto got = run_kernel_once(*k, views, 1);
  EXPECT_TRUE(got.ok()) << got.status().message();
  if (!got.ok()) return {};
  return {(*got)[0], k->impl_name()};
}

struct ConvCase {
  Shape x, w;
  int64_t group;
  std::vector<int64_t> strides, pads;
};

const ConvCase kCases[] = {
    {Shape{1, 3, 23, 17}, Shape{20, 3, 7, 7}, 1, {2, 2}, {3, 3, 3, 3}},   // stem-like, C=3, odd spatial
    {Shape{3, 17, 9, 11}, Shape{33, 17, 3, 3}, 1, {1, 1}, {1, 1, 1, 1}},  // batch 3, channels not multiple of 16
    {Shape{1, 32, 15, 15}, Shape{48, 32, 3, 3}, 1, {2, 2}, {1, 0, 1, 2}},  // stride 2, asymmetric pads
    {Shape{2, 20, 13, 7}, Shape{36, 20, 1, 1}, 1, {2, 2}, {}},             // 1x1 stride 2 (downsample)
    {Shape{1, 64, 14, 14}, Shape{64, 64, 3, 3}, 1, {1, 1}, {1, 1, 1, 1}},  // ResNet block shape
    {Shape{2, 12, 9, 9}, Shape{18, 4, 3, 3}, 3, {1, 1}, {1, 1, 1, 1}},     // groups
    {Shape{1, 32, 10, 9}, Shape{32, 4, 3, 3}, 8, {1, 1}, {1, 1, 1, 1}},   // groups of 4 (ResNeXt), paired into 8s
    {Shape{2, 16, 7, 6}, Shape{16, 2, 3, 3}, 8, {2, 2}, {1, 0, 1, 1}},    // groups of 2, stride 2: quadrupled into 8s
    {Shape{1, 19, 11, 10}, Shape{19, 1, 3, 3}, 19, {2, 1}, {1, 1, 1, 1}},  // depthwise
    {Shape{3, 5, 29}, Shape{7, 5, 3}, 1, {2}, {1, 1}},                     // 1-D
};

AttrMap conv_attrs(const ConvCase& c) {
  AttrMap a{{"group", Attribute::Int(c.group)}};
  if (!c.strides.empty()) a["strides"] = Attribute::Ints(c.strides);
  if (!c.pads.empty()) a["pads"] = Attribute::Ints(c.pads);
  return a;
}

// The output shape of a case, from the reference Conv.
Shape conv_out_shape(const ConvCase& c) {
  auto y = run_op_once("Conv", conv_attrs(c), {random_f32(c.x, 1), random_f32(c.w, 2)}, 1, "reference");
  EXPECT_TRUE(y.ok()) << y.status().message();
  return y.ok() ? (*y)[0].shape() : Shape{};
}

TEST(FusedConv, OnednnMatchesUnfusedReferenceAtAwkwardShapes) {
  uint32_t seed = 500;
  int variant = 0;
  for (const auto& c : kCases) {
    const Shape ys = conv_out_shape(c);
    // Every combination of bias, residual and Relu across the cases.
    for (int v = 0; v < 4; ++v, ++variant) {
      const bool bias = variant % 2 == 0, res = v >= 2, relu = v % 2 == 1;
      std::vector<Tensor> in{random_f32(c.x, seed++), random_f32(c.w, seed++)};
      in.push_back(bias ? random_f32(Shape{c.w[0]}, seed++) : Tensor());
      if (res) in.push_back(random_f32(ys, seed++));
      if (!res && !bias) in.pop_back();
      AttrMap attrs = conv_attrs(c);
      attrs["activation"] = Attribute::String(relu ? "relu" : "none");
      const std::string what = c.x.str() + " * " + c.w.str() + (bias ? " bias" : "") + (res ? " residual" : "") + (relu ? " relu" : "");
      const Tensor want = unfused(conv_attrs(c), in, relu);
      const auto [got, impl] = fused(attrs, in, "onednn");
      EXPECT_EQ(impl, "onednn") << what;
      const double K = static_cast<double>(c.w.numel() / c.w[0]);
      expect_close(got, want, 1e-5 * std::sqrt(K), 1e-4, what);
      const auto [ref, ref_impl] = fused(attrs, in, "reference");
      EXPECT_EQ(ref_impl, "reference");
      expect_close(ref, want, 1e-6 * std::sqrt(K), 1e-5, what + " (FusedConv reference)");
    }
  }
}

TEST(FusedConv, Bf16MatchesReferenceWithBf16Tolerance) {
  if (!(host_cpu_features() & kCpuAvx512Bf16)) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  uint32_t seed = 900;
  for (int nhwc = 0; nhwc < 2; ++nhwc)
    for (const auto& c : kCases) {
      if (nhwc && c.x.rank() != 4) continue;
      const std::vector<Tensor> nchw{random_f32(c.x, seed++), random_f32(c.w, seed++), random_f32(Shape{c.w[0]}, seed++),
                                     random_f32(conv_out_shape(c), seed++)};
      std::vector<Tensor> in = nchw;
      AttrMap attrs = conv_attrs(c);
      attrs["activation"] = Attribute::String("relu");
      if (nhwc) {
        in[0] = to_nhwc(in[0]);
        in[3] = to_nhwc(in[3]);
        for (const char* a : {"x_layout", "residual_layout", "y_layout"}) attrs[a] = Attribute::String("nhwc");
      }
      const auto [got, impl] = fused(attrs, in, "onednn_bf16");
      EXPECT_EQ(impl, "onednn_bf16");
      // bf16 operands carry 8 significant bits: the error grows like sqrt(K) times 2^-8.
      const double K = static_cast<double>(c.w.numel() / c.w[0]);
      const Tensor want = unfused(conv_attrs(c), nchw, true);
      expect_close(got, nhwc ? to_nhwc(want) : want, 8e-3 * std::sqrt(K), 1e-2,
                   c.x.str() + " * " + c.w.str() + (nhwc ? " nhwc" : ""));
    }
}

TEST(FusedConv, ZeroBatchAndRepreparedShapes) {
  AttrMap attrs{{"pads", Attribute::Ints({1, 1, 1, 1})}, {"activation", Attribute::String("relu")}};
  auto k = make_kernel("FusedConv", attrs, 4, "onednn");
  ASSERT_TRUE(k);
  const Tensor w = random_f32(Shape{21, 5, 3, 3}, 7), b = random_f32(Shape{21}, 8);
  uint32_t seed = 40;
  // The weights stay (a plan constant); the batch changes, through zero and back.
  for (int64_t n : {2, 0, 1, 3, 2}) {
    const std::vector<Tensor> in{random_f32(Shape{n, 5, 9, 7}, seed++), w, b, random_f32(Shape{n, 21, 9, 7}, seed++)};
    std::vector<TensorView> views;
    for (const auto& t : in) views.push_back(t.view());
    auto got = run_kernel_once(*k, views, 1);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_STREQ(k->impl_name(), n == 0 ? "reference" : "onednn") << n;
    const Tensor want = unfused({{"pads", Attribute::Ints({1, 1, 1, 1})}}, in, true);
    expect_close((*got)[0], want, 1e-4, 1e-4, "batch " + std::to_string(n));
  }
}

TEST(FusedConv, ResidualOfAnotherShapeIsAnError) {
  auto k = make_kernel("FusedConv", {}, 4, "onednn");
  ASSERT_TRUE(k);
  const std::vector<Tensor> in{random_f32(Shape{1, 2, 5, 5}, 1), random_f32(Shape{3, 2, 3, 3}, 2), Tensor(),
                               random_f32(Shape{1, 3, 1, 3}, 3)};
  std::vector<TensorView> views;
  for (const auto& t : in) views.push_back(t.empty() ? TensorView() : t.view());
  std::vector<TensorDesc> out(1);
  const Status st = k->infer(views, out);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("input 3 (residual)"), std::string::npos) << st.message();
  KernelArgs args;
  args.op_type = "FusedConv";
  args.num_inputs = 2;
  args.num_outputs = 1;
  auto bad = KernelRegistry::builtin().create(args, {{"activation", Attribute::String("gelu")}}, "onednn");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("activation"), std::string::npos) << bad.status().message();
}

TEST(FusedConv, ChannelsLastLayoutsMatchTheNchwReference) {
  uint32_t seed = 1300;
  int combo = 0;
  for (const auto& c : kCases) {
    if (c.x.rank() != 4) continue;
    for (int rep = 0; rep < 2; ++rep, ++combo) {
      const bool x_nhwc = combo % 2 == 0, res_nhwc = combo % 3 != 1, y_nhwc = combo % 4 < 2;
      const std::vector<Tensor> nchw{random_f32(c.x, seed++), random_f32(c.w, seed++), random_f32(Shape{c.w[0]}, seed++),
                                     random_f32(conv_out_shape(c), seed++)};
      const Tensor want = unfused(conv_attrs(c), nchw, true);
      std::vector<Tensor> in = nchw;
      if (x_nhwc) in[0] = to_nhwc(in[0]);
      if (res_nhwc) in[3] = to_nhwc(in[3]);
      AttrMap attrs = conv_attrs(c);
      attrs["activation"] = Attribute::String("relu");
      attrs["x_layout"] = Attribute::String(x_nhwc ? "nhwc" : "nchw");
      attrs["residual_layout"] = Attribute::String(res_nhwc ? "nhwc" : "nchw");
      attrs["y_layout"] = Attribute::String(y_nhwc ? "nhwc" : "nchw");
      const std::string what = c.x.str() + " * " + c.w.str() + " x " + (x_nhwc ? "nhwc" : "nchw") + " residual " +
                               (res_nhwc ? "nhwc" : "nchw") + " y " + (y_nhwc ? "nhwc" : "nchw");
      const double K = static_cast<double>(c.w.numel() / c.w[0]);
      for (const char* impl : {"onednn", "reference"}) {
        const auto [got, ran] = fused(attrs, in, impl);
        EXPECT_EQ(ran, impl) << what;
        expect_close(got, y_nhwc ? to_nhwc(want) : want, 1e-5 * std::sqrt(K), 1e-4, what + " " + impl);
      }
    }
  }
  // Zero batch (reference fallback) in NHWC, and a layout on a 1-D input is an error.
  AttrMap attrs{{"x_layout", Attribute::String("nhwc")}, {"y_layout", Attribute::String("nhwc")}};
  const auto [empty, ran] = fused(attrs, {Tensor::zeros(DType::kFloat32, Shape{0, 5, 6, 3}), random_f32(Shape{4, 3, 3, 3}, 1)}, "onednn");
  EXPECT_EQ(ran, "reference");
  EXPECT_EQ(empty.shape(), (Shape{0, 3, 4, 4}));
  auto k = make_kernel("FusedConv", attrs, 2, "onednn");
  const Tensor x1 = random_f32(Shape{1, 3, 9}, 2), w1 = random_f32(Shape{2, 3, 3}, 3);
  const TensorView v1[] = {x1.view(), w1.view()};
  std::vector<TensorDesc> d(1);
  const Status st = k->infer(v1, d);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("nhwc"), std::string::npos) << st.message();
}

// ---- MaxPool, GlobalAveragePool ---------------------------------------------------------------------

TEST(VectorizedMaxPool, MatchesReferenceAtAwkwardShapes) {
  struct PoolCase {
    Shape x;
    std::vector<int64_t> kernel, strides, pads;
    int64_t ceil_mode;
  };
  const PoolCase cases[] = {
      {Shape{1, 64, 112, 112}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},  // ResNet stem
      {Shape{3, 5, 13, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},     // odd sizes, batch 3
      {Shape{2, 3, 10, 9}, {2, 3}, {2, 3}, {}, 1},                // ceil mode: windows past the end
      {Shape{1, 4, 7, 8}, {3, 2}, {1, 2}, {2, 0, 1, 1}, 0},       // asymmetric pads
      {Shape{1, 2, 5, 5}, {5, 5}, {1, 1}, {}, 0},                 // one window covering everything
      {Shape{2, 3, 17}, {4}, {3}, {1, 2}, 1},                     // 1-D
      {Shape{0, 3, 8, 8}, {2, 2}, {2, 2}, {}, 0},                 // zero batch
  };
  uint32_t seed = 70;
  for (const auto& c : cases) {
    AttrMap attrs{{"kernel_shape", Attribute::Ints(c.kernel)}, {"ceil_mode", Attribute::Int(c.ceil_mode)}};
    if (!c.strides.empty()) attrs["strides"] = Attribute::Ints(c.strides);
    if (!c.pads.empty()) attrs["pads"] = Attribute::Ints(c.pads);
    const Tensor x = random_f32(c.x, seed++);
    auto k = make_kernel("MaxPool", attrs, 1, "vectorized");
    ASSERT_TRUE(k);
    const TensorView xv = x.view();
    auto got = run_kernel_once(*k, std::span<const TensorView>(&xv, 1), 1);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_STREQ(k->impl_name(), "vectorized") << c.x.str();
    auto want = run_op_once("MaxPool", attrs, {x}, 1, "reference");
    ASSERT_TRUE(want.ok()) << want.status().message();
    expect_close((*got)[0], (*want)[0], 0, 0, c.x.str());
  }
}

// Every divisor rule: windows clipped by pads and by ceil mode, with and without count_include_pad.
TEST(VectorizedAveragePool, MatchesReferenceAtAwkwardShapes) {
  struct PoolCase {
    Shape x;
    std::vector<int64_t> kernel, strides, pads;
    int64_t ceil_mode, count_include_pad;
  };
  const PoolCase cases[] = {
      {Shape{1, 128, 56, 56}, {2, 2}, {2, 2}, {}, 0, 0},          // DenseNet's transition
      {Shape{3, 5, 13, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0, 0},  // odd sizes, batch 3, pads excluded
      {Shape{3, 5, 13, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0, 1},  // pads counted
      {Shape{2, 3, 10, 9}, {2, 3}, {2, 3}, {}, 1, 0},             // ceil mode: windows past the end
      {Shape{2, 3, 10, 9}, {3, 3}, {2, 2}, {1, 0, 0, 1}, 1, 1},   // ceil mode past the padded end, counted
      {Shape{1, 4, 7, 8}, {3, 2}, {1, 2}, {2, 0, 1, 1}, 0, 1},    // asymmetric pads
      {Shape{1, 2, 5, 5}, {5, 5}, {1, 1}, {}, 0, 0},              // one window covering everything
      {Shape{2, 3, 17}, {4}, {3}, {1, 2}, 1, 1},                  // 1-D
      {Shape{0, 3, 8, 8}, {2, 2}, {2, 2}, {}, 0, 0},              // zero batch
  };
  uint32_t seed = 170;
  for (const auto& c : cases) {
    AttrMap attrs{{"kernel_shape", Attribute::Ints(c.kernel)}, {"ceil_mode", Attribute::Int(c.ceil_mode)},
                  {"count_include_pad", Attribute::Int(c.count_include_pad)}};
    if (!c.strides.empty()) attrs["strides"] = Attribute::Ints(c.strides);
    if (!c.pads.empty()) attrs["pads"] = Attribute::Ints(c.pads);
    const std::string what = c.x.str() + (c.count_include_pad ? " count_include_pad" : "") + (c.ceil_mode ? " ceil" : "");
    const Tensor x = random_f32(c.x, seed++);
    auto k = make_kernel("AveragePool", attrs, 1, "vectorized");
    ASSERT_TRUE(k);
    const TensorView xv = x.view();
    auto got = run_kernel_once(*k, std::span<const TensorView>(&xv, 1), 1);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_STREQ(k->impl_name(), "vectorized") << what;
    auto want = run_op_once("AveragePool", attrs, {x}, 1, "reference");
    ASSERT_TRUE(want.ok()) << want.status().message();
    expect_close((*got)[0], (*want)[0], 1e-6, 1e-6, what);
  }
  // Dilation runs on the reference.
  const AttrMap dilated{{"kernel_shape", Attribute::Ints({2, 2})}, {"dilations", Attribute::Ints({2, 2})}};
  auto k = make_kernel("AveragePool", dilated, 1, "vectorized");
  const Tensor x = random_f32(Shape{1, 2, 7, 7}, 3);
  const TensorView xv = x.view();
  ASSERT_TRUE(run_kernel_once(*k, std::span<const TensorView>(&xv, 1), 1).ok());
  EXPECT_STREQ(k->impl_name(), "reference");
}

TEST(VectorizedGlobalAveragePool, MatchesReferenceAtAwkwardShapes) {
  // Planes smaller than, equal to and not a multiple of the 16 partial sums; 1-D and 3-D; zero batch;
  // ResNet-18's head; one large plane (parallel over planes only past 65536 elements).
  const Shape shapes[] = {Shape{1, 512, 7, 7}, Shape{2, 3, 1, 1},   Shape{3, 5, 4, 4},   Shape{2, 7, 17},
                          Shape{1, 2, 3, 5, 7}, Shape{0, 3, 8, 8}, Shape{2, 64, 33, 31}, Shape{1, 1, 300, 301}};
  uint32_t seed = 90;
  for (const Shape& s : shapes) {
    const Tensor x = random_f32(s, seed++);
    auto k = make_kernel("GlobalAveragePool", {}, 1, "vectorized");
    ASSERT_TRUE(k);
    const TensorView xv = x.view();
    auto got = run_kernel_once(*k, std::span<const TensorView>(&xv, 1), 1);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_STREQ(k->impl_name(), "vectorized") << s.str();
    auto want = run_op_once("GlobalAveragePool", {}, {x}, 1, "reference");
    ASSERT_TRUE(want.ok()) << want.status().message();
    expect_close((*got)[0], (*want)[0], 1e-6, 1e-6, s.str());
  }
  // float64 runs on the reference.
  auto k = make_kernel("GlobalAveragePool", {}, 1, "vectorized");
  const Tensor x64 = Tensor::zeros(DType::kFloat64, Shape{1, 2, 3, 3});
  const TensorView xv = x64.view();
  ASSERT_TRUE(run_kernel_once(*k, std::span<const TensorView>(&xv, 1), 1).ok());
  EXPECT_STREQ(k->impl_name(), "reference");
}

TEST(VectorizedMaxPool, IndicesDilationAndFloat64RunOnTheReference) {
  const AttrMap dilated{{"kernel_shape", Attribute::Ints({2, 2})}, {"dilations", Attribute::Ints({2, 2})}};
  auto k = make_kernel("MaxPool", dilated, 1, "vectorized");
  ASSERT_TRUE(k);
  const Tensor x = random_f32(Shape{1, 2, 7, 7}, 3);
  const TensorView xv = x.view();
  auto got = run_kernel_once(*k, std::span<const TensorView>(&xv, 1), 1);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_STREQ(k->impl_name(), "reference");
  auto want = run_op_once("MaxPool", dilated, {x}, 1, "reference");
  ASSERT_TRUE(want.ok());
  expect_close((*got)[0], (*want)[0], 0, 0, "dilated");

  KernelArgs args;
  args.op_type = "MaxPool";
  args.num_inputs = 1;
  args.num_outputs = 2;
  auto with_indices = KernelRegistry::builtin().create(args, {{"kernel_shape", Attribute::Ints({2, 2})}}, "vectorized");
  ASSERT_TRUE(with_indices.ok());
  auto both = run_kernel_once(**with_indices, std::span<const TensorView>(&xv, 1), 2);
  ASSERT_TRUE(both.ok()) << both.status().message();
  EXPECT_STREQ((*with_indices)->impl_name(), "reference");
  EXPECT_EQ((*both)[1].dtype(), DType::kInt64);

  const Tensor xd = Tensor::from_vector<double>({1, 5, 3, 2}, Shape{1, 1, 2, 2});
  auto kd = make_kernel("MaxPool", {{"kernel_shape", Attribute::Ints({2, 2})}}, 1, "vectorized");
  const TensorView xdv = xd.view();
  auto yd = run_kernel_once(*kd, std::span<const TensorView>(&xdv, 1), 1);
  ASSERT_TRUE(yd.ok());
  EXPECT_STREQ(kd->impl_name(), "reference");
  EXPECT_EQ((*yd)[0].as<double>()[0], 5.0);
}

TEST(VectorizedMaxPool, NhwcLayoutMatchesTheNchwReference) {
  struct PoolCase {
    Shape x;  // NCHW
    std::vector<int64_t> kernel, strides, pads;
    int64_t ceil_mode;
  };
  const PoolCase cases[] = {
      {Shape{1, 64, 28, 28}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},
      {Shape{3, 5, 13, 11}, {3, 2}, {2, 1}, {1, 0, 1, 1}, 0},
      {Shape{2, 17, 10, 9}, {2, 3}, {2, 3}, {}, 1},
      {Shape{0, 3, 8, 8}, {2, 2}, {2, 2}, {}, 0},
  };
  uint32_t seed = 170;
  for (const auto& c : cases) {
    AttrMap attrs{{"kernel_shape", Attribute::Ints(c.kernel)}, {"ceil_mode", Attribute::Int(c.ceil_mode)}};
    if (!c.strides.empty()) attrs["strides"] = Attribute::Ints(c.strides);
    if (!c.pads.empty()) attrs["pads"] = Attribute::Ints(c.pads);
    const Tensor x = random_f32(c.x, seed++);
    auto want = run_op_once("MaxPool", attrs, {x}, 1, "reference");
    ASSERT_TRUE(want.ok()) << want.status().message();
    AttrMap nhwc = attrs;
    nhwc["layout"] = Attribute::String("nhwc");
    const Tensor xn = to_nhwc(x);
    for (const char* impl : {"vectorized", "reference"}) {
      auto k = make_kernel("MaxPool", nhwc, 1, impl);
      ASSERT_TRUE(k);
      const TensorView xv = xn.view();
      auto got = run_kernel_once(*k, std::span<const TensorView>(&xv, 1), 1);
      ASSERT_TRUE(got.ok()) << got.status().message();
      EXPECT_STREQ(k->impl_name(), impl) << c.x.str();
      expect_close((*got)[0], to_nhwc((*want)[0]), 0, 0, c.x.str() + " " + impl);
    }
  }
  // NHWC has no Indices output and needs a 4-D input.
  auto k = make_kernel("MaxPool", {{"kernel_shape", Attribute::Ints({2, 2})}, {"layout", Attribute::String("nhwc")}}, 1, "vectorized");
  const Tensor x3 = random_f32(Shape{1, 4, 4}, 1);
  const TensorView v3 = x3.view();
  std::vector<TensorDesc> d(1);
  EXPECT_FALSE(k->infer(std::span<const TensorView>(&v3, 1), d).ok());
  const Tensor x4 = random_f32(Shape{1, 4, 4, 2}, 2);
  const TensorView v4 = x4.view();
  std::vector<TensorDesc> d2(2);
  EXPECT_FALSE(k->infer(std::span<const TensorView>(&v4, 1), d2).ok());
}

// ---- conv_epilogue_fusion -----------------------------------------------------------------------

// A ResNet-like graph: a stem Conv+Relu+MaxPool, a basic block (Conv+Relu, Conv + residual Add + Relu), a
// Conv whose output is also a graph output (nothing fuses after it) and a Conv whose output has two
// readers (neither the Add nor the Relu fuses).
OnnxModelBuilder cnn_model() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{3}, int64_t{11}, int64_t{9}});
  auto init = [&](const std::string& name, std::vector<int64_t> dims, uint32_t seed) {
    Shape s;
    for (auto d : dims) s.push_back(d);
    const Tensor t = random_f32(s, seed);
    b.initializer_f(name, std::vector<float>(t.as<float>(), t.as<float>() + t.numel()), dims);
  };
  init("w0", {6, 3, 3, 3}, 1);
  init("b0", {6}, 2);
  init("w1", {6, 6, 3, 3}, 3);
  init("b1", {6}, 4);
  init("w2", {6, 6, 3, 3}, 5);
  init("w3", {5, 6, 1, 1}, 6);
  init("w4", {5, 5, 1, 1}, 7);
  auto conv = [&](const std::string& x, const std::string& w, const std::string& bias, const std::string& y,
                  const std::string& name, bool pad) {
    std::vector<std::string> in{x, w};
    if (!bias.empty()) in.push_back(bias);
    auto& n = b.node("Conv", in, {y}, name);
    if (pad) OnnxModelBuilder::ints_attr(n, "pads", {1, 1, 1, 1});
  };
  conv("x", "w0", "b0", "c0", "stem/Conv", true);
  b.node("Relu", {"c0"}, {"r0"}, "stem/Relu");
  auto& pool = b.node("MaxPool", {"r0"}, {"p0"}, "stem/MaxPool");
  OnnxModelBuilder::ints_attr(pool, "kernel_shape", {3, 3});
  OnnxModelBuilder::ints_attr(pool, "pads", {1, 1, 1, 1});
  conv("p0", "w1", "b1", "c1", "block/conv1", true);
  b.node("Relu", {"c1"}, {"r1"}, "block/relu1");
  conv("r1", "w2", "", "c2", "block/conv2", true);
  b.node("Add", {"p0", "c2"}, {"s2"}, "block/Add");
  b.node("Relu", {"s2"}, {"r2"}, "block/relu2");
  conv("r2", "w3", "", "c3", "head/Conv", false);
  b.node("Relu", {"c3"}, {"r3"}, "head/Relu");
  conv("r3", "w4", "", "c4", "twice/Conv", false);
  b.node("Add", {"c4", "r3"}, {"s4"}, "twice/Add");
  b.node("Mul", {"c4", "s4"}, {"y"}, "twice/Mul");
  b.output("c3").output("r3").output("y");
  return b;
}

std::vector<std::vector<float>> run_cnn(const Graph& g, const std::set<std::string>& disabled, const Tensor& x,
                                        std::vector<std::string>* ops) {
  BuildOptions opts;
  opts.disabled_passes = disabled;
  auto plan = build_plan(g, opts);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  for (const auto& s : (*plan)->steps) ops->push_back(s.op_type);
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  EXPECT_TRUE((*ctx)->set_input("x", x.view()).ok());
  const Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<std::vector<float>> outs;
  for (int i = 0; i < 3; ++i) {
    const TensorView& y = (*ctx)->output(i);
    outs.emplace_back(y.as<float>(), y.as<float>() + y.numel());
  }
  return outs;
}

TEST(ConvEpilogueFusion, RewritesConvAddReluChains) {
  auto g = cnn_model().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  PassContext ctx;
  ctx.conv_layout = "nhwc";  // AVX-512's choice, whatever this machine is (the 6 channels are no whole 8-blocks)
  ASSERT_TRUE(run_pass_pipeline(*g, ctx).ok());
  std::map<std::string, const Node*> fused_nodes;
  int others = 0;
  for (const auto& n : g->nodes) {
    if (n.op_type == "FusedConv") fused_nodes[n.name] = &n;
    others += n.op_type == "Conv" || n.op_type == "Relu";
  }
  ASSERT_EQ(fused_nodes.size(), 5u);
  EXPECT_EQ(others, 1);  // head/Relu: its input c3 is a graph output
  auto check = [&](const std::string& name, const std::string& act, std::vector<std::string> replaced, size_t inputs,
                   const std::string& output) {
    const Node& n = *fused_nodes.at(name);
    EXPECT_EQ(n.attrs.at("activation").s, act) << name;
    EXPECT_EQ(n.replaced_nodes, replaced) << name;
    EXPECT_EQ(n.inputs.size(), inputs) << name;
    EXPECT_EQ(g->values[n.outputs[0]].name, output) << name;
  };
  check("stem/Conv", "relu", {"stem/Conv", "stem/Relu"}, 3, "r0");
  check("block/conv1", "relu", {"block/conv1", "block/relu1"}, 3, "r1");
  check("block/conv2", "relu", {"block/conv2", "block/Add", "block/relu2"}, 4, "r2");
  const Node& conv2 = *fused_nodes.at("block/conv2");
  EXPECT_LT(conv2.inputs[2], 0);  // no bias
  EXPECT_EQ(g->values[conv2.inputs[3]].name, "p0");
  EXPECT_EQ(fused_nodes.at("block/conv2")->attrs.at("pads").ints, (std::vector<int64_t>{1, 1, 1, 1}));
  check("head/Conv", "none", {"head/Conv"}, 2, "c3");
  check("twice/Conv", "none", {"twice/Conv"}, 2, "c4");
  // conv_channels_last: r0 (through the MaxPool), p0, r1 and r2 flow only into FusedConvs; c3 is a
  // graph output and c4 has other readers, so they stay NCHW, as does the graph input x.
  auto layout = [&](const std::string& name, const char* attr) {
    const auto& attrs = fused_nodes.at(name)->attrs;
    auto it = attrs.find(attr);
    return it == attrs.end() ? std::string("nchw") : it->second.s;
  };
  const char* kAttrs[] = {"x_layout", "residual_layout", "y_layout"};
  const std::map<std::string, std::vector<std::string>> want = {{"stem/Conv", {"nchw", "nchw", "nhwc"}},
                                                                {"block/conv1", {"nhwc", "nchw", "nhwc"}},
                                                                {"block/conv2", {"nhwc", "nhwc", "nhwc"}},
                                                                {"head/Conv", {"nhwc", "nchw", "nchw"}},
                                                                {"twice/Conv", {"nchw", "nchw", "nchw"}}};
  for (const auto& [name, layouts] : want)
    for (int i = 0; i < 3; ++i) EXPECT_EQ(layout(name, kAttrs[i]), layouts[i]) << name << " " << kAttrs[i];
  for (const auto& n : g->nodes) {
    if (n.op_type == "MaxPool") {
      EXPECT_EQ(n.attrs.at("layout").s, "nhwc");
    }
  }
  const Value& r1 = g->values[fused_nodes.at("block/conv1")->outputs[0]];
  ASSERT_TRUE(r1.shape.has_value());
  EXPECT_EQ(sym_shape_str(*r1.shape), sym_shape_str(from_shape(Shape{2, 11, 9, 6})));
}

TEST(ConvEpilogueFusion, OnAndOffGiveTheSameOutputs) {
  auto g = cnn_model().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Tensor x = random_f32(Shape{2, 3, 11, 9}, 99);
  std::vector<std::string> ops_on, ops_off;
  const auto on = run_cnn(*g, {}, x, &ops_on);
  const auto off = run_cnn(*g, {"conv_epilogue_fusion"}, x, &ops_off);
  std::vector<std::string> ops_nchw;
  const auto nchw = run_cnn(*g, {"conv_channels_last"}, x, &ops_nchw);
  EXPECT_EQ(ops_nchw, ops_on);
  EXPECT_EQ(std::count(ops_on.begin(), ops_on.end(), "FusedConv"), 5);
  EXPECT_EQ(std::count(ops_off.begin(), ops_off.end(), "FusedConv"), 0);
  ASSERT_EQ(on.size(), off.size());
  for (size_t o = 0; o < on.size(); ++o) {
    ASSERT_EQ(on[o].size(), off[o].size());
    for (size_t i = 0; i < on[o].size(); ++i)
      EXPECT_NEAR(on[o][i], off[o][i], 1e-4 * (1.0 + std::abs(off[o][i]))) << "output " << o << " element " << i;
  }
  ASSERT_EQ(nchw.size(), off.size());
  for (size_t o = 0; o < nchw.size(); ++o)
    for (size_t i = 0; i < nchw[o].size(); ++i)
      EXPECT_NEAR(nchw[o][i], off[o][i], 1e-4 * (1.0 + std::abs(off[o][i]))) << "NCHW only: output " << o << " element " << i;
}

// A broadcasting Add after a Conv is not a residual the kernel can take: the Conv fuses alone and
// the Add and the Relu after it stay, with the same outputs as the unfused graph.
TEST(ConvEpilogueFusion, BroadcastingAddIsNotFused) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{4}});
  b.input("r", DType::kFloat32, {int64_t{3}, int64_t{1}, int64_t{1}});
  const Tensor w = random_f32(Shape{3, 2, 3, 3}, 1);
  b.initializer_f("w", std::vector<float>(w.as<float>(), w.as<float>() + w.numel()), {3, 2, 3, 3});
  b.node("Conv", {"x", "w"}, {"c"}, "conv");
  b.node("Add", {"c", "r"}, {"s"}, "add");
  b.node("Relu", {"s"}, {"y"}, "relu");
  b.output("y");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Tensor x = random_f32(Shape{1, 2, 5, 4}, 2), r = random_f32(Shape{3, 1, 1}, 3);
  std::vector<float> results[2];
  for (int off = 0; off < 2; ++off) {
    BuildOptions opts;
    if (off) opts.disabled_passes = {"conv_epilogue_fusion"};
    auto plan = build_plan(*g, opts);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    std::vector<std::string> ops;
    for (const auto& st : (*plan)->steps) ops.push_back(st.op_type);
    // The broadcasting Add and the Relu stay out of the convolution; elementwise_fusion makes them one step.
    EXPECT_EQ(ops, (std::vector<std::string>{off ? "Conv" : "FusedConv", "FusedElementwise"}));
    auto ctx = ExecutionContext::create(*plan);
    ASSERT_TRUE(ctx.ok());
    ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
    ASSERT_TRUE((*ctx)->set_input("r", r.view()).ok());
    ASSERT_TRUE((*ctx)->run().ok());
    const TensorView& y = (*ctx)->output(0);
    results[off].assign(y.as<float>(), y.as<float>() + y.numel());
  }
  ASSERT_EQ(results[0].size(), 18u);  // [1, 3, 3, 2]
  for (size_t i = 0; i < results[0].size(); ++i) EXPECT_NEAR(results[0][i], results[1][i], 1e-5);
}

TEST(ConvEpilogueFusion, EngineFileKeepsFusedConvStepsAndOutputs) {
  auto g = cnn_model().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto built = build_plan(*g, {});
  ASSERT_TRUE(built.ok()) << built.status().message();
  auto plan = std::const_pointer_cast<Plan>(*built);
  plan->profile = "p";
  EngineWriteInput w;
  w.plans = {plan};
  w.source_model = "cnn.onnx";
  w.required_cpu_features = host_cpu_features() & (kCpuAvx2 | kCpuFma);
  auto bytes = serialize_engine(w);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto engine = Engine::load_memory(bytes->data(), bytes->size());
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  const Plan& loaded = *(*engine)->plan(0);
  ASSERT_EQ(loaded.steps.size(), plan->steps.size());
  int fused = 0;
  for (size_t i = 0; i < loaded.steps.size(); ++i) {
    const PlanStep& a = loaded.steps[i];
    const PlanStep& b = plan->steps[i];
    EXPECT_EQ(a.op_type, b.op_type);
    EXPECT_EQ(a.replaced_nodes, b.replaced_nodes) << a.name;
    if (a.op_type != "FusedConv") continue;
    ++fused;
    for (const char* attr : {"activation", "x_layout", "residual_layout", "y_layout", "pads"}) {
      auto x = a.attrs.find(attr), y = b.attrs.find(attr);
      ASSERT_EQ(x == a.attrs.end(), y == b.attrs.end()) << a.name << " " << attr;
      if (x == a.attrs.end()) continue;
      EXPECT_EQ(x->second.s, y->second.s) << a.name << " " << attr;
      EXPECT_EQ(x->second.ints, y->second.ints) << a.name << " " << attr;
    }
  }
  EXPECT_EQ(fused, 5);
  const Tensor x = random_f32(Shape{2, 3, 11, 9}, 5);
  std::vector<std::vector<float>> outs[2];
  for (int from_file = 0; from_file < 2; ++from_file) {
    auto ctx = from_file ? (*engine)->create_context("p") : ExecutionContext::create(plan);
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
    ASSERT_TRUE((*ctx)->run().ok());
    for (int o = 0; o < 3; ++o) {
      const TensorView& y = (*ctx)->output(o);
      outs[from_file].emplace_back(y.as<float>(), y.as<float>() + y.numel());
    }
  }
  EXPECT_EQ(outs[0], outs[1]);
}

}  // namespace
}  // namespace kiln
