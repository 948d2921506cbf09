// The kernel interface and the kernel registry.
//
// Lifecycle (XNNPACK-style create -> reshape -> run):
//   1. A factory creates a Kernel from the node's attributes (KernelArgs + AttrReader). Attribute
//      errors are reported here, naming the attribute.
//   2. infer() computes output dtypes and shapes. It is always called with every input fully
//      computed, so data-dependent shapes (Reshape's shape input, Slice's starts, NonZero) may read
//      input data.
//   3. prepare() is called whenever input shapes change, before run(); optimized kernels build their
//      primitives here. It must not be needed again while shapes stay the same.
//   4. run() computes outputs into caller-provided buffers. It must not allocate in steady state.
//
// A kernel object belongs to one execution context; it is never shared across threads.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/attributes.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace kiln {

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual Status infer(std::span<const TensorView> inputs, std::span<TensorDesc> outputs) = 0;
  virtual Status prepare(std::span<const TensorView> inputs, std::span<const TensorView> outputs) {
    (void)inputs;
    (void)outputs;
    return Status::Ok();
  }
  virtual Status run(std::span<const TensorView> inputs, std::span<const TensorView> outputs) = 0;
  // Name of the implementation ("reference", "onednn", ...), shown by engine inspection.
  virtual const char* impl_name() const { return "reference"; }
  // Whether output 0 may be written into input `i`'s buffer (ONNX Runtime's MayInplace): as
  // prepared for the current shapes, the kernel reads each element of input i before it writes the
  // element of output 0 at the same index and reads none of input i after writing another, so the
  // two may share one buffer. Asked after prepare(); where nothing reads input i after this step,
  // the context places output 0 in its buffer (a residual the convolution adds onto needs no copy).
  virtual bool writes_over_input(size_t i) const {
    (void)i;
    return false;
  }
};

// kiln's own fused ops (FusedMatMul, FusedConv, FusedRotary, ...) live in this domain, as ONNX
// Runtime's live in com.microsoft, so they never shadow a standard ONNX op. Ops of the default ONNX
// domain ("") and of this one run on built-in kernels; any other domain names a plugin.
inline constexpr std::string_view kKilnDomain = "ai.kiln";
inline bool is_kernel_domain(std::string_view domain) { return domain.empty() || domain == kKilnDomain; }

struct KernelArgs {
  std::string_view op_type;
  std::string_view node_name;
  int opset = 17;          // opset of the default domain the model was exported with
  int num_inputs = 0;      // as written in the node, trailing absent inputs excluded
  int num_outputs = 0;

  // The arguments of a graph node or plan step (anything with name, op_type, inputs, outputs).
  template <typename NodeLike>
  static KernelArgs of(const NodeLike& n, int opset) {
    return KernelArgs{n.op_type, n.name, opset, static_cast<int>(n.inputs.size()), static_cast<int>(n.outputs.size())};
  }
};

using KernelFactory = std::function<StatusOr<std::unique_ptr<Kernel>>(const KernelArgs&, AttrReader&)>;

// How a step's output may share memory with its inputs. Declared by the kernel's registry entry
// (as ONNX Runtime's kernels declare Alias and MayInplace), so the execution context decides views
// and in-place writes from declarations and never recognises an op by its name.
enum class OutputAlias : uint8_t {
  kNone,          // output 0 gets its own buffer
  kView,          // output 0 is input 0's bytes under another shape (Reshape, Squeeze, Identity, ...)
  kViewAtOffset,  // output 0 is one contiguous block of input 0 at every shape (a leading constant Gather)
  kMayView,       // output 0 is a block of input 0 at some shapes only; at the others the kernel copies
};

// For kViewAtOffset and kMayView: where output 0 starts in input 0 at this run's shapes, in bytes, or
// -1 when it is not a view at these shapes (kMayView only; the kernel then runs). An error for inputs
// the kernel itself would reject (an out-of-range index), since a view skips the kernel.
using ViewOffsetFn = Status (*)(const AttrMap& attrs, std::span<const TensorView> in, const TensorDesc& out, int64_t* offset);

