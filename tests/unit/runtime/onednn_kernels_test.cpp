// The oneDNN kernels against the reference kernels at shapes that do not divide tile sizes, with
// broadcasting, transposes, groups, and zero-size dims (which run on the reference fallback).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/kernel_runner.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::make_kernel;
using testing::random_f32;

std::vector<TensorView> views_of(const std::vector<Tensor>& in) {
  std::vector<TensorView> v;
  for (const auto& t : in) v.push_back(t.view());
  return v;
}

void expect_close(const Tensor& got, const Tensor& want, int64_t K, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const double atol = 1e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(K, 1))), rtol = 1e-4;
  int bad = 0;
  for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
    const double g = read_double(got.view(), i), w = read_double(want.view(), i);
    if (!(std::abs(g - w) <= atol + rtol * std::abs(w))) {
      ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
      ++bad;
    }
  }
}

// Runs `op` with the oneDNN and the reference kernels; `onednn_path` says whether the oneDNN kernel
// must have used its primitive (true) or its reference fallback (false).
void compare(const std::string& op, const AttrMap& attrs, const std::vector<Tensor>& in, int64_t K, bool onednn_path,
             const std::string& what) {
  auto fast = make_kernel(op, attrs, static_cast<int>(in.size()), "onednn");
  ASSERT_TRUE(fast);
  auto views = views_of(in);
  auto got = run_kernel_once(*fast, views, 1);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
  EXPECT_STREQ(fast->impl_name(), onednn_path ? "onednn" : "reference") << what;
  auto want = run_op_once(op, attrs, in, 1, "reference");
  ASSERT_TRUE(want.ok()) << what << ": " << want.status().message();
  expect_close((*got)[0], (*want)[0], K, what);
}

std::string str(const Shape& a, const Shape& b) { return a.str() + " x " + b.str(); }

// ---- MatMul -------------------------------------------------------------------------------------

TEST(OnednnMatMul, OddSizesMatchReference) {
  const int64_t sizes[] = {1, 3, 17, 63, 129};
  uint32_t seed = 1;
  for (int64_t M : sizes)
    for (int64_t N : sizes)
      for (int64_t K : sizes) {
        const Shape a{M, K}, b{K, N};
        compare("MatMul", {}, {random_f32(a, seed++), random_f32(b, seed++)}, K, true, str(a, b));
      }
}

TEST(OnednnMatMul, BatchBroadcast) {
  const std::pair<Shape, Shape> cases[] = {
      {Shape{2, 1, 3, 5, 7}, Shape{4, 1, 7, 6}}, {Shape{3, 5, 7}, Shape{7, 6}},        {Shape{5, 7}, Shape{2, 3, 7, 6}},
      {Shape{1, 4, 17, 3}, Shape{2, 1, 3, 9}}, {Shape{3, 1, 17, 63}, Shape{1, 5, 63, 3}}, {Shape{2, 3, 4}, Shape{2, 4, 5}},
      {Shape{3, 17, 63}, Shape{1, 1, 63, 5}},  {Shape{2, 3, 1, 129}, Shape{129, 3}}};
  uint32_t seed = 100;
  for (const auto& [a, b] : cases)
    compare("MatMul", {}, {random_f32(a, seed++), random_f32(b, seed++)}, a[a.rank() - 1], true, str(a, b));
}

TEST(OnednnMatMul, FallbackCases) {
  // 1-D operands, other dtypes and zero-size dims run on the reference kernel.
  compare("MatMul", {}, {random_f32(Shape{17}, 1), random_f32(Shape{17, 3}, 2)}, 17, false, "1-D lhs");
  compare("MatMul", {}, {random_f32(Shape{2, 3, 17}, 3), random_f32(Shape{17}, 4)}, 17, false, "1-D rhs");
  compare("MatMul", {}, {random_f32(Shape{0, 5}, 5), random_f32(Shape{5, 3}, 6)}, 5, false, "M=0");
  compare("MatMul", {}, {random_f32(Shape{4, 0}, 7), random_f32(Shape{0, 3}, 8)}, 1, false, "K=0");
  compare("MatMul", {}, {random_f32(Shape{0, 4, 5}, 9), random_f32(Shape{5, 3}, 10)}, 5, false, "batch=0");
  compare("MatMul", {}, {random_f32(Shape{3, 0}, 11), random_f32(Shape{0, 3}, 12)}, 1, false, "K=0 square");
  compare("MatMul", {},
          {Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2}), Tensor::from_vector<double>({1, 0, 0, 1}, {2, 2})}, 2,
          false, "float64");
}

