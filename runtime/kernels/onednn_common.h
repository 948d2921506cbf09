// Private header of the oneDNN kernels: a prepared primitive with its arguments, run through the C
// API so that run() neither creates primitives nor allocates.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "runtime/kernel.h"
#include "runtime/kernels/fused_conv_common.h"

namespace kiln {

// oneDNN's format tag of a FusedConv tensor layout (the fp32 and int8 convolutions share it).
dnnl::memory::format_tag onednn_conv_tag(ConvLayout l);

// The process-wide CPU engine.
const dnnl::engine& onednn_engine();

// One primitive plus its argument list. Memory objects are created in prepare() without data and
// get their data pointers bound right before each execution.
//
// The scratchpad (oneDNN's temporary memory for one execution) is one buffer per thread, shared by
// every primitive that thread executes, grown to the largest request: primitives run one after the
// other and a scratchpad holds nothing between executions. One buffer per primitive would cost
// ResNet-18 at batch 1 about 30 MB (1.5-4 MB per Winograd convolution) that every run sweeps
// through, pushing its ~60 MB of weights and activations out of a last-level cache of about that
// size; shared, they take 4 MB.
class OnednnExec {
 public:
  void reset() {
    prim_ = dnnl::primitive();
    solo_prim_ = dnnl::primitive();
    mems_.clear();
    args_.clear();
    scratch_slot_ = -1;
    scratch_bytes_ = 0;
    one_thread_ = false;
  }
  // `pd` must have been created with scratchpad_mode::user. Grows this thread's scratchpad to the
  // primitive's need (so runs on this thread allocate nothing). Also makes the same primitive for a
  // team of one where oneDNN gives one with the same implementation and memory formats: execute()
  // runs that one while the OpenMP team is late (runtime/openmp_team.h).
  void init(const dnnl::primitive_desc_base& pd, dnnl::primitive prim);
  // Only a primitive for one thread (`pd` made while the OpenMP team was 1): execute() then opens
  // no OpenMP region, so it may run on any thread, e.g. in a chunk of kiln's pool.
  Status init_one_thread(const dnnl::primitive_desc_base& pd);
  // Declares an argument; returns its slot for bind().
  int add_arg(int arg, const dnnl::memory::desc& md);
  void bind(int slot, const void* data) { mems_[slot].set_data_handle(const_cast<void*>(data)); }
  Status execute(const dnnl::stream& s) const;
  bool ready() const { return static_cast<bool>(prim_); }

 private:
  dnnl::primitive prim_, solo_prim_;  // for the full OpenMP team, and for the calling thread alone
  std::vector<dnnl::memory> mems_;
  std::vector<dnnl_exec_arg_t> args_;
  int scratch_slot_ = -1;  // bound to the executing thread's scratchpad before each execution
  size_t scratch_bytes_ = 0;
  bool one_thread_ = false;
};

// `pd`'s primitive made for a team of one thread (with oneDNN's primitive cache off, which keys
// primitives without their thread count); empty where oneDNN cannot make it.
dnnl::primitive one_thread_primitive(const dnnl::primitive_desc_base& pd);

// FusedConv's epilogue as oneDNN post-ops: the residual a sum, the activation an eltwise, except
// SiLU, which kiln applies after the primitive (silu_in_place; see onednn_conv_kernels.cpp).
dnnl::post_ops fused_conv_post_ops(const FusedSpec& spec, bool residual);
// y = silu(y) over n floats, on kiln's pool where it pays (inline inside a pool chunk).
void silu_in_place(float* y, int64_t n);

// This thread's scratchpad of at least `bytes` (64-byte aligned), or nullptr when it cannot grow.
// Valid until the next call on this thread that asks for more.
void* onednn_thread_scratchpad(size_t bytes);

// Base of the oneDNN kernels. Shapes and validation come from the wrapped reference kernel, and
// every case build() declines (dtype, rank, zero-size dims, a primitive oneDNN cannot create) runs
// on it as well.
class OnednnKernel : public Kernel {
 public:
  explicit OnednnKernel(std::unique_ptr<Kernel> ref) : ref_(std::move(ref)), stream_(onednn_engine()) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override { return ref_->infer(in, out); }
  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override;
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    return use_ref_ ? ref_->run(in, out) : execute(in, out);
  }
  // "reference" once prepare() handed the current shapes to the reference kernel.
  const char* impl_name() const override { return use_ref_ ? "reference" : "onednn"; }

