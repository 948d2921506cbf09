// ExecutionContext: per-thread execution state for one Plan (the Engine/Plan is shared and
// immutable; a context owns its kernels and its activation arena, like ncnn's Extractor).
//
// Memory: the first run at a new set of input shapes executes with per-value buffers and records
// every value's shape; from those it plans one arena with buffers reused by liveness. Later runs at
// the same shapes use the arena and allocate nothing. A data-dependent op whose output shape changes
// falls back to per-value buffers for the rest of that run and triggers a re-plan.
//
// The context keeps the per-run state; the decisions live in their own units: which steps are views
// or update in place comes from the kernels' registry declarations (runtime/kernel.h StepMemory),
// lifetimes and the arena layout from runtime/memory_plan.h, streaming state slabs from
// runtime/state_placement.h, and running one step from runtime/run_step.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/memory_plan.h"
#include "runtime/plan.h"
#include "runtime/state_placement.h"

namespace kiln {

class ExecutionContext {
 public:
  static StatusOr<std::unique_ptr<ExecutionContext>> create(std::shared_ptr<const Plan> plan,
                                                            const KernelRegistry& registry = KernelRegistry::builtin());

  // Binds an input (zero copy: the data must stay valid until run() returns). Checks dtype, rank and
  // static dims against the declaration; the error names the input, dim and values.
  Status set_input(const std::string& name, const TensorView& view);
  Status set_input(size_t index, const TensorView& view);
  Status run();

  // Zero-copy outputs: the step producing `name` writes straight into `buffer` when the shapes
  // agree (an error names the output and both shapes otherwise). An empty view unbinds.
  Status bind_output(const std::string& name, const TensorView& buffer);

  // Streaming state (what StreamingSession uses; see runtime/state_placement.h). A state tensor
  // lives in a caller-owned buffer laid out as slabs: the dims before `axis` index slabs that are
  // `slab_pitch` bytes apart, each holding up to `capacity_rows` rows along `axis` (rows are
  // contiguous, as are the dims after `axis`). Growing a cache along `axis` then never moves it.
  //
  // A state input is read in place when every reader selects single slabs by leading views at an
  // offset (constant leading Gathers: a layer's slice of a stacked KV cache); otherwise binding it
  // fails and the caller passes a contiguous copy instead. `view.data` is the first row of slab 0.
  Status set_state_input(const std::string& name, const TensorView& view, int axis, int64_t slab_pitch);
  // A state output is written into the same kind of buffer. When the steps producing it are a tree
  // of Concat/Unsqueeze over per-slab producers (torch.stack of per-layer caches), those producers
  // write straight into their slabs and the Concats are skipped; this needs the shapes of a
  // previous run at the same input shapes. Otherwise the output is computed as usual and copied
  // into the buffer after the run (state_bytes_copied() counts it). An empty `base` unbinds.
  Status bind_state_output(const std::string& name, void* base, int axis, int64_t slab_pitch, int64_t capacity_rows);
  // After run(): whether a bound state output was written in place, whether it did not fit (then
  // nothing was copied and output() holds it contiguously), and the bytes copied for state.
  bool state_output_in_place(const std::string& name) const;
  bool state_output_overflowed(const std::string& name) const;
  uint64_t state_bytes_copied() const { return state_.bytes_copied(); }

  // In-place updates of an input (runtime/update_in_place.cpp; what Session uses for a fixed-size
  // KV cache whose step writes one row at cur_pos). Allows the chain of update steps (ScatterND, as
  // its registry entry declares) starting at
  // `input` to write into the input's own buffer instead of copying it first, wherever nothing
  // reads the old contents afterwards. Call before the first run. The caller then owns the
  // consequence: the input's buffer holds the updated tensor after run().
  Status allow_update_in_place(const std::string& input);
  // Whether `output` is the end of such a chain on `input` (it then aliases the input's buffer).
  bool updates_in_place(const std::string& output, const std::string& input) const;
  // Bytes the in-place update steps wrote in the last run (their `updates`, not the whole tensor).
  uint64_t in_place_update_bytes() const { return update_bytes_; }

