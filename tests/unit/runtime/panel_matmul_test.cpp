// MatMul impl "panel" (runtime/kernels/panel_matmul_kernels.cpp) against the reference MatMul:
// batched products of two activations at shapes that divide neither the 6-row nor the 64-column
// blocking nor the K depth (384), batch broadcasting either way, a B shared by every product (with
// A's batches contiguous, run as one GEMM), B of exactly one panel (read in place, or packed when
// misaligned), single rows (decoding), and the thread counts of a parallel and a serial run.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
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

// Runs MatMul impl `impl` on views a, b; returns the output and the impl that ran.
std::pair<Tensor, std::string> run_matmul(const TensorView& a, const TensorView& b, const char* impl) {
  auto k = make_kernel("MatMul", {}, 2, impl);
  if (!k) return {};
  const TensorView in[2] = {a, b};
  TensorDesc desc;
  Status s = k->infer(in, std::span<TensorDesc>(&desc, 1));
  EXPECT_TRUE(s.ok()) << s.message();
  Tensor y = Tensor::zeros(DType::kFloat32, desc.shape);
  // Poisoned, so a product that is never written shows.
  for (int64_t i = 0; i < y.numel(); ++i) y.as<float>()[i] = NAN;
  TensorView out = y.view();
  s = k->prepare(in, std::span<const TensorView>(&out, 1));
  EXPECT_TRUE(s.ok()) << s.message();
  // Twice: the second run reuses the packing space.
  for (int r = 0; r < 2 && s.ok(); ++r) s = k->run(in, std::span<const TensorView>(&out, 1));
  EXPECT_TRUE(s.ok()) << s.message();
  return {std::move(y), k->impl_name()};
}

void expect_close(const Tensor& got, const Tensor& want, int64_t K, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  // f32 sums of K products of values in [-1, 1], in different orders.
  const double tol = 2e-6 * static_cast<double>(K) + 1e-6;
  int bad = 0;
  for (int64_t i = 0; i < got.numel() && bad < 5; ++i) {
    const double g = got.as<float>()[i], w = want.as<float>()[i];
    if (!(std::fabs(g - w) <= tol)) {
      ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
      ++bad;
    }
  }
}

struct Case {
  Shape a, b;
};

TEST(PanelMatMul, MatchesTheReferenceAtAwkwardShapes) {
  if (!panel_gemm::supported()) GTEST_SKIP() << "no AVX2 + FMA";
  const std::vector<Case> cases = {
      {{12, 128, 64}, {12, 64, 128}},           // attention's Q x K^T
      {{12, 128, 128}, {12, 128, 64}},          // P x V: N = 64, B read in place
      {{1, 3, 37, 29}, {1, 3, 29, 71}},         // nothing divides
      {{2, 3, 7, 5}, {3, 5, 130}},              // B broadcast over the leading batch dim
      {{3, 1, 9, 17}, {1, 4, 17, 65}},          // both broadcast
      {{5, 13, 11}, {11, 67}},                  // B shared, A contiguous: one GEMM of 65 rows
      {{2, 1, 13, 11}, {1, 3, 11, 64}},         // A broadcast, B one panel
      {{4, 1, 700}, {4, 700, 64}},              // decode row, K beyond one K block
      {{4, 1, 64}, {4, 64, 1025}},              // decode row against a long key axis
      {{2, 19, 800}, {2, 800, 129}},            // K in three blocks, N past two panels
      {{7, 6, 16}, {7, 16, 16}},                // exactly one register block, N below a panel
  };
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    uint32_t seed = 1;
    for (const Case& c : cases) {
      const Tensor a = random_f32(c.a, seed++), b = random_f32(c.b, seed++);
      const std::string what = "A " + c.a.str() + " B " + c.b.str() + " threads " + std::to_string(threads);
      auto [want, ref_impl] = run_matmul(a.view(), b.view(), "reference");
      auto [got, impl] = run_matmul(a.view(), b.view(), "panel");
      EXPECT_EQ(impl, "panel") << what;
      expect_close(got, want, c.a[c.a.rank() - 1], what);
    }
  }
  omp_set_num_threads(2);
}

TEST(PanelMatMul, PacksAOnePanelBThatIsNotAligned) {
  if (!panel_gemm::supported()) GTEST_SKIP() << "no AVX2 + FMA";
  // B [3, 20, 64] starting one float into its buffer: the in-place read would be misaligned.
  const Tensor a = random_f32(Shape{3, 10, 20}, 7), big = random_f32(Shape{3 * 20 * 64 + 1}, 8);
  Tensor b = Tensor::zeros(DType::kFloat32, Shape{3, 20, 64});
  std::memcpy(b.as<float>(), big.as<float>() + 1, sizeof(float) * 3 * 20 * 64);
  TensorView bv = big.view();
  bv.shape = Shape{3, 20, 64};
  bv.data = big.as<float>() + 1;
  auto [want, r] = run_matmul(a.view(), b.view(), "reference");
  auto [got, impl] = run_matmul(a.view(), bv, "panel");
  EXPECT_EQ(impl, "panel");
  expect_close(got, want, 20, "misaligned B");
}

TEST(PanelMatMul, OtherDtypesAndVectorsRunTheReference) {
  Tensor a = Tensor::zeros(DType::kFloat32, Shape{5}), b = random_f32(Shape{5, 3}, 3);
  for (int64_t i = 0; i < 5; ++i) a.as<float>()[i] = static_cast<float>(i);
  auto [want, r] = run_matmul(a.view(), b.view(), "reference");
  auto [got, impl] = run_matmul(a.view(), b.view(), "panel");
  EXPECT_EQ(impl, "reference");
  expect_close(got, want, 5, "1-D A");
}

}  // namespace
}  // namespace kiln
