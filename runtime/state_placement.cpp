// Streaming state in place: state inputs read from, and state outputs written into, caller-owned
// slab buffers (see ExecutionContext::set_state_input / bind_state_output).
//
// Why: a KV cache is stacked over layers ([L, 2, B, S, D], S the growing axis). Fed back as a
// contiguous tensor, every step would copy the whole cache twice (the stacking Concat, then into
// the next step's input). With a slab layout each layer's [B, S, D] rows have room to grow, the
// attention plugin appends the new rows in place, and the stacking Concats become no-ops.
#include <cstring>

#include "runtime/execution_context.h"

namespace kiln {

namespace {
bool is_concat(const PlanStep& step) { return step.domain.empty() && step.op_type == "Concat"; }

int concat_axis(const PlanStep& step, int rank) {
  auto it = step.attrs.find("axis");
  if (it == step.attrs.end() || it->second.kind != Attribute::Kind::kInt) return -1;
  const int64_t a = it->second.i < 0 ? it->second.i + rank : it->second.i;
  return a >= 0 && a < rank ? static_cast<int>(a) : -1;
}
}  // namespace

// Every reader of a multi-slab state value must select slabs with constant leading Gathers (run as
// views at a slab offset) until a single slab, which is contiguous, remains.
Status ExecutionContext::check_state_readers(int value, const Shape& shape, int axis, std::string* why) const {
  for (int s : readers_[value]) {
    const PlanStep& step = plan_->steps[s];
    if (view_step_[s] != 2 || step.inputs[0] != value) {
      *why = "node '" + step.name + "' (" + step.op_type + ") reads it as a whole";
      return FailedPrecondition(*why);
    }
    const Tensor& idx = plan_->constants[plan_->values[step.inputs[1]].constant];
    Shape out;
    if (idx.shape().rank() == 1) out.push_back(1);
    for (int d = 1; d < shape.rank(); ++d) out.push_back(shape[d]);
    const int out_axis = axis - (shape.rank() - out.rank());
    if (out.numel(0, out_axis) > 1) KILN_RETURN_IF_ERROR(check_state_readers(step.outputs[0], out, out_axis, why));
  }
  for (int v : plan_->outputs)
    if (v == value) {
      *why = "it is also a model output";
      return FailedPrecondition(*why);
    }
  return Status::Ok();
}

Status ExecutionContext::set_state_input(const std::string& name, const TensorView& view, int axis, int64_t slab_pitch) {
  int index = -1;
  for (size_t i = 0; i < plan_->inputs.size(); ++i)
    if (plan_->values[plan_->inputs[i]].name == name) index = static_cast<int>(i);
  if (index < 0) return NotFound("the model has no input named '" + name + "'");
  KILN_RETURN_IF_ERROR(set_input(static_cast<size_t>(index), view));
  const int v = plan_->inputs[index];
  if (axis < 0 || axis >= view.shape.rank())
    return InvalidArgument("state input '" + name + "': axis " + std::to_string(axis) + " is out of range for shape " + view.shape.str());
  const int64_t slab_bytes = view.shape.numel(axis, view.shape.rank()) * static_cast<int64_t>(dtype_size(view.dtype));
  if (slab_pitch < slab_bytes)
    return InvalidArgument("state input '" + name + "': slab pitch " + std::to_string(slab_pitch) + " bytes is below one slab of " +
                           std::to_string(slab_bytes) + " bytes");
  if (view.shape.numel(0, axis) <= 1) return Status::Ok();  // one slab: contiguous already
  std::string why;
  Status st = check_state_readers(v, view.shape, axis, &why);
  if (!st.ok()) {
    input_bound_[index] = false;
    return FailedPrecondition("state input '" + name + "' cannot be read in place: " + why);
  }
  slab_pitch_[v] = slab_pitch;
  slab_axis_[v] = axis;
  return Status::Ok();
}

Status ExecutionContext::bind_state_output(const std::string& name, void* base, int axis, int64_t slab_pitch, int64_t capacity_rows) {
  int value = -1;
  for (int v : plan_->outputs)
    if (plan_->values[v].name == name) value = v;
  if (value < 0) return NotFound("the model has no output named '" + name + "'");
  for (size_t i = 0; i < state_outputs_.size(); ++i)
    if (state_outputs_[i].value == value) {
      state_outputs_.erase(state_outputs_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  if (!base) return Status::Ok();
  if (plan_->values[value].constant >= 0) return InvalidArgument("state output '" + name + "' is a constant of the model");
  if (axis < 0 || capacity_rows < 0 || slab_pitch <= 0) return InvalidArgument("state output '" + name + "': bad axis, pitch or capacity");
  state_outputs_.push_back(StateOutput{value, static_cast<char*>(base), axis, slab_pitch, capacity_rows, false, false});
  return Status::Ok();
}

// Places `value` (shape from the last run) at `base`: single-slab values are written there by their
// producer; a multi-slab value must be a Concat (or a leading-dims reshape of one) whose inputs
// are placed in its slabs, recursively. False when not placeable.
bool ExecutionContext::place_value(int value, char* base, int axis, int64_t pitch, Placement& pl) const {
  const Shape& shape = planned_[value].shape;
  const int p = producer_[value];
  if (p < 0 || axis < 0 || axis >= shape.rank() || pl.at[value] || bound_outputs_[value].present()) return false;
  const PlanStep& step = plan_->steps[p];
  if (view_step_[p] == 2) return false;  // already a view into another buffer (a conditional view, 3, placed writes here)
  pl.at[value] = base;
  if (shape.numel(0, axis) <= 1) {
    // Contiguous at base. A Reshape-like view is placed through its input, which it aliases.
    if (view_step_[p] != 1) return true;
    return place_value(step.inputs[0], base, planned_[step.inputs[0]].shape.rank() - (shape.rank() - axis), pitch, pl);
  }
  pl.multi[value] = 1;
  if (view_step_[p] == 1) {
    // A view that only regroups the slab dims (torch.stack's Unsqueeze) keeps the slab order.
    const Shape& in = planned_[step.inputs[0]].shape;
    const int in_axis = in.rank() - (shape.rank() - axis);
    if (in_axis < 0 || in.numel(0, in_axis) != shape.numel(0, axis)) return false;
    for (int d = 0; d < shape.rank() - axis; ++d)
      if (in[in_axis + d] != shape[axis + d]) return false;
    return place_value(step.inputs[0], base, in_axis, pitch, pl);
  }
  const int cat = is_concat(step) ? concat_axis(step, shape.rank()) : -1;
  if (cat < 0 || cat >= axis || shape.numel(0, cat) != 1) return false;
  pl.skip[p] = 1;
  int64_t first = 0;
  for (int in : step.inputs) {
    if (in < 0 || producer_[in] < 0 || planned_[in].shape.rank() != shape.rank()) return false;  // a graph input cannot be placed
    if (!place_value(in, base + first * shape.numel(cat + 1, axis) * pitch, axis, pitch, pl)) return false;
    first += planned_[in].shape[cat];
  }
  return true;
}

void ExecutionContext::plan_state_placement() {
  std::fill(placed_.begin(), placed_.end(), nullptr);
  std::fill(skip_step_.begin(), skip_step_.end(), 0);
  if (state_outputs_.empty()) return;
  // Scratch sized once: a steady-state step re-places (the buffer moves) without allocating.
  Placement& done = placement_done_;
  Placement& pl = placement_try_;
  for (Placement* p : {&done, &pl}) {
    p->at.resize(placed_.size());
    p->skip.resize(skip_step_.size());
    p->multi.resize(placed_.size());
  }
  std::fill(done.at.begin(), done.at.end(), nullptr);
  std::fill(done.skip.begin(), done.skip.end(), 0);
  std::fill(done.multi.begin(), done.multi.end(), 0);
  for (StateOutput& so : state_outputs_) {
    so.in_place = false;
    const Shape& shape = planned_[so.value].shape;
    if (so.axis >= shape.rank() || shape[so.axis] > so.capacity_rows) continue;
    std::copy(done.at.begin(), done.at.end(), pl.at.begin());
    std::copy(done.skip.begin(), done.skip.end(), pl.skip.begin());
    std::copy(done.multi.begin(), done.multi.end(), pl.multi.begin());
    if (!place_value(so.value, so.base, so.axis, so.pitch, pl)) continue;
    // A multi-slab value is not contiguous: only the placement tree (the skipped Concats and the
    // views between them) may read it.
    bool ok = true;
    for (size_t v = 0; v < pl.multi.size() && ok; ++v) {
      if (!pl.multi[v]) continue;
      for (int s : readers_[v]) {
        const int out = plan_->steps[s].outputs.empty() ? -1 : plan_->steps[s].outputs[0];
        if (!pl.skip[s] && !(view_step_[s] == 1 && out >= 0 && pl.multi[out])) ok = false;
      }
    }
    if (!ok) continue;
    std::swap(done, pl);
    so.in_place = true;
  }
  std::copy(done.at.begin(), done.at.end(), placed_.begin());
  std::copy(done.skip.begin(), done.skip.end(), skip_step_.begin());
}

// State outputs not written in place are copied into their slab buffers now.
Status ExecutionContext::finish_state_outputs() {
  state_bytes_copied_ = 0;
  for (StateOutput& so : state_outputs_) {
    so.overflowed = false;
    if (so.in_place) continue;
    const TensorView& out = views_[so.value];
    if (so.axis >= out.shape.rank())
      return InvalidArgument("state output '" + plan_->values[so.value].name + "' has shape " + out.shape.str() + ", no axis " + std::to_string(so.axis));
    const int64_t rows = out.shape[so.axis];
    if (rows > so.capacity_rows) {
      so.overflowed = true;
      continue;
    }
    const size_t slab_bytes = static_cast<size_t>(out.shape.numel(so.axis, out.shape.rank())) * dtype_size(out.dtype);
    const int64_t slabs = out.shape.numel(0, so.axis);
    const char* src = static_cast<const char*>(out.data);
    for (int64_t k = 0; k < slabs; ++k) {
      char* dst = so.base + k * so.pitch;
      if (dst != src + k * slab_bytes) std::memmove(dst, src + k * slab_bytes, slab_bytes);
    }
    state_bytes_copied_ += slab_bytes * static_cast<uint64_t>(slabs);
  }
  return Status::Ok();
}

bool ExecutionContext::state_output_in_place(const std::string& name) const {
  for (const StateOutput& so : state_outputs_)
    if (plan_->values[so.value].name == name) return so.in_place;
  return false;
}

bool ExecutionContext::state_output_overflowed(const std::string& name) const {
  for (const StateOutput& so : state_outputs_)
    if (plan_->values[so.value].name == name) return so.overflowed;
  return false;
}

}  // namespace kiln
