#include "profiles/matmul_peak.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "runtime/kernel.h"
#include "runtime/tensor.h"

namespace kiln {

StatusOr<MatmulPeak> measure_matmul_peak(int n, int runs) {
  if (n < 1 || runs < 1) return InvalidArgument("matmul peak: n and runs must be positive");
  KernelArgs args;
  args.op_type = "MatMul";
  args.node_name = "matmul_peak";
  args.num_inputs = 2;
  args.num_outputs = 1;
  KILN_ASSIGN_OR_RETURN(auto kernel, KernelRegistry::builtin().create(args, {}, "onednn"));
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

}  // namespace kiln