 protected:
  // Builds the primitives for these shapes; returns false when the case is left to the reference.
  virtual StatusOr<bool> build(std::span<const TensorView> in, std::span<const TensorView> out) = 0;
  virtual Status execute(std::span<const TensorView> in, std::span<const TensorView> out) = 0;

  std::unique_ptr<Kernel> ref_;
  dnnl::stream stream_;
  bool use_ref_ = false;
};

// Converts an activation from `from` to `to` (float32 -> bfloat16 for the bf16 kernels) into a
// buffer it owns; a no-op when both descriptors are equal.
class OnednnConvert {
 public:
  Status build(const dnnl::memory::desc& from, const dnnl::memory::desc& to);
  // Returns `src` itself or the converted copy.
  StatusOr<const void*> run(const void* src, const dnnl::stream& s);

 private:
  OnednnExec reorder_;
  std::shared_ptr<void> buffer_;
  int src_slot_ = 0;
};

// Weights `src` (laid out as `src_md`) reordered into `packed_md`, oneDNN's preferred layout for a
// primitive (blocked, possibly bfloat16). The result is cached process-wide while any kernel holds
// it, keyed by address, layout and a checksum of the bytes, so every context of an engine shares
// one packed copy and a different tensor at a reused address never hits a stale entry. `src` must
// not change while the result is held (the callers' weights are plan constants).
StatusOr<std::shared_ptr<void>> onednn_packed_weights(const void* src, const dnnl::memory::desc& src_md,
                                                      const dnnl::memory::desc& packed_md);
// As above for weights rewritten before the reorder: `to_plain` writes `plain_md`'s bytes from the
// `src_bytes` at `src` (which, with `rewrite` naming the rewrite, keys the cache).
StatusOr<std::shared_ptr<void>> onednn_packed_weights(const void* src, size_t src_bytes, const std::string& rewrite,
                                                      const dnnl::memory::desc& plain_md, const dnnl::memory::desc& packed_md,
                                                      const std::function<void(void* plain)>& to_plain);

// C-order strides of `dims` as oneDNN dims.
dnnl::memory::dims onednn_plain_strides(const dnnl::memory::dims& dims);

void register_onednn_matmul_kernels(KernelRegistry& r);
void register_onednn_strided_matmul_kernels(KernelRegistry& r);  // onednn_strided_matmul_kernels.cpp: StridedMatMul "onednn"
void register_onednn_conv_kernels(KernelRegistry& r);
void register_fused_matmul_kernels(KernelRegistry& r);
void register_fused_matmul_int8_kernels(KernelRegistry& r);
void register_fused_conv_int8_kernels(KernelRegistry& r);
void register_im2col_conv_kernels(KernelRegistry& r);  // im2col_conv_kernels.cpp: FusedConv on the panel GEMM
void register_winograd_conv_kernels(KernelRegistry& r);  // winograd_conv_kernels.cpp: 3x3 FusedConv by F(4x4, 3x3)
void register_stem_conv_kernels(KernelRegistry& r);  // stem_conv_kernels.cpp: FusedConv on the image (1-4 channels)
void register_onednn_split_conv_kernels(KernelRegistry& r);  // onednn_split_conv_kernels.cpp: parts on kiln's pool

// FusedMatMul's reference kernel (reads the `activation` attribute), for kernels that wrap it.
StatusOr<std::unique_ptr<Kernel>> make_fused_matmul_reference(const KernelArgs& args, AttrReader& attrs);

}  // namespace kiln
