// kiln's StridedMatMul (runtime/kernels/*strided_matmul_kernels.cpp), impls "panel", "onednn" and "reference",
// against the op written out: the Transposes materialised here, the reference MatMul, alpha, the
// output Transpose. Shapes are unfused attentions' (heads interleaved as [S, B*H, D] and [B, S, H,
// D], K^T as a permuted view, the merge Transpose on the output) at sizes that divide neither the
// 6-row nor the 64-column blocking, batch broadcasting, a B shared by every product, fewer products
// than threads, and strides off the fast path (the panel impl then runs the reference), on 1-3
// threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/kernels/panel_gemm.h"
#include "runtime/tensor.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::make_kernel;
using testing::random_f32;

// Transpose(x, perm), written out.
Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  if (perm.empty()) return Tensor::copy_of(x.view());
  const Shape& s = x.shape();
  const int r = s.rank();
  Shape ys;
  for (int i = 0; i < r; ++i) ys.push_back(s[perm[static_cast<size_t>(i)]]);
  Tensor y = Tensor::zeros(DType::kFloat32, ys);
  std::vector<int64_t> xs(static_cast<size_t>(r), 1);
  for (int i = r - 2; i >= 0; --i) xs[static_cast<size_t>(i)] = xs[static_cast<size_t>(i) + 1] * s[i + 1];
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  for (int64_t o = 0; o < y.numel(); ++o) {
    int64_t rest = o, off = 0;
    for (int i = r - 1; i >= 0; --i) {
      const int64_t v = rest % ys[i];
      rest /= ys[i];
      off += v * xs[static_cast<size_t>(perm[static_cast<size_t>(i)])];
    }
    y.as<float>()[o] = x.as<float>()[off];
  }
  return y;
}

StatusOr<Tensor> run(const char* op, const AttrMap& attrs, const Tensor& a, const Tensor& b, const char* impl, std::string* ran) {
  auto k = make_kernel(op, attrs, 2, impl);
  if (!k) return Internal("no kernel");
  const TensorView v[] = {a.view(), b.view()};
  KILN_ASSIGN_OR_RETURN(auto out, run_kernel_once(*k, v, 1));
  if (ran) *ran = k->impl_name();
  return std::move(out[0]);
}

struct Case {
  const char* what;
  Shape a, b;
  std::vector<int64_t> pa, pb, py;
  float alpha;
  bool fast;  // the panel impl keeps its fast path
};

TEST(StridedMatMul, MatchesTheTransposedMatMulAtAwkwardShapes) {
  if (!panel_gemm::supported()) GTEST_SKIP() << "no AVX2 + FMA";
  const std::vector<Case> cases = {
      {"seq-first Q x K^T, scaled", {13, 6, 19}, {13, 6, 19}, {1, 0, 2}, {1, 2, 0}, {}, 0.37f, true},
      {"seq-first P x V, merged", {6, 13, 13}, {13, 6, 19}, {}, {1, 0, 2}, {1, 0, 2}, 1.0f, true},
      {"[B,S,H,D] Q x K^T", {2, 7, 3, 67}, {2, 7, 3, 67}, {0, 2, 1, 3}, {0, 2, 3, 1}, {}, 0.125f, true},
      {"K^T of a cache, merged output", {2, 3, 9, 5}, {2, 3, 70, 5}, {}, {0, 1, 3, 2}, {0, 2, 1, 3}, -2.0f, true},
      {"B broadcast over A's batch", {2, 1, 5, 7}, {3, 130, 7}, {}, {0, 2, 1}, {}, 1.0f, true},
      {"B shared by every product", {4, 5, 9}, {9, 67}, {1, 0, 2}, {}, {1, 0, 2}, 2.0f, true},
      {"fewer products than threads", {1, 37, 11}, {1, 11, 70}, {}, {}, {}, 1.0f, true},
      {"product written transposed", {2, 5, 11}, {2, 11, 7}, {}, {}, {0, 2, 1}, 1.0f, false},
      {"A's K axis strided", {3, 11, 8}, {3, 11, 12}, {0, 2, 1}, {}, {}, 0.5f, false},
      {"B's two axes strided", {2, 5, 4}, {4, 2, 6}, {}, {1, 0, 2}, {}, 1.0f, true},
  };
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    uint32_t seed = 1;
    for (const Case& c : cases) {
      const std::string what = std::string(c.what) + ", threads " + std::to_string(threads);
      const Tensor a = random_f32(c.a, seed++), b = random_f32(c.b, seed++);
      auto prod = run("MatMul", {}, transpose(a, c.pa), transpose(b, c.pb), "reference", nullptr);
      ASSERT_TRUE(prod.ok()) << what << ": " << prod.status().message();
      for (int64_t i = 0; i < prod->numel(); ++i) prod->as<float>()[i] *= c.alpha;
      const Tensor want = transpose(*prod, c.py);
      AttrMap attrs;
      if (!c.pa.empty()) attrs["perm_a"] = Attribute::Ints(c.pa);
      if (!c.pb.empty()) attrs["perm_b"] = Attribute::Ints(c.pb);
      if (!c.py.empty()) attrs["perm_y"] = Attribute::Ints(c.py);
      if (c.alpha != 1.0f) attrs["alpha"] = Attribute::Float(c.alpha);
      for (const char* impl : {"reference", "panel", "onednn"}) {
        std::string ran;
        auto got = run("StridedMatMul", attrs, a, b, impl, &ran);
        ASSERT_TRUE(got.ok()) << what << " " << impl << ": " << got.status().message();
        // oneDNN declines the strides it has only a reference implementation for.
        if (std::string(impl) == "onednn") EXPECT_TRUE(ran == "onednn" || ran == "reference") << what << ": " << ran;
        else EXPECT_EQ(ran, std::string(impl) == "panel" && c.fast ? "panel" : "reference") << what << " " << impl;
        // f32 sums of K products of values in [-1, 1] in different orders, times |alpha| <= 2.
        const int64_t K = c.pa.empty() ? c.a[c.a.rank() - 1] : c.a[c.pa.back()];
        testing::expect_close(*got, want, 4e-6 * static_cast<double>(K) + 1e-6, 0, what + " " + impl);
      }
    }
  }
  omp_set_num_threads(2);
}

TEST(StridedMatMul, RejectsPermutationsThatAreNone) {
  const Tensor a = random_f32(Shape{2, 3, 4}, 1), b = random_f32(Shape{2, 4, 5}, 2);
  for (const auto& [name, perm] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"perm_a", {0, 1}}, {"perm_b", {0, 1, 1}}, {"perm_y", {0, 1, 3}}}) {
    AttrMap attrs;
    attrs[name] = Attribute::Ints(perm);
    auto got = run("StridedMatMul", attrs, a, b, "panel", nullptr);
    ASSERT_FALSE(got.ok()) << name;
    EXPECT_NE(got.status().message().find(name), std::string::npos) << got.status().message();
  }
  // K disagrees once permuted.
  AttrMap attrs;
  attrs["perm_b"] = Attribute::Ints({0, 2, 1});
  EXPECT_FALSE(run("StridedMatMul", attrs, a, b, "reference", nullptr).ok());
}

}  // namespace
}  // namespace kiln
