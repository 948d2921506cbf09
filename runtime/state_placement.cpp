#include "runtime/state_placement.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace kiln {

void StatePlacement::init(size_t num_values, size_t num_steps) {
  pitch_.assign(num_values, 0);
  axis_.assign(num_values, 0);
  placed_.assign(num_values, nullptr);
  skip_step_.assign(num_steps, 0);
}

// Every reader of a multi-slab state value must select slabs with leading views at an offset
// until a single slab, which is contiguous, remains. Allocates nothing (called every stream step).
Status StatePlacement::check_readers(const Plan& plan, const PlanMemory& memory, std::span<const std::unique_ptr<Kernel>> kernels,
                                     int value, const TensorDesc& desc, int axis, std::string* why) const {
  for (int s : memory.readers[value]) {
    const PlanStep& step = plan.steps[s];
    auto refuse = [&](const std::string& what) {
      *why = "node '" + step.name + "' (" + step.op_type + ") " + what;
      return FailedPrecondition(*why);
    };
    std::array<TensorView, 4> in;
    if (memory.step[s].alias != OutputAlias::kViewAtOffset || step.inputs[0] != value || step.inputs.size() > in.size())
      return refuse("reads it as a whole");
    // The view's shape at this input shape, as its kernel infers it from the view's constant operands.
    in[0] = TensorView{nullptr, desc.dtype, desc.shape};
    for (size_t i = 1; i < step.inputs.size(); ++i) {
      const int v = step.inputs[i];
      if (v >= 0 && plan.values[v].constant < 0) return refuse("selects from it by a computed input");
      if (v >= 0) in[i] = plan.constants[plan.values[v].constant].view();
    }
    std::array<TensorDesc, 1> out;
    if (!kernels[s]->infer(std::span<const TensorView>(in.data(), step.inputs.size()), out).ok()) return refuse("cannot take its shape");
    const int out_axis = axis - (desc.shape.rank() - out[0].shape.rank());
    if (out_axis >= 0 && out[0].shape.numel(0, out_axis) > 1)
      KILN_RETURN_IF_ERROR(check_readers(plan, memory, kernels, step.outputs[0], out[0], out_axis, why));
  }
  for (int v : plan.outputs)
    if (v == value) {
      *why = "it is also a model output";
      return FailedPrecondition(*why);
    }
  return Status::Ok();
}

Status StatePlacement::bind_input(const Plan& plan, const PlanMemory& memory, std::span<const std::unique_ptr<Kernel>> kernels, int value,
                                  const TensorView& view, int axis, int64_t pitch) {
  const std::string& name = plan.values[value].name;
  pitch_[value] = 0;
  if (axis < 0 || axis >= view.shape.rank())
    return InvalidArgument("state input '" + name + "': axis " + std::to_string(axis) + " is out of range for shape " + view.shape.str());
  const int64_t slab_bytes = view.shape.numel(axis, view.shape.rank()) * static_cast<int64_t>(dtype_size(view.dtype));
  if (pitch < slab_bytes)
    return InvalidArgument("state input '" + name + "': slab pitch " + std::to_string(pitch) + " bytes is below one slab of " +
                           std::to_string(slab_bytes) + " bytes");
  if (view.shape.numel(0, axis) <= 1) return Status::Ok();  // one slab: contiguous already
  std::string why;
  if (!check_readers(plan, memory, kernels, value, view.desc(), axis, &why).ok())
    return FailedPrecondition("state input '" + name + "' cannot be read in place: " + why);
  set_slabs(value, pitch, axis);
  return Status::Ok();
}

Status StatePlacement::bind_output(const Plan& plan, int value, void* base, int axis, int64_t pitch, int64_t capacity_rows) {
  const std::string& name = plan.values[value].name;
  std::erase_if(outputs_, [&](const Output& o) { return o.value == value; });
  if (!base) return Status::Ok();
  if (plan.values[value].constant >= 0) return InvalidArgument("state output '" + name + "' is a constant of the model");
  if (axis < 0 || capacity_rows < 0 || pitch <= 0) return InvalidArgument("state output '" + name + "': bad axis, pitch or capacity");
  outputs_.push_back(Output{value, static_cast<char*>(base), axis, pitch, capacity_rows, false, false});
  return Status::Ok();
}

