// FusedConv and MaxPool in every activation layout (NCHW, NHWC, nChw8c, nChw16c) against the NCHW
// reference at awkward shapes, and conv_channels_last in both of its layouts (NHWC: what an AVX-512
// build machine chooses; nChw8c: what an AVX2 one does) run against the unfused graph. Whichever
// layout a plan records, the kernels of this machine must run it: the forced layouts below are
// how a plan built on the other CPU looks. The ctest conv_layout_isa_cap runs this file again with
// KILN_MAX_CPU_ISA=avx2, which makes an AVX-512 machine build and run the AVX2 choice.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>

#include "builder/passes/pass.h"
#include "builder/plan/build_plan.h"
#include "onnx_model_builder.h"
#include "runtime/cpu_features.h"
#include "runtime/execution_context.h"
#include "runtime/kernel_runner.h"
#include "runtime/thread_pool.h"
#include "unit/builder/graph_test_util.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::expect_close;
using testing::make_kernel;
using testing::random_f32;

using testing::OnnxModelBuilder;

// The layouts, with their channel block (0: not blocked; -1: NHWC).
struct Layout {
  const char* name;
  int64_t block;
};
constexpr Layout kLayouts[] = {{"nchw", 0}, {"nhwc", -1}, {"nchw8c", 8}, {"nchw16c", 16}};

bool fits(const Layout& l, int64_t channels) { return l.block <= 0 || channels % l.block == 0; }

// NCHW [N, C, H, W] into layout `l`.
Tensor to_layout(const Tensor& t, const Layout& l) { return testing::to_layout(t, l.name); }

struct ConvCase {
  Shape x, w;
  int64_t group;
  int64_t stride;
  int64_t pad;
};

// Channels 3, 5, 12, 17, 24 (whole 8-blocks, half blocks, none), groups, depthwise, stride 2,
// batch 2.
const ConvCase kConvCases[] = {
    {Shape{2, 3, 9, 7}, Shape{24, 3, 3, 3}, 1, 2, 1},     // C=3 stem, stride 2
    {Shape{2, 5, 8, 9}, Shape{12, 5, 3, 3}, 1, 1, 1},     // 5 -> 12
    {Shape{1, 12, 7, 7}, Shape{17, 12, 1, 1}, 1, 1, 0},   // 12 -> 17
    {Shape{2, 17, 6, 5}, Shape{24, 17, 3, 3}, 1, 2, 1},   // 17 -> 24, stride 2
    {Shape{1, 24, 9, 9}, Shape{24, 8, 3, 3}, 3, 1, 1},    // groups of 8
    {Shape{2, 24, 5, 6}, Shape{12, 6, 3, 3}, 4, 1, 1},    // groups of 6 -> 3
    {Shape{1, 32, 7, 9}, Shape{32, 4, 3, 3}, 8, 1, 1},    // groups of 4 (oneDNN: widened to 8)
    {Shape{2, 24, 7, 6}, Shape{24, 1, 3, 3}, 24, 2, 1},   // depthwise, stride 2
    {Shape{1, 16, 8, 8}, Shape{16, 1, 3, 3}, 16, 1, 1},   // depthwise, 16c fits
    {Shape{2, 16, 6, 6}, Shape{32, 16, 1, 1}, 1, 1, 0},   // 1x1, every layout fits
    {Shape{2, 16, 9, 10}, Shape{32, 16, 3, 3}, 1, 1, 1},  // 3x3 stride 1 (Winograd), every layout fits
};

AttrMap conv_attrs(const ConvCase& c) {
  return {{"group", Attribute::Int(c.group)},
          {"strides", Attribute::Ints({c.stride, c.stride})},
          {"pads", Attribute::Ints({c.pad, c.pad, c.pad, c.pad})}};
}

