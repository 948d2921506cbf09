// parallel-overhead: the figures behind kiln's thread-pool cost model (runtime/thread_pool.cpp):
// what a parallel region costs (kiln's pool and an OpenMP region, with the helper still spinning
// and after it has gone to sleep), and how fast one thread streams bytes and retires FMAs.
//
//   parallel-overhead [--rounds N]
//
// Run it as the tools run (OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=10000 is what they set).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "runtime/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double time_us(const F& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 2000;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::max(10, std::atoi(argv[++i]));
  kiln::ThreadPool& pool = kiln::ThreadPool::global();
  // Two chunks of 20 us of work each: a region that used both threads takes ~20 us, one whose
  // helper never came ~40 us (kiln's pool: the caller did both), an OpenMP region whose helper was
  // descheduled as long as the helper took to come. Reported: time minus the 20 us of work.
  auto busy = [](double us) {
    const auto end = Clock::now() + std::chrono::nanoseconds(static_cast<int64_t>(us * 1000));
    while (Clock::now() < end) {
    }
  };
  constexpr double kWorkUs = 20;
  auto two_chunks = [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) busy(kWorkUs);
  };
  std::vector<double> hot, cold, omp_hot, omp_cold;
  for (int r = 0; r < rounds; ++r) hot.push_back(time_us([&] { pool.parallel_for(2, 1, two_chunks); }) - kWorkUs);
  for (int r = 0; r < std::min(rounds, 300); ++r) {
    std::this_thread::sleep_for(std::chrono::microseconds(400));  // the helper's spin (50 us) has ended
    cold.push_back(time_us([&] { pool.parallel_for(2, 1, two_chunks); }) - kWorkUs);
  }
  for (int r = 0; r < rounds; ++r)
    omp_hot.push_back(time_us([&] {
#pragma omp parallel for num_threads(2) schedule(static)
      for (int i = 0; i < 2; ++i) busy(kWorkUs);
    }) - kWorkUs);
  for (int r = 0; r < std::min(rounds, 300); ++r) {
    std::this_thread::sleep_for(std::chrono::microseconds(400));
    omp_cold.push_back(time_us([&] {
#pragma omp parallel for num_threads(2) schedule(static)
      for (int i = 0; i < 2; ++i) busy(kWorkUs);
    }) - kWorkUs);
  }
  auto pct = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
  };
  double load[3] = {0, 0, 0};
  ::getloadavg(load, 3);
  std::printf("threads %d, load average %.2f\n", pool.max_threads(), load[0]);
  std::printf("region overhead (2 chunks of %.0f us; us over the work, p50 / p90 / max):\n", kWorkUs);
  std::printf("  helper spinning:  kiln pool %6.2f / %6.2f / %8.2f   OpenMP %6.2f / %6.2f / %8.2f\n", pct(hot, 0.5), pct(hot, 0.9), pct(hot, 1),
              pct(omp_hot, 0.5), pct(omp_hot, 0.9), pct(omp_hot, 1));
  std::printf("  helper asleep:    kiln pool %6.2f / %6.2f / %8.2f   OpenMP %6.2f / %6.2f / %8.2f\n", pct(cold, 0.5), pct(cold, 0.9), pct(cold, 1),
              pct(omp_cold, 0.5), pct(omp_cold, 0.9), pct(omp_cold, 1));

  // One thread: bytes streamed by an elementwise add over 3 x 8 MiB (beyond L2), and FMAs in
  // registers.
  const size_t n = size_t{1} << 20;  // 3 x 4 MiB: a step's activations, in the last-level cache
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
  std::vector<double> add_us;
  for (int r = 0; r < 20; ++r)
    add_us.push_back(time_us([&] {
#pragma omp simd
      for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
    }));
  const double bytes_per_ns = 12.0 * static_cast<double>(n) / (median(add_us) * 1000.0);
  __m256 acc[8];
  for (auto& x : acc) x = _mm256_set1_ps(1.0f);
  const __m256 m = _mm256_set1_ps(0.999f), k = _mm256_set1_ps(0.001f);
  const int64_t iters = 2'000'000;
  const double fma_us = time_us([&] {
    for (int64_t i = 0; i < iters; ++i)
      for (auto& x : acc) x = _mm256_fmadd_ps(x, m, k);
  });
  float out = 0;
  for (auto& x : acc) out += _mm256_cvtss_f32(x);
  const double flops_per_ns = 2.0 * 8 * 8 * static_cast<double>(iters) / (fma_us * 1000.0);
  std::printf("one thread: %.2f bytes/ns streamed (c = a + b over 12 MiB), %.1f FLOP/ns (AVX2 FMA in registers; %g)\n", bytes_per_ns,
              flops_per_ns, out);
  std::printf("a region's p90 overhead is as much as %.0f KB streamed by one thread (helper asleep), %.0f KB (spinning)\n",
              pct(cold, 0.9) * bytes_per_ns, pct(hot, 0.9) * bytes_per_ns);
  return 0;
}
