// Step running: how one plan step gets its output buffers and runs its kernel.
//
// An output is, in order of preference: a view of its input (the kernel's registry entry declares
// when; the kernel does not run), a slab of a placed state buffer, the caller's bound buffer, its
// planned place in the arena, or, in a run at new shapes, a buffer of its own. Nothing here
// allocates in a run at planned shapes.
#include "runtime/execution_context.h"

namespace kiln {

// Views: an always-view points at its input (at the offset its declaration computes); a step that
// may view does so when these shapes allow it and nothing asked for the output elsewhere.
Status ExecutionContext::run_view_step(size_t s, std::span<const TensorView> in, const TensorDesc& out_desc, bool* done) {
  const PlanStep& step = plan_->steps[s];
  const StepMemory& mem = memory_.step[s];
  *done = false;
  if (mem.alias == OutputAlias::kNone) return Status::Ok();
  const int v = step.outputs[0], src = step.inputs[0];  // a declared view has both (PlanMemory::analyze)
  if (bound_outputs_[v].present()) return Status::Ok();
  if (mem.alias == OutputAlias::kMayView && (state_.placed(v) || layout_.host[v] >= 0 || state_.pitch(src) != 0)) return Status::Ok();
  int64_t offset = 0;
  if (mem.view_offset) KILN_RETURN_IF_ERROR(mem.view_offset(step.attrs, in, out_desc, &offset));
  if (offset < 0) return Status::Ok();  // not a view at these shapes: the kernel copies
  char* base = static_cast<char*>(in[0].data);
  state_.set_slabs(v, 0, 0);
  if (mem.alias == OutputAlias::kViewAtOffset && state_.pitch(src) > 0) {
    // A view of a slab-laid-out state input: slabs are pitch bytes apart, not contiguous. The
    // offset selects a block of input 0's leading dim; step over that many slabs instead.
    const Shape& x = in[0].shape;
    const int in_axis = state_.axis(src);
    const int64_t block = x.numel(1, x.rank()) * static_cast<int64_t>(dtype_size(in[0].dtype));
    const int64_t index = block > 0 ? offset / block : 0;
    base += index * x.numel(1, in_axis) * state_.pitch(src);
    const int out_axis = in_axis - (x.rank() - out_desc.shape.rank());
    if (out_axis >= 0 && out_desc.shape.numel(0, out_axis) > 1) state_.set_slabs(v, state_.pitch(src), out_axis);
  } else {
    base += offset;
  }
  views_[v] = TensorView{base, out_desc.dtype, out_desc.shape};
  planned_[v] = out_desc;
  *done = true;
  return Status::Ok();
}

Status ExecutionContext::bind_step_output(size_t s, size_t o, const TensorDesc& desc, bool use_arena, bool* shapes_changed) {
  const PlanStep& step = plan_->steps[s];
  const int v = step.outputs[o];
  auto where = [&] { return "node '" + step.name + "' (" + step.op_type + ")"; };
  if (!dtype_is_known(desc.dtype)) return Internal(where() + ": output " + std::to_string(o) + " has no inferred dtype");
  if (char* at = state_.placed(v)) {
    if (desc.shape != planned_[v].shape) return Internal(where() + ": placed output changed shape to " + desc.shape.str());
    views_[v] = TensorView{at, desc.dtype, desc.shape};
  } else if (bound_outputs_[v].present()) {
    const TensorView& b = bound_outputs_[v];
    if (b.dtype != desc.dtype || b.shape != desc.shape)
      return InvalidArgument("output '" + plan_->values[v].name + "' is " + dtype_name(desc.dtype) + " " + desc.shape.str() +
                             " but the bound buffer is " + dtype_name(b.dtype) + " " + b.shape.str());
    views_[v] = b;
  } else if (use_arena && desc.dtype == planned_[v].dtype && desc.shape == planned_[v].shape) {
    views_[v] = TensorView{static_cast<char*>(arena_.get()) + layout_.offsets[v], desc.dtype, desc.shape};
  } else {
    // Unplanned run, or a data-dependent shape that differs from the plan: own buffer, re-plan later.
    if (use_arena) arena_valid_ = false;
    Tensor& buf = heap_buffers_[v];
    if (buf.empty() || buf.dtype() != desc.dtype || buf.shape() != desc.shape) {
      const std::string what = where() + " output " + std::to_string(o);
      KILN_ASSIGN_OR_RETURN(size_t bytes, checked_nbytes(desc.dtype, desc.shape, what));
      if (buf.empty() || buf.nbytes() < bytes || buf.dtype() != desc.dtype) {
        KILN_ASSIGN_OR_RETURN(Tensor fresh, Tensor::try_zeros(desc.dtype, desc.shape, what));
        buf = std::move(fresh);
      } else {
        buf = buf.reshaped(desc.shape);
      }
    }
    views_[v] = buf.view();
    heap_in_use_.push_back(v);
    *shapes_changed = true;
  }
  planned_[v] = desc;
  return Status::Ok();
}

Status ExecutionContext::run_step(size_t s, bool use_arena) {
  const PlanStep& step = plan_->steps[s];
  Kernel& kernel = *kernels_[s];
  const size_t ni = step.inputs.size(), no = step.outputs.size();
  std::span<TensorView> in(in_scratch_.data(), ni);
  std::span<TensorView> out(out_scratch_.data(), no);
  std::span<TensorDesc> desc(desc_scratch_.data(), no);
  for (size_t i = 0; i < ni; ++i) in[i] = step.inputs[i] >= 0 ? views_[step.inputs[i]] : TensorView{};
  for (size_t o = 0; o < no; ++o) desc[o] = TensorDesc{};
  // Built only on error: a steady-state run must not allocate.
  auto where = [&] { return "node '" + step.name + "' (" + step.op_type + ")"; };
  Status st = kernel.infer(in, desc);
  if (!st.ok()) return st.with_context(where());
  if (state_.skips(s)) {
    // Every input already sits in its slab of the placed output (state placement).
    const int v = step.outputs[0];
    if (desc[0].shape != planned_[v].shape) return Internal(where() + ": placed output changed shape to " + desc[0].shape.str());
    views_[v] = TensorView{state_.placed(v), desc[0].dtype, desc[0].shape};
    return Status::Ok();
  }
  bool viewed = false;
  st = run_view_step(s, in, desc[0], &viewed);
  if (!st.ok()) return st.with_context(where());
  if (viewed) return Status::Ok();
  bool shapes_changed = !prepared_[s];
  size_t first = 0;
  if (update_in_place_[s]) {
    // The output is the data input's buffer, updated in place (allow_update_in_place).
    const int v = step.outputs[0];
    if (desc[0].dtype != in[0].dtype || desc[0].shape != in[0].shape) return Internal(where() + ": an in-place update changed the shape");
    if (bound_outputs_[v].present() && bound_outputs_[v].data != in[0].data)
      return InvalidArgument("output '" + plan_->values[v].name + "' is updated in place in its input's buffer; bind it to that buffer");
    views_[v] = TensorView{in[0].data, desc[0].dtype, desc[0].shape};
    planned_[v] = desc[0];
    out[0] = views_[v];
    const int with = memory_.step[s].updates_input_with;
    update_bytes_ += with >= 0 && static_cast<size_t>(with) < ni ? in[with].nbytes() : 0;
    first = 1;
  }
  for (size_t o = first; o < no; ++o) {
    KILN_RETURN_IF_ERROR(bind_step_output(s, o, desc[o], use_arena, &shapes_changed));
    out[o] = views_[step.outputs[o]];
  }
  if (shapes_changed) {
    st = kernel.prepare(in, out);
    if (!st.ok()) return st.with_context(where());
    prepared_[s] = true;
  }
  st = kernel.run(in, out);
  if (!st.ok()) return st.with_context(where());
  return Status::Ok();
}

}  // namespace kiln