TEST(ConvBlockedLayout, FusedConvEveryLayoutMatchesTheNchwReference) {
  uint32_t seed = 900;
  int checked = 0;
  for (const auto& c : kConvCases) {
    auto y0 = run_op_once("Conv", conv_attrs(c), {random_f32(c.x, 1), random_f32(c.w, 2)}, 1, "reference");
    ASSERT_TRUE(y0.ok()) << y0.status().message();
    const Shape ys = (*y0)[0].shape();
    const Tensor x = random_f32(c.x, seed++), w = random_f32(c.w, seed++), b = random_f32(Shape{c.w[0]}, seed++);
    const Tensor res = random_f32(ys, seed++);
    // The NCHW reference: Conv, Add, Relu.
    auto conv = run_op_once("Conv", conv_attrs(c), {x, w, b}, 1, "reference");
    ASSERT_TRUE(conv.ok());
    auto sum = run_op_once("Add", {}, {(*conv)[0], res}, 1, "reference");
    ASSERT_TRUE(sum.ok());
    auto want = run_op_once("Relu", {}, {(*sum)[0]}, 1, "reference");
    ASSERT_TRUE(want.ok());
    const double K = static_cast<double>(c.w.numel() / c.w[0]);
    for (const Layout& lx : kLayouts)
      for (const Layout& lr : kLayouts)
        for (const Layout& ly : kLayouts) {
          if (!fits(lx, c.x[1]) || !fits(lr, ys[1]) || !fits(ly, ys[1])) continue;
          AttrMap attrs = conv_attrs(c);
          attrs["activation"] = Attribute::String("relu");
          attrs["x_layout"] = Attribute::String(lx.name);
          attrs["residual_layout"] = Attribute::String(lr.name);
          attrs["y_layout"] = Attribute::String(ly.name);
          const std::vector<Tensor> in{to_layout(x, lx), w, b, to_layout(res, lr)};
          std::vector<TensorView> views;
          for (const auto& t : in) views.push_back(t.view());
          const std::string what = c.x.str() + " * " + c.w.str() + " group " + std::to_string(c.group) + " x " + lx.name + " residual " +
                                   lr.name + " y " + ly.name;
          // onednn_split: batch 1, every value in one blocked layout, group 1 or depthwise, two blocks or
          // more of output channels, two threads.
          const bool split = c.x[0] == 1 && lx.block > 0 && lr.block == lx.block && ly.block == lx.block &&
                             (c.group == 1 || (c.group == c.x[1] && c.group == c.w[0])) && c.w[0] / lx.block >= 2 &&
                             ThreadPool::global().max_threads() > 1 && omp_get_max_threads() > 1;
          for (const char* impl : {"onednn", "im2col_panel", "winograd_f4x3", "onednn_split", "depthwise_direct", "depthwise_nchw", "reference"}) {
            // im2col_panel runs group 1 only, winograd_f4x3 3x3 stride-1 group-1 only, depthwise_direct
            // depthwise convolutions with no NCHW tensor only, depthwise_nchw with every tensor NCHW
            // only (the reference otherwise).
            if (c.group != 1 && std::string(impl) == "im2col_panel") continue;
            if ((c.group != 1 || c.stride != 1 || c.w[2] != 3) && std::string(impl) == "winograd_f4x3") continue;
            if (!split && std::string(impl) == "onednn_split") continue;
            const bool no_nchw = lx.block != 0 && lr.block != 0 && ly.block != 0;
            if ((c.group != c.x[1] || c.w[0] != c.x[1] || !no_nchw) && std::string(impl) == "depthwise_direct") continue;
            const bool all_nchw = lx.block == 0 && lr.block == 0 && ly.block == 0;
            if ((c.group != c.x[1] || c.w[0] != c.x[1] || !all_nchw) && std::string(impl) == "depthwise_nchw") continue;
            auto k = make_kernel("FusedConv", attrs, 4, impl);
            ASSERT_TRUE(k) << what;
            auto got = run_kernel_once(*k, views, 1);
            ASSERT_TRUE(got.ok()) << what << " " << impl << ": " << got.status().message();
            EXPECT_EQ(std::string(k->impl_name()), impl) << what;
            expect_close((*got)[0], to_layout((*want)[0], ly), 1e-5 * std::sqrt(K), 1e-4, what + " " + impl);
            ++checked;
          }
        }
  }
  EXPECT_GT(checked, 200);
}