TEST(OnednnMatMul, ReprepareWithNewShapes) {
  auto k = make_kernel("MatMul", {}, 2, "onednn");
  ASSERT_TRUE(k);
  const std::pair<Shape, Shape> shapes[] = {{Shape{3, 17}, Shape{17, 5}}, {Shape{2, 9, 4}, Shape{4, 63}},
                                            {Shape{5}, Shape{5, 2}},        {Shape{3, 17}, Shape{17, 5}}};
  uint32_t seed = 7;
  for (const auto& [a, b] : shapes) {
    std::vector<Tensor> in{random_f32(a, seed++), random_f32(b, seed++)};
    auto views = views_of(in);
    auto got = run_kernel_once(*k, views, 1);
    ASSERT_TRUE(got.ok()) << got.status().message();
    auto want = run_op_once("MatMul", {}, in, 1, "reference");
    ASSERT_TRUE(want.ok());
    expect_close((*got)[0], (*want)[0], a[a.rank() - 1], str(a, b));
  }
}

// ---- Gemm ---------------------------------------------------------------------------------------

TEST(OnednnGemm, TransposesBiasShapesAlphaBeta) {
  const int64_t dims[][3] = {{1, 1, 1}, {3, 17, 63}, {17, 3, 129}, {63, 129, 3}, {129, 63, 17}};
  const std::pair<float, float> ab[] = {{1.0f, 1.0f}, {0.5f, 2.0f}, {-1.5f, 0.0f}};
  uint32_t seed = 200;
  for (const auto& d : dims) {
    const int64_t M = d[0], N = d[1], K = d[2];
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (const auto& [alpha, beta] : ab) {
          const Shape c_shapes[] = {Shape{}, Shape{N}, Shape{1, N}, Shape{M, 1}, Shape{M, N}};
          for (int c = -1; c < 5; ++c) {
            AttrMap attrs{{"transA", Attribute::Int(ta)}, {"transB", Attribute::Int(tb)},
                          {"alpha", Attribute::Float(alpha)}, {"beta", Attribute::Float(beta)}};
            std::vector<Tensor> in{random_f32(ta ? Shape{K, M} : Shape{M, K}, seed++),
                                   random_f32(tb ? Shape{N, K} : Shape{K, N}, seed++)};
            if (c >= 0) in.push_back(random_f32(c_shapes[c], seed++));
            const std::string what = "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                                     " tA=" + std::to_string(ta) + " tB=" + std::to_string(tb) +
                                     " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta) +
                                     " C=" + (c >= 0 ? c_shapes[c].str() : "none");
            compare("Gemm", attrs, in, K, true, what);
          }
        }
  }
}

TEST(OnednnGemm, ZeroSizeFallback) {
  compare("Gemm", {}, {random_f32(Shape{0, 5}, 1), random_f32(Shape{5, 3}, 2), random_f32(Shape{3}, 3)}, 5, false, "M=0");
  compare("Gemm", {{"beta", Attribute::Float(0.5f)}},
          {random_f32(Shape{4, 0}, 4), random_f32(Shape{0, 3}, 5), random_f32(Shape{4, 3}, 6)}, 1, false, "K=0");
  compare("Gemm", {}, {random_f32(Shape{4, 5}, 7), random_f32(Shape{5, 0}, 8)}, 5, false, "N=0");
}

// ---- Conv ---------------------------------------------------------------------------------------

struct ConvCase {
  Shape x, w;
  int64_t group;
  std::vector<int64_t> strides, dilations, pads;
  std::string auto_pad;
  bool bias;
};

