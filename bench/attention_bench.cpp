// Micro-benchmark of the kiln::Attention kernel at the ControlTransformer's shapes (Google
// benchmark; not a test): the AVX2 f32 path, the AVX-512 f32 path (plain, with the bool mask, cold
// copies, cold in place) and bf16 (AMX, else AVX512_BF16; KILN_MAX_CPU_ISA picks which), each a
// benchmark named "<shape>/<variant>", timed on the wall clock, with a GFLOP/s counter
// (2 * 2 * Dh flops per visible query-key pair) and the process's CPU time. Threads:
// OMP_NUM_THREADS. `engine-perf import` takes its JSON output.
//
//   attention-bench [--shapes=incremental|full|Q:K] [--benchmark_filter=fp32] [--benchmark_repetitions=10]
//                   [--benchmark_out=attention.json --benchmark_out_format=json]
//   (Q:K = Q new tokens over K keys; the default runs incremental and full). On this shared host,
//   compare variants with --benchmark_enable_random_interleaving=true --benchmark_repetitions=N:
//   their repetitions then alternate instead of running back to back.
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "plugins/attention/attention_common.h"
#include "plugins/attention/attention_kernel.h"

namespace kiln {
namespace {

using attention::Geometry;
using attention::MaskKind;
using attention::Params;

struct Shapes {
  const char* name;
  int64_t Sq, Sk_new, Sc;
};

Tensor random_tensor(const Shape& s, std::mt19937& rng) {
  Tensor t = Tensor::zeros(DType::kFloat32, s);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = u(rng);
  return t;
}

double visible_pairs(const Params& p, const Geometry& g) {
  double n = 0;
  for (int64_t i = 0; i < g.Sq; ++i) n += std::min(g.Sk_total(), attention::visible_limit(p, g.query_offset() + i));
  return n * g.B * g.H;
}

// Registers shape i's variants, then the next shape's from inside this frame, and runs every
// benchmark from the innermost: the variants' closures point into these frames, which stay alive
// until the runs are over.
void register_and_run(const std::vector<Shapes>& all, size_t i, const std::string& only) {
  if (i == all.size()) {
    benchmark::RunSpecifiedBenchmarks();
    return;
  }
  const Shapes& s = all[i];
  Params p;
  p.num_heads = 6;
  p.scale = 0.125f;
  p.mask = MaskKind::kBlockCausal;
  p.block = 274;
  p.kv_cache = true;
  Geometry g;
  g.B = 1, g.H = 6, g.Dh = 64, g.Sq = s.Sq, g.Sk_new = s.Sk_new, g.Sc = s.Sc;
  const int64_t D = g.H * g.Dh;
  std::mt19937 rng(1);
  std::vector<Tensor> in{random_tensor(Shape{1, g.Sq, D}, rng), random_tensor(Shape{1, g.Sk_new, D}, rng),
                         random_tensor(Shape{1, g.Sk_new, D}, rng), Tensor(),
                         random_tensor(Shape{1, g.Sc, D}, rng), random_tensor(Shape{1, g.Sc, D}, rng)};
  std::vector<Tensor> out{Tensor::zeros(DType::kFloat32, Shape{1, g.Sq, D}),
                          Tensor::zeros(DType::kFloat32, Shape{1, g.Sk_total(), D}),
                          Tensor::zeros(DType::kFloat32, Shape{1, g.Sk_total(), D})};
  std::vector<TensorView> iv, ov;
  for (const Tensor& t : in) iv.push_back(t.view());
  for (const Tensor& t : out) ov.push_back(t.view());
  const int slots = omp_get_max_threads();
  Params pb = p;
  pb.precision = attention::Precision::kBf16;
  // The same block-causal visibility as a bool [Sq, Sk] mask input, as the ControlTransformer's
  // fused attention receives it.
  Params pm = p, pmb = pb;
  pm.mask = pmb.mask = MaskKind::kBool;
  Tensor mask = Tensor::zeros(DType::kBool, Shape{g.Sq, g.Sk_total()});
  for (int64_t i = 0; i < g.Sq; ++i)
    for (int64_t j = 0; j < g.Sk_total(); ++j)
      mask.as<bool>()[i * g.Sk_total() + j] = j < attention::visible_limit(p, g.query_offset() + i);
  std::vector<TensorView> mv = iv;
  mv[attention::kMask] = mask.view();
  Geometry gm = g;
  gm.mask_stride[2] = g.Sk_total();
  gm.mask_stride[3] = 1;
  std::vector<char> ws(std::max(attention::workspace_bytes(pb, g, slots), attention::workspace_bytes(pmb, gm, slots)));

  struct Variant {
    std::string name;
    std::function<Status()> run;
  };
  // The AVX2 path is what CPUs without AVX-512 run.
  std::vector<Variant> variants{
      {"avx2 fp32",
       [&] {
         attention::allow_avx512(false);
         Status st = attention::run_attention(p, g, iv, ov, ws.data(), slots);
         attention::allow_avx512(true);
         return st;
       }},
      {"fp32", [&] { return attention::run_attention(p, g, iv, ov, ws.data(), slots); }},
  };
  variants.push_back({"fp32 mask", [&] { return attention::run_attention(pm, gm, mv, ov, ws.data(), slots); }});
  // "cold": every call reads and writes its own copy of the inputs and outputs, one of kCopies,
  // as each layer of a model does (its cache was last touched a whole run earlier).
  constexpr int kCopies = 12;
  std::vector<std::vector<Tensor>> cold_in(kCopies), cold_out(kCopies);
  std::vector<std::vector<TensorView>> cold_iv(kCopies), cold_ov(kCopies);
  for (int c = 0; c < kCopies; ++c) {
    for (const Tensor& t : in) cold_in[c].push_back(t.empty() ? Tensor() : Tensor::copy_of(t.view()));
    for (const Tensor& t : out) cold_out[c].push_back(Tensor::copy_of(t.view()));
    for (const Tensor& t : cold_in[c]) cold_iv[c].push_back(t.view());
    for (const Tensor& t : cold_out[c]) cold_ov[c].push_back(t.view());
    cold_iv[c][attention::kMask] = mask.view();
  }
  int cold_next = 0;
  variants.push_back({"fp32 cold", [&] {
                        const int c = cold_next++ % kCopies;
                        return attention::run_attention(pm, gm, cold_iv[c], cold_ov[c], ws.data(), slots);
                      }});
  // "cold in place": as "cold", but each copy's cache is the prefix of its K/V outputs (as in a
  // streaming session's state slabs), so only the new rows are appended, not the whole cache
  // copied: set beside "cold", it tells what the copy costs apart from reading the cold cache.
  std::vector<std::vector<TensorView>> inplace_iv = cold_iv;
  for (int c = 0; c < kCopies; ++c)
    for (int t = 0; t < 2; ++t) {
      TensorView cache = cold_iv[c][attention::kKCache + t];
      std::memcpy(cold_ov[c][1 + t].data, cache.data, static_cast<size_t>(cache.numel()) * sizeof(float));
      cache.data = cold_ov[c][1 + t].data;
      inplace_iv[c][attention::kKCache + t] = cache;
    }
  variants.push_back({"fp32 cold in place", [&] {
                        const int c = cold_next++ % kCopies;
                        return attention::run_attention(pm, gm, inplace_iv[c], cold_ov[c], ws.data(), slots);
                      }});
  if (attention::bf16_supported()) {
    variants.push_back({"bf16", [&] { return attention::run_attention(pb, g, iv, ov, ws.data(), slots); }});
    variants.push_back({"bf16 mask", [&] { return attention::run_attention(pmb, gm, mv, ov, ws.data(), slots); }});
    variants.push_back({"bf16 cold", [&] {
                          const int c = cold_next++ % kCopies;
                          return attention::run_attention(pmb, gm, cold_iv[c], cold_ov[c], ws.data(), slots);
                        }});
  }
  if (!only.empty())
    std::erase_if(variants, [&](const Variant& v) { return v.name.find(only) == std::string::npos; });
  const double gflop = visible_pairs(p, g) * 4 * g.Dh * 1e-9;
  for (size_t v = 0; v < variants.size(); ++v) {
    const std::string name = std::string(s.name) + "/" + variants[v].name;
    benchmark::RegisterBenchmark(name.c_str(), [&variants, v, gflop](benchmark::State& st) {
      for (auto _ : st) {
        Status status = variants[v].run();
        if (!status.ok()) {
          st.SkipWithError(status.message().c_str());
          break;
        }
      }
      st.counters["GFLOP/s"] = benchmark::Counter(gflop, benchmark::Counter::kIsIterationInvariantRate);  // GFLOP per second
      st.counters["GFLOP"] = gflop;
    })->UseRealTime()->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
  }
  register_and_run(all, i + 1, only);
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  // --shapes=incremental|full|Q:K is this program's own flag; the rest are Google benchmark's.
  std::string shapes;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--shapes=", 0) == 0) shapes = a.substr(9);
    else rest.push_back(argv[i]);
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 1;
  std::vector<kiln::Shapes> all;
  if (shapes.empty() || shapes == "incremental") all.push_back({"incremental", 274, 274, 1370});
  if (shapes.empty() || shapes == "full") all.push_back({"full", 1644, 1644, 0});
  long long q = 0, k = 0;
  if (std::sscanf(shapes.c_str(), "%lld:%lld", &q, &k) == 2 && q > 0 && k >= q) all.push_back({shapes.c_str(), q, q, k - q});
  if (all.empty()) {
    std::fprintf(stderr, "attention-bench: --shapes expects incremental, full or Q:K, got '%s'\n", shapes.c_str());
    return 2;
  }
  kiln::register_and_run(all, 0, "");
  benchmark::Shutdown();
  return 0;
}