// A blocked layout whose block does not divide the channels is an error naming the layout.
TEST(ConvBlockedLayout, ChannelsNotInWholeBlocksAreRejected) {
  AttrMap attrs{{"y_layout", Attribute::String("nchw8c")}};
  auto k = make_kernel("FusedConv", attrs, 2, "onednn");
  ASSERT_TRUE(k);
  const Tensor x = random_f32(Shape{1, 3, 4, 4}, 1), w = random_f32(Shape{12, 3, 1, 1}, 2);
  const TensorView v[] = {x.view(), w.view()};
  std::vector<TensorDesc> d(1);
  const Status st = k->infer(v, d);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("nchw8c"), std::string::npos) << st.message();
  // A 5-D input whose last dim is not the block.
  AttrMap xattrs{{"x_layout", Attribute::String("nchw8c")}};
  auto k2 = make_kernel("FusedConv", xattrs, 2, "onednn");
  const Tensor x5 = random_f32(Shape{1, 1, 4, 4, 16}, 3), w2 = random_f32(Shape{4, 16, 1, 1}, 4);
  const TensorView v2[] = {x5.view(), w2.view()};
  EXPECT_FALSE(k2->infer(v2, d).ok());
}

TEST(ConvBlockedLayout, MaxPoolEveryLayoutMatchesTheNchwReference) {
  struct PoolCase {
    Shape x;
    std::vector<int64_t> k, strides, pads;
    int64_t ceil_mode;
  };
  const PoolCase cases[] = {
      {Shape{2, 8, 11, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},   // ResNet stem, batch 2
      {Shape{1, 24, 13, 13}, {3, 3}, {2, 2}, {0, 0, 0, 0}, 1},  // SqueezeNet / GoogLeNet ceil_mode
      {Shape{2, 16, 7, 6}, {3, 3}, {1, 1}, {1, 1, 1, 1}, 1},   // inception branch: stride 1, pad 1
      {Shape{1, 40, 5, 8}, {2, 3}, {2, 1}, {0, 1, 1, 0}, 0},   // asymmetric
  };
  uint32_t seed = 77;
  for (const auto& c : cases) {
    AttrMap attrs{{"kernel_shape", Attribute::Ints(c.k)},
                  {"strides", Attribute::Ints(c.strides)},
                  {"pads", Attribute::Ints(c.pads)},
                  {"ceil_mode", Attribute::Int(c.ceil_mode)}};
    const Tensor x = random_f32(c.x, seed++);
    auto want = run_op_once("MaxPool", attrs, {x}, 1, "reference");
    ASSERT_TRUE(want.ok()) << want.status().message();
    for (const Layout& l : {kLayouts[1], kLayouts[2]}) {
      AttrMap la = attrs;
      la["layout"] = Attribute::String(l.name);
      const Tensor xl = to_layout(x, l);
      for (const char* impl : {"vectorized", "reference"}) {
        auto k = make_kernel("MaxPool", la, 1, impl);
        ASSERT_TRUE(k);
        const TensorView v = xl.view();
        auto got = run_kernel_once(*k, std::span<const TensorView>(&v, 1), 1);
        ASSERT_TRUE(got.ok()) << got.status().message();
        expect_close((*got)[0], to_layout((*want)[0], l), 0, 0, c.x.str() + " " + l.name + " " + impl);
        EXPECT_STREQ(k->impl_name(), impl) << c.x.str() << " " << l.name;
      }
    }
  }
  // nchw16c is a convolution layout only.
  KernelArgs args;
  args.op_type = "MaxPool";
  args.node_name = "test";
  args.num_inputs = 1;
  args.num_outputs = 1;
  auto bad = KernelRegistry::builtin().create(
      args, {{"kernel_shape", Attribute::Ints({2, 2})}, {"layout", Attribute::String("nchw16c")}}, "vectorized");
  EXPECT_FALSE(bad.ok());
}

TEST(ConvBlockedLayout, GlobalAveragePoolEveryLayoutMatchesTheNchwReference) {
  const Shape cases[] = {Shape{2, 8, 11, 9}, Shape{1, 24, 1, 1}, Shape{2, 136, 7, 5}, Shape{1, 16, 57, 3}};
  uint32_t seed = 31;
  for (const Shape& xs : cases) {
    const Tensor x = random_f32(xs, seed++);
    auto want = run_op_once("GlobalAveragePool", {}, {x}, 1, "reference");
    ASSERT_TRUE(want.ok()) << want.status().message();
    for (const Layout& l : {kLayouts[1], kLayouts[2]}) {
      const Tensor xl = to_layout(x, l);
      for (const char* impl : {"vectorized", "reference"}) {
        auto k = make_kernel("GlobalAveragePool", {{"layout", Attribute::String(l.name)}}, 1, impl);
        ASSERT_TRUE(k);
        const TensorView v = xl.view();
        auto got = run_kernel_once(*k, std::span<const TensorView>(&v, 1), 1);
        ASSERT_TRUE(got.ok()) << got.status().message();
        expect_close((*got)[0], to_layout((*want)[0], l), 1e-6, 1e-5, xs.str() + " " + l.name + " " + impl);
        EXPECT_STREQ(k->impl_name(), impl) << xs.str() << " " << l.name;
      }
    }
  }
}

// Binary ops broadcasting in the channels-inner layouts (x [N, C/8, H, W, 8] * s [N, C/8, 1, 1, 8],
// NHWC's [N, H, W, C] * [N, 1, 1, C]) and other short-row patterns, large enough for the parallel
// path, against a loop over the broadcast indices written out here.
TEST(ConvBlockedLayout, BroadcastingInChannelsInnerLayoutsMatchesALoop) {
  struct Case {
    Shape a, b;
  };
  const Case cases[] = {
      {Shape{2, 18, 29, 31, 8}, Shape{2, 18, 1, 1, 8}},  // SE rescale in nChw8c, batch 2
      {Shape{1, 18, 56, 56, 8}, Shape{1, 18, 1, 1, 8}},  // efficientnet's largest
      {Shape{1, 18, 1, 1, 8}, Shape{1, 18, 56, 56, 8}},  // broadcast operand first
      {Shape{2, 29, 31, 40}, Shape{2, 1, 1, 40}},        // NHWC SE rescale
      {Shape{3, 97, 5}, Shape{3, 1, 5}},                 // rows of 5
      {Shape{4, 3000, 7}, Shape{1, 3000, 1}},            // rows of 7, a broadcast column
      {Shape{2, 9, 13, 8}, Shape{2, 9, 13, 8}},          // rows of 8 that merge into one run
  };
  uint32_t seed = 5;
  for (const auto& c : cases) {
    const Tensor a = random_f32(c.a, seed++), b = random_f32(c.b, seed++);
    auto got = run_op_once("Mul", {}, {a, b}, 1, "");
    ASSERT_TRUE(got.ok()) << got.status().message();
    const Tensor& y = (*got)[0];
    const Shape& ys = y.shape();
    ASSERT_EQ(ys.rank(), c.a.rank());
    std::vector<int64_t> idx(static_cast<size_t>(ys.rank()), 0);
    int bad = 0;
    for (int64_t i = 0; i < y.numel() && bad < 5; ++i) {
      int64_t rest = i, oa = 0, ob = 0, sa = 1, sb = 1;
      for (int d = ys.rank() - 1; d >= 0; --d) {
        const int64_t k = rest % ys[d];
        rest /= ys[d];
        oa += (c.a[d] == 1 ? 0 : k) * sa;
        ob += (c.b[d] == 1 ? 0 : k) * sb;
        sa *= c.a[d];
        sb *= c.b[d];
      }
      const float want = a.as<float>()[oa] * b.as<float>()[ob];
      if (y.as<float>()[i] != want) {
        ADD_FAILURE() << c.a.str() << " * " << c.b.str() << " element " << i << " got " << y.as<float>()[i] << " want " << want;
        ++bad;
      }
    }
  }
}

// ---- conv_channels_last -------------------------------------------------------------------------

void init(OnnxModelBuilder& b, const std::string& name, std::vector<int64_t> dims, uint32_t seed) {
  Shape s;
  for (auto d : dims) s.push_back(d);
  const Tensor t = random_f32(s, seed);
  std::vector<float> v(t.as<float>(), t.as<float>() + t.numel());
  // Scaled so that activations stay near 1 through the chain.
  const float scale = 1.0f / std::sqrt(static_cast<float>(t.numel() / dims[0]));
  for (float& f : v) f *= scale * 1.7f;
  b.initializer_f(name, v, dims);
}

// An inception-like graph: a stem Conv+Relu and a ceil-mode MaxPool, three branches (1x1, 3x3, and a
// stride-1 MaxPool then 1x1) concatenated over the channels, a depthwise stride-2 Conv, a 1x1 to 12
// channels (not whole 8-blocks), a 1x1 back to 24, a residual block,
// a squeeze-excitation block (GlobalAveragePool, 1x1 Convs, Sigmoid, Mul), then a head whose output is
// the graph output.
OnnxModelBuilder inception_model() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{3}, int64_t{12}, int64_t{10}});
  init(b, "w0", {16, 3, 3, 3}, 1);
  init(b, "b0", {16}, 2);
  init(b, "w1", {8, 16, 1, 1}, 3);
  init(b, "w2", {16, 16, 3, 3}, 4);
  init(b, "w3", {8, 16, 1, 1}, 5);
  init(b, "w4", {32, 1, 3, 3}, 6);
  init(b, "w5", {12, 32, 1, 1}, 7);
  init(b, "w6", {24, 12, 1, 1}, 8);
  init(b, "w7", {24, 24, 1, 1}, 9);
  init(b, "w8", {5, 24, 3, 3}, 10);
  init(b, "w9", {8, 24, 1, 1}, 11);
  init(b, "w10", {24, 8, 1, 1}, 12);
  auto conv = [&](const std::string& x, const std::string& w, const std::string& y, int64_t pad, int64_t group = 1,
                  int64_t stride = 1) -> onnx::NodeProto& {
    auto& n = b.node("Conv", {x, w}, {y}, y + "/Conv");
    OnnxModelBuilder::ints_attr(n, "pads", {pad, pad, pad, pad});
    OnnxModelBuilder::ints_attr(n, "strides", {stride, stride});
    OnnxModelBuilder::int_attr(n, "group", group);
    return n;
  };
  auto relu = [&](const std::string& x, const std::string& y) { b.node("Relu", {x}, {y}, y + "/Relu"); };
  auto pool = [&](const std::string& x, const std::string& y, int64_t stride, int64_t pad) {
    auto& n = b.node("MaxPool", {x}, {y}, y + "/MaxPool");
    OnnxModelBuilder::ints_attr(n, "kernel_shape", {3, 3});
    OnnxModelBuilder::ints_attr(n, "strides", {stride, stride});
    OnnxModelBuilder::ints_attr(n, "pads", {pad, pad, pad, pad});
    OnnxModelBuilder::int_attr(n, "ceil_mode", 1);
  };
  b.node("Conv", {"x", "w0", "b0"}, {"c0"}, "stem/Conv");
  relu("c0", "r0");
  pool("r0", "p0", 2, 0);
  conv("p0", "w1", "ca", 0);
  relu("ca", "a");
  conv("p0", "w2", "cb", 1);
  relu("cb", "bb");
  pool("p0", "pc", 1, 1);
  conv("pc", "w3", "c", 0);
  auto& cat = b.node("Concat", {"a", "bb", "c"}, {"cat"}, "cat/Concat");
  OnnxModelBuilder::int_attr(cat, "axis", 1);
  conv("cat", "w4", "d", 1, 32, 2);
  conv("d", "w5", "e", 0);
  conv("e", "w6", "cf", 0);
  relu("cf", "f");
  conv("f", "w7", "cg", 0);
  b.node("Add", {"cg", "f"}, {"sg"}, "g/Add");
  relu("sg", "g");
  b.node("GlobalAveragePool", {"g"}, {"sq"}, "se/GlobalAveragePool");
  conv("sq", "w9", "se1", 0);
  relu("se1", "se1r");
  conv("se1r", "w10", "se2", 0);
  b.node("Sigmoid", {"se2"}, {"s"}, "se/Sigmoid");
  b.node("Mul", {"g", "s"}, {"h"}, "se/Mul");
  conv("h", "w8", "y", 1);
  b.output("y");
  return b;
}

