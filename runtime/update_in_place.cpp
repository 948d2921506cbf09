// ExecutionContext::allow_update_in_place: a fixed-size cache updated by ScatterND (PyTorch's
// index_put / StaticCache: `cache[..., cur_pos, :] = new_row`) writes the new rows into the
// cache's own buffer instead of copying the whole cache and then writing them.
//
// A ScatterND step may update its data input's buffer in place when (1) the data input is the
// allowed input itself or the output of an earlier in-place update of it (a chain over the layers
// of a stacked cache), and (2) nothing reads that buffer after the step: the last use of the
// buffer, views of it included (last_use_ is extended over aliases at creation), is this step.
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
    if (!step.domain.empty() || step.op_type != "ScatterND" || step.inputs.size() < 3 || step.outputs.size() != 1) continue;
    const int data = step.inputs[0];
    if (data < 0 || !in_chain[data] || last_use_[root] != static_cast<int>(s)) continue;
    // Indices and updates must not be views of the buffer being written.
    bool reads_itself = false;
    for (size_t i = 1; i < step.inputs.size(); ++i) {
      if (step.inputs[i] < 0) continue;
      const int r = alias_root_[step.inputs[i]] >= 0 ? alias_root_[step.inputs[i]] : step.inputs[i];
      reads_itself = reads_itself || in_chain[r] || in_chain[step.inputs[i]];
    }
    if (reads_itself) continue;
    const int out = step.outputs[0];
    update_in_place_[s] = 1;
    in_chain[out] = 1;
    alias_root_[out] = root;
    last_use_[root] = std::max(last_use_[root], last_use_[out]);
  }
  return Status::Ok();
}

bool ExecutionContext::updates_in_place(const std::string& output, const std::string& input) const {
  int in = -1, out = -1;
  for (int v : plan_->inputs)
    if (plan_->values[v].name == input) in = v;
  for (int v : plan_->outputs)
    if (plan_->values[v].name == output) out = v;
  if (in < 0 || out < 0 || producer_[out] < 0) return false;
  return update_in_place_[producer_[out]] && alias_root_[out] == in;
}

}  // namespace kiln
