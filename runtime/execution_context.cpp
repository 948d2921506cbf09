#include "runtime/execution_context.h"

#include "runtime/memory_budget.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "runtime/plugin_host/plugin_kernel.h"
#include "runtime/thread_pool.h"

namespace kiln {

StatusOr<std::unique_ptr<ExecutionContext>> ExecutionContext::create(std::shared_ptr<const Plan> plan,
                                                                      const KernelRegistry& registry) {
  // The pool's threads start now, not in the first run that needs them.
  (void)ThreadPool::global();
  std::unique_ptr<ExecutionContext> ctx(new ExecutionContext(plan));
  const size_t nv = plan->values.size(), ns = plan->steps.size();
  ctx->views_.resize(nv);
  ctx->planned_.resize(nv);
  ctx->heap_buffers_.resize(nv);
  ctx->input_bound_.assign(plan->inputs.size(), false);
  ctx->bound_outputs_.resize(nv);
  ctx->prepared_.assign(ns, false);
  ctx->update_in_place_.assign(ns, 0);
  size_t max_in = 0, max_out = 0;
  for (size_t s = 0; s < ns; ++s) {
    const PlanStep& step = plan->steps[s];
    const KernelArgs args = KernelArgs::of(step, plan->opset);
    // Steps of a custom domain are plugins; the kernel registry holds only the default domain.
    KILN_ASSIGN_OR_RETURN(auto kernel, is_kernel_domain(step.domain) ? registry.create(args, step.attrs, step.impl) : create_plugin_kernel(step));
    ctx->kernels_.push_back(std::move(kernel));
    max_in = std::max(max_in, step.inputs.size());
    max_out = std::max(max_out, step.outputs.size());
  }
  ctx->memory_ = PlanMemory::analyze(*plan, registry);
  ctx->state_.init(nv, ns);
  ctx->layout_.offsets.assign(nv, 0);  // nothing is planned or hosted before the first plan
  ctx->layout_.host.assign(nv, -1);
  ctx->layout_.host_offset.assign(nv, 0);
  for (size_t c = 0; c < plan->values.size(); ++c)
    if (plan->values[c].constant >= 0) ctx->views_[c] = plan->constants[plan->values[c].constant].view();
  // Pairs of input dims that share a dim_param name, each checked against the first occurrence.
  std::map<std::string, std::pair<int, int>> first;
  for (size_t i = 0; i < plan->inputs.size(); ++i) {
    const PlanValue& pv = plan->values[plan->inputs[i]];
    for (size_t d = 0; d < pv.dim_names.size() && d < pv.dims.size(); ++d) {
      if (pv.dim_names[d].empty() || pv.dims[d] >= 0) continue;
      auto [it, fresh] = first.emplace(pv.dim_names[d], std::make_pair(static_cast<int>(i), static_cast<int>(d)));
      if (!fresh) ctx->shared_dims_.push_back({it->second.first, it->second.second, static_cast<int>(i), static_cast<int>(d)});
    }
  }
  ctx->in_scratch_.resize(max_in);
  ctx->out_scratch_.resize(max_out);
  ctx->desc_scratch_.resize(max_out);
  return ctx;
}

// Inputs that share a dim name (a dim_param such as "cached_seq") must agree on it; each input's
// own range check cannot see that. Checked whenever input shapes change.
Status ExecutionContext::check_named_dims() const {
  for (const auto& [a, da, b, db] : shared_dims_) {
    const int64_t va = views_[plan_->inputs[a]].shape[da], vb = views_[plan_->inputs[b]].shape[db];
    if (va != vb) {
      const PlanValue& pa = plan_->values[plan_->inputs[a]];
      const PlanValue& pb = plan_->values[plan_->inputs[b]];
      return InvalidArgument("input '" + pb.name + "' dim " + std::to_string(db) + " ('" + pb.dim_names[db] + "') is " + std::to_string(vb) +
                             " but input '" + pa.name + "' dim " + std::to_string(da) + " binds '" + pa.dim_names[da] + "' to " + std::to_string(va));
    }
  }
  return Status::Ok();
}

Status ExecutionContext::set_input(const std::string& name, const TensorView& view) {
  for (size_t i = 0; i < plan_->inputs.size(); ++i)
    if (plan_->values[plan_->inputs[i]].name == name) return set_input(i, view);
  std::string known;
  for (int v : plan_->inputs) known += (known.empty() ? "" : ", ") + plan_->values[v].name;
  return NotFound("the model has no input named '" + name + "' (inputs: " + known + ")");
}

Status ExecutionContext::set_input(size_t index, const TensorView& view) {
  if (index >= plan_->inputs.size()) return OutOfRange("input index " + std::to_string(index) + " is out of range");
  const PlanValue& pv = plan_->values[plan_->inputs[index]];
  // Built only on error: binding inputs is part of a steady-state run.
  auto what = [&] { return "input '" + pv.name + "'"; };
  if (view.dtype != pv.dtype)
    return InvalidArgument(what() + " must be " + dtype_name(pv.dtype) + ", got " + dtype_name(view.dtype));
  if (pv.has_declared_shape) {
    if (static_cast<size_t>(view.shape.rank()) != pv.dims.size())
      return InvalidArgument(what() + " must have rank " + std::to_string(pv.dims.size()) + ", got shape " + view.shape.str());
    for (int d = 0; d < view.shape.rank(); ++d)
      if (pv.dims[d] >= 0 && pv.dims[d] != view.shape[d])
        return InvalidArgument(what() + " dim " + std::to_string(d) + " must be " + std::to_string(pv.dims[d]) + ", got " +
                               std::to_string(view.shape[d]) + " (shape " + view.shape.str() + ")");
  }
  if (!pv.range_min.empty()) {
    for (int d = 0; d < view.shape.rank() && d < static_cast<int>(pv.range_min.size()); ++d)
      if (view.shape[d] < pv.range_min[d] || view.shape[d] > pv.range_max[d])
        return OutOfRange(what() + " dim " + std::to_string(d) + (d < static_cast<int>(pv.dim_names.size()) && !pv.dim_names[d].empty() ? " ('" + pv.dim_names[d] + "')" : "") +
                          " = " + std::to_string(view.shape[d]) + " is outside profile '" + plan_->profile + "' range [" +
                          std::to_string(pv.range_min[d]) + ", " + std::to_string(pv.range_max[d]) + "]");
  }
  if (view.numel() > 0 && view.data == nullptr) return InvalidArgument(what() + " has no data");
  views_[plan_->inputs[index]] = view;
  state_.unbind_input(plan_->inputs[index]);
  input_bound_[index] = true;
  return Status::Ok();
}

Status ExecutionContext::run() {
  for (size_t i = 0; i < input_bound_.size(); ++i)
    if (!input_bound_[i]) return InvalidArgument("input '" + input_name(i) + "' was not set");
  bool same_inputs = arena_valid_ && planned_input_shapes_.size() == plan_->inputs.size();
  for (size_t i = 0; same_inputs && i < plan_->inputs.size(); ++i)
    same_inputs = planned_input_shapes_[i] == views_[plan_->inputs[i]].shape;
  if (!same_inputs) {
    KILN_RETURN_IF_ERROR(check_named_dims());
    arena_valid_ = false;
    std::fill(prepared_.begin(), prepared_.end(), false);
  }
  const bool use_arena = arena_valid_;
  update_bytes_ = 0;
  // Placing state outputs needs every value's shape, known from the last run at these inputs.
  if (use_arena) state_.place(*plan_, memory_, planned_, bound_outputs_);
  else state_.clear();
  if (use_arena && !heap_in_use_.empty()) {
    for (int v : heap_in_use_) heap_buffers_[v] = Tensor();  // left from the unplanned run
    heap_in_use_.clear();
  }
  const auto run_t0 = profiling_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  for (size_t s = 0; s < plan_->steps.size(); ++s) {
    const auto t0 = profiling_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    KILN_RETURN_IF_ERROR(run_step(s, use_arena && arena_valid_));
    if (profiling_) {
      step_ms_[s] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      step_begin_ms_[s] = std::chrono::duration<double, std::milli>(t0 - run_t0).count();
    }
    if (!arena_valid_) release_dead_buffers(s);
  }
  if (!arena_valid_) {
    KILN_RETURN_IF_ERROR(plan_arena());
    // The per-value buffers of the unplanned run are no longer needed, except those backing the
    // outputs the caller is about to read; those go at the next run.
    planned_input_shapes_.clear();
    for (int v : plan_->inputs) planned_input_shapes_.push_back(views_[v].shape);
    // Steps keep their prepared state: the next run sees identical shapes, only new buffers.
  }
  return state_.finish(*plan_, views_);
}

// In an unplanned run each value has its own buffer; dropping it after its last reader keeps the
// peak memory of that run at the live set instead of the sum of all activations.
void ExecutionContext::release_dead_buffers(size_t s) {
  const PlanStep& step = plan_->steps[s];
  for (int v : step.inputs)
    if (v >= 0 && memory_.last_use[v] == static_cast<int>(s) && !heap_buffers_[v].empty()) heap_buffers_[v] = Tensor();
  for (int v : step.outputs)
    if (memory_.last_use[v] < 0) heap_buffers_[v] = Tensor();
}

Status ExecutionContext::bind_output(const std::string& name, const TensorView& buffer) {
  for (int v : plan_->outputs)
    if (plan_->values[v].name == name) {
      if (plan_->values[v].constant >= 0) return InvalidArgument("output '" + name + "' is a constant of the model; read it with output()");
      if (buffer.present() && buffer.numel() > 0 && buffer.data == nullptr) return InvalidArgument("bound buffer for output '" + name + "' has no data");
      // The arena plan decides around bound outputs (a Concat hosting its inputs, views): binding
      // or unbinding one plans again; a new buffer in place of a bound one does not.
      if (bound_outputs_[v].present() != buffer.present()) arena_valid_ = false;
      bound_outputs_[v] = buffer;
      return Status::Ok();
    }
  return NotFound("the model has no output named '" + name + "'");
}

Status ExecutionContext::prepare_for_profile() {
  for (int v : plan_->inputs)
    // A scalar input's range is the empty shape.
    if (plan_->values[v].range_max.empty() && !(plan_->values[v].has_declared_shape && plan_->values[v].dims.empty()))
      return InvalidArgument("this plan has no profile ranges to prepare for");
  std::vector<Tensor> zeros;
  using Range = std::vector<int64_t> PlanValue::*;
  for (Range which : {&PlanValue::range_max, &PlanValue::range_opt}) {
    zeros.clear();
    for (size_t i = 0; i < plan_->inputs.size(); ++i) {
      const PlanValue& pv = plan_->values[plan_->inputs[i]];
      KILN_ASSIGN_OR_RETURN(Tensor z, Tensor::try_zeros(pv.dtype, Shape(pv.*which), "profile '" + plan_->profile + "' input '" + pv.name + "'"));
      zeros.push_back(std::move(z));
      KILN_RETURN_IF_ERROR(set_input(i, zeros.back().view()));
    }
    KILN_RETURN_IF_ERROR(run());  // at new shapes: records them, plans the arena, prepares kernels
  }
  std::fill(input_bound_.begin(), input_bound_.end(), false);  // the zero inputs die here
  return Status::Ok();
}

void ExecutionContext::set_profiling(bool on) {
  profiling_ = on;
  step_ms_.assign(plan_->steps.size(), 0.0);
  step_begin_ms_.assign(plan_->steps.size(), 0.0);
}

Status ExecutionContext::plan_arena() {
  // Graph inputs and constants have no planned desc: their shape is in their view.
  std::vector<TensorDesc> desc(plan_->values.size());
  std::vector<char> bound(plan_->values.size(), 0);
  for (size_t v = 0; v < desc.size(); ++v) {
    desc[v] = value_desc(static_cast<int>(v));
    bound[v] = bound_outputs_[v].present();
  }
  // Every kernel has been prepared for these shapes by the unplanned run before.
  std::vector<int> writes_over(plan_->steps.size(), -1);
  for (size_t s = 0; s < plan_->steps.size(); ++s)
    for (size_t i = 0; i < plan_->steps[s].inputs.size() && writes_over[s] < 0; ++i)
      if (kernels_[s] && kernels_[s]->writes_over_input(i)) writes_over[s] = static_cast<int>(i);
  layout_ = layout_arena(*plan_, memory_, desc, bound, writes_over);
  const size_t total = layout_.bytes;
  if (total > arena_bytes_ || !arena_) {
    const std::string what = "profile '" + (plan_->profile.empty() ? std::string("<none>") : plan_->profile) + "': the activation arena";
    // The old arena is released first when the new one would not fit beside it under the cap.
    if (arena_ && !check_memory(total, what).ok()) arena_.reset(), arena_bytes_ = 0;
    KILN_RETURN_IF_ERROR(check_memory(total, what));
    auto arena = aligned_alloc_shared(total);
    if (!arena) return ResourceExhausted(what + ": cannot allocate " + std::to_string(total) + " bytes");
    arena_ = std::move(arena);
    arena_bytes_ = total;
  }
  arena_valid_ = true;
  return Status::Ok();
}

// Streaming state: the context finds the value; StatePlacement decides and keeps the slabs.
Status ExecutionContext::set_state_input(const std::string& name, const TensorView& view, int axis, int64_t slab_pitch) {
  int index = -1;
  for (size_t i = 0; i < plan_->inputs.size(); ++i)
    if (plan_->values[plan_->inputs[i]].name == name) index = static_cast<int>(i);
  if (index < 0) return NotFound("the model has no input named '" + name + "'");
  KILN_RETURN_IF_ERROR(set_input(static_cast<size_t>(index), view));
  Status st = state_.bind_input(*plan_, memory_, kernels_, plan_->inputs[index], view, axis, slab_pitch);
  if (!st.ok()) input_bound_[index] = false;
  return st;
}

Status ExecutionContext::bind_state_output(const std::string& name, void* base, int axis, int64_t slab_pitch, int64_t capacity_rows) {
  for (int v : plan_->outputs)
    if (plan_->values[v].name == name) return state_.bind_output(*plan_, v, base, axis, slab_pitch, capacity_rows);
  return NotFound("the model has no output named '" + name + "'");
}

bool ExecutionContext::state_output_in_place(const std::string& name) const {
  for (int v : plan_->outputs)
    if (plan_->values[v].name == name && state_.output_in_place(v)) return true;
  return false;
}

bool ExecutionContext::state_output_overflowed(const std::string& name) const {
  for (int v : plan_->outputs)
    if (plan_->values[v].name == name && state_.output_overflowed(v)) return true;
  return false;
}

}  // namespace kiln
