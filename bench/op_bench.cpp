// op-bench: one Google-benchmark per elementwise / reduction op family, through kiln's kernel
// registry exactly as a plan step runs it (kernel created and prepared once, run() timed), at the
// shapes the issue-19 models produce. bench/run_op_bench.py runs the same ops as single-op ONNX
// models in ONNX Runtime and writes the comparison to bench/RESULTS.md.
//
//   build/op-bench [--benchmark_filter=REGEX] [--benchmark_format=json] ...
//
// KILN_SIMD=avx2 pins the AVX2 build of the vector loops (runtime/kernels/vec_kernels.h).
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu_features.h"
#include "runtime/kernel.h"
#include "runtime/kernels/vec_kernels.h"
#include "runtime/tensor.h"

namespace kiln {
namespace {

Tensor random(DType dt, const Shape& s, float lo, float hi, uint32_t seed) {
  Tensor t = Tensor::zeros(dt, s);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  if (dt == DType::kFloat32)
    for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = u(rng);
  else if (dt == DType::kBool)
    for (int64_t i = 0; i < t.numel(); ++i) t.as<bool>()[i] = u(rng) > 0;
  return t;
}

// Times `op` on `inputs`; reports bytes moved (inputs + output) per second.
void run_op(benchmark::State& state, const std::string& op, std::vector<Tensor> inputs, AttrMap attrs = {}, const std::string& impl = "") {
  KernelArgs args;
  args.op_type = op;
  args.node_name = "bench";
  args.opset = 17;
  args.num_inputs = static_cast<int>(inputs.size());
  args.num_outputs = 1;
  auto k = impl.empty() ? KernelRegistry::builtin().create(args, attrs) : KernelRegistry::builtin().create(args, attrs, impl);
  if (!k.ok()) {
    state.SkipWithError(k.status().message().c_str());
    return;
  }
  std::vector<TensorView> in;
  for (auto& t : inputs) in.push_back(t.view());
  std::vector<TensorDesc> desc(1);
  if (Status st = (*k)->infer(in, desc); !st.ok()) {
    state.SkipWithError(st.message().c_str());
    return;
  }
  Tensor out = Tensor::zeros(desc[0].dtype, desc[0].shape);
  const TensorView ov = out.view();
  if (Status st = (*k)->prepare(in, {&ov, 1}); !st.ok()) {
    state.SkipWithError(st.message().c_str());
    return;
  }
  for (auto _ : state) {
    Status st = (*k)->run(in, {&ov, 1});
    benchmark::DoNotOptimize(st);
  }
  int64_t bytes = out.nbytes();
  for (auto& t : inputs) bytes += t.nbytes();
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetLabel(op + " " + desc[0].shape.str());
}

// The shapes: the GPT-2 MLP activation [1, 32, 1536] (the Tanh), EfficientNet-B0's largest
// activation [1, 96, 112, 112], and a small [1, 32, 384] row block.
const Shape kGpt{1, 32, 1536}, kEff{1, 96, 112, 112}, kSmall{1, 32, 384};

void unary(benchmark::State& s, const char* op, const Shape* shape) { run_op(s, op, {random(DType::kFloat32, *shape, -4, 4, 1)}); }
void positive_unary(benchmark::State& s, const char* op, const Shape* shape) {
  run_op(s, op, {random(DType::kFloat32, *shape, 0.01f, 4, 1)});
}

#define KILN_UNARY_BENCH(OP, FN)                                                    \
  BENCHMARK_CAPTURE(FN, OP##_gpt, #OP, &kGpt)->Unit(benchmark::kMicrosecond);       \
  BENCHMARK_CAPTURE(FN, OP##_effnet, #OP, &kEff)->Unit(benchmark::kMicrosecond);
KILN_UNARY_BENCH(Tanh, unary)
KILN_UNARY_BENCH(Erf, unary)
KILN_UNARY_BENCH(Exp, unary)
KILN_UNARY_BENCH(Sigmoid, unary)
KILN_UNARY_BENCH(Softplus, unary)
KILN_UNARY_BENCH(Relu, unary)
KILN_UNARY_BENCH(HardSwish, unary)
KILN_UNARY_BENCH(Log, positive_unary)
KILN_UNARY_BENCH(Sqrt, positive_unary)
KILN_UNARY_BENCH(Reciprocal, positive_unary)
#undef KILN_UNARY_BENCH

// SiLU in place on one core, as the oneDNN FusedConv's epilogue runs it over each convolution's
// output (silu_in_place): EfficientNet-B0's largest activation, and a block that stays in L2, so the
// pair separates the arithmetic from the memory traffic. Both vector tables where the CPU has them.
void silu_in_place_one_core(benchmark::State& s, bool avx512, int64_t n) {
  const vec::Table* t = avx512 ? vec::avx512_table() : &vec::avx2_table();
  if (!t) {
    s.SkipWithError("no AVX-512 on this CPU");
    return;
  }
  std::vector<float> x(static_cast<size_t>(n));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-6.0f, 6.0f);
  for (float& v : x) v = d(rng);
  const vec::UnaryFn f = t->unary[static_cast<int>(vec::Unary::kSilu)];
  for (auto _ : s) {
    f(x.data(), x.data(), n, {});
    benchmark::ClobberMemory();
    // SiLU shrinks negative values toward 0 run after run; refresh one lane per line so the
    // values stay spread without a second pass.
    for (int64_t i = 0; i < n; i += 4096) x[static_cast<size_t>(i)] = d(rng);
  }
  s.SetBytesProcessed(s.iterations() * n * 8);
  s.SetLabel(std::string(t->isa) + " " + std::to_string(n) + " floats");
}
BENCHMARK_CAPTURE(silu_in_place_one_core, avx2_effnet, false, 96 * 112 * 112)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(silu_in_place_one_core, avx2_l2, false, 64 * 1024)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(silu_in_place_one_core, avx512_effnet, true, 96 * 112 * 112)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(silu_in_place_one_core, avx512_l2, true, 64 * 1024)->Unit(benchmark::kMicrosecond);

void gelu(benchmark::State& s, const char* approx) {
  run_op(s, "FusedElementwise", {random(DType::kFloat32, kGpt, -4, 4, 1)}, [&] {
    AttrMap f;
    // One instruction: GELU (vec::Unary kGeluErf = 6, kGeluTanh = 7) on input 0.
    f["program"] = Attribute::Ints({std::string(approx) == "tanh" ? 7 : 6, 1, 0, -1, -1});
    f["immediates"] = Attribute::Floats({});
    return f;
  }());
}
BENCHMARK_CAPTURE(gelu, erf, "none")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(gelu, tanh, "tanh")->Unit(benchmark::kMicrosecond);

void pow_const(benchmark::State& s, float e) {
  run_op(s, "Pow", {random(DType::kFloat32, kGpt, 0.01f, 4, 1), Tensor::from_vector<float>({e}, Shape{})});
}
BENCHMARK_CAPTURE(pow_const, square, 2.0f)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(pow_const, cube, 3.0f)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(pow_const, sqrt, 0.5f)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(pow_const, general, 1.7f)->Unit(benchmark::kMicrosecond);

void binary(benchmark::State& s, const char* op, bool bcast) {
  run_op(s, op, {random(DType::kFloat32, kGpt, -4, 4, 1), random(DType::kFloat32, bcast ? Shape{1536} : kGpt, 0.5f, 4, 2)});
}
BENCHMARK_CAPTURE(binary, Add, "Add", false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(binary, Add_bias, "Add", true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(binary, Mul_bias, "Mul", true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(binary, Div, "Div", false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(binary, Less, "Less", false)->Unit(benchmark::kMicrosecond);

void se_gate(benchmark::State& s) {  // EfficientNet's squeeze-excite Mul: [1,96,112,112] * [1,96,1,1]
  run_op(s, "Mul", {random(DType::kFloat32, kEff, -4, 4, 1), random(DType::kFloat32, Shape{1, 96, 1, 1}, 0, 1, 2)});
}
BENCHMARK(se_gate)->Unit(benchmark::kMicrosecond);

void where(benchmark::State& s) {
  run_op(s, "Where", {random(DType::kBool, kGpt, -1, 1, 3), random(DType::kFloat32, kGpt, -4, 4, 1), random(DType::kFloat32, kGpt, -4, 4, 2)});
}
BENCHMARK(where)->Unit(benchmark::kMicrosecond);

void cast(benchmark::State& s, DType from, DType to, const Shape* shape) {
  AttrMap a;
  a["to"] = Attribute::Int(static_cast<int64_t>(to));
  Tensor x = random(DType::kFloat32, *shape, -4, 4, 1);
  if (from == DType::kFloat16) {  // the same values, as float16
    Tensor h = Tensor::zeros(DType::kFloat16, *shape);
    for (int64_t i = 0; i < x.numel(); ++i) h.as<uint16_t>()[i] = float_to_half(x.as<float>()[i]);
    x = std::move(h);
  }
  run_op(s, "Cast", {std::move(x)}, a);
}
BENCHMARK_CAPTURE(cast, f32_f16, DType::kFloat32, DType::kFloat16, &kGpt)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(cast, f16_f32, DType::kFloat16, DType::kFloat32, &kGpt)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(cast, f32_bf16, DType::kFloat32, DType::kBFloat16, &kGpt)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(cast, f32_f16_effnet, DType::kFloat32, DType::kFloat16, &kEff)->Unit(benchmark::kMicrosecond);

void reduce(benchmark::State& s, const char* op) {
  AttrMap a;
  a["axes"] = Attribute::Ints({-1});
  run_op(s, op, {random(DType::kFloat32, kGpt, -4, 4, 1)}, a);
}
BENCHMARK_CAPTURE(reduce, ReduceMean, "ReduceMean")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(reduce, ReduceSum, "ReduceSum")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(reduce, ReduceMax, "ReduceMax")->Unit(benchmark::kMicrosecond);

// Unfused attention's scores at the ControlTransformer forward's [1, 6, 1644, 1644]: the
// elementwise fusion's Div by the scale then Where(mask, -inf) over a broadcast bool mask, and the
// Softmax after it.
const Shape kScores{1, 6, 1644, 1644};
void scores_mask(benchmark::State& s) {
  Tensor mask = random(DType::kBool, Shape{1644, 1644}, -1, 1, 2);
  run_op(s, "FusedElementwise", {random(DType::kFloat32, kScores, -4, 4, 1), mask}, [&] {
    AttrMap f;
    // r4 = x / 8 (Binary kDiv = 3, immediate r2); r5 = mask ? r3 (-inf) : r4.
    f["program"] = Attribute::Ints({100 + 3, 4, 0, 2, -1, 200, 5, 1, 3, 4});
    f["immediates"] = Attribute::Floats({8.0f, -INFINITY});
    return f;
  }());
}
BENCHMARK(scores_mask)->Unit(benchmark::kMillisecond)->UseRealTime();
void scores_softmax(benchmark::State& s) { run_op(s, "Softmax", {random(DType::kFloat32, kScores, -4, 4, 1)}); }
BENCHMARK(scores_softmax)->Unit(benchmark::kMillisecond)->UseRealTime();

// Unfused attention's K^T: [T, H, D] -> [H, D, T] at ViT's 197 tokens.
void transpose_kt(benchmark::State& s) {
  run_op(s, "Transpose", {random(DType::kFloat32, Shape{197, 12, 64}, -4, 4, 1)}, [] {
    AttrMap a;
    a["perm"] = Attribute::Ints({1, 2, 0});
    return a;
  }());
}
BENCHMARK(transpose_kt)->Unit(benchmark::kMicrosecond)->UseRealTime();

void softmax(benchmark::State& s) { run_op(s, "Softmax", {random(DType::kFloat32, kGpt, -4, 4, 1)}); }
BENCHMARK(softmax)->Unit(benchmark::kMicrosecond);
// Swin-T's shifted-window attention (its masked Softmax stays a step): rows of 49, windows x heads.
const Shape kSwinStage3{4, 12, 49, 49}, kSwinStage1{64, 3, 49, 49};
void softmax_window(benchmark::State& s, const Shape* shape) { run_op(s, "Softmax", {random(DType::kFloat32, *shape, -4, 4, 1)}); }
BENCHMARK_CAPTURE(softmax_window, swin_stage3, &kSwinStage3)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(softmax_window, swin_stage1, &kSwinStage1)->Unit(benchmark::kMicrosecond);
// The shifted blocks' scores: torchvision adds -100 where query and key come from different
// regions of a window the roll wrapped around (the last row and column of windows), so those rows
// hold values near -100 below their max; exp of them is far below FLT_MIN.
Tensor swin_shifted_scores(const Shape& shape) {
  Tensor t = random(DType::kFloat32, shape, -4, 4, 1);
  const int64_t windows = shape[0], heads = shape[1], g = static_cast<int64_t>(std::lround(std::sqrt(double(windows))));
  const int64_t ws = 7, shift = 3, side = g * ws;
  auto region = [&](int64_t p) { return p < side - ws ? 0 : p < side - shift ? 1 : 2; };
  float* x = t.as<float>();
  for (int64_t w = 0; w < windows; ++w)
    for (int64_t i = 0; i < 49; ++i)
      for (int64_t j = 0; j < 49; ++j) {
        const int64_t wy = w / g * ws, wx = w % g * ws;
        const int64_t ri = region(wy + i / ws) * 3 + region(wx + i % ws), rj = region(wy + j / ws) * 3 + region(wx + j % ws);
        if (ri == rj) continue;
        for (int64_t h = 0; h < heads; ++h) x[((w * heads + h) * 49 + i) * 49 + j] -= 100.0f;
      }
  return t;
}
void softmax_window_masked(benchmark::State& s, const Shape* shape) { run_op(s, "Softmax", {swin_shifted_scores(*shape)}); }
BENCHMARK_CAPTURE(softmax_window_masked, swin_stage3, &kSwinStage3)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(softmax_window_masked, swin_stage1, &kSwinStage1)->Unit(benchmark::kMicrosecond);

// Swin-T's and ViT-B/16's data movement: the patch merging's Concat of four strided quarters
// (features.4, [1, 14, 14, 192] x 4 along the channels), the shifted blocks' roll (a Slice pair
// joined along W: [1, 28, 25, 192] + [1, 28, 3, 192]), the window reverse's Transpose and ViT's
// patch-embedding Transpose ([1, 768, 196] -> [1, 196, 768]).
void concat(benchmark::State& s, std::vector<Shape> shapes, int64_t axis) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < shapes.size(); ++i) in.push_back(random(DType::kFloat32, shapes[i], -4, 4, static_cast<uint32_t>(i + 1)));
  AttrMap a;
  a["axis"] = Attribute::Int(axis);
  run_op(s, "Concat", std::move(in), a);
}
BENCHMARK_CAPTURE(concat, swin_merge4, std::vector<Shape>(4, Shape{1, 14, 14, 192}), 3)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(concat, swin_merge2, std::vector<Shape>(4, Shape{1, 28, 28, 96}), 3)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(concat, swin_roll_w, (std::vector<Shape>{{1, 28, 25, 192}, {1, 28, 3, 192}}), 2)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(concat, swin_roll_w1, (std::vector<Shape>{{1, 56, 53, 96}, {1, 56, 3, 96}}), 2)->Unit(benchmark::kMicrosecond)->UseRealTime();
// DenseNet-121's dense Concats in NHWC (AVX-512's layout between FusedConvs): every earlier
// feature map, 32 channels each, joined per pixel. Block 1's sixth layer and block 2's tenth.
std::vector<Shape> dense_inputs(int64_t hw, int64_t c0, int layers) {
  std::vector<Shape> v{{1, hw, hw, c0}};
  for (int i = 0; i < layers; ++i) v.push_back({1, hw, hw, 32});
  return v;
}
BENCHMARK_CAPTURE(concat, densenet_b1_l6, dense_inputs(56, 64, 5), 3)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(concat, densenet_b2_l10, dense_inputs(28, 128, 9), 3)->Unit(benchmark::kMicrosecond)->UseRealTime();
void transpose(benchmark::State& s, Shape shape, std::vector<int64_t> perm) {
  AttrMap a;
  a["perm"] = Attribute::Ints(perm);
  run_op(s, "Transpose", {random(DType::kFloat32, shape, -4, 4, 1)}, a);
}
BENCHMARK_CAPTURE(transpose, vit_patches, Shape{1, 768, 196}, std::vector<int64_t>{0, 2, 1})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(transpose, swin_window_reverse, Shape{1, 4, 4, 7, 7, 192}, std::vector<int64_t>{0, 1, 3, 2, 4, 5})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(transpose, swin_qkv, Shape{16, 49, 3, 6, 32}, std::vector<int64_t>{2, 0, 3, 1, 4})->Unit(benchmark::kMicrosecond)->UseRealTime();
void residual_add(benchmark::State& s, Shape shape) {
  run_op(s, "Add", {random(DType::kFloat32, shape, -4, 4, 1), random(DType::kFloat32, shape, -4, 4, 2)});
}
BENCHMARK_CAPTURE(residual_add, vit, Shape{1, 197, 768})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(residual_add, swin_stage1, Shape{1, 56, 56, 96})->Unit(benchmark::kMicrosecond)->UseRealTime();

void global_avg_pool(benchmark::State& s) { run_op(s, "GlobalAveragePool", {random(DType::kFloat32, kEff, -4, 4, 1)}); }
BENCHMARK(global_avg_pool)->Unit(benchmark::kMicrosecond);

// The layouts builder/passes/conv_channels_last.cpp keeps between FusedConvs (nChw8c with AVX2, NHWC
// with AVX-512): ResNet-18's stem MaxPool and EfficientNet-B0's squeeze-excitation
// (GlobalAveragePool, then the gate Mul) at its largest [1, 96, 112, 112] and a late [1, 480, 14, 14].
Shape in_layout(const char* layout, const Shape& nchw) {
  if (std::string(layout) == "nhwc") return Shape{nchw[0], nchw[2], nchw[3], nchw[1]};
  return Shape{nchw[0], nchw[1] / 8, nchw[2], nchw[3], 8};
}
const Shape kStem{1, 64, 112, 112}, kEffLate{1, 480, 14, 14};
void max_pool_layout(benchmark::State& s, const char* layout) {
  AttrMap a;
  a["kernel_shape"] = Attribute::Ints({3, 3});
  a["strides"] = Attribute::Ints({2, 2});
  a["pads"] = Attribute::Ints({1, 1, 1, 1});
  a["layout"] = Attribute::String(layout);
  run_op(s, "MaxPool", {random(DType::kFloat32, in_layout(layout, kStem), -4, 4, 1)}, a);
}
BENCHMARK_CAPTURE(max_pool_layout, nchw8c, "nchw8c")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(max_pool_layout, nhwc, "nhwc")->Unit(benchmark::kMicrosecond);
// SqueezeNet 1.1's first MaxPool (3x3, stride 2, ceil_mode, no padding) on [1, 64, 111, 111] in NHWC.
void max_pool_squeezenet_nhwc(benchmark::State& s) {
  AttrMap a;
  a["kernel_shape"] = Attribute::Ints({3, 3});
  a["strides"] = Attribute::Ints({2, 2});
  a["ceil_mode"] = Attribute::Int(1);
  a["layout"] = Attribute::String("nhwc");
  run_op(s, "MaxPool", {random(DType::kFloat32, Shape{1, 111, 111, 64}, -4, 4, 1)}, a);
}
BENCHMARK(max_pool_squeezenet_nhwc)->Unit(benchmark::kMicrosecond);
void global_avg_pool_layout(benchmark::State& s, const char* layout, const Shape* nchw) {
  AttrMap a;
  a["layout"] = Attribute::String(layout);
  run_op(s, "GlobalAveragePool", {random(DType::kFloat32, in_layout(layout, *nchw), -4, 4, 1)}, a);
}
BENCHMARK_CAPTURE(global_avg_pool_layout, nchw8c, "nchw8c", &kEff)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(global_avg_pool_layout, nchw8c_late, "nchw8c", &kEffLate)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(global_avg_pool_layout, nhwc, "nhwc", &kEff)->Unit(benchmark::kMicrosecond);
const Shape kEffSe2{1, 96, 56, 56}, kEffSe6{1, 1152, 7, 7};
BENCHMARK_CAPTURE(global_avg_pool_layout, nhwc_se2, "nhwc", &kEffSe2)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(global_avg_pool_layout, nhwc_late, "nhwc", &kEffLate)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(global_avg_pool_layout, nhwc_se6, "nhwc", &kEffSe6)->Unit(benchmark::kMicrosecond);
void se_gate_nchw8c(benchmark::State& s, const Shape* nchw) {  // gate first, as the exported graph has it
  const Shape x = in_layout("nchw8c", *nchw), gate{1, x[1], 1, 1, 8};
  run_op(s, "Mul", {random(DType::kFloat32, gate, 0, 1, 2), random(DType::kFloat32, x, -4, 4, 1)});
}
BENCHMARK_CAPTURE(se_gate_nchw8c, large, &kEff)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(se_gate_nchw8c, late, &kEffLate)->Unit(benchmark::kMicrosecond);
// The same gate in NHWC (AVX-512 machines keep NHWC between FusedConvs): [1,1,1,C] * [1,H,W,C],
// EfficientNet-B0's first block (C 32 at 112x112) and a late one (C 672 at 14x14).
void se_gate_nhwc(benchmark::State& s, int64_t C, int64_t HW) {
  run_op(s, "Mul", {random(DType::kFloat32, Shape{1, 1, 1, C}, 0, 1, 2), random(DType::kFloat32, Shape{1, HW, HW, C}, -4, 4, 1)});
}
BENCHMARK_CAPTURE(se_gate_nhwc, effnet_block1, 32, 112)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(se_gate_nhwc, effnet_stage2, 144, 56)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(se_gate_nhwc, effnet_late, 672, 14)->Unit(benchmark::kMicrosecond);
// MobileNet-V3's gate after elementwise fusion: one FusedElementwise HardSigmoid(gate) * x
// (vec::Unary kHardSigmoid = 13 with its alpha, beta immediates; then Mul = 102).
void se_gate_fused_nchw8c(benchmark::State& s, const Shape* nchw) {
  const Shape x = in_layout("nchw8c", *nchw), gate{1, x[1], 1, 1, 8};
  AttrMap f;
  f["program"] = Attribute::Ints({13, 4, 0, 2, 3, 102, 5, 4, 1, -1});
  f["immediates"] = Attribute::Floats({1.0f / 6.0f, 0.5f});
  run_op(s, "FusedElementwise", {random(DType::kFloat32, gate, -4, 4, 2), random(DType::kFloat32, x, -4, 4, 1)}, f);
}
const Shape kMnv3{1, 16, 56, 56};
BENCHMARK_CAPTURE(se_gate_fused_nchw8c, mobilenet_v3, &kMnv3)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(se_gate_fused_nchw8c, large, &kEff)->Unit(benchmark::kMicrosecond);

// ResNet's 3x3, stride-1 convolutions (pad 1, bias, ReLU) in nChw8c, the layout kept between
// FusedConvs on AVX2, on each FusedConv kernel that runs them: oneDNN's direct convolution, the
// im2col GEMM and Winograd F(4x4, 3x3). Arguments: channels (in = out) and the square input's side.
void conv3x3_nchw8c(benchmark::State& s, const char* impl) {
  const int64_t c = s.range(0), hw = s.range(1);
  AttrMap a;
  a["pads"] = Attribute::Ints({1, 1, 1, 1});
  a["activation"] = Attribute::String("relu");
  a["x_layout"] = Attribute::String("nchw8c");
  a["y_layout"] = Attribute::String("nchw8c");
  run_op(s, "FusedConv",
         {random(DType::kFloat32, in_layout("nchw8c", Shape{1, c, hw, hw}), -1, 1, 1), random(DType::kFloat32, Shape{c, c, 3, 3}, -0.1, 0.1, 2),
          random(DType::kFloat32, Shape{c}, -1, 1, 3)},
         a, impl);
  s.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(c * c * 9 * hw * hw) * 1e-9 * static_cast<double>(s.iterations()),
                                             benchmark::Counter::kIsRate);
}
#define KILN_CONV3X3(impl) \
  BENCHMARK_CAPTURE(conv3x3_nchw8c, impl, #impl)->Args({64, 56})->Args({128, 28})->Args({256, 14})->Args({512, 7})->Unit(benchmark::kMicrosecond)->UseRealTime()
KILN_CONV3X3(onednn);
KILN_CONV3X3(im2col_panel);
KILN_CONV3X3(winograd_f4x3);
#undef KILN_CONV3X3

// The layout builder/passes/conv_channels_last.cpp keeps between FusedConvs on this CPU.
const char* conv_layout_for_bench() { return cpu_info().avx512 ? "nhwc" : "nchw8c"; }

// The stems of the zoo: a 3-channel NCHW image into the layout kept between FusedConvs (NHWC on
// AVX-512), 3x3 stride 2 pad 1 with ReLU. Arguments: output channels, the square input's side.
void stem_conv(benchmark::State& s, const char* impl) {
  const int64_t oc = s.range(0), hw = s.range(1);
  AttrMap a;
  a["pads"] = Attribute::Ints({1, 1, 1, 1});
  a["strides"] = Attribute::Ints({2, 2});
  a["activation"] = Attribute::String("relu");
  a["y_layout"] = Attribute::String(conv_layout_for_bench());
  run_op(s, "FusedConv",
         {random(DType::kFloat32, Shape{1, 3, hw, hw}, -1, 1, 1), random(DType::kFloat32, Shape{oc, 3, 3, 3}, -0.3, 0.3, 2),
          random(DType::kFloat32, Shape{oc}, -1, 1, 3)},
         a, impl);
}
BENCHMARK_CAPTURE(stem_conv, onednn, "onednn")->Args({16, 224})->Args({32, 224})->Args({64, 224})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(stem_conv, im2col_panel, "im2col_panel")->Args({16, 224})->Args({32, 224})->Args({64, 224})->Unit(benchmark::kMicrosecond)->UseRealTime();

// EfficientNet-B0's depthwise convolutions (pad k / 2, bias, SiLU) in nChw8c, on oneDNN's jit_dw
// (SiLU as kiln's pass after the primitive) and on "depthwise_direct" (the epilogue in registers);
// then a few without activation, and MobileNet-V3-small's (ReLU/HardSwish there; none here).
// Arguments: channels, the square input's side, kernel side, stride (and 0: no activation).
void depthwise_nchw8c(benchmark::State& s, const char* impl) {
  const int64_t c = s.range(0), hw = s.range(1), k = s.range(2), stride = s.range(3);
  const bool silu = s.range(4) != 0;
  AttrMap a;
  a["group"] = Attribute::Int(c);
  a["strides"] = Attribute::Ints({stride, stride});
  a["pads"] = Attribute::Ints({k / 2, k / 2, k / 2, k / 2});
  a["activation"] = Attribute::String(silu ? "silu" : "none");
  a["x_layout"] = Attribute::String("nchw8c");
  a["y_layout"] = Attribute::String("nchw8c");
  run_op(s, "FusedConv",
         {random(DType::kFloat32, in_layout("nchw8c", Shape{1, c, hw, hw}), -1, 1, 1), random(DType::kFloat32, Shape{c, 1, k, k}, -0.3, 0.3, 2),
          random(DType::kFloat32, Shape{c}, -1, 1, 3)},
         a, impl);
}
#define KILN_DEPTHWISE(impl)                                                                                                    \
  BENCHMARK_CAPTURE(depthwise_nchw8c, impl, #impl)                                                                              \
      ->Args({32, 112, 3, 1, 1})->Args({96, 112, 3, 2, 1})->Args({144, 56, 3, 1, 1})->Args({144, 56, 5, 2, 1})                  \
      ->Args({240, 28, 5, 1, 1})->Args({480, 14, 3, 1, 1})->Args({672, 14, 5, 1, 1})->Args({1152, 7, 5, 1, 1})                 \
      ->Args({32, 112, 3, 1, 0})->Args({144, 56, 3, 1, 0})                                                                        \
      ->Args({16, 112, 3, 2, 0})->Args({72, 56, 3, 2, 0})->Args({88, 28, 3, 1, 0})->Args({576, 7, 5, 1, 0})                     \
      ->Unit(benchmark::kMicrosecond)->UseRealTime()
KILN_DEPTHWISE(onednn);
KILN_DEPTHWISE(depthwise_direct);
#undef KILN_DEPTHWISE

// ShuffleNet-V2's depthwise convolutions (3x3, pad 1, bias, no activation) on values that stay
// NCHW (58, 116 and 232 channels), on oneDNN (jit_dw between two reorders), "nchw_direct" and
// "depthwise_nchw"; then one 5x5 and two of ConvNeXt-T's 7x7 (NCHW between its LayerNorms).
// Arguments: channels, the square input's side, kernel side, stride.
void depthwise_nchw(benchmark::State& s, const char* impl) {
  const int64_t c = s.range(0), hw = s.range(1), k = s.range(2), stride = s.range(3);
  AttrMap a;
  a["group"] = Attribute::Int(c);
  a["strides"] = Attribute::Ints({stride, stride});
  a["pads"] = Attribute::Ints({k / 2, k / 2, k / 2, k / 2});
  run_op(s, "FusedConv",
         {random(DType::kFloat32, Shape{1, c, hw, hw}, -1, 1, 1), random(DType::kFloat32, Shape{c, 1, k, k}, -0.3, 0.3, 2),
          random(DType::kFloat32, Shape{c}, -1, 1, 3)},
         a, impl);
  const int64_t ohw = (hw + 2 * (k / 2) - k) / stride + 1;
  s.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(c * k * k * ohw * ohw) * 1e-9 * static_cast<double>(s.iterations()),
                                             benchmark::Counter::kIsRate);
}
#define KILN_DEPTHWISE_NCHW(impl)                                                                                               \
  BENCHMARK_CAPTURE(depthwise_nchw, impl, #impl)                                                                                \
      ->Args({58, 56, 3, 2})->Args({58, 28, 3, 1})->Args({116, 28, 3, 2})->Args({116, 14, 3, 1})->Args({232, 14, 3, 2})        \
      ->Args({96, 28, 5, 1})->Args({96, 56, 7, 1})->Args({384, 14, 7, 1})->Unit(benchmark::kMicrosecond)->UseRealTime()
KILN_DEPTHWISE_NCHW(onednn);
KILN_DEPTHWISE_NCHW(nchw_direct);
KILN_DEPTHWISE_NCHW(depthwise_nchw);
#undef KILN_DEPTHWISE_NCHW

void layer_norm(benchmark::State& s, bool fused) {
  const Shape x{1, 32, 384};
  if (fused) {
    AttrMap f;
    f["norm"] = Attribute::String("layer");
    f["epsilon"] = Attribute::Float(1e-5f);
    // n * gamma + beta: Mul (100 + kMul = 102) then Add (100).
    f["program"] = Attribute::Ints({102, 4, 3, 1, -1, 100, 5, 4, 2, -1});
    f["immediates"] = Attribute::Floats({});
    run_op(s, "FusedElementwise",
           {random(DType::kFloat32, x, -4, 4, 1), random(DType::kFloat32, Shape{384}, 0.5, 2, 2), random(DType::kFloat32, Shape{384}, -1, 1, 3)}, f);
  } else {
    AttrMap a;
    a["axis"] = Attribute::Int(-1);
    run_op(s, "LayerNormalization",
           {random(DType::kFloat32, x, -4, 4, 1), random(DType::kFloat32, Shape{384}, 0.5, 2, 2), random(DType::kFloat32, Shape{384}, -1, 1, 3)}, a);
  }
}
BENCHMARK_CAPTURE(layer_norm, fused_elementwise, true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(layer_norm, LayerNormalization, false)->Unit(benchmark::kMicrosecond);

// LayerNormalization over the last axis at the zoo's shapes: ViT-B/16's tokens ([1, 197, 768]) and
// ConvNeXt-T's channels-last LayerNorm per stage (3136 rows of 96 channels ... 49 rows of 768).
void layer_norm_zoo(benchmark::State& s, const Shape* x) {
  AttrMap a;
  a["axis"] = Attribute::Int(-1);
  a["epsilon"] = Attribute::Float(1e-6f);
  const int64_t c = (*x)[x->rank() - 1];
  run_op(s, "LayerNormalization",
         {random(DType::kFloat32, *x, -4, 4, 1), random(DType::kFloat32, Shape{c}, 0.5, 2, 2), random(DType::kFloat32, Shape{c}, -1, 1, 3)}, a);
}
const Shape kVit{1, 197, 768}, kConvNext1{1, 56, 56, 96}, kConvNext2{1, 28, 28, 192}, kConvNext3{1, 14, 14, 384}, kConvNext4{1, 7, 7, 768};
BENCHMARK_CAPTURE(layer_norm_zoo, vit_b_16, &kVit)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(layer_norm_zoo, convnext_stage1, &kConvNext1)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(layer_norm_zoo, convnext_stage2, &kConvNext2)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(layer_norm_zoo, convnext_stage3, &kConvNext3)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(layer_norm_zoo, convnext_stage4, &kConvNext4)->Unit(benchmark::kMicrosecond);

// DenseNet-121's transitions in nChw8c as kiln runs them (pool_before_pointwise_conv: the pool
// before the 1x1 conv, on the BN + ReLU output): the BN + ReLU FusedElementwise (x * s + b, Relu:
// vec::Binary kMul 102, kAdd 100, vec::Unary kRelu 11) and the 2x2/2 AveragePool as two steps, and
// as one (FusedElementwise with pool_layout, builder/passes/elementwise_pool_fusion.cpp).
// Arguments: channels and the square input's side (transition1 256 x 56, 2: 512 x 28, 3: 1024 x 14).
AttrMap bn_relu_program() {
  AttrMap f;
  f["program"] = Attribute::Ints({102, 3, 0, 1, -1, 100, 4, 3, 2, -1, 11, 5, 4, -1, -1});
  f["immediates"] = Attribute::Floats({});
  return f;
}
std::vector<Tensor> bn_relu_inputs(int64_t c, int64_t hw) {
  const Shape x = in_layout("nchw8c", Shape{1, c, hw, hw}), p{c / 8, 1, 1, 8};
  return {random(DType::kFloat32, x, -4, 4, 1), random(DType::kFloat32, p, 0.5, 2, 2), random(DType::kFloat32, p, -1, 1, 3)};
}
void transition_bn_relu(benchmark::State& s) { run_op(s, "FusedElementwise", bn_relu_inputs(s.range(0), s.range(1)), bn_relu_program()); }
void transition_avg_pool(benchmark::State& s) {
  AttrMap a;
  a["kernel_shape"] = Attribute::Ints({2, 2});
  a["strides"] = Attribute::Ints({2, 2});
  a["layout"] = Attribute::String("nchw8c");
  run_op(s, "AveragePool", {random(DType::kFloat32, in_layout("nchw8c", Shape{1, s.range(0), s.range(1), s.range(1)}), -4, 4, 1)}, a);
}
void transition_bn_relu_pool(benchmark::State& s) {
  AttrMap f = bn_relu_program();
  f["pool_layout"] = Attribute::String("nchw8c");
  run_op(s, "FusedElementwise", bn_relu_inputs(s.range(0), s.range(1)), f);
}
#define KILN_TRANSITION(fn) BENCHMARK(fn)->Args({256, 56})->Args({512, 28})->Args({1024, 14})->Unit(benchmark::kMicrosecond)
KILN_TRANSITION(transition_bn_relu);
KILN_TRANSITION(transition_avg_pool);
KILN_TRANSITION(transition_bn_relu_pool);
#undef KILN_TRANSITION

void batchnorm(benchmark::State& s) {
  run_op(s, "BatchNormalization", {random(DType::kFloat32, kEff, -4, 4, 1), random(DType::kFloat32, Shape{96}, 0.5, 2, 2),
                                   random(DType::kFloat32, Shape{96}, -1, 1, 3), random(DType::kFloat32, Shape{96}, -1, 1, 4),
                                   random(DType::kFloat32, Shape{96}, 0.5, 2, 5)});
}
BENCHMARK(batchnorm)->Unit(benchmark::kMicrosecond);

// An unfused attention's products at mha_batch_first's shapes (12 heads of 64, 197 tokens, heads
// interleaved as [S, H, D]): MatMul on Transposes the graph materialises, against StridedMatMul
// reading the same operands through strides (builder/passes/matmul_transpose_folding.cpp).
const Shape kHeads{197, 12, 64};
void attention_qk(benchmark::State& s, const char* impl) {
  run_op(s, "MatMul", {random(DType::kFloat32, Shape{12, 197, 64}, -1, 1, 1), random(DType::kFloat32, Shape{12, 64, 197}, -1, 1, 2)}, {}, impl);
}
void attention_pv(benchmark::State& s, const char* impl) {
  run_op(s, "MatMul", {random(DType::kFloat32, Shape{12, 197, 197}, 0, 1, 1), random(DType::kFloat32, Shape{12, 197, 64}, -1, 1, 2)}, {}, impl);
}
void strided_qk(benchmark::State& s, const char* impl) {
  AttrMap a;
  a["perm_a"] = Attribute::Ints({1, 0, 2});
  a["perm_b"] = Attribute::Ints({1, 2, 0});
  a["alpha"] = Attribute::Float(0.125f);
  run_op(s, "StridedMatMul", {random(DType::kFloat32, kHeads, -1, 1, 1), random(DType::kFloat32, kHeads, -1, 1, 2)}, a, impl);
}
void strided_pv(benchmark::State& s, const char* impl) {
  AttrMap a;
  a["perm_b"] = Attribute::Ints({1, 0, 2});
  a["perm_y"] = Attribute::Ints({1, 0, 2});
  run_op(s, "StridedMatMul", {random(DType::kFloat32, Shape{12, 197, 197}, 0, 1, 1), random(DType::kFloat32, kHeads, -1, 1, 2)}, a, impl);
}
void head_transpose(benchmark::State& s, std::vector<int64_t> perm) {
  AttrMap a;
  a["perm"] = Attribute::Ints(std::move(perm));
  run_op(s, "Transpose", {random(DType::kFloat32, kHeads, -1, 1, 1)}, a);
}
BENCHMARK_CAPTURE(attention_qk, onednn, "onednn")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(attention_qk, panel, "panel")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(strided_qk, panel, "panel")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(strided_qk, onednn, "onednn")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(attention_pv, onednn, "onednn")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(attention_pv, panel, "panel")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(strided_pv, panel, "panel")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(strided_pv, onednn, "onednn")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(head_transpose, split, std::vector<int64_t>{1, 0, 2})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(head_transpose, k_t, std::vector<int64_t>{1, 2, 0})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
