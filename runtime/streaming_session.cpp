#include "runtime/streaming_session.h"

#include <numeric>

#include <algorithm>
#include <cstring>
#include <limits>

#include "runtime/mirrored_buffer.h"

namespace kiln {

namespace {
const BindingInfo* find_binding(const std::vector<BindingInfo>& list, const std::string& name) {
  for (const auto& b : list)
    if (b.name == name) return &b;
  return nullptr;
}
}  // namespace

Shape StreamingSession::State::shape(int64_t rows) const {
  Shape s = slab_dims;
  s.push_back(rows);
  for (int64_t d : inner_dims) s.push_back(d);
  return s;
}

StatusOr<std::unique_ptr<StreamingSession>> StreamingSession::create(std::shared_ptr<const Engine> engine, const StreamingSpec& spec) {
  if (!engine) return InvalidArgument("streaming: no engine");
  std::unique_ptr<StreamingSession> s(new StreamingSession());
  s->engine_ = engine;
  s->spec_ = spec;
  const int cold = engine->find_profile(spec.cold_start), warm = engine->find_profile(spec.step);
  if (cold < 0) return NotFound("streaming: the engine has no profile '" + spec.cold_start + "' (cold_start)");
  if (warm < 0) return NotFound("streaming: the engine has no profile '" + spec.step + "' (step)");
  if (spec.tokens_per_step <= 0 || spec.max_steps <= 0)
    return InvalidArgument("streaming: window tokens_per_step and max_steps must be positive, got " + std::to_string(spec.tokens_per_step) +
                           " and " + std::to_string(spec.max_steps));
  if (spec.state.empty()) return InvalidArgument("streaming: no state pairs");
  const ProfileInfo& wp = engine->profiles()[warm];
  const ProfileInfo& cp = engine->profiles()[cold];
  const int64_t window = spec.tokens_per_step * spec.max_steps;
  for (const auto& st : spec.state) {
    const std::string what = "streaming state " + st.output + " -> " + st.input;
    for (const ProfileInfo* p : {&cp, &wp}) {
      if (!find_binding(p->inputs, st.input)) return NotFound(what + ": profile '" + p->name + "' has no input '" + st.input + "'");
      if (!find_binding(p->outputs, st.output)) return NotFound(what + ": profile '" + p->name + "' has no output '" + st.output + "'");
    }
    const BindingInfo& in = *find_binding(wp.inputs, st.input);
    const BindingInfo& out = *find_binding(wp.outputs, st.output);
    if (dtype_is_known(out.dtype) && in.dtype != out.dtype)
      return InvalidArgument(what + ": output is " + dtype_name(out.dtype) + " but input is " + dtype_name(in.dtype));
    if (st.axis < 0 || st.axis >= in.opt.rank())
      return InvalidArgument(what + ": axis " + std::to_string(st.axis) + " is out of range for input shape " + in.opt.str());
    State state;
    state.spec = st;
    state.dtype = in.dtype;
    for (int d = 0; d < in.opt.rank(); ++d) {
      if (d == st.axis) continue;
      if (in.min[d] != in.max[d])
        return InvalidArgument(what + ": input dim " + std::to_string(d) + " ranges over [" + std::to_string(in.min[d]) + ", " +
                               std::to_string(in.max[d]) + "] in profile '" + wp.name + "'; only the state axis may vary");
      (d < st.axis ? state.slab_dims : state.inner_dims).push_back(in.opt[d]);
    }
    state.slabs = state.slab_dims.numel();
    state.row_bytes = static_cast<size_t>(state.inner_dims.numel()) * dtype_size(in.dtype);
    if (in.max[st.axis] < window)
      return InvalidArgument(what + ": the window holds " + std::to_string(window) + " rows but profile '" + wp.name + "' accepts at most " +
                             std::to_string(in.max[st.axis]) + " along axis " + std::to_string(st.axis));
    s->states_.push_back(std::move(state));
  }
  for (const auto& in : wp.inputs) {
    const BindingInfo* c = find_binding(cp.inputs, in.name);
    int axis = -1;
    if (c && c->opt.rank() == in.opt.rank())
      for (int d = 0; d < in.opt.rank(); ++d)
        if (c->opt[d] != in.opt[d] && in.opt[d] > 0) axis = d;
    s->timestep_axes_.push_back({in.name, {axis, axis >= 0 ? in.opt[axis] : 0}});
  }
  if (!spec.mask_input.empty()) {
    const BindingInfo* m = find_binding(wp.inputs, spec.mask_input);
    if (!m) return NotFound("streaming: profile '" + wp.name + "' has no mask input '" + spec.mask_input + "'");
    if (m->dtype != DType::kBool || m->opt.rank() != 2)
      return InvalidArgument("streaming: mask input '" + spec.mask_input + "' must be a bool [new, total] matrix, got " + dtype_name(m->dtype) + " " + m->opt.str());
    if (spec.mask_block <= 0) return InvalidArgument("streaming: mask '" + spec.mask_input + "' needs a positive block");
  }
  KILN_ASSIGN_OR_RETURN(s->cold_, engine->create_context(spec.cold_start, /*prepare=*/true));
  KILN_ASSIGN_OR_RETURN(s->warm_, engine->create_context(spec.step, /*prepare=*/true));
  // Twice the window plus room for the new rows: the window slides through it and is compacted
  // to the front once every max_steps steps.
  uint64_t unused = 0;
  // Room for the window plus a cold start or step's new rows; without mirrored slabs, twice the
  // window, so compaction happens at most once per max_steps steps.
  KILN_RETURN_IF_ERROR(s->reallocate(window + 2 * spec.tokens_per_step, std::vector<Rows>(s->states_.size(), Rows{nullptr, 0}), 0, &unused));
  return s;
}

StatusOr<std::unique_ptr<StreamingSession>> StreamingSession::create(std::shared_ptr<const Engine> engine) {
  if (!engine) return InvalidArgument("streaming: no engine");
  if (!engine->info().has_streaming)
    return FailedPrecondition("streaming: the engine records no streaming section (build it from a config with `streaming:`)");
  return create(engine, engine->info().streaming);
}

uint64_t StreamingSession::state_buffer_bytes() const {
  uint64_t total = 0;
  for (const State& st : states_) total += static_cast<uint64_t>(st.slabs) * static_cast<uint64_t>(capacity_) * st.row_bytes;
  return total;
}

void StreamingSession::reset(bool scrub) {
  if (scrub)
    for (const State& st : states_)
      for (int64_t k = 0; k < st.slabs; ++k) {
        const size_t bytes = static_cast<size_t>(capacity_) * st.row_bytes;
        if (st.dtype == DType::kFloat32) std::fill_n(reinterpret_cast<float*>(row(st, k, 0)), bytes / sizeof(float), std::numeric_limits<float>::quiet_NaN());
        else std::memset(row(st, k, 0), 0, bytes);
      }
  start_ = rows_ = steps_ = 0;
  last_ = nullptr;
  stats_ = StreamingStepStats{};
}

// Makes room for rows [start_, start_ + rows_needed) in every state buffer. Mirrored slabs only
// wrap the start. Otherwise the live rows are compacted to the front when they fit there, else the
// buffers grow; both count as copied bytes.
Status StreamingSession::reserve(int64_t rows_needed, uint64_t* copied) {
  if (mirrored_ && rows_needed <= capacity_) {
    start_ %= capacity_;
    return Status::Ok();
  }
  if (!mirrored_ && start_ + rows_needed <= capacity_) return Status::Ok();
  if (!mirrored_ && rows_needed <= capacity_) {
    for (State& st : states_)
      for (int64_t k = 0; k < st.slabs; ++k) std::memmove(row(st, k, 0), row(st, k, start_), static_cast<size_t>(rows_) * st.row_bytes);
    for (const State& st : states_) *copied += static_cast<uint64_t>(st.slabs) * static_cast<uint64_t>(rows_) * st.row_bytes;
    start_ = 0;
    return Status::Ok();
  }
  std::vector<Rows> live;
  for (const State& st : states_) live.push_back(Rows{row(st, 0, start_), pitch(st)});
  return reallocate(std::max(rows_needed, 2 * capacity_), live, rows_, copied);
}

// New buffers of at least `capacity` rows per slab holding `rows` rows copied from `sources`.
// Mirrored slabs when the system maps them (capacity rounded up to whole pages per slab).
Status StreamingSession::reallocate(int64_t capacity, const std::vector<Rows>& sources, int64_t rows, uint64_t* copied) {
  const size_t page = mirror_page_bytes();
  int64_t unit = 1;  // rows that make a whole number of pages in every state
  for (const State& st : states_) unit = std::lcm(unit, static_cast<int64_t>(page / std::gcd(page, st.row_bytes)));
  const int64_t mirrored_capacity = (capacity + unit - 1) / unit * unit;
  std::vector<std::shared_ptr<void>> fresh;
  for (const State& st : states_) {
    fresh.push_back(alloc_mirrored_slabs(static_cast<size_t>(st.slabs), static_cast<size_t>(mirrored_capacity) * st.row_bytes));
    if (!fresh.back()) break;
  }
  const bool mirrored = fresh.size() == states_.size() && fresh.back() != nullptr;
  if (!mirrored) {
    fresh.clear();
    for (const State& st : states_) {
      const int64_t row_elems = static_cast<int64_t>(st.row_bytes / dtype_size(st.dtype));
      auto bytes = checked_nbytes(st.dtype, Shape{st.slabs, capacity, row_elems}, "streaming state '" + st.spec.output + "'");
      if (!bytes.ok()) return bytes.status();
      fresh.push_back(aligned_alloc_shared(static_cast<size_t>(*bytes)));
      if (!fresh.back()) return ResourceExhausted("streaming state '" + st.spec.output + "': cannot allocate " + std::to_string(*bytes) + " bytes");
    }
  }
  const int64_t new_capacity = mirrored ? mirrored_capacity : capacity;
  for (size_t i = 0; i < states_.size(); ++i) {
    State& st = states_[i];
    const int64_t new_pitch = (mirrored ? 2 : 1) * new_capacity * static_cast<int64_t>(st.row_bytes);
    for (int64_t k = 0; k < st.slabs && rows > 0 && sources[i].data; ++k)
      std::memcpy(static_cast<char*>(fresh[i].get()) + k * new_pitch, sources[i].data + k * sources[i].pitch, static_cast<size_t>(rows) * st.row_bytes);
    if (sources[i].data) *copied += static_cast<uint64_t>(st.slabs) * static_cast<uint64_t>(std::max<int64_t>(rows, 0)) * st.row_bytes;
    st.buffer = std::move(fresh[i]);
  }
  capacity_ = new_capacity;
  mirrored_ = mirrored;
  start_ = 0;
  return Status::Ok();
}

Status StreamingSession::bind_state(ExecutionContext& ctx, uint64_t* copied, bool* in_place) {
  for (State& st : states_) {
    const Shape shape = st.shape(rows_);
    TensorView view{row(st, 0, start_), st.dtype, shape};
    Status s = ctx.set_state_input(st.spec.input, view, st.spec.axis, pitch(st));
    if (!s.ok() && s.code() == StatusCode::kFailedPrecondition) {
      // The model reads this state as a whole: pass a contiguous copy (O(cache), counted).
      *in_place = false;
      if (st.fallback.empty() || st.fallback.shape() != shape) {
        KILN_ASSIGN_OR_RETURN(st.fallback, Tensor::try_zeros(st.dtype, shape, "streaming state input '" + st.spec.input + "'"));
      }
      const size_t slab_bytes = static_cast<size_t>(rows_) * st.row_bytes;
      for (int64_t k = 0; k < st.slabs; ++k)
        std::memcpy(static_cast<char*>(st.fallback.data()) + k * slab_bytes, row(st, k, start_), slab_bytes);
      *copied += slab_bytes * static_cast<uint64_t>(st.slabs);
      s = ctx.set_input(st.spec.input, st.fallback.view());
    }
    KILN_RETURN_IF_ERROR(s);
    KILN_RETURN_IF_ERROR(ctx.bind_state_output(st.spec.output, row(st, 0, start_), st.spec.axis, pitch(st), mirrored_ ? capacity_ : capacity_ - start_));
  }
  return Status::Ok();
}

int64_t StreamingSession::new_rows_of(std::span<const std::pair<std::string, TensorView>> inputs) const {
  for (const auto& [name, view] : inputs)
    for (const auto& [tname, axis] : timestep_axes_)
      if (tname == name && axis.first >= 0 && axis.first < view.shape.rank() && axis.second > 0)
        return view.shape[axis.first] / axis.second * spec_.tokens_per_step;
  return spec_.tokens_per_step;
}

Status StreamingSession::fill_mask(ExecutionContext& ctx, int64_t new_rows) {
  const Shape shape{new_rows, rows_ + new_rows};
  if (mask_.empty() || mask_.shape() != shape) {
    KILN_ASSIGN_OR_RETURN(mask_, Tensor::try_zeros(DType::kBool, shape, "streaming mask '" + spec_.mask_input + "'"));
    // A query at window position p sees key j iff j / block <= p / block. The window always starts
    // at a block boundary (it drops whole timesteps), so positions within it are enough.
    bool* m = mask_.as<bool>();
    const int64_t b = spec_.mask_block;
    for (int64_t i = 0; i < new_rows; ++i)
      for (int64_t j = 0; j < rows_ + new_rows; ++j) m[i * (rows_ + new_rows) + j] = j / b <= (rows_ + i) / b;
  }
  return ctx.set_input(spec_.mask_input, mask_.view());
}

Status StreamingSession::step(std::span<const std::pair<std::string, TensorView>> inputs) {
  const bool cold = steps_ == 0;
  ExecutionContext& ctx = cold ? *cold_ : *warm_;
  // Built only on error: a steady-state step must not allocate.
  auto where = [&] { return "streaming step " + std::to_string(steps_) + " (profile '" + (cold ? spec_.cold_start : spec_.step) + "')"; };
  stats_ = StreamingStepStats{};
  stats_.cold_start = cold;
  if (cold) start_ = rows_ = 0;
  // Slide: keep at most max_steps steps of cache (drop the oldest by moving the start).
  const int64_t window = spec_.tokens_per_step * spec_.max_steps;
  if (rows_ > window) {
    start_ += rows_ - window;
    rows_ = window;
  }
  for (const auto& [name, view] : inputs) {
    for (const State& st : states_)
      if (name == st.spec.input) return InvalidArgument("streaming: input '" + name + "' is state; the session feeds it");
    if (name == spec_.mask_input) return InvalidArgument("streaming: input '" + name + "' is the mask; the session generates it");
    if (Status st = ctx.set_input(name, view); !st.ok()) return st.with_context(where());
  }
  const int64_t new_rows = new_rows_of(inputs);
  uint64_t copied = 0;
  KILN_RETURN_IF_ERROR(reserve(rows_ + new_rows, &copied));
  bool in_place = true;
  KILN_RETURN_IF_ERROR(bind_state(ctx, &copied, &in_place));
  if (!spec_.mask_input.empty()) KILN_RETURN_IF_ERROR(fill_mask(ctx, new_rows));
  stats_.cached_rows = rows_;
  if (Status st = ctx.run(); !st.ok()) return st.with_context(where());
  last_ = &ctx;
  copied += ctx.state_bytes_copied();
  int64_t out_rows = -1;
  std::vector<TensorView>& outs = outs_scratch_;
  outs.assign(states_.size(), TensorView{});
  bool overflowed = false;
  for (size_t o = 0; o < ctx.num_outputs(); ++o)
    for (size_t i = 0; i < states_.size(); ++i) {
      const State& st = states_[i];
      if (ctx.output_name(o) != st.spec.output) continue;
      const TensorView& out = ctx.output(o);
      if (out.shape.rank() != st.slab_dims.rank() + 1 + st.inner_dims.rank() || out.shape.numel(0, st.spec.axis) != st.slabs ||
          static_cast<size_t>(out.shape.numel(st.spec.axis + 1, out.shape.rank())) * dtype_size(out.dtype) != st.row_bytes)
        return InvalidArgument("streaming: state output '" + st.spec.output + "' has shape " + out.shape.str() + ", which does not match input '" +
                               st.spec.input + "' " + st.shape(rows_).str() + " outside axis " + std::to_string(st.spec.axis));
      const int64_t rows = out.shape[st.spec.axis];
      if (out_rows >= 0 && rows != out_rows)
        return InvalidArgument("streaming: state outputs disagree on their length (" + std::to_string(rows) + " vs " + std::to_string(out_rows) + ")");
      out_rows = rows;
      outs[i] = out;
      in_place = in_place && ctx.state_output_in_place(st.spec.output);
      overflowed = overflowed || ctx.state_output_overflowed(st.spec.output);
    }
  if (overflowed) {
    // More rows than the inputs suggested did not fit: the outputs are contiguous in the context;
    // move every state into larger buffers (the ones that did fit were copied into the old ones).
    std::vector<Rows> sources;
    for (size_t i = 0; i < states_.size(); ++i) {
      const State& st = states_[i];
      if (ctx.state_output_overflowed(st.spec.output))
        sources.push_back(Rows{static_cast<const char*>(outs[i].data), out_rows * static_cast<int64_t>(st.row_bytes)});
      else
        sources.push_back(Rows{row(st, 0, start_), pitch(st)});
    }
    KILN_RETURN_IF_ERROR(reallocate(2 * (out_rows + spec_.tokens_per_step), sources, out_rows, &copied));
    in_place = false;
  }
  if (out_rows < rows_) return InvalidArgument("streaming: state shrank from " + std::to_string(rows_) + " to " + std::to_string(out_rows) + " rows");
  stats_.new_rows = out_rows - rows_;
  for (const State& st : states_) stats_.state_bytes_appended += static_cast<uint64_t>(stats_.new_rows) * st.row_bytes * static_cast<uint64_t>(st.slabs);
  rows_ = out_rows;
  stats_.state_bytes_copied = copied;
  stats_.in_place = in_place;
  ++steps_;
  return Status::Ok();
}

StatusOr<TensorView> StreamingSession::output(const std::string& name) const {
  if (!last_) return FailedPrecondition("streaming: no step has run");
  for (const State& st : states_)
    if (st.spec.output == name) return InvalidArgument("streaming: output '" + name + "' is state; read it with state()");
  for (size_t o = 0; o < last_->num_outputs(); ++o)
    if (last_->output_name(o) == name) return last_->output(o);
  return NotFound("streaming: no output named '" + name + "'");
}

StatusOr<Tensor> StreamingSession::state(const std::string& output) const {
  for (const State& st : states_) {
    if (st.spec.output != output) continue;
    KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::try_zeros(st.dtype, st.shape(rows_), "streaming state '" + output + "'"));
    const size_t slab_bytes = static_cast<size_t>(rows_) * st.row_bytes;
    for (int64_t k = 0; k < st.slabs; ++k)
      std::memcpy(static_cast<char*>(t.data()) + k * slab_bytes, row(st, k, start_), slab_bytes);
    return t;
  }
  return NotFound("streaming: no state output named '" + output + "'");
}

}  // namespace kiln
