// ExecutionContext::allow_update_in_place: a fixed-size cache updated by ScatterND (PyTorch's
// index_put / StaticCache: `cache[..., cur_pos, :] = new_row`) writes the new rows into the
// cache's own buffer instead of copying the whole cache and then writing them.
//
// An update step (one whose registry entry declares StepMemory::updates_input_with: ScatterND)
// may update its data input's buffer in place when (1) the data input is the
// allowed input itself or the output of an earlier in-place update of it (a chain over the layers
// of a stacked cache), and (2) nothing reads that buffer after the step: the last use of the
// buffer, views of it included (lifetimes are extended over aliases, runtime/memory_plan.h), is this step.
// The output then aliases the input like a view, so it takes no arena space and its own readers
// extend the buffer's lifetime for the next link of the chain.
#include "runtime/execution_context.h"

#include <algorithm>

namespace kiln {

Status ExecutionContext::allow_update_in_place(const std::string& input) {
  if (std::find(prepared_.begin(), prepared_.end(), true) != prepared_.end() || arena_)
    return FailedPrecondition("allow_update_in_place('" + input + "') must come before the first run");
  int root = -1;
  for (int v : plan_->inputs)
    if (plan_->values[v].name == input) root = v;
  if (root < 0) return NotFound("the model has no input named '" + input + "'");
  std::vector<char> in_chain(plan_->values.size(), 0);
  in_chain[root] = 1;
  for (size_t s = 0; s < plan_->steps.size(); ++s) {
    const PlanStep& step = plan_->steps[s];
    if (memory_.step[s].updates_input_with < 0 || step.inputs.empty() || step.outputs.size() != 1) continue;
    const int data = step.inputs[0];
    if (data < 0 || !in_chain[data] || memory_.last_use[root] != static_cast<int>(s)) continue;
    // Indices and updates must not be views of the buffer being written.
    bool reads_itself = false;
    for (size_t i = 1; i < step.inputs.size(); ++i) {
      if (step.inputs[i] < 0) continue;
      reads_itself = reads_itself || in_chain[memory_.root(step.inputs[i])] || in_chain[step.inputs[i]];
    }
    if (reads_itself) continue;
    const int out = step.outputs[0];
    update_in_place_[s] = 1;
    in_chain[out] = 1;
    memory_.alias(out, root);
  }
  return Status::Ok();
}

bool ExecutionContext::updates_in_place(const std::string& output, const std::string& input) const {
  int in = -1, out = -1;
  for (int v : plan_->inputs)
    if (plan_->values[v].name == input) in = v;
  for (int v : plan_->outputs)
    if (plan_->values[v].name == output) out = v;
  if (in < 0 || out < 0 || memory_.producer[out] < 0) return false;
  return update_in_place_[memory_.producer[out]] && memory_.alias_root[out] == in;
}

}  // namespace kiln
