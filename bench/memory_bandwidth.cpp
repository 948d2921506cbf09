// Read bandwidth by working-set size (not a test: numbers go to stdout only). Each size is a
// buffer read end to end by every thread's share, repeatedly; the median pass gives GB/s. Where
// the rate drops tells how much of the cache hierarchy this process really gets: on a shared
// machine the last-level cache the CPU reports is not the share a run can keep.
//
//   memory-bandwidth [rounds]        threads: OMP_NUM_THREADS
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/tensor.h"

// The project builds for the x86-64 baseline; this file's loop uses AVX2 loads.
#pragma GCC target("avx2")

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  const int threads = omp_get_max_threads();
  std::printf("read bandwidth, %d threads, median of %d passes\n", threads, rounds);
  float sink = 0;
  for (size_t mb : {1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 256, 512}) {
    const size_t bytes = mb << 20, floats = bytes / sizeof(float);
    auto buf = kiln::aligned_alloc_shared(bytes);  // zeroed; >= 2 MiB on huge pages
    if (!buf) return 1;
    const float* f = static_cast<const float*>(buf.get());
    std::vector<double> gbs;
    for (int r = 0; r < rounds + 1; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      float part[256] = {};
#pragma omp parallel num_threads(threads)
      {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
        const size_t begin = floats / n * t, end = t + 1 == n ? floats : floats / n * (t + 1);
        __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (size_t i = begin; i + 32 <= end; i += 32)
          for (int u = 0; u < 4; ++u) a[u] = _mm256_add_ps(a[u], _mm256_load_ps(f + i + 8 * u));
        float out[8];
        _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
        part[t % 256] = out[0];
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      sink += part[0];
      if (r > 0) gbs.push_back(static_cast<double>(bytes) / s / 1e9);  // the first pass faults pages in
    }
    std::sort(gbs.begin(), gbs.end());
    std::printf("%5zu MB  %7.1f GB/s\n", mb, gbs[gbs.size() / 2]);
  }
  std::printf("(sum of the zeroed buffers, which keeps the reads: %g)\n", sink);
  return 0;
}