  // Runs once at the profile's max shapes (sizing the arena for the whole range) and once at its
  // opt shapes (planning buffers and preparing kernels), on zero-filled inputs, so the first real
  // run at opt needs no preparation. Inputs must be bound again afterwards.
  Status prepare_for_profile();

  size_t num_inputs() const { return plan_->inputs.size(); }
  size_t num_outputs() const { return plan_->outputs.size(); }
  const std::string& input_name(size_t i) const { return plan_->values[plan_->inputs[i]].name; }
  const std::string& output_name(size_t i) const { return plan_->values[plan_->outputs[i]].name; }
  // Valid after run() until the next run().
  const TensorView& output(size_t i) const { return views_[plan_->outputs[i]]; }
  const Plan& plan() const { return *plan_; }
  const Kernel& kernel(size_t step) const { return *kernels_[step]; }
  size_t arena_bytes() const { return arena_bytes_; }
  // dtype and shape of any value in the last run (for tools that inspect a plan's shapes).
  TensorDesc value_desc(int value) const { return memory_.producer[value] >= 0 ? planned_[value] : views_[value].desc(); }
  // Per-step wall time of the runs made while profiling is on (for the layer profile); off by
  // default so timed runs carry no clock reads.
  void set_profiling(bool on);
  const std::vector<double>& step_ms() const { return step_ms_; }
  // Start of each step in the last profiled run, in ms from that run's start (for a timeline).
  const std::vector<double>& step_begin_ms() const { return step_begin_ms_; }
  // The view of any plan value as of the last run (shapes for FLOP counts and traces); its data is
  // only meaningful for inputs, constants and outputs.
  const TensorView& value(int v) const { return views_[v]; }

 private:
  explicit ExecutionContext(std::shared_ptr<const Plan> plan) : plan_(std::move(plan)) {}
  // Step running (runtime/run_step.cpp): binds a step's outputs (a view, a placed state slab, a
  // bound output, the arena or a buffer of its own) and runs its kernel.
  Status run_step(size_t s, bool use_arena);
  Status run_view_step(size_t s, std::span<const TensorView> in, const TensorDesc& out, bool* done);
  Status bind_step_output(size_t s, size_t o, const TensorDesc& desc, bool use_arena, bool* shapes_changed);
  Status plan_arena();
  void release_dead_buffers(size_t s);
  Status check_named_dims() const;

  // What is fixed for the plan (shared by nothing else: a context owns its kernels).
  std::shared_ptr<const Plan> plan_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
  PlanMemory memory_;                         // views, joins, producers, lifetimes (runtime/memory_plan.h)
  struct SharedDim { int input_a, dim_a, input_b, dim_b; };
  std::vector<SharedDim> shared_dims_;        // input dims that share a dim name
  // Per-run state.
  std::vector<TensorView> views_;             // current view of every value
  std::vector<TensorDesc> planned_;           // descs the arena was planned for
  ArenaLayout layout_;                        // where each planned value lives in the arena
  std::vector<Tensor> heap_buffers_;          // per-value buffers of an unplanned run
  std::vector<int> heap_in_use_;              // values that got a heap buffer since the last planned run
  std::vector<bool> input_bound_;
  std::vector<TensorView> bound_outputs_;     // per value; dtype kUndefined = not bound
  std::vector<Shape> planned_input_shapes_;
  std::vector<bool> prepared_;                // per step: prepared for the current shapes
  std::shared_ptr<void> arena_;
  size_t arena_bytes_ = 0;
  bool arena_valid_ = false;
  StatePlacement state_;                      // streaming state slabs (runtime/state_placement.h)
  std::vector<char> update_in_place_;         // per step: an update writing into its data input's buffer
  uint64_t update_bytes_ = 0;
  // Scratch spans reused by every step, sized once at creation.
  std::vector<TensorView> in_scratch_, out_scratch_;
  std::vector<TensorDesc> desc_scratch_;
  bool profiling_ = false;
  std::vector<double> step_ms_;
  std::vector<double> step_begin_ms_;
};

}  // namespace kiln