using testing::attr_or;
using testing::Built;
using testing::build_and_run;
using testing::producer;

TEST(ConvChannelsLast, BothLayoutsMatchTheUnfusedGraph) {
  auto g = inception_model().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Tensor x = random_f32(Shape{2, 3, 12, 10}, 42);
  const Built off = build_and_run(*g, {"conv_epilogue_fusion"}, "", x);
  const Built nchw = build_and_run(*g, {"conv_channels_last"}, "", x);
  ASSERT_EQ(off.y.size(), static_cast<size_t>(2 * 5 * 3 * 2));
  for (const char* layout : {"nhwc", "nchw8c"}) {
    const Built on = build_and_run(*g, {}, layout, x);
    const bool blocked = std::string(layout) == "nchw8c";
    const Graph& b = on.graph;
    // Every value between convolutions is in the layout, through both MaxPools and the Concat,
    // except e (12 channels) in nChw8c; the graph input and output stay NCHW.
    const std::string L = layout;
    EXPECT_EQ(attr_or(producer(b, "r0"), "x_layout", "nchw"), "nchw");
    EXPECT_EQ(attr_or(producer(b, "r0"), "y_layout", "nchw"), L);
    EXPECT_EQ(attr_or(producer(b, "p0"), "layout", "nchw"), L);
    EXPECT_EQ(attr_or(producer(b, "pc"), "layout", "nchw"), L);
    EXPECT_EQ(attr_or(producer(b, "cat"), "axis", ""), blocked ? "1" : "3");
    EXPECT_EQ(attr_or(producer(b, "a"), "x_layout", "nchw"), L);
    EXPECT_EQ(attr_or(producer(b, "d"), "x_layout", "nchw"), L);
    EXPECT_EQ(attr_or(producer(b, "e"), "y_layout", "nchw"), blocked ? "nchw" : L);
    EXPECT_EQ(attr_or(producer(b, "f"), "x_layout", "nchw"), blocked ? "nchw" : L);
    EXPECT_EQ(attr_or(producer(b, "g"), "residual_layout", "nchw"), L);
    EXPECT_EQ(attr_or(producer(b, "y"), "y_layout", "nchw"), "nchw");
    EXPECT_EQ(attr_or(producer(b, "y"), "x_layout", "nchw"), L);
    EXPECT_EQ(attr_or(producer(b, "sq"), "layout", "nchw"), L);
    EXPECT_EQ(attr_or(producer(b, "se1r"), "x_layout", "nchw"), L);
    EXPECT_EQ(attr_or(producer(b, "s"), "x_layout", "nchw"), L);
    EXPECT_EQ(attr_or(producer(b, "s"), "y_layout", "nchw"), L);  // the Sigmoid fused into the Conv
    const Value& cat = b.values[b.find_value("cat")];
    ASSERT_TRUE(cat.shape.has_value());
    EXPECT_EQ(sym_shape_str(*cat.shape), sym_shape_str(from_shape(blocked ? Shape{2, 4, 5, 4, 8} : Shape{2, 5, 4, 32})));
    ASSERT_EQ(on.y.size(), off.y.size()) << layout;
    for (size_t i = 0; i < off.y.size(); ++i) {
      EXPECT_NEAR(on.y[i], off.y[i], 1e-4 * (1.0 + std::abs(off.y[i]))) << layout << " element " << i;
      EXPECT_NEAR(nchw.y[i], off.y[i], 1e-4 * (1.0 + std::abs(off.y[i]))) << "pass off, element " << i;
    }
  }
}