TEST(OnednnConv, MatchesReference) {
  const ConvCase cases[] = {
      {Shape{1, 3, 17, 13}, Shape{5, 3, 3, 3}, 1, {}, {}, {}, "", true},
      {Shape{2, 3, 17, 13}, Shape{7, 3, 3, 5}, 1, {2, 1}, {1, 2}, {1, 2, 0, 1}, "", true},
      {Shape{1, 6, 9, 11}, Shape{9, 2, 3, 3}, 3, {1, 2}, {2, 1}, {2, 1, 2, 1}, "", false},
      {Shape{1, 7, 15, 15}, Shape{7, 1, 3, 3}, 7, {2, 2}, {}, {1, 1, 1, 1}, "", true},    // depthwise
      {Shape{2, 5, 10, 7}, Shape{15, 1, 5, 3}, 5, {}, {}, {}, "SAME_UPPER", true},       // channel multiplier 3
      {Shape{1, 4, 9, 9}, Shape{6, 2, 2, 2}, 2, {3, 3}, {}, {}, "SAME_LOWER", false},
      {Shape{1, 3, 8, 8}, Shape{5, 3, 1, 1}, 1, {}, {}, {}, "VALID", true},
      {Shape{3, 17, 5, 6}, Shape{63, 17, 3, 3}, 1, {1, 1}, {}, {0, 1, 2, 0}, "", true},
      {Shape{1, 5, 31}, Shape{3, 5, 4}, 1, {2}, {3}, {2, 1}, "", true},                 // 1-D
      {Shape{2, 4, 19}, Shape{4, 1, 3}, 4, {}, {}, {}, "SAME_UPPER", false},             // 1-D depthwise
  };
  uint32_t seed = 300;
  for (const auto& c : cases) {
    AttrMap attrs{{"group", Attribute::Int(c.group)}};
    if (!c.strides.empty()) attrs["strides"] = Attribute::Ints(c.strides);
    if (!c.dilations.empty()) attrs["dilations"] = Attribute::Ints(c.dilations);
    if (!c.pads.empty()) attrs["pads"] = Attribute::Ints(c.pads);
    if (!c.auto_pad.empty()) attrs["auto_pad"] = Attribute::String(c.auto_pad);
    std::vector<Tensor> in{random_f32(c.x, seed++), random_f32(c.w, seed++)};
    if (c.bias) in.push_back(random_f32(Shape{c.w[0]}, seed++));
    compare("Conv", attrs, in, c.w.numel() / c.w[0], true, str(c.x, c.w) + " group " + std::to_string(c.group));
  }
}

TEST(OnednnConv, FallbackCases) {
  compare("Conv", {}, {random_f32(Shape{1, 2, 4, 5, 6}, 1), random_f32(Shape{3, 2, 2, 2, 2}, 2)}, 16, false, "3-D");
  compare("Conv", {}, {random_f32(Shape{0, 3, 7, 7}, 3), random_f32(Shape{4, 3, 3, 3}, 4)}, 27, false, "batch=0");
  compare("Conv", {},
          {Tensor::from_vector<double>({1, 2, 3, 4}, {1, 1, 2, 2}), Tensor::from_vector<double>({1, 1}, {1, 1, 1, 2})},
          2, false, "float64");
}

TEST(OnednnConv, ReprepareAndRerun) {
  auto k = make_kernel("Conv", {{"pads", Attribute::Ints({1, 1, 1, 1})}}, 2, "onednn");
  ASSERT_TRUE(k);
  const std::pair<Shape, Shape> shapes[] = {{Shape{1, 3, 9, 9}, Shape{4, 3, 3, 3}},
                                            {Shape{2, 5, 6, 11}, Shape{3, 5, 3, 3}},
                                            {Shape{1, 3, 9, 9}, Shape{4, 3, 3, 3}}};
  uint32_t seed = 17;
  for (const auto& [x, w] : shapes)
    for (int rep = 0; rep < 2; ++rep) {  // a second run with new data through the same primitives
      std::vector<Tensor> in{random_f32(x, seed++), random_f32(w, seed++)};
      auto views = views_of(in);
      auto got = rep == 0 ? run_kernel_once(*k, views, 1) : StatusOr<std::vector<Tensor>>(std::vector<Tensor>{});
      if (rep == 1) {
        std::vector<TensorDesc> d(1);
        ASSERT_TRUE(k->infer(views, d).ok());
        std::vector<Tensor> outs{Tensor::zeros(d[0].dtype, d[0].shape)};
        std::vector<TensorView> ov{outs[0].view()};
        ASSERT_TRUE(k->run(views, ov).ok());  // same shapes: no prepare()
        got = outs;
      }
      ASSERT_TRUE(got.ok()) << got.status().message();
      auto want = run_op_once("Conv", {{"pads", Attribute::Ints({1, 1, 1, 1})}}, in, 1, "reference");
      ASSERT_TRUE(want.ok());
      expect_close((*got)[0], (*want)[0], w.numel() / w[0], str(x, w));
    }
}

TEST(OnednnRegistry, PreferredOverReference) {
  for (const char* op : {"MatMul", "Gemm", "Conv"}) {
    auto impls = KernelRegistry::builtin().implementations(op);
    ASSERT_GE(impls.size(), 2u) << op;
    EXPECT_EQ(impls[0]->impl, "onednn") << op;
    EXPECT_EQ(impls[0]->priority, 10) << op;
  }
}

}  // namespace
}  // namespace kiln
