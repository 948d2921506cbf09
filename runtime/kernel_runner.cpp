#include "runtime/kernel_runner.h"

namespace kiln {

StatusOr<std::vector<Tensor>> run_kernel_once(Kernel& kernel, std::span<const TensorView> inputs, int num_outputs) {
  std::vector<TensorDesc> descs(static_cast<size_t>(num_outputs));
  KILN_RETURN_IF_ERROR(kernel.infer(inputs, descs));
  std::vector<Tensor> outs;
  std::vector<TensorView> views;
  for (const auto& d : descs) {
    if (!dtype_is_known(d.dtype)) return Internal("kernel inferred no dtype for an output");
    KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::try_zeros(d.dtype, d.shape, "output " + std::to_string(outs.size())));
    outs.push_back(std::move(t));
    views.push_back(outs.back().view());
  }
  KILN_RETURN_IF_ERROR(kernel.prepare(inputs, views));
  KILN_RETURN_IF_ERROR(kernel.run(inputs, views));
  return outs;
}

StatusOr<std::vector<Tensor>> run_op_once(const std::string& op_type, const AttrMap& attrs,
                                          const std::vector<Tensor>& inputs, int num_outputs, const std::string& impl,
                                          int opset) {
  const KernelArgs args{op_type, "test", opset, static_cast<int>(inputs.size()), num_outputs};
  KILN_ASSIGN_OR_RETURN(auto kernel, KernelRegistry::builtin().create(args, attrs, impl));
  std::vector<TensorView> views;
  for (const auto& t : inputs) views.push_back(t.view());
  return run_kernel_once(*kernel, views, num_outputs);
}

}  // namespace kiln
