// f32 GEMM timings (Google benchmark; not a test): kiln's oneDNN MatMul kernel at the 1024^3
// peak shape engine-build measures, and oneDNN against the panel kernel at the ControlTransformer
// step's linear-layer shapes (274 rows against 384x384, 384x1536 and 1536x384 weights), the full
// forward's 1644 rows, a decoder's single row and a decoder's 128-token prefill, and ResNet-18's 3x3
// convolutions as im2col GEMMs (FusedConv impl im2col_panel). "cold" variants read their weights
// from one of several copies in turn, as a model's layers do. batched_*: MatMul of two activations
// per head (unfused attention), oneDNN against the panel kernel. A GFLOP/s counter per benchmark;
// `engine-perf import` takes its JSON output.
//
//   gemm-bench [--benchmark_filter=panel] [--benchmark_repetitions=10 --benchmark_enable_random_interleaving=true]
//   threads: OMP_NUM_THREADS
#include <omp.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <benchmark/benchmark.h>

#include "runtime/kernel.h"
#include "runtime/kernels/panel_gemm.h"
#include "runtime/tensor.h"

namespace kiln {
namespace {

Tensor filled(const Shape& s, float phase) {
  Tensor t = Tensor::zeros(DType::kFloat32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = std::sin(phase + 0.001f * static_cast<float>(i));
  return t;
}

// Copies of the weights: 8 of the step's largest (2.4 MB) exceed what this VM keeps in L2 and its
// share of L3, so each call reads its weights from memory, as in a model run.
constexpr int kColdCopies = 8;

void BM_OnednnMatMul(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  const int copies = st.range(3) ? kColdCopies : 1;
  KernelArgs args;
  args.op_type = "MatMul";
  args.node_name = "gemm_bench";
  args.num_inputs = 2;
  args.num_outputs = 1;
  auto kernel = KernelRegistry::builtin().create(args, {}, "onednn");
  if (!kernel.ok()) {
    st.SkipWithError(kernel.status().message().c_str());
    return;
  }
  Tensor a = filled(Shape{M, K}, 0.f), c = Tensor::zeros(DType::kFloat32, Shape{M, N});
  std::vector<Tensor> w;
  for (int i = 0; i < copies; ++i) w.push_back(filled(Shape{K, N}, static_cast<float>(i)));
  TensorView out = c.view();
  for (const Tensor& wi : w) {
    const TensorView in[2] = {a.view(), wi.view()};
    TensorDesc desc;
    if (!(*kernel)->infer(in, std::span<TensorDesc>(&desc, 1)).ok() || !(*kernel)->prepare(in, std::span<TensorView>(&out, 1)).ok()) {
      st.SkipWithError("oneDNN matmul: infer/prepare failed");
      return;
    }
  }
  int next = 0;
  for (auto _ : st) {
    const TensorView in[2] = {a.view(), w[static_cast<size_t>(next++ % copies)].view()};
    Status s = (*kernel)->run(in, std::span<TensorView>(&out, 1));
    if (!s.ok()) {
      st.SkipWithError(s.message().c_str());
      break;
    }
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2e-9 * static_cast<double>(M * K * N), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_PanelGemm(benchmark::State& st) {
  if (!panel_gemm::supported()) {
    st.SkipWithError("no AVX2 + FMA on this CPU");
    return;
  }
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  const int copies = st.range(3) ? kColdCopies : 1;
  Tensor a = filled(Shape{M, K}, 0.f), c = Tensor::zeros(DType::kFloat32, Shape{M, N});
  std::vector<Tensor> packed;
  for (int i = 0; i < copies; ++i) {
    Tensor w = filled(Shape{K, N}, static_cast<float>(i));
    Tensor p = Tensor::zeros(DType::kFloat32, Shape{panel_gemm::packed_floats(K, N)});
    panel_gemm::pack(w.as<float>(), K, N, p.as<float>());
    packed.push_back(std::move(p));
  }
  const int threads = omp_get_max_threads();
  int next = 0;
  for (auto _ : st) {
    panel_gemm::Args g;
    g.a = a.as<float>();
    g.M = M, g.K = K, g.N = N;
    g.packed = packed[static_cast<size_t>(next++ % copies)].as<float>();
    g.y = c.as<float>();
    panel_gemm::run(g, threads);
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2e-9 * static_cast<double>(M * K * N), benchmark::Counter::kIsIterationInvariantRate);
}

// Batched MatMul of two activations (unfused attention: Q x K^T and P x V per head), one impl.
void BM_BatchedMatMul(benchmark::State& st, const char* impl) {
  const int64_t H = st.range(0), M = st.range(1), K = st.range(2), N = st.range(3);
  KernelArgs args;
  args.op_type = "MatMul";
  args.node_name = "gemm_bench";
  args.num_inputs = 2;
  args.num_outputs = 1;
  auto kernel = KernelRegistry::builtin().create(args, {}, impl);
  if (!kernel.ok()) {
    st.SkipWithError(kernel.status().message().c_str());
    return;
  }
  Tensor a = filled(Shape{H, M, K}, 0.f), b = filled(Shape{H, K, N}, 1.f), c = Tensor::zeros(DType::kFloat32, Shape{H, M, N});
  TensorView out = c.view();
  const TensorView in[2] = {a.view(), b.view()};
  TensorDesc desc;
  if (!(*kernel)->infer(in, std::span<TensorDesc>(&desc, 1)).ok() || !(*kernel)->prepare(in, std::span<TensorView>(&out, 1)).ok()) {
    st.SkipWithError("MatMul: infer/prepare failed");
    return;
  }
  for (auto _ : st) {
    Status s = (*kernel)->run(in, std::span<TensorView>(&out, 1));
    if (!s.ok()) {
      st.SkipWithError(s.message().c_str());
      break;
    }
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2e-9 * static_cast<double>(H * M * K * N), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_BatchedOnednn(benchmark::State& st) { BM_BatchedMatMul(st, "onednn"); }
void BM_BatchedPanel(benchmark::State& st) { BM_BatchedMatMul(st, "panel"); }

// Heads x (Q x K^T, P x V) at a 128-token prefill, ViT's 197 tokens, a 1-token decode on 1024
// cached tokens and the ControlTransformer step's 274 queries on 1644 keys.
void batched_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"H", "M", "K", "N"});
  for (int64_t t : {128, 197}) {
    b->Args({12, t, 64, t});
    b->Args({12, t, t, 64});
  }
  b->Args({12, 1, 64, 1025});
  b->Args({12, 1, 1025, 64});
  b->Args({6, 274, 64, 1644});
  b->Args({6, 274, 1644, 64});
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "N", "cold"});
  for (int64_t m : {1, 274, 1644})
    for (auto [k, n] : {std::pair<int64_t, int64_t>{384, 384}, {384, 1536}, {1536, 384}})
      for (int64_t cold : {0, 1}) b->Args({m, k, n, cold});
  // A 128-token prefill of a 768-wide decoder: projections, MLP in and out, a 4096-word head.
  for (auto [k, n] : {std::pair<int64_t, int64_t>{768, 768}, {768, 1536}, {1536, 768}, {768, 4096}})
    for (int64_t cold : {0, 1}) b->Args({128, k, n, cold});
  // ResNet-18's 3x3 convolutions as im2col GEMMs: output pixels x (9 * in channels) x out channels.
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{49, 4608, 512}, {196, 2304, 256}, {784, 1152, 128}, {3136, 576, 64}})
    b->Args({m, k, n, 1});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace kiln

BENCHMARK(kiln::BM_OnednnMatMul)->Name("onednn_peak")->Args({1024, 1024, 1024, 0})->ArgNames({"M", "K", "N", "cold"})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(kiln::BM_OnednnMatMul)->Name("onednn")->Apply(kiln::shapes);
BENCHMARK(kiln::BM_PanelGemm)->Name("panel")->Apply(kiln::shapes);
BENCHMARK(kiln::BM_BatchedOnednn)->Name("batched_onednn")->Apply(kiln::batched_shapes);
BENCHMARK(kiln::BM_BatchedPanel)->Name("batched_panel")->Apply(kiln::batched_shapes);
BENCHMARK_MAIN();
