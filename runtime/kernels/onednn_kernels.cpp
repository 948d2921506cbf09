// oneDNN-backed MatMul, Gemm (onednn_matmul_kernels.cpp) and Conv (onednn_conv_kernels.cpp), plus
// the shared primitive runner.
#include <algorithm>

#include "runtime/kernels/families.h"
#include "runtime/kernels/onednn_common.h"

namespace kiln {

const dnnl::engine& onednn_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

void OnednnExec::init(const dnnl::primitive_desc_base& pd, dnnl::primitive prim) {
  prim_ = std::move(prim);
  const dnnl::memory::desc scratch_md = pd.scratchpad_desc();
  if (scratch_md.get_size() > 0) {
    scratch_ = aligned_alloc_shared(scratch_md.get_size());
    const int slot = add_arg(DNNL_ARG_SCRATCHPAD, scratch_md);
    bind(slot, scratch_.get());
  }
}

int OnednnExec::add_arg(int arg, const dnnl::memory::desc& md) {
  mems_.emplace_back(md, onednn_engine(), static_cast<void*>(nullptr));
  // The C handle is stable when the vector of C++ wrappers reallocates.
  args_.push_back({arg, mems_.back().get()});
  return static_cast<int>(mems_.size()) - 1;
}

Status OnednnExec::execute(const dnnl::stream& s) const {
  dnnl_status_t st = dnnl_primitive_execute(prim_.get(), s.get(), static_cast<int>(args_.size()), args_.data());
  if (st == dnnl_success) st = dnnl_stream_wait(s.get());
  if (st != dnnl_success) return Internal("oneDNN primitive execution failed with status " + std::to_string(st));
  return Status::Ok();
}

Status OnednnKernel::prepare(std::span<const TensorView> in, std::span<const TensorView> out) {
  bool built = false;
  try {
    KILN_ASSIGN_OR_RETURN(built, build(in, out));
  } catch (const dnnl::error&) {
    built = false;  // no oneDNN implementation for this case
  }
  use_ref_ = !built;
  return use_ref_ ? ref_->prepare(in, out) : Status::Ok();
}

dnnl::memory::dims onednn_plain_strides(const dnnl::memory::dims& dims) {
  dnnl::memory::dims st(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * std::max<dnnl::memory::dim>(dims[i + 1], 1);
  return st;
}

void register_onednn_kernels(KernelRegistry& r) {
  register_onednn_matmul_kernels(r);
  register_onednn_conv_kernels(r);
}

}  // namespace kiln