// Without a forced layout the pass takes the build machine's (under KILN_MAX_CPU_ISA).
TEST(ConvChannelsLast, LayoutFollowsTheCpu) {
  EXPECT_STREQ(conv_activation_layout_for_host(), cpu_info().avx512 ? "nhwc" : "nchw8c");
  auto g = inception_model().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Tensor x = random_f32(Shape{2, 3, 12, 10}, 43);
  const Built host = build_and_run(*g, {}, "", x);
  EXPECT_EQ(attr_or(producer(host.graph, "r0"), "y_layout", "nchw"), conv_activation_layout_for_host());
  const Built off = build_and_run(*g, {"conv_epilogue_fusion"}, "", x);
  ASSERT_EQ(host.y.size(), off.y.size());
  for (size_t i = 0; i < off.y.size(); ++i) EXPECT_NEAR(host.y[i], off.y[i], 1e-4 * (1.0 + std::abs(off.y[i]))) << "element " << i;
}

TEST(ConvChannelsLast, UnknownForcedLayoutIsAnError) {
  auto g = inception_model().import();
  ASSERT_TRUE(g.ok());
  PassContext ctx;
  ctx.conv_layout = "nchw16c";
  EXPECT_FALSE(run_pass_pipeline(*g, ctx).ok());
}

}  // namespace
}  // namespace kiln