// Places `value` (shape from the last run) at `base`: single-slab values are written there by their
// producer; a multi-slab value must be a join (or a leading-dims view of one) whose inputs are
// placed in its slabs, recursively. False when not placeable.
bool StatePlacement::place_value(const Plan& plan, const PlanMemory& m, std::span<const TensorDesc> desc, std::span<const TensorView> bound,
                                 int value, char* base, int axis, int64_t pitch, Placement& pl) const {
  const Shape& shape = desc[value].shape;
  const int p = m.producer[value];
  if (p < 0 || axis < 0 || axis >= shape.rank() || pl.at[value] || bound[value].present()) return false;
  const PlanStep& step = plan.steps[p];
  // Already a view into another buffer (a step that only may view keeps a buffer, placed here).
  if (m.step[p].alias == OutputAlias::kViewAtOffset) return false;
  const bool view = m.step[p].alias == OutputAlias::kView;
  pl.at[value] = base;
  if (shape.numel(0, axis) <= 1) {
    // Contiguous at base. A view is placed through its input, which it aliases.
    if (!view) return true;
    return place_value(plan, m, desc, bound, step.inputs[0], base, desc[step.inputs[0]].shape.rank() - (shape.rank() - axis), pitch, pl);
  }
  pl.multi[value] = 1;
  if (view) {
    // A view that only regroups the slab dims (torch.stack's Unsqueeze) keeps the slab order.
    const Shape& in = desc[step.inputs[0]].shape;
    const int in_axis = in.rank() - (shape.rank() - axis);
    if (in_axis < 0 || in.numel(0, in_axis) != shape.numel(0, axis)) return false;
    for (int d = 0; d < shape.rank() - axis; ++d)
      if (in[in_axis + d] != shape[axis + d]) return false;
    return place_value(plan, m, desc, bound, step.inputs[0], base, in_axis, pitch, pl);
  }
  if (!m.step[p].joins_inputs_along) return false;
  int64_t cat = *m.step[p].joins_inputs_along;
  if (cat < 0) cat += shape.rank();
  if (cat < 0 || cat >= axis || shape.numel(0, static_cast<int>(cat)) != 1) return false;
  pl.skip[p] = 1;
  int64_t first = 0;
  for (int in : step.inputs) {
    if (in < 0 || m.producer[in] < 0 || desc[in].shape.rank() != shape.rank()) return false;  // a graph input cannot be placed
    if (!place_value(plan, m, desc, bound, in, base + first * shape.numel(static_cast<int>(cat) + 1, axis) * pitch, axis, pitch, pl)) return false;
    first += desc[in].shape[cat];
  }
  return true;
}

void StatePlacement::clear() {
  std::fill(placed_.begin(), placed_.end(), nullptr);
  std::fill(skip_step_.begin(), skip_step_.end(), 0);
}

void StatePlacement::place(const Plan& plan, const PlanMemory& m, std::span<const TensorDesc> desc, std::span<const TensorView> bound) {
  clear();
  if (outputs_.empty()) return;
  // Scratch sized once: a steady-state step re-places (the buffer moves) without allocating.
  Placement& done = done_;
  Placement& pl = try_;
  for (Placement* p : {&done, &pl}) {
    p->at.resize(placed_.size());
    p->skip.resize(skip_step_.size());
    p->multi.resize(placed_.size());
  }
  std::fill(done.at.begin(), done.at.end(), nullptr);
  std::fill(done.skip.begin(), done.skip.end(), 0);
  std::fill(done.multi.begin(), done.multi.end(), 0);
  for (Output& so : outputs_) {
    so.in_place = false;
    const Shape& shape = desc[so.value].shape;
    if (so.axis >= shape.rank() || shape[so.axis] > so.capacity_rows) continue;
    std::copy(done.at.begin(), done.at.end(), pl.at.begin());
    std::copy(done.skip.begin(), done.skip.end(), pl.skip.begin());
    std::copy(done.multi.begin(), done.multi.end(), pl.multi.begin());
    if (!place_value(plan, m, desc, bound, so.value, so.base, so.axis, so.pitch, pl)) continue;
    // A multi-slab value is not contiguous: only the placement tree (the skipped joins and the
    // views between them) may read it.
    bool ok = true;
    for (size_t v = 0; v < pl.multi.size() && ok; ++v) {
      if (!pl.multi[v]) continue;
      for (int s : m.readers[v]) {
        const int out = plan.steps[s].outputs.empty() ? -1 : plan.steps[s].outputs[0];
        if (!pl.skip[s] && !(m.step[s].alias == OutputAlias::kView && out >= 0 && pl.multi[out])) ok = false;
      }
    }
    if (!ok) continue;
    std::swap(done, pl);
    so.in_place = true;
  }
  std::copy(done.at.begin(), done.at.end(), placed_.begin());
  std::copy(done.skip.begin(), done.skip.end(), skip_step_.begin());
}

Status StatePlacement::finish(const Plan& plan, std::span<const TensorView> views) {
  bytes_copied_ = 0;
  for (Output& so : outputs_) {
    so.overflowed = false;
    if (so.in_place) continue;
    const TensorView& out = views[so.value];
    if (so.axis >= out.shape.rank())
      return InvalidArgument("state output '" + plan.values[so.value].name + "' has shape " + out.shape.str() + ", no axis " + std::to_string(so.axis));
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
    bytes_copied_ += slab_bytes * static_cast<uint64_t>(slabs);
  }
  return Status::Ok();
}

bool StatePlacement::output_in_place(int value) const {
  for (const Output& so : outputs_)
    if (so.value == value) return so.in_place;
  return false;
}

bool StatePlacement::output_overflowed(int value) const {
  for (const Output& so : outputs_)
    if (so.value == value) return so.overflowed;
  return false;
}

}  // namespace kiln
