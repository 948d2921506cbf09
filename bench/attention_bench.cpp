// Micro-benchmark of the kiln::Attention kernel at the ControlTransformer's shapes (not a test:
// timings go to stdout only): the AVX2 f32 path, the AVX-512 f32 path and (with AMX) bf16, run
// alternately, one call each per round; reports each variant's median wall and CPU time and
// GFLOP/s (2 * 2 * Dh flops per visible query-key pair). Threads: OMP_NUM_THREADS.
//
//   attention-bench [rounds] [variant name filter] [incremental|full|Q:K]   (Q:K = Q new tokens over K keys)
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench(const Shapes& s, int rounds, const std::string& only) {
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
  }
  // Wall time, and the process's CPU time (both threads): on a loaded machine the latter still
  // shows the kernel's cost when the wall time mostly shows waiting for a core.
  if (!only.empty())
    std::erase_if(variants, [&](const Variant& v) { return v.name.find(only) == std::string::npos; });
  std::vector<std::vector<double>> ms(variants.size()), cpu_ms(variants.size());
  auto cpu_now = [] {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
  };
  for (int r = 0; r < rounds + 2; ++r)
    for (size_t v = 0; v < variants.size(); ++v) {
      const double c0 = cpu_now();
      const auto t0 = std::chrono::steady_clock::now();
      Status st = variants[v].run();
      const auto t1 = std::chrono::steady_clock::now();
      const double c1 = cpu_now();
      if (!st.ok()) {
        std::fprintf(stderr, "%s: %s\n", variants[v].name.c_str(), st.message().c_str());
        std::exit(1);
      }
      if (r >= 2) {
        ms[v].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        cpu_ms[v].push_back(c1 - c0);
      }
    }
  const double gflop = visible_pairs(p, g) * 4 * g.Dh * 1e-9;
  std::printf("%s: Sq=%lld Sk=%lld H=%lld Dh=%lld block_causal 274, %.3f GFLOP, %d threads\n", s.name,
              static_cast<long long>(g.Sq), static_cast<long long>(g.Sk_total()), static_cast<long long>(g.H),
              static_cast<long long>(g.Dh), gflop, slots);
  for (size_t v = 0; v < variants.size(); ++v) {
    const double m = median(ms[v]), c = median(cpu_ms[v]);
    std::printf("  %-10s median %8.3f ms  %7.1f GFLOP/s   cpu %8.3f ms  %7.1f GFLOP/s per cpu-second\n",
                variants[v].name.c_str(), m, gflop / (m * 1e-3), c, gflop / (c * 1e-3));
  }
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 30;
  const std::string only = argc > 2 ? argv[2] : "";
  const std::string shapes = argc > 3 ? argv[3] : "";
  if (shapes.empty() || shapes == "incremental") kiln::bench({"incremental", 274, 274, 1370}, rounds, only);
  if (shapes.empty() || shapes == "full") kiln::bench({"full", 1644, 1644, 0}, rounds, only);
  // "Q:K": Q new queries (and keys) after K - Q cached keys, e.g. 256:1644.
  long long q = 0, k = 0;
  if (std::sscanf(shapes.c_str(), "%lld:%lld", &q, &k) == 2 && q > 0 && k >= q) kiln::bench({shapes.c_str(), q, q, k - q}, rounds, only);
  return 0;
}