struct StepMemory {
  OutputAlias alias = OutputAlias::kNone;
  ViewOffsetFn view_offset = nullptr;
  // Concat-like: output 0 is the inputs laid end to end along this axis (negative counts from the
  // end), and the kernel does not copy an input whose data already sits at its place in output 0.
  std::optional<int64_t> joins_inputs_along;
  // ScatterND-like: output 0 may be input 0's buffer updated in place; the kernel then writes only
  // the elements this input holds (-1: the kernel never updates in place).
  int updates_input_with = -1;
};

// What a memory rule sees of a step when a context is created: its attributes and, per input, the
// constant tensor it reads (nullptr for a computed or absent input).
struct MemoryQuery {
  const AttrMap& attrs;
  std::span<const Tensor* const> constant_inputs;
  size_t num_outputs = 0;
};
using MemoryRule = StepMemory (*)(const MemoryQuery&);

// What memory rules return, spelled out (designated initializers that leave members out warn).
inline StepMemory view_memory(OutputAlias alias, ViewOffsetFn view_offset = nullptr) {
  StepMemory m;
  m.alias = alias;
  m.view_offset = view_offset;
  return m;
}
inline StepMemory joining_memory(int64_t axis) {
  StepMemory m;
  m.joins_inputs_along = axis;
  return m;
}
inline StepMemory updating_memory(int written_input) {
  StepMemory m;
  m.updates_input_with = written_input;
  return m;
}

// One implementation of one op. `priority`: higher wins when the builder picks automatically;
// reference kernels are priority 0.
struct KernelEntry {
  std::string op_type;
  std::string impl;  // "reference", "onednn", ...
  int priority = 0;
  KernelFactory make;
  // CpuFeature bits (runtime/engine_format.h) beyond the engine baseline that this implementation
  // needs: tactic selection only times it on a CPU that has them, and an engine using it requires
  // them, so a CPU without them refuses the engine at load instead of failing a step at run time.
  uint64_t cpu_features = 0;
  // "" for an ONNX op, kKilnDomain for one of kiln's fused ops.
  std::string domain = {};
  // The step's memory declaration (views, in-place writes); nullptr = none.
  MemoryRule memory = nullptr;
};

class KernelRegistry {
 public:
  // The registry with every built-in kernel, filled once from the explicit table in
  // runtime/kernels/registry.cpp.
  static const KernelRegistry& builtin();

  void add(KernelEntry e) { entries_.push_back(std::move(e)); }
  // Registers a kernel of one of kiln's own fused ops (domain kKilnDomain).
  void add_kiln_op(KernelEntry e) {
    e.domain = std::string(kKilnDomain);
    entries_.push_back(std::move(e));
  }
  bool supports(std::string_view op_type) const;
  // Whether `op_type` of `domain` has a kernel (op types are unique across the kernel domains).
  bool supports(std::string_view domain, std::string_view op_type) const;
  std::vector<std::string> op_types() const;  // sorted, unique
  std::vector<const KernelEntry*> implementations(std::string_view op_type) const;  // best first
  // The memory declaration of `op_type` in `domain` (the same for each implementation of an op).
  MemoryRule memory_rule(std::string_view domain, std::string_view op_type) const;
  // Declares the memory rule of every registered implementation of `op_type` (default domain).
  void set_memory_rule(std::string_view op_type, MemoryRule rule);

  // Creates a kernel: `impl` empty means best available. Fails with a message naming the op, the
  // node and the reason (unknown op, bad attribute, unsupported attribute).
  StatusOr<std::unique_ptr<Kernel>> create(const KernelArgs& args, const AttrMap& attrs,
                                           std::string_view impl = {}) const;

 private:
  std::vector<KernelEntry> entries_;
};

// Helper for simple kernels: wraps two lambdas into a Kernel.
template <typename InferFn, typename RunFn>
class LambdaKernel final : public Kernel {
 public:
  LambdaKernel(InferFn infer, RunFn run) : infer_(std::move(infer)), run_(std::move(run)) {}
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override { return infer_(in, out); }
  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override { return run_(in, out); }

 private:
  InferFn infer_;
  RunFn run_;
};
template <typename InferFn, typename RunFn>
std::unique_ptr<Kernel> make_lambda_kernel(InferFn infer, RunFn run) {
  return std::make_unique<LambdaKernel<InferFn, RunFn>>(std::move(infer), std::move(run));
}

}  // namespace kiln
