// FusedRotary (created by builder/passes/rotary_fusion.cpp): y = x * cos + rotate_half(x) * sin, the
// rotary position embedding as Llama-style PyTorch code writes it, with rotate_half(x) =
// concat(-x[..., D/2:], x[..., :D/2]). Exported, that is seven nodes per q or k (two Slices, Neg,
// Concat, two Muls, Add), each a pass over the tensor and, past the parallel threshold, a wake-up of
// every thread; fused it is one pass.
//
// Inputs: x [..., S, D] float32 with D even; cos and sin float32 of S * D elements laid out [S, D]
// (any leading dims are 1): row r of x (the rows are x viewed as [N, D]) uses row r % S of both.
#include <algorithm>

#include "runtime/kernels/elementwise_common.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/thread_pool.h"

namespace kiln {
namespace {

class FusedRotaryKernel final : public Kernel {
 public:
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    KILN_RETURN_IF_ERROR(check_input_count(in, 3, 3));
    const Shape& x = in[0].shape;
    for (int i = 0; i < 3; ++i)
      if (in[i].dtype != DType::kFloat32)
        return InvalidArgument("input " + std::to_string(i) + " must be float32, got " + dtype_name(in[i].dtype));
    if (x.rank() < 2) return InvalidArgument("input 0 must have rank >= 2, got " + x.str());
    const int64_t S = x[x.rank() - 2], D = x[x.rank() - 1];
    if (D % 2 != 0) return InvalidArgument("input 0's last dim must be even, got " + std::to_string(D));
    for (int i = 1; i < 3; ++i) {
      const Shape& t = in[i].shape;
      bool ok = t.rank() >= 2 && t[t.rank() - 2] == S && t[t.rank() - 1] == D;
      for (int d = 0; ok && d < t.rank() - 2; ++d) ok = t[d] == 1;
      if (!ok)
        return InvalidArgument("input " + std::to_string(i) + " " + t.str() + " must be [" + std::to_string(S) + ", " +
                               std::to_string(D) + "] (with leading 1s) for input 0 " + x.str());
    }
    out[0] = TensorDesc{DType::kFloat32, x};
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const Shape& xs = in[0].shape;
    const int64_t S = xs[xs.rank() - 2], D = xs[xs.rank() - 1], h = D / 2;
    const int64_t rows = D > 0 ? xs.numel() / D : 0;
    const float* x = in[0].as<float>();
    const float* c = in[1].as<float>();
    const float* s = in[2].as<float>();
    float* y = out[0].as<float>();
    const double d = static_cast<double>(D);
    parallel_for_each(rows, LoopCost{16.0 * d, 3.0 * d}, [&](int64_t r) {
      const float* xr = x + r * D;
      const float* cr = c + (r % S) * D;
      const float* sr = s + (r % S) * D;
      float* yr = y + r * D;
#pragma omp simd
      for (int64_t d = 0; d < h; ++d) yr[d] = xr[d] * cr[d] - xr[d + h] * sr[d];
#pragma omp simd
      for (int64_t d = h; d < D; ++d) yr[d] = xr[d] * cr[d] + xr[d - h] * sr[d];
    });
    return Status::Ok();
  }
};

}  // namespace

void register_nn_rotary_kernels(KernelRegistry& r) {
  r.add_kiln_op({"FusedRotary", "reference", 0, [](const KernelArgs&, AttrReader&) -> StatusOr<std::unique_ptr<Kernel>> {
           return std::unique_ptr<Kernel>(std::make_unique<FusedRotaryKernel>());
         }});
}

}  // namespace kiln
