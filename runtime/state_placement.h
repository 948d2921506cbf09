// Streaming state in place: state inputs read from, and state outputs written into, caller-owned
// slab buffers (ExecutionContext::set_state_input / bind_state_output say what the caller sees).
//
// Why: a KV cache is stacked over layers ([L, 2, B, S, D], S the growing axis). Fed back as a
// contiguous tensor, every step would copy the whole cache twice (the stacking Concat, then into
// the next step's input). With a slab layout each layer's [B, S, D] rows have room to grow, the
// attention plugin appends the new rows in place, and the stacking Concats become no-ops.
//
// A StatePlacement belongs to one ExecutionContext. It decides, from the plan's memory facts
// (runtime/memory_plan.h) and the shapes of the last run, where each state value is written and
// which joining steps are skipped; the context's step running reads those decisions.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/memory_plan.h"
#include "runtime/plan.h"

namespace kiln {

class StatePlacement {
 public:
  void init(size_t num_values, size_t num_steps);

  // A state input laid out as slabs `pitch` bytes apart along the dims before `axis`. It is read in
  // place when every reader selects single slabs by leading views at an offset (a layer's slice of
  // a stacked KV cache); the error says which reader does not. `kernels` infer those views' shapes.
  Status bind_input(const Plan& plan, const PlanMemory& memory, std::span<const std::unique_ptr<Kernel>> kernels, int value,
                    const TensorView& view, int axis, int64_t pitch);
  // The input was bound again as an ordinary contiguous tensor.
  void unbind_input(int value) { pitch_[value] = 0; }
  Status bind_output(const Plan& plan, int value, void* base, int axis, int64_t pitch, int64_t capacity_rows);

  // Before a run at the planned shapes (`desc` per value): where each state output and the values
  // it is made of are written, and which joins are skipped. Allocates nothing in steady state.
  void place(const Plan& plan, const PlanMemory& memory, std::span<const TensorDesc> desc, std::span<const TensorView> bound_outputs);
  // Before a run at new shapes: nothing is placed.
  void clear();
  // After the run: state outputs not written in place are copied into their slabs.
  Status finish(const Plan& plan, std::span<const TensorView> views);

  // What step running needs: a value's placed address (or nullptr), whether a join is skipped
  // because its inputs already sit in their slabs, and a value's slab layout (pitch 0 = contiguous).
  char* placed(int value) const { return placed_[value]; }
  bool skips(size_t step) const { return skip_step_[step] != 0; }
  int64_t pitch(int value) const { return pitch_[value]; }
  int axis(int value) const { return axis_[value]; }
  void set_slabs(int value, int64_t pitch, int axis) { pitch_[value] = pitch, axis_[value] = axis; }

  bool output_in_place(int value) const;
  bool output_overflowed(int value) const;
  uint64_t bytes_copied() const { return bytes_copied_; }

 private:
  struct Placement { std::vector<char*> at; std::vector<char> skip, multi; };
  struct Output { int value; char* base; int axis; int64_t pitch; int64_t capacity_rows; bool in_place; bool overflowed; };
  Status check_readers(const Plan& plan, const PlanMemory& memory, std::span<const std::unique_ptr<Kernel>> kernels, int value,
                       const TensorDesc& desc, int axis, std::string* why) const;
  bool place_value(const Plan& plan, const PlanMemory& memory, std::span<const TensorDesc> desc, std::span<const TensorView> bound,
                   int value, char* base, int axis, int64_t pitch, Placement& pl) const;

  std::vector<int64_t> pitch_;   // per value: slab pitch in bytes of a state input or a view of one
  std::vector<int> axis_;        // per value: its slab axis
  std::vector<char*> placed_;    // per value: where a placed value is written, or nullptr
  std::vector<char> skip_step_;  // per step: a join whose inputs were written in place
  std::vector<Output> outputs_;
  Placement done_, try_;         // scratch of place(), sized once
  uint64_t bytes_copied_ = 0;
};

}  // namespace kiln
