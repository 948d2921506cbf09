// Memory planning of an ExecutionContext, apart from running it.
//
// PlanMemory holds what is fixed for a plan once its kernels are chosen: each step's memory
// declaration (runtime/kernel.h StepMemory: views, joins, in-place updates, declared by the kernel
// registry, never recognised by op name), who produces and reads each value, which buffer a view
// lives in, and how long each buffer must live. layout_arena() places the buffers of one set of
// shapes in a single arena, reusing memory by liveness; it is a pure function of the plan, these
// facts and the shapes, so it is tested on its own.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/plan.h"

namespace kiln {

struct PlanMemory {
  std::vector<StepMemory> step;            // per step: its kernel's memory declaration
  std::vector<int> producer;               // per value: the step writing it, or -1
  std::vector<std::vector<int>> readers;   // per value: the steps reading it
  std::vector<int> last_use;               // per value: the last step reading it or a view of it (steps.size() for outputs)
  std::vector<int> alias_root;             // per value: the value whose buffer it lives in, or -1

  // Steps of a kernel domain take the registry's declarations; plugin steps declare none.
  static PlanMemory analyze(const Plan& plan, const KernelRegistry& registry);

  int root(int value) const { return alias_root[value] >= 0 ? alias_root[value] : value; }
  // Output 0 is always a view of input 0 (no buffer of its own).
  bool always_views(size_t s) const { return step[s].alias == OutputAlias::kView || step[s].alias == OutputAlias::kViewAtOffset; }
  // Makes `value` live in `root`'s buffer, which then lives as long as `value` is read.
  void alias(int value, int root);
};

struct ArenaLayout {
  std::vector<size_t> offsets;        // per value: byte offset in the arena (produced values only)
  // per value: the value whose buffer holds it, or -1: the joined output (Concat) it is a slice of,
  // or the input its producer wrote over (writes_over)
  std::vector<int> host;
  std::vector<size_t> host_offset;    // its byte offset within that value's buffer
  size_t bytes = 0;                   // the arena's size
};

// Greedy best-fit by size over [producer step, last use] lifetimes. `desc` is every value's dtype
// and shape at the planned run; `bound` marks outputs the caller bound to its own buffers (they
// neither host nor are hosted). An input written by a kernel is placed at its slice of a joining
// step's output when the slices are contiguous (all dims before the axis are 1), so the join
// skips it: torch.stack of KV caches costs no copy. `writes_over` (per step, or empty) is the input
// whose buffer the step's kernel may write output 0 into (Kernel::writes_over_input), or -1: where
// the step is that input's last reader, output 0 takes the input's buffer (a FusedConv's residual).
ArenaLayout layout_arena(const Plan& plan, const PlanMemory& memory, std::span<const TensorDesc> desc, std::span<const char> bound,
                         std::span<const int> writes_over = {});

}  // namespace kiln
