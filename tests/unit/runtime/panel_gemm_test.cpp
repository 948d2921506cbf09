// The panel GEMM (runtime/kernels/panel_gemm.h) on every register block this CPU runs (AVX2 always,
// AVX-512 where present) against a double-precision reference: shapes that divide neither the
// 6-row nor the 16/64-column blocking nor the K depth, every epilogue, a residual that is the
// output itself, and several thread counts. FusedMatMul's tests (matmul_epilogue_test.cpp) cover
// the kernel behind the registry.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <tuple>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu_features.h"
#include "runtime/kernels/panel_gemm.h"
#include "runtime/kernels/panel_gemm_block.h"

namespace kiln::panel_gemm {
namespace {

struct Isa {
  const char* name;
  detail::BlockFn block;
};

std::vector<Isa> isas() {
  std::vector<Isa> v;
  if (cpu_info().avx2) v.push_back({"avx2", detail::run_block_avx2});
  if (cpu_info().avx512) v.push_back({"avx512", detail::run_block_avx512});
  return v;
}

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

struct Problem {
  int64_t M, K, N;
  std::vector<float> a, w, bias, residual;
  std::shared_ptr<float> packed;  // pack(w), 64-byte aligned as the kernels load it
  double scale = 1;               // of A's values, for the tolerance
};

// y = act(a x w + bias) + residual in double.
std::vector<float> reference(const Problem& p, bool bias, Act act, bool residual) {
  std::vector<double> acc(static_cast<size_t>(p.N));
  std::vector<float> y(static_cast<size_t>(p.M * p.N));
  for (int64_t m = 0; m < p.M; ++m) {
    for (int64_t n = 0; n < p.N; ++n) acc[n] = bias ? p.bias[n] : 0.0;
    for (int64_t k = 0; k < p.K; ++k) {
      const double x = p.a[m * p.K + k];
      const float* wr = p.w.data() + k * p.N;
      for (int64_t n = 0; n < p.N; ++n) acc[n] += x * wr[n];
    }
    for (int64_t n = 0; n < p.N; ++n) {
      double v = acc[n];
      if (act == Act::kGeluErf) v = 0.5 * v * (1.0 + std::erf(v * 0.70710678118654752));
      if (act == Act::kGeluTanh) v = 0.5 * v * (1.0 + std::tanh(0.79788456080286536 * (v + 0.044715 * v * v * v)));
      if (residual) v += p.residual[m * p.N + n];
      y[m * p.N + n] = static_cast<float>(v);
    }
  }
  return y;
}

const char* act_name(Act a) { return a == Act::kNone ? "none" : a == Act::kGeluErf ? "gelu_erf" : "gelu_tanh"; }

// Runs one problem with one epilogue on one ISA and thread count; `alias`: the residual is y.
void check(const Problem& p, const Isa& isa, int threads, bool bias, Act act, bool residual, bool alias) {
  const std::string what = std::string(isa.name) + " M " + std::to_string(p.M) + " K " + std::to_string(p.K) + " N " +
                           std::to_string(p.N) + (bias ? " bias " : " ") + act_name(act) + (residual ? alias ? " +residual=y" : " +residual" : "") +
                           " threads " + std::to_string(threads);
  const std::vector<float> want = reference(p, bias, act, residual);
  // A sentinel past y's end: a masked store that writes past N shows up there.
  std::vector<float> y(static_cast<size_t>(p.M * p.N + 16), 1e30f);
  if (alias) std::copy(p.residual.begin(), p.residual.end(), y.begin());
  Args g;
  g.a = p.a.data();
  g.M = p.M, g.K = p.K, g.N = p.N;
  g.packed = p.packed.get();
  g.bias = bias ? p.bias.data() : nullptr;
  g.residual = residual ? (alias ? y.data() : p.residual.data()) : nullptr;
  g.y = y.data();
  g.act = act;
  detail::run_with(g, threads, isa.block);
  const double atol = 1e-5 * p.scale * std::sqrt(static_cast<double>(p.K)), rtol = 1e-4;
  int bad = 0;
  for (int64_t i = 0; i < p.M * p.N && bad < 5; ++i)
    if (!(std::abs(static_cast<double>(y[i]) - want[i]) <= atol + rtol * std::abs(static_cast<double>(want[i])))) {
      ADD_FAILURE() << what << ": element " << i << " (row " << i / p.N << ", column " << i % p.N << ") got " << y[i] << " want "
                    << want[i];
      ++bad;
    }
  for (int64_t i = p.M * p.N; i < p.M * p.N + 16; ++i) EXPECT_EQ(y[i], 1e30f) << what << ": wrote past the output";
}

Problem make_problem(int64_t M, int64_t K, int64_t N, uint32_t seed) {
  Problem p{M, K, N, random_floats(M * K, seed), random_floats(K * N, seed + 1), random_floats(N, seed + 2),
            random_floats(M * N, seed + 3), nullptr, 1};
  const size_t bytes = (sizeof(float) * static_cast<size_t>(packed_floats(K, N)) + 63) / 64 * 64;
  p.packed.reset(static_cast<float*>(std::aligned_alloc(64, bytes)), std::free);
  pack(p.w.data(), K, N, p.packed.get());
  return p;
}

TEST(PanelGemm, SupportedOnKilnsBaseline) { EXPECT_EQ(supported(), cpu_info().avx2); }

// Every shape of the grid once per ISA, the epilogue, bias, residual (separate or aliased) and
// thread count varying with the shape so the grid stays affordable.
TEST(PanelGemm, MatchesReferenceAtAwkwardShapes) {
  if (!supported()) GTEST_SKIP() << "no AVX2 + FMA";
  const Act acts[] = {Act::kNone, Act::kGeluErf, Act::kGeluTanh};
  const int thread_counts[] = {1, 2, 3, 4};
  uint32_t seed = 1;
  int i = 0;
  // Rows 1-5 and 7 leave every short register block (1-5 rows; the AVX2 blocks widen below 4).
  for (int64_t M : {1, 2, 3, 5, 7, 274})
    for (int64_t K : {1, 3, 17, 385, 1536})
      for (int64_t N : {1, 15, 17, 63, 65, 100, 1536}) {
        // The largest corner is the step's own shape class; one of it is enough.
        if (M == 274 && K == 1536 && N == 1536 && i % 2) continue;
        const Problem p = make_problem(M, K, N, seed += 4);
        for (const Isa& isa : isas()) {
          const int r = i % 4;  // 0 none, 1 separate, 2 aliased, 3 separate
          check(p, isa, thread_counts[i % 4], i % 3 != 2, acts[(i / 2) % 3], r != 0, r == 2);
          ++i;
        }
      }
}

// Every epilogue combination at shapes with a partial panel and a partial row block, on 1 and 2
// threads.
TEST(PanelGemm, EveryEpilogue) {
  if (!supported()) GTEST_SKIP() << "no AVX2 + FMA";
  uint32_t seed = 500;
  for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{7, 385, 100}, {274, 17, 65}, {5, 1000, 130}, {3, 33, 70}, {2, 64, 64}}) {
    const Problem p = make_problem(M, K, N, seed += 4);
    for (const Isa& isa : isas())
      for (int threads : {1, 2})
        for (bool bias : {false, true})
          for (Act act : {Act::kNone, Act::kGeluErf, Act::kGeluTanh})
            for (int res : {0, 1, 2}) check(p, isa, threads, bias, act, res != 0, res == 2);
  }
}

// The GELUs far into both tails and near zero (inputs scaled up so the products span +-30).
TEST(PanelGemm, GeluTails) {
  if (!supported()) GTEST_SKIP() << "no AVX2 + FMA";
  Problem p = make_problem(13, 40, 70, 900);
  for (float& x : p.a) x *= 6.0f;
  p.scale = 6;
  for (const Isa& isa : isas())
    for (Act act : {Act::kGeluErf, Act::kGeluTanh}) check(p, isa, 2, true, act, false, false);
}

}  // namespace
}  // namespace kiln::panel_gemm
