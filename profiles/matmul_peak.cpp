#include "profiles/matmul_peak.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/tensor.h"

namespace kiln {

namespace {

// The kernel that runs `precision`'s matmuls in an engine, and the attributes it needs.
struct PeakKernel {
  const char* op_type;
  const char* impl;
  AttrMap attrs;
};

PeakKernel peak_kernel(FlopPrecision precision) {
  switch (precision) {
    case FlopPrecision::kBf16: return {"MatMul", "onednn_bf16", {}};
    case FlopPrecision::kInt8: {
      AttrMap attrs;
      // A in [-1, 1] (sin), quantized per tensor: scale 1/127.
      attrs["a_scale"] = Attribute::Float(1.0f / 127.0f);
      return {"FusedMatMul", "onednn_int8", attrs};
    }
    default: return {"MatMul", "onednn", {}};
  }
}

}  // namespace

StatusOr<MatmulPeak> measure_matmul_peak(FlopPrecision precision, int n, int runs) {
  if (n < 1 || runs < 1) return InvalidArgument("matmul peak: n and runs must be positive");
  const PeakKernel pk = peak_kernel(precision);
  KernelArgs args;
  args.op_type = pk.op_type;
  args.node_name = "matmul_peak";
  args.num_inputs = 2;
  args.num_outputs = 1;
  KILN_ASSIGN_OR_RETURN(auto kernel, KernelRegistry::builtin().create(args, pk.attrs, pk.impl));
  const Shape square{n, n};
  Tensor a = Tensor::zeros(DType::kFloat32, square), b = Tensor::zeros(DType::kFloat32, square);
  // Non-trivial values: zeros could take a different path in a future kernel.
  for (int64_t i = 0; i < a.numel(); ++i) {
    a.as<float>()[i] = std::sin(0.001f * static_cast<float>(i));
    b.as<float>()[i] = std::cos(0.001f * static_cast<float>(i));
  }
  const TensorView in[2] = {a.view(), b.view()};
  TensorDesc desc;
  KILN_RETURN_IF_ERROR(kernel->infer(in, std::span<TensorDesc>(&desc, 1)));
  Tensor c = Tensor::zeros(desc.dtype, desc.shape);
  TensorView out = c.view();
  KILN_RETURN_IF_ERROR(kernel->prepare(in, std::span<TensorView>(&out, 1)));
  KILN_RETURN_IF_ERROR(kernel->run(in, std::span<TensorView>(&out, 1)));
  // A kernel that handed the shapes to its reference would measure the wrong thing.
  if (std::string(kernel->impl_name()) != pk.impl)
    return Unimplemented(std::string("matmul peak: the ") + flop_precision_name(precision) + " kernel '" + pk.impl +
                         "' does not run here (it fell back to '" + kernel->impl_name() + "')");
  double best_s = INFINITY;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(kernel->run(in, std::span<TensorView>(&out, 1)));
    best_s = std::min(best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  MatmulPeak p;
  p.n = n;
  p.runs = runs;
  p.gflops = 2.0 * n * n * static_cast<double>(n) / best_s / 1e9;
  return p;
}

StatusOr<MatmulPeaks> measure_matmul_peaks(const std::set<FlopPrecision>& used, int n, int runs) {
  MatmulPeaks peaks{};
  std::set<FlopPrecision> which = used;
  which.insert(FlopPrecision::kF32);
  for (FlopPrecision p : which) {
    KILN_ASSIGN_OR_RETURN(MatmulPeak peak, measure_matmul_peak(p, n, runs));
    peaks[static_cast<int>(p)] = peak.gflops;
  }
  return peaks;
}

}  // namespace kiln
