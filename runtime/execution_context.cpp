#include "runtime/execution_context.h"

#include "runtime/memory_budget.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>

#include "runtime/plugin_host/plugin_kernel.h"

namespace kiln {

namespace {
// Ops whose output is their first input with another shape: executed as views, never copied.
bool is_view_op(const PlanStep& step) {
  if (!step.domain.empty()) return false;  // a plugin may reuse a standard op's name
  const std::string& op = step.op_type;
  return op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" || op == "Flatten" || op == "Identity";
}

// Gather on axis 0 with one constant index selects one contiguous block of a C-order tensor: a
// view at an offset (e.g. one layer's slice of a stacked KV cache), never a copy.
bool is_leading_gather_view(const Plan& plan, const PlanStep& step) {
  if (!step.domain.empty() || step.op_type != "Gather" || step.inputs.size() != 2 || step.inputs[1] < 0) return false;
  auto axis = step.attrs.find("axis");
  if (axis != step.attrs.end() && (axis->second.kind != Attribute::Kind::kInt || axis->second.i != 0)) return false;
  const PlanValue& idx = plan.values[step.inputs[1]];
  if (idx.constant < 0) return false;
  const Tensor& t = plan.constants[idx.constant];
  return dtype_is_integer(t.dtype()) && t.numel() == 1 && t.shape().rank() <= 1;
}

// Steps that are views of their input at some shapes only, so they keep their own buffer for the
// other shapes: a Slice with unit steps is a contiguous block of its input whenever every dim
// before the first sliced one is 1 (pos_table[:S], x[:, -1:] of [1, S, D]).
bool is_conditional_view(const Plan& plan, const PlanStep& step) {
  if (!step.domain.empty() || step.outputs.size() != 1 || step.inputs.empty()) return false;
  // Transpose: a view whenever it moves only dims of size 1 (e.g. [S, 1, D] -> [1, S, D]).
  if (step.op_type == "Transpose") return step.inputs.size() == 1;
  if (step.op_type != "Slice" || step.inputs.size() < 3) return false;
  if (step.inputs.size() > 4 && step.inputs[4] >= 0) {
    const PlanValue& st = plan.values[step.inputs[4]];
    if (st.constant < 0) return false;
    const Tensor& t = plan.constants[st.constant];
    if (!dtype_is_integer(t.dtype())) return false;
    for (int64_t i = 0; i < t.numel(); ++i)
      if (read_int(t.view(), i) != 1) return false;
  }
  return true;
}

size_t aligned_size(const TensorDesc& d) {
  const size_t bytes = static_cast<size_t>(d.shape.numel()) * dtype_size(d.dtype);
  return (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
}
}  // namespace

StatusOr<std::unique_ptr<ExecutionContext>> ExecutionContext::create(std::shared_ptr<const Plan> plan,
                                                                      const KernelRegistry& registry) {
  std::unique_ptr<ExecutionContext> ctx(new ExecutionContext(plan));
  const size_t nv = plan->values.size(), ns = plan->steps.size();
  ctx->views_.resize(nv);
  ctx->planned_.resize(nv);
  ctx->offsets_.assign(nv, 0);
  ctx->heap_buffers_.resize(nv);
  ctx->input_bound_.assign(plan->inputs.size(), false);
  ctx->bound_outputs_.resize(nv);
  ctx->prepared_.assign(ns, false);
  ctx->last_use_.assign(nv, -1);
  size_t max_in = 0, max_out = 0;
  for (size_t s = 0; s < ns; ++s) {
    const PlanStep& step = plan->steps[s];
    const KernelArgs args = KernelArgs::of(step, plan->opset);
    // Steps of a custom domain are plugins; the kernel registry holds only the default domain.
    KILN_ASSIGN_OR_RETURN(auto kernel, is_kernel_domain(step.domain) ? registry.create(args, step.attrs, step.impl) : create_plugin_kernel(step));
    ctx->kernels_.push_back(std::move(kernel));
    for (int v : step.inputs)
      if (v >= 0) ctx->last_use_[v] = static_cast<int>(s);
    max_in = std::max(max_in, step.inputs.size());
    max_out = std::max(max_out, step.outputs.size());
  }
  for (int v : plan->outputs) ctx->last_use_[v] = static_cast<int>(ns);
  ctx->slab_pitch_.assign(nv, 0);
  ctx->slab_axis_.assign(nv, 0);
  ctx->readers_.resize(nv);
  ctx->producer_.assign(nv, -1);
  ctx->placed_.assign(nv, nullptr);
  ctx->concat_host_.assign(nv, -1);  // set by place_concat_inputs once the arena is planned
  ctx->skip_step_.assign(ns, 0);
  for (size_t s = 0; s < ns; ++s) {
    for (int v : plan->steps[s].inputs)
      if (v >= 0) ctx->readers_[v].push_back(static_cast<int>(s));
    for (int v : plan->steps[s].outputs) ctx->producer_[v] = static_cast<int>(s);
  }
  // Reshape-like steps produce a view of their input instead of a copy. The viewed buffer (the
  // alias root) must then live as long as its last view is read.
  ctx->alias_root_.assign(nv, -1);
  ctx->view_step_.assign(ns, 0);
  for (size_t s = 0; s < ns; ++s) {
    const PlanStep& step = plan->steps[s];
    const bool gather = is_leading_gather_view(*plan, step);
    if ((!is_view_op(step) && !gather) || step.outputs.size() != 1 || step.inputs.empty() || step.inputs[0] < 0) continue;
    const int in = step.inputs[0];
    ctx->alias_root_[step.outputs[0]] = ctx->alias_root_[in] >= 0 ? ctx->alias_root_[in] : in;
    ctx->view_step_[s] = gather ? 2 : 1;
  }
  for (size_t v = 0; v < nv; ++v)
    if (const int root = ctx->alias_root_[v]; root >= 0 && ctx->last_use_[v] >= 0)
      ctx->last_use_[root] = std::max(ctx->last_use_[root], ctx->last_use_[v]);
  // A step that may be a view keeps its own (planned) buffer, and its input's buffer lives as
  // long as the step's output is read; later steps first, so chains of them reach the root.
  for (size_t s = ns; s-- > 0;) {
    const PlanStep& step = plan->steps[s];
    if (ctx->view_step_[s] || !is_conditional_view(*plan, step) || step.inputs[0] < 0) continue;
    ctx->view_step_[s] = 3;
    const int in = step.inputs[0], root = ctx->alias_root_[in] >= 0 ? ctx->alias_root_[in] : in;
    ctx->last_use_[root] = std::max(ctx->last_use_[root], ctx->last_use_[step.outputs[0]]);
  }
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
  slab_pitch_[plan_->inputs[index]] = 0;
  input_bound_[index] = true;
  return Status::Ok();
}

std::optional<int64_t> ExecutionContext::conditional_view_offset(const PlanStep& step, std::span<const TensorView> in,
                                                                 const TensorDesc& out) const {
  const Shape& x = in[0].shape;
  if (step.op_type == "Transpose") {
    // The same bytes when the dims other than 1 keep their order.
    auto perm = step.attrs.find("perm");
    if (perm == step.attrs.end() || static_cast<int>(perm->second.ints.size()) != x.rank()) return std::nullopt;
    int64_t last = -1;
    for (int64_t p : perm->second.ints) {
      if (p < 0 || p >= x.rank()) return std::nullopt;
      if (x[p] == 1) continue;
      if (p < last) return std::nullopt;
      last = p;
    }
    return 0;
  }
  if (out.shape.rank() != x.rank() || (out.shape.numel() > 0 && !in[0].data)) return std::nullopt;
  int p = 0;
  while (p < x.rank() && out.shape[p] == x[p]) ++p;
  if (p == x.rank()) return 0;  // the whole input
  for (int d = 0; d < p; ++d)
    if (x[d] != 1) return std::nullopt;
  for (int d = p + 1; d < x.rank(); ++d)
    if (out.shape[d] != x[d]) return std::nullopt;
  // Axis p's start, as the Slice kernel reads it: starts[i] for axes[i] == p (axes default to
  // 0, 1, ...), negative from the end, clamped to [0, dim].
  const TensorView& starts = in[1];
  const bool has_axes = in.size() > 3 && in[3].present();
  int64_t start = 0;
  bool found = false;
  for (int64_t i = 0; i < starts.numel(); ++i) {
    int64_t a = has_axes ? read_int(in[3], i) : i;
    if (a < 0) a += x.rank();
    if (a == p) {
      start = read_int(starts, i);
      found = true;
    }
  }
  if (!found) return std::nullopt;
  if (start < 0) start += x[p];
  start = std::clamp<int64_t>(start, 0, x[p]);
  return start * x.numel(p + 1, x.rank()) * static_cast<int64_t>(dtype_size(in[0].dtype));
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
  if (skip_step_[s]) {
    // Every input already sits in its slab of the placed output (state placement).
    const int v = step.outputs[0];
    if (desc[0].shape != planned_[v].shape) return Internal(where() + ": placed output changed shape to " + desc[0].shape.str());
    views_[v] = TensorView{placed_[v], desc[0].dtype, desc[0].shape};
    return Status::Ok();
  }
  // A conditional view placed in a Concat's or a state's buffer writes there instead.
  if (view_step_[s] == 3 && !bound_outputs_[step.outputs[0]].present() && !placed_[step.outputs[0]] &&
      concat_host_[step.outputs[0]] < 0 && slab_pitch_[step.inputs[0]] == 0) {
    if (auto offset = conditional_view_offset(step, in, desc[0])) {
      const int v = step.outputs[0];
      views_[v] = TensorView{static_cast<char*>(in[0].data) + *offset, desc[0].dtype, desc[0].shape};
      planned_[v] = desc[0];
      return Status::Ok();
    }
  }
  if ((view_step_[s] == 1 || view_step_[s] == 2) && !bound_outputs_[step.outputs[0]].present()) {
    const int v = step.outputs[0];
    char* base = static_cast<char*>(in[0].data);
    slab_pitch_[v] = 0;
    if (view_step_[s] == 2 && slab_pitch_[step.inputs[0]] > 0) {
      // A Gather of a slab-laid-out state input: slabs are slab_pitch apart, not contiguous.
      const int in_axis = slab_axis_[step.inputs[0]];
      const int64_t dim0 = in[0].shape[0];
      int64_t idx = read_int(in[1], 0);
      if (idx < -dim0 || idx >= dim0)
        return OutOfRange(where() + ": index " + std::to_string(idx) + " is out of range [" + std::to_string(-dim0) + ", " +
                          std::to_string(dim0) + ") for input 0 dim 0");
      if (idx < 0) idx += dim0;
      base += idx * in[0].shape.numel(1, in_axis) * slab_pitch_[step.inputs[0]];
      const int out_axis = in_axis - (in[0].shape.rank() - desc[0].shape.rank());
      if (desc[0].shape.numel(0, out_axis) > 1) {
        slab_pitch_[v] = slab_pitch_[step.inputs[0]];
        slab_axis_[v] = out_axis;
      }
    } else if (view_step_[s] == 2) {
      // The Gather kernel checks indices in run(), which a view skips: check here.
      const int64_t dim0 = in[0].shape.rank() > 0 ? in[0].shape[0] : 0;
      int64_t idx = read_int(in[1], 0);
      if (idx < -dim0 || idx >= dim0)
        return OutOfRange(where() + ": index " + std::to_string(idx) + " is out of range [" + std::to_string(-dim0) + ", " +
                          std::to_string(dim0) + ") for input 0 dim 0");
      if (idx < 0) idx += dim0;
      base += idx * (in[0].numel() / in[0].shape[0]) * static_cast<int64_t>(dtype_size(in[0].dtype));
    }
    views_[v] = TensorView{base, desc[0].dtype, desc[0].shape};
    planned_[v] = desc[0];
    return Status::Ok();
  }
  bool shapes_changed = !prepared_[s];
  for (size_t o = 0; o < no; ++o) {
    const int v = step.outputs[o];
    if (!dtype_is_known(desc[o].dtype))  return Internal(where() + ": output " + std::to_string(o) + " has no inferred dtype");
    if (placed_[v]) {
      if (desc[o].shape != planned_[v].shape) return Internal(where() + ": placed output changed shape to " + desc[o].shape.str());
      views_[v] = TensorView{placed_[v], desc[o].dtype, desc[o].shape};
    } else if (bound_outputs_[v].present()) {
      const TensorView& b = bound_outputs_[v];
      if (b.dtype != desc[o].dtype || b.shape != desc[o].shape)
        return InvalidArgument("output '" + plan_->values[v].name + "' is " + dtype_name(desc[o].dtype) + " " + desc[o].shape.str() +
                               " but the bound buffer is " + dtype_name(b.dtype) + " " + b.shape.str());
      views_[v] = b;
    } else if (use_arena && desc[o].dtype == planned_[v].dtype && desc[o].shape == planned_[v].shape) {
      views_[v] = TensorView{static_cast<char*>(arena_.get()) + offsets_[v], desc[o].dtype, desc[o].shape};
    } else {
      // Unplanned run, or a data-dependent shape that differs from the plan: own buffer, re-plan later.
      if (use_arena) arena_valid_ = false;
      Tensor& buf = heap_buffers_[v];
      if (buf.empty() || buf.dtype() != desc[o].dtype || buf.shape() != desc[o].shape) {
        auto bytes = checked_nbytes(desc[o].dtype, desc[o].shape, where() + " output " + std::to_string(o));
        if (!bytes.ok()) return bytes.status();
        if (buf.empty() || buf.nbytes() < *bytes || buf.dtype() != desc[o].dtype) {
          auto fresh = Tensor::try_zeros(desc[o].dtype, desc[o].shape, where() + " output " + std::to_string(o));
          if (!fresh.ok()) return fresh.status();
          buf = std::move(fresh).value();
        } else {
          buf = buf.reshaped(desc[o].shape);
        }
      }
      views_[v] = buf.view();
      heap_in_use_.push_back(v);
      shapes_changed = true;
    }
    planned_[v] = desc[o];
    out[o] = views_[v];
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
  // Placing state outputs needs every value's shape, known from the last run at these inputs.
  if (use_arena) plan_state_placement();
  else std::fill(placed_.begin(), placed_.end(), nullptr), std::fill(skip_step_.begin(), skip_step_.end(), 0);
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
  return finish_state_outputs();
}

// In an unplanned run each value has its own buffer; dropping it after its last reader keeps the
// peak memory of that run at the live set instead of the sum of all activations.
void ExecutionContext::release_dead_buffers(size_t s) {
  const PlanStep& step = plan_->steps[s];
  for (int v : step.inputs)
    if (v >= 0 && last_use_[v] == static_cast<int>(s) && !heap_buffers_[v].empty()) heap_buffers_[v] = Tensor();
  for (int v : step.outputs)
    if (last_use_[v] < 0) heap_buffers_[v] = Tensor();
}

Status ExecutionContext::bind_output(const std::string& name, const TensorView& buffer) {
  for (int v : plan_->outputs)
    if (plan_->values[v].name == name) {
      if (plan_->values[v].constant >= 0) return InvalidArgument("output '" + name + "' is a constant of the model; read it with output()");
      if (buffer.present() && buffer.numel() > 0 && buffer.data == nullptr) return InvalidArgument("bound buffer for output '" + name + "' has no data");
      bound_outputs_[v] = buffer;
      return Status::Ok();
    }
  return NotFound("the model has no output named '" + name + "'");
}

Status ExecutionContext::prepare_for_profile() {
  for (int v : plan_->inputs)
    if (plan_->values[v].range_max.empty()) return InvalidArgument("this plan has no profile ranges to prepare for");
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

// Concat without copies: an input written by a kernel (directly, or through Reshape-like views of
// the same size) is placed at its slice of the Concat's output buffer, so the kernel writes it
// there and the Concat skips it (it copies only inputs not already in place). Only for a Concat
// whose slices are contiguous (all dims before the axis are 1), e.g. torch.stack of KV caches.
void ExecutionContext::place_concat_inputs() {
  const size_t nv = plan_->values.size();
  concat_host_.assign(nv, -1);
  concat_offset_.assign(nv, 0);
  std::vector<char> is_output(nv, 0);
  for (int v : plan_->outputs) is_output[v] = 1;
  for (size_t s = 0; s < plan_->steps.size(); ++s) {
    const PlanStep& step = plan_->steps[s];
    if (!step.domain.empty() || step.op_type != "Concat" || step.outputs.size() != 1) continue;
    const int out = step.outputs[0];
    const Shape& os = planned_[out].shape;
    auto axis_attr = step.attrs.find("axis");
    if (alias_root_[out] >= 0 || bound_outputs_[out].present() || axis_attr == step.attrs.end() || os.rank() == 0) continue;
    const int64_t axis = axis_attr->second.i < 0 ? axis_attr->second.i + os.rank() : axis_attr->second.i;
    if (axis < 0 || axis >= os.rank() || os.numel(0, static_cast<int>(axis)) != 1) continue;
    size_t offset = 0;
    for (int in : step.inputs) {
      if (in < 0) continue;
      // Graph inputs and constants have no planned desc: their shape is in their view.
      const TensorDesc d = value_desc(in);
      const size_t bytes = static_cast<size_t>(d.shape.numel()) * dtype_size(d.dtype);
      const int root = alias_root_[in] >= 0 ? alias_root_[in] : in;
      const bool placeable = bytes > 0 && root != out && producer_[root] >= 0 && (view_step_[producer_[root]] == 0 || view_step_[producer_[root]] == 3) && concat_host_[root] < 0 &&
                             !bound_outputs_[root].present() && planned_[root].shape.numel() == d.shape.numel() &&
                             planned_[root].dtype == d.dtype && !(is_output[root] && is_output[out]);
      if (placeable) {
        concat_host_[root] = out;
        concat_offset_[root] = offset;
      }
      offset += bytes;
    }
  }
}

Status ExecutionContext::plan_arena() {
  // Greedy best-fit by size: place each produced value at the lowest offset that does not overlap a
  // value whose lifetime [producer step, last use] intersects its own.
  struct Item { int value; int begin; int end; size_t size; };
  const size_t nv = plan_->values.size();
  std::vector<int> begin(nv, -1), end(nv, -1);
  for (size_t s = 0; s < plan_->steps.size(); ++s)
    for (int v : plan_->steps[s].outputs) {
      begin[v] = static_cast<int>(s);
      end[v] = last_use_[v] < 0 ? static_cast<int>(s) : last_use_[v];
    }
  place_concat_inputs();
  // A hosted value lives inside its Concat's buffer, which must then live from the first write
  // of any part to the last read of any part.
  auto top = [&](int v) {
    while (concat_host_[v] >= 0) v = concat_host_[v];
    return v;
  };
  for (size_t v = 0; v < nv; ++v)
    if (concat_host_[v] >= 0) {
      const int r = top(static_cast<int>(v));
      begin[r] = std::min(begin[r], begin[v]);
      end[r] = std::max(end[r], end[v]);
    }
  std::vector<Item> items;
  for (size_t s = 0; s < plan_->steps.size(); ++s)
    for (int v : plan_->steps[s].outputs) {
      if (alias_root_[v] >= 0 || concat_host_[v] >= 0) continue;  // lives in another value's buffer
      items.push_back(Item{v, begin[v], end[v], aligned_size(planned_[v])});
    }
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return items[a].size > items[b].size; });
  std::vector<size_t> placed;
  size_t total = 0;
  for (size_t idx : order) {
    const Item& it = items[idx];
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t p : placed) {
      const Item& q = items[p];
      if (q.begin <= it.end && it.begin <= q.end) busy.push_back({offsets_[q.value], offsets_[q.value] + q.size});
    }
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (const auto& [b, e] : busy) {
      if (off + it.size <= b) break;
      off = std::max(off, e);
    }
    offsets_[it.value] = off;
    total = std::max(total, off + it.size);
    placed.push_back(idx);
  }
  // Hosted values sit at their offset within their host (hosts first: a host may be hosted).
  std::vector<char> resolved(nv, 0);
  std::function<void(int)> resolve = [&](int v) {
    if (resolved[v] || concat_host_[v] < 0) return;
    resolve(concat_host_[v]);
    offsets_[v] = offsets_[concat_host_[v]] + concat_offset_[v];
    resolved[v] = 1;
  };
  for (size_t v = 0; v < nv; ++v) resolve(static_cast<int>(v));
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

}  // namespace kiln
