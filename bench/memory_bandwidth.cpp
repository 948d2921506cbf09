// Read bandwidth by working-set size (Google benchmark; not a test). Each size is a buffer read
// end to end by every thread's share, repeatedly; bytes_per_second gives GB/s. Where the rate drops
// tells how much of the cache hierarchy this process really gets: on a shared machine the
// last-level cache the CPU reports is not the share a run can keep. `engine-perf import` takes its
// JSON output.
//
//   memory-bandwidth [--benchmark_repetitions=7] [--benchmark_out=bw.json --benchmark_out_format=json]
//   threads: OMP_NUM_THREADS
#include <immintrin.h>
#include <omp.h>

#include <benchmark/benchmark.h>

#include "runtime/tensor.h"

// The project builds for the x86-64 baseline; this file's loop uses AVX2 loads.
#pragma GCC target("avx2")

namespace {

void read_pass(const float* f, size_t floats, int threads, float* sink) {
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
  *sink += part[0];
}

void BM_ReadBandwidth(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) << 20, floats = bytes / sizeof(float);
  auto buf = kiln::aligned_alloc_shared(bytes);  // zeroed; >= 2 MiB on huge pages
  if (!buf) {
    state.SkipWithError("allocation failed");
    return;
  }
  const float* f = static_cast<const float*>(buf.get());
  const int threads = omp_get_max_threads();
  float sink = 0;
  read_pass(f, floats, threads, &sink);  // the first pass faults pages in
  for (auto _ : state) {
    read_pass(f, floats, threads, &sink);
    benchmark::DoNotOptimize(sink);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.counters["threads"] = threads;
}

}  // namespace

BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->Arg(48)->Arg(64)->Arg(96)->Arg(128)->Arg(256)->Arg(512)
    ->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
