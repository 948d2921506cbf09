// The kernels of the steps builder/passes/conv_channels_last.cpp keeps in the channels-innermost
// layouts between FusedConvs: MaxPool, AveragePool and GlobalAveragePool with attribute layout nchw8c / nhwc
// (runtime/kernels/nn_pool_blocked_kernels.cpp) against the NCHW reference pools, and a binary op
// broadcasting an nChw8c channel block over the pixels (squeeze-excitation's gate Mul) against a
// plain loop, directly and inside kiln::FusedElementwise. Awkward shapes: channels not a multiple
// of 8 (NHWC; nChw8c only takes whole blocks), odd sizes, pads, ceil mode, strides 1 and 2, more
// than one image, a run split mid-block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernel_runner.h"
#include "unit/runtime/kernel_test_util.h"
#include "runtime/tensor.h"

namespace kiln {
namespace {

using testing::expect_close;
using testing::make_kernel;
using testing::random_f32;

// Runs `op` with `attrs` plus layout on `x` (NCHW) in `layout`, with both implementations, and
// compares with the NCHW reference's output in that layout.
void expect_layout_matches_reference(const std::string& op, const AttrMap& attrs, const Tensor& x, const std::string& layout,
                                     double tol, const std::string& what) {
  auto want = run_op_once(op, attrs, {x}, 1, "reference");
  ASSERT_TRUE(want.ok()) << want.status().message();
  const Tensor want_l = testing::to_layout((*want)[0], layout);
  AttrMap la = attrs;
  la["layout"] = Attribute::String(layout);
  const Tensor xl = testing::to_layout(x, layout);
  for (const char* impl : {"vectorized", "reference"}) {
    auto k = make_kernel(op, la, 1, impl);
    ASSERT_TRUE(k);
    const TensorView xv = xl.view();
    auto got = run_kernel_once(*k, std::span<const TensorView>(&xv, 1), 1);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_STREQ(k->impl_name(), impl) << what;
    expect_close((*got)[0], want_l, tol, tol, what + " " + layout + " " + impl);
  }
}

struct PoolCase {
  Shape x;  // NCHW
  std::vector<int64_t> kernel, strides, pads;
  int64_t ceil_mode;
};

const PoolCase kPoolCases[] = {
    {Shape{1, 64, 112, 112}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},  // ResNet stem, parallel
    {Shape{3, 16, 13, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},    // odd sizes, batch 3
    {Shape{2, 8, 10, 9}, {2, 3}, {2, 3}, {}, 1},                // ceil mode: windows past the end
    {Shape{1, 24, 7, 8}, {3, 2}, {1, 2}, {2, 0, 1, 1}, 0},      // asymmetric pads, stride 1 rows
    {Shape{2, 8, 9, 7}, {3, 3}, {1, 1}, {1, 1, 1, 1}, 0},       // stride 1, same size
    {Shape{1, 16, 5, 5}, {5, 5}, {1, 1}, {}, 0},                // one window covering everything
    {Shape{1, 8, 6, 5}, {1, 1}, {2, 2}, {}, 1},                 // 1x1 window: one row, read in place
    {Shape{2, 32, 15, 17}, {3, 3}, {2, 2}, {0, 0, 2, 2}, 1},    // ceil mode past the padded end
    {Shape{0, 8, 8, 8}, {2, 2}, {2, 2}, {}, 0},                 // zero batch
    {Shape{1, 128, 56, 56}, {2, 2}, {2, 2}, {}, 0},             // DenseNet's transition pool
};

TEST(PoolLayout, MaxPoolMatchesTheNchwReference) {
  uint32_t seed = 300;
  for (const auto& c : kPoolCases) {
    AttrMap attrs{{"kernel_shape", Attribute::Ints(c.kernel)}, {"ceil_mode", Attribute::Int(c.ceil_mode)}};
    if (!c.strides.empty()) attrs["strides"] = Attribute::Ints(c.strides);
    if (!c.pads.empty()) attrs["pads"] = Attribute::Ints(c.pads);
    const Tensor x = random_f32(c.x, seed++);
    for (const char* layout : {"nchw8c", "nhwc"}) expect_layout_matches_reference("MaxPool", attrs, x, layout, 0, c.x.str());
    // NHWC at channel counts that are no multiple of 8 (vector loops with a scalar tail), and
    // past a block of 32 (the direct path's four registers, then single vectors, then the tail).
    for (int64_t C : {1, 5, 12, 19, 43}) {
      const Tensor xc = random_f32(Shape{c.x[0], C, c.x[2], c.x[3]}, seed++);
      expect_layout_matches_reference("MaxPool", attrs, xc, "nhwc", 0, xc.shape().str());
    }
  }
}

// NaNs, -inf and signed zeros: every vectorized layout (NCHW, NHWC, nChw8c; separable: the window's
// rows, then its columns) keeps the reference's NaN (a window's result is NaN exactly when its first
// tap is, and a NaN elsewhere hides nothing) and its -inf; of a tie between +0 and -0 it may keep the
// other zero than the reference (equal values; ONNX does not say which).
TEST(PoolLayout, MaxPoolKeepsTheReferencesNanAndZeroRule) {
  for (int64_t k : {3, 5}) {
    Tensor x = random_f32(Shape{1, 40, 11, 12}, 77);
    float* p = x.as<float>();
    std::mt19937 rng(78);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const uint32_t r = rng() % 100;
      if (r < 8) p[i] = NAN;
      else if (r < 48) p[i] = r % 2 ? 0.0f : -0.0f;  // zeros are the largest values: ties of +0 and -0
      else p[i] = -std::abs(p[i]);
    }
    for (int64_t i = 0; i < 11 * 12; ++i) p[i] = -INFINITY;  // a plane of -inf: its windows' maximum is -inf
    AttrMap attrs{{"kernel_shape", Attribute::Ints({k, k})}, {"strides", Attribute::Ints({2, 1})}, {"pads", Attribute::Ints({1, 1, 1, 1})}};
    auto want = run_op_once("MaxPool", attrs, {x}, 1, "reference");
    ASSERT_TRUE(want.ok()) << want.status().message();
    for (const char* layout : {"nchw", "nchw8c", "nhwc"}) {
      const Tensor want_l = testing::to_layout((*want)[0], layout);
      attrs["layout"] = Attribute::String(layout);
      const Tensor xl = testing::to_layout(x, layout);
      auto kern = make_kernel("MaxPool", attrs, 1, "vectorized");
      ASSERT_TRUE(kern);
      const TensorView xv = xl.view();
      auto got = run_kernel_once(*kern, std::span<const TensorView>(&xv, 1), 1);
      ASSERT_TRUE(got.ok()) << got.status().message();
      int nans = 0;
      for (int64_t i = 0; i < want_l.numel(); ++i) {
        const float g = (*got)[0].as<float>()[i], w = want_l.as<float>()[i];
        nans += std::isnan(w);
        ASSERT_TRUE(std::isnan(w) ? std::isnan(g) : g == w)
            << layout << " kernel " << k << " element " << i << ": got " << g << ", want " << w;
      }
      EXPECT_GT(nans, 0) << "the case must reach the NaN rule";
      EXPECT_EQ((*got)[0].as<float>()[0], -INFINITY) << layout << ": channel 0 at pixel 0, in every layout";
    }
  }
}

// AveragePool adds in the NCHW path's order (the window's rows, then its columns), so the layouts
// match the reference to rounding; both divisor rules, windows cut by the padding and by ceil mode.
TEST(PoolLayout, AveragePoolMatchesTheNchwReference) {
  uint32_t seed = 500;
  for (const auto& c : kPoolCases) {
    for (int64_t include_pad : {0, 1}) {
      AttrMap attrs{{"kernel_shape", Attribute::Ints(c.kernel)},
                    {"ceil_mode", Attribute::Int(c.ceil_mode)},
                    {"count_include_pad", Attribute::Int(include_pad)}};
      if (!c.strides.empty()) attrs["strides"] = Attribute::Ints(c.strides);
      if (!c.pads.empty()) attrs["pads"] = Attribute::Ints(c.pads);
      const Tensor x = random_f32(c.x, seed++);
      const std::string what = c.x.str() + " count_include_pad " + std::to_string(include_pad);
      for (const char* layout : {"nchw8c", "nhwc"}) expect_layout_matches_reference("AveragePool", attrs, x, layout, 1e-6, what);
      for (int64_t C : {1, 5, 12, 19}) {
        const Tensor xc = random_f32(Shape{c.x[0], C, c.x[2], c.x[3]}, seed++);
        expect_layout_matches_reference("AveragePool", attrs, xc, "nhwc", 1e-6, xc.shape().str() + " " + what);
      }
    }
  }
}

// nChw8c holds whole blocks of 8 channels: any other channel count is an error, not a wrong answer.
TEST(PoolLayout, Nchw8cNeedsWholeChannelBlocks) {
  for (const char* op : {"MaxPool", "AveragePool", "GlobalAveragePool"}) {
    AttrMap attrs{{"layout", Attribute::String("nchw8c")}};
    if (std::string(op) != "GlobalAveragePool") attrs["kernel_shape"] = Attribute::Ints({2, 2});
    auto k = make_kernel(op, attrs, 1, "vectorized");
    ASSERT_TRUE(k);
    const Tensor x = random_f32(Shape{1, 2, 4, 4, 5}, 1);
    const TensorView xv = x.view();
    std::vector<TensorDesc> d(1);
    EXPECT_FALSE(k->infer(std::span<const TensorView>(&xv, 1), d).ok()) << op;
  }
}

TEST(PoolLayout, GlobalAveragePoolMatchesTheNchwReference) {
  // Pixels fewer than, equal to and not a multiple of the 4x16-pixel runs; more than one
  // 1024-pixel chunk (2 and 3 chunks, the last partial); EfficientNet's SE shapes; NHWC's tiles of
  // 128 channels (one partial) by pixel runs (several, the last partial); zero batch.
  const Shape shapes[] = {Shape{1, 8, 1, 1},    Shape{2, 16, 3, 5},   Shape{1, 24, 8, 8},   Shape{3, 8, 7, 9},
                          Shape{1, 16, 33, 37}, Shape{2, 8, 64, 48},  Shape{1, 96, 56, 56}, Shape{1, 480, 14, 14},
                          Shape{1, 1152, 7, 7}, Shape{2, 304, 20, 21}, Shape{0, 8, 4, 4}};
  uint32_t seed = 400;
  for (const Shape& s : shapes) {
    // An offset, so the mean is not near zero and the relative tolerance means something.
    const Tensor x = random_f32(s, seed++, 0.5f, 2.0f);
    for (const char* layout : {"nchw8c", "nhwc"}) expect_layout_matches_reference("GlobalAveragePool", {}, x, layout, 1e-6, s.str());
    for (int64_t C : {3, 12, 70}) {
      const Tensor xc = random_f32(Shape{s[0], C, s[2], s[3]}, seed++, -1.0f, 1.0f);
      expect_layout_matches_reference("GlobalAveragePool", {}, xc, "nhwc", 1e-6, xc.shape().str());
    }
  }
}

// x [N, C/8, H, W, 8] op gate [N, C/8, 1, 1, 8] and the reverse, against a plain loop: the pixel
// dims merge into rows that read the gate with period 8. Sub and Div check the operand order.
TEST(PoolLayout, BlockBroadcastBinaryMatchesALoop) {
  const Shape xs[] = {Shape{1, 12, 112, 112, 8},  // EfficientNet's largest SE Mul, parallel
                      Shape{1, 60, 14, 14, 8}, Shape{2, 3, 5, 7, 8}, Shape{1, 1, 1, 1, 8}, Shape{2, 1, 3, 1, 8},
                      // One block of 183 x 181 pixels: the parallel split cuts the row mid-block.
                      Shape{1, 1, 183, 181, 8}};
  uint32_t seed = 500;
  for (const Shape& xshape : xs) {
    const Shape gshape{xshape[0], xshape[1], 1, 1, 8};
    const Tensor x = random_f32(xshape, seed++), gate = random_f32(gshape, seed++, 0.5f, 1.5f);
    const int64_t blocks = xshape[0] * xshape[1], pixels = xshape[2] * xshape[3];
    for (const char* op : {"Mul", "Sub", "Div", "Add"}) {
      for (bool gate_first : {true, false}) {
        auto got = run_op_once(op, {}, gate_first ? std::vector<Tensor>{gate, x} : std::vector<Tensor>{x, gate}, 1);
        ASSERT_TRUE(got.ok()) << got.status().message();
        const Tensor& y = (*got)[0];
        ASSERT_EQ(y.shape(), xshape);
        Tensor want = Tensor::zeros(DType::kFloat32, xshape);
        for (int64_t b = 0; b < blocks; ++b)
          for (int64_t p = 0; p < pixels; ++p)
            for (int64_t c = 0; c < 8; ++c) {
              const float xv = x.as<float>()[(b * pixels + p) * 8 + c], gv = gate.as<float>()[b * 8 + c];
              const float l = gate_first ? gv : xv, r = gate_first ? xv : gv;
              const std::string o = op;
              want.as<float>()[(b * pixels + p) * 8 + c] = o == "Mul" ? l * r : o == "Sub" ? l - r : o == "Div" ? l / r : l + r;
            }
        expect_close(y, want, 0, 0, std::string(op) + (gate_first ? " gate first " : " gate second ") + xshape.str());
      }
    }
  }
  // The same period-8 walk where the repeated operand is broadcast in a middle dim only, and on ints.
  const Tensor a = Tensor::from_vector<int32_t>(std::vector<int32_t>(16, 3), Shape{2, 1, 8});
  std::vector<int32_t> bv(2 * 5 * 8);
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<int32_t>(i);
  const Tensor b = Tensor::from_vector<int32_t>(bv, Shape{2, 5, 8});
  auto got = run_op_once("Sub", {}, {b, a}, 1);
  ASSERT_TRUE(got.ok()) << got.status().message();
  for (size_t i = 0; i < bv.size(); ++i) EXPECT_EQ((*got)[0].as<int32_t>()[i], bv[i] - 3) << i;
}

// x [N, H, W, C] op gate [N, 1, 1, C] (NHWC's squeeze-excitation) and the reverse, against a plain
// loop: the pixel dims merge into runs that read the gate with period C, whole periods tiled on the
// stack. Channel counts around the tile (9, 32, 33, 144, 256) and past the merge (257); runs the
// parallel split cuts mid-period; batch 2 with a gate per image; int64 (a wider tile element).
TEST(PoolLayout, ChannelVectorBroadcastOverPixelsMatchesALoop) {
  struct Case {
    Shape x;
    bool gate_per_image;
  };
  const Case cases[] = {{Shape{1, 112, 112, 32}, false}, {Shape{1, 56, 56, 144}, false}, {Shape{2, 7, 9, 33}, true},
                        {Shape{1, 3, 5, 9}, false},      {Shape{1, 61, 67, 256}, false}, {Shape{1, 14, 14, 257}, false},
                        {Shape{2, 183, 181, 32}, true}};
  uint32_t seed = 600;
  for (const Case& c : cases) {
    const Shape& xs = c.x;
    const int64_t N = xs[0], pixels = xs[1] * xs[2], C = xs[3];
    const Shape gs{c.gate_per_image ? N : 1, 1, 1, C};
    const Tensor x = random_f32(xs, seed++), gate = random_f32(gs, seed++, 0.5f, 1.5f);
    for (const char* op : {"Mul", "Sub", "Div"}) {
      for (bool gate_first : {true, false}) {
        auto got = run_op_once(op, {}, gate_first ? std::vector<Tensor>{gate, x} : std::vector<Tensor>{x, gate}, 1);
        ASSERT_TRUE(got.ok()) << got.status().message();
        Tensor want = Tensor::zeros(DType::kFloat32, xs);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t p = 0; p < pixels; ++p)
            for (int64_t ch = 0; ch < C; ++ch) {
              const int64_t i = (n * pixels + p) * C + ch;
              const float xv = x.as<float>()[i], gv = gate.as<float>()[(c.gate_per_image ? n : 0) * C + ch];
              const float l = gate_first ? gv : xv, r = gate_first ? xv : gv;
              const std::string o = op;
              want.as<float>()[i] = o == "Mul" ? l * r : o == "Sub" ? l - r : l / r;
            }
        expect_close((*got)[0], want, 0, 0, std::string(op) + (gate_first ? " gate first " : " gate second ") + xs.str());
      }
    }
  }
  std::vector<int64_t> av(40), bv(2 * 300 * 40);
  for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<int64_t>(i) * 1000003;
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<int64_t>(i);
  const Tensor a = Tensor::from_vector<int64_t>(av, Shape{1, 1, 40}), b = Tensor::from_vector<int64_t>(bv, Shape{2, 300, 40});
  auto got = run_op_once("Sub", {}, {b, a}, 1);
  ASSERT_TRUE(got.ok()) << got.status().message();
  for (size_t i = 0; i < bv.size(); ++i) ASSERT_EQ((*got)[0].as<int64_t>()[i], bv[i] - av[i % 40]) << i;
}

// The same broadcast through kiln::FusedElementwise (the elementwise fusion pass turns
// squeeze-excitation's HardSigmoid gate and Mul into one): the period-8 inputs are tiled over the
// program's blocks. Programs: HardSigmoid(g) * x; x - g; cond ? x : z with a bool cond block;
// x * s + g with a one-element s.
TEST(PoolLayout, FusedElementwiseBlockBroadcastMatchesALoop) {
  const Shape xs[] = {Shape{1, 12, 56, 56, 8}, Shape{2, 3, 5, 7, 8}, Shape{1, 1, 183, 181, 8}, Shape{1, 2, 1, 3, 8}};
  uint32_t seed = 600;
  auto program = [](std::vector<int64_t> code, std::vector<float> imm) {
    return AttrMap{{"program", Attribute::Ints(code)}, {"immediates", Attribute::Floats(imm)}};
  };
  for (const Shape& xshape : xs) {
    const Shape gshape{xshape[0], xshape[1], 1, 1, 8};
    const Tensor x = random_f32(xshape, seed++, -4.0f, 4.0f), z = random_f32(xshape, seed++), g = random_f32(gshape, seed++, -4.0f, 4.0f);
    const Tensor sc = Tensor::from_vector<float>({1.5f}, Shape{1});
    Tensor cond = Tensor::zeros(DType::kBool, gshape);
    for (int64_t i = 0; i < cond.numel(); ++i) cond.as<bool>()[i] = (i * 7) % 3 == 0;
    const int64_t blocks = xshape[0] * xshape[1], pixels = xshape[2] * xshape[3];
    struct Case {
      const char* what;
      AttrMap attrs;
      std::vector<Tensor> in;
      float (*f)(float x, float g, float z, bool c);
      double tol;
    };
    const Case cases[] = {
        {"hardsigmoid(g) * x", program({13, 4, 0, 2, 3, 102, 5, 4, 1, -1}, {1.0f / 6.0f, 0.5f}), {g, x},
         [](float x, float g, float, bool) { return std::max(0.0f, std::min(1.0f, g / 6.0f + 0.5f)) * x; }, 1e-6},
        {"x - g", program({101, 2, 0, 1, -1}, {}), {x, g}, [](float x, float g, float, bool) { return x - g; }, 0},
        {"cond ? x : z", program({200, 3, 0, 1, 2}, {}), {cond, x, z}, [](float x, float, float z, bool c) { return c ? x : z; }, 0},
        {"x * s + g", program({102, 3, 0, 2, -1, 100, 4, 3, 1, -1}, {}), {x, g, sc},
         [](float x, float g, float, bool) { return x * 1.5f + g; }, 1e-6},
    };
    for (const Case& c : cases) {
      auto got = run_op_once("FusedElementwise", c.attrs, c.in, 1);
      ASSERT_TRUE(got.ok()) << c.what << ": " << got.status().message();
      Tensor want = Tensor::zeros(DType::kFloat32, xshape);
      for (int64_t b = 0; b < blocks; ++b)
        for (int64_t p = 0; p < pixels; ++p)
          for (int64_t ch = 0; ch < 8; ++ch) {
            const int64_t i = (b * pixels + p) * 8 + ch, gi = b * 8 + ch;
            want.as<float>()[i] = c.f(x.as<float>()[i], g.as<float>()[gi], z.as<float>()[i], cond.as<bool>()[gi]);
          }
      expect_close((*got)[0], want, c.tol, c.tol, std::string(c.what) + " " + xshape.str());
    }
  }
}

}  // namespace
}  // namespace kiln
