#include "runtime/session.h"

#include <cstring>

namespace kiln {

namespace {

bool fits_range(const BindingInfo& b, const Shape& s) {
  if (b.min.rank() == 0 && b.max.rank() == 0) return true;  // no range recorded: any shape
  if (s.rank() != b.min.rank() || s.rank() != b.max.rank()) return false;
  for (int d = 0; d < s.rank(); ++d)
    if (s[d] < b.min[d] || s[d] > b.max[d]) return false;
  return true;
}

std::string entry_label(const std::string& entry) { return entry.empty() ? std::string("the engine") : "entry '" + entry + "'"; }

// Like KILN_RETURN_IF_ERROR(expr.with_context(entry_label(entry))), but builds the label only on
// error: a steady-state run must not allocate.
#define KILN_RETURN_IF_ERROR_IN_ENTRY(expr)                    \
  do {                                                         \
    Status _st = (expr);                                       \
    if (!_st.ok()) return _st.with_context(entry_label(entry)); \
  } while (0)

}  // namespace

StatusOr<std::unique_ptr<Session>> Session::create(std::shared_ptr<const Engine> engine, bool prepare, bool update_in_place) {
  if (!engine) return InvalidArgument("Session::create: no engine");
  std::unique_ptr<Session> s(new Session());
  s->engine_ = std::move(engine);
  const auto& specs = s->engine_->info().state;
  s->states_.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    State& st = s->states_[i];
    st.spec = &specs[i];
    bool read_and_written = false;
    for (const auto& b : specs[i].bindings) read_and_written = read_and_written || (!b.input.empty() && !b.output.empty());
    for (int half = 0; half < (read_and_written ? 2 : 1); ++half) {
      KILN_ASSIGN_OR_RETURN(st.buf[half], Tensor::try_zeros(specs[i].dtype, Shape(specs[i].dims), "state '" + specs[i].name + "'"));
    }
  }
  const auto& profiles = s->engine_->profiles();
  s->runs_.resize(profiles.size());
  for (size_t p = 0; p < profiles.size(); ++p) {
    ProfileRun& r = s->runs_[p];
    r.profile = p;
    KILN_ASSIGN_OR_RETURN(r.ctx, s->engine_->create_context(profiles[p].name, /*prepare=*/false));
    const ProfileInfo& info = profiles[p];
    r.input_state.assign(info.inputs.size(), -1);
    r.output_state.assign(info.outputs.size(), -1);
    r.reads_own.assign(info.outputs.size(), 0);
    r.in_place.assign(info.outputs.size(), 0);
    for (size_t i = 0; i < specs.size(); ++i)
      for (const auto& b : specs[i].bindings) {
        if (b.entry != info.entry) continue;
        for (size_t k = 0; k < info.inputs.size(); ++k)
          if (!b.input.empty() && info.inputs[k].name == b.input) r.input_state[k] = static_cast<int>(i);
        for (size_t k = 0; k < info.outputs.size(); ++k)
          if (!b.output.empty() && info.outputs[k].name == b.output) {
            r.output_state[k] = static_cast<int>(i);
            r.reads_own[k] = !b.input.empty();
            if (!b.input.empty()) {
              // A state the entry reads and writes: its ScatterND updates may go in place. If the
              // whole chain does, the output is the input's buffer; if only part of it does, the
              // input half is scratch after the run anyway (the halves swap).
              if (update_in_place) KILN_RETURN_IF_ERROR(r.ctx->allow_update_in_place(b.input));
              r.in_place[k] = r.ctx->updates_in_place(b.output, b.input);
            }
          }
      }
    for (PositionBound& b : find_position_bounds(*s->engine_->plan(p)))
      for (size_t k = 0; k < info.inputs.size(); ++k)
        if (info.inputs[k].name == b.position) {
          std::string indexes = "input '" + b.data + "'";
          for (size_t i = 0; i < specs.size(); ++i)
            for (const auto& sb : specs[i].bindings)
              if (sb.entry == info.entry && sb.input == b.data) indexes = "state '" + specs[i].name + "'";
          r.positions.push_back({k, std::move(b), std::move(indexes)});
          break;
        }
    if (prepare) KILN_RETURN_IF_ERROR(r.ctx->prepare_for_profile().with_context("preparing profile '" + info.name + "'"));
    for (size_t k = 0; k < info.outputs.size(); ++k) r.outs.emplace_back(info.outputs[k].name, TensorView{});
  }
  return s;
}

int Session::find_state(const std::string& name) const {
  for (size_t i = 0; i < states_.size(); ++i)
    if (states_[i].spec->name == name) return static_cast<int>(i);
  return -1;
}

int Session::state_of_input(const std::string& entry, const std::string& input) const {
  for (size_t i = 0; i < states_.size(); ++i)
    for (const auto& b : states_[i].spec->bindings)
      if (b.entry == entry && b.input == input) return static_cast<int>(i);
  return -1;
}

// A position at or past the cache length would have the step write a row the cache does not have
// (seed 001: stop at max length). Checked here so the error names the position, not the ScatterND.
Status Session::check_positions(const std::string& entry, const ProfileRun& r, std::span<const NamedView> inputs) const {
  for (const ProfileRun::Position& p : r.positions) {
    TensorView v;
    if (r.input_state[p.input] >= 0) {
      const State& st = states_[r.input_state[p.input]];
      v = st.buf[st.cur].view();
    } else {
      for (const auto& [name, view] : inputs)
        if (name == p.bound.position) v = view;
    }
    if (!v.data || v.numel() != 1 || (v.dtype != DType::kInt64 && v.dtype != DType::kInt32)) continue;  // run() reports it
    const int64_t pos = read_int(v, 0);
    if (pos >= 0 && pos < p.bound.limit) continue;
    return OutOfRange(entry_label(entry) + ": " + p.bound.position + " = " + std::to_string(pos) +
                      (pos < 0 ? " is negative" : " is at or past the cache length " + std::to_string(p.bound.limit)) +
                      " (the step writes row " + p.bound.position + " of dim " + std::to_string(p.bound.axis) + " of " + p.indexes +
                      ", " + std::to_string(p.bound.limit) + " rows); stop at the cache length");
  }
  return Status::Ok();
}

StatusOr<Session::ProfileRun*> Session::pick(const std::string& entry, std::span<const NamedView> inputs, const std::string& profile) {
  const auto& profiles = engine_->profiles();
  bool any = false;
  for (ProfileRun& r : runs_) {
    const ProfileInfo& info = profiles[r.profile];
    if (info.entry != entry) continue;
    any = true;
    if (!profile.empty()) {
      if (info.name == (entry.empty() ? profile : entry_profile_name(entry, profile))) return &r;
      continue;
    }
    bool fits = true;
    for (size_t k = 0; k < info.inputs.size() && fits; ++k) {
      if (r.input_state[k] >= 0) continue;
      for (const auto& [name, view] : inputs)
        if (name == info.inputs[k].name) fits = fits_range(info.inputs[k], view.shape);
    }
    if (fits) return &r;
  }
  if (!any) {
    std::string known;
    for (const auto& e : engine_->entries()) known += (known.empty() ? "'" : ", '") + e + "'";
    return NotFound("the engine has no entry '" + entry + "' (entries: " + known + ")");
  }
  std::string shapes;
  for (const auto& [name, view] : inputs) shapes += (shapes.empty() ? "" : ", ") + name + " " + view.shape.str();
  if (!profile.empty()) return NotFound(entry_label(entry) + " has no profile '" + profile + "'");
  return OutOfRange(entry_label(entry) + ": no profile's ranges hold the inputs (" + shapes + ")");
}

StatusOr<std::span<const NamedView>> Session::run(const std::string& entry, std::span<const NamedView> inputs, const std::string& profile) {
  KILN_ASSIGN_OR_RETURN(ProfileRun* r, pick(entry, inputs, profile));
  const ProfileInfo& info = engine_->profiles()[r->profile];
  ExecutionContext& ctx = *r->ctx;
  SessionRunStats stats;
  stats.profile = info.name;
  // Every given input must be one the entry takes from the caller.
  for (const auto& [name, view] : inputs) {
    bool known = false;
    for (size_t k = 0; k < info.inputs.size(); ++k) {
      if (info.inputs[k].name != name) continue;
      if (r->input_state[k] >= 0)
        return InvalidArgument(entry_label(entry) + ": input '" + name + "' is read from state '" + states_[r->input_state[k]].spec->name +
                               "'; set it with write_state");
      known = true;
    }
    if (!known) return NotFound(entry_label(entry) + " has no input '" + name + "'");
  }
  KILN_RETURN_IF_ERROR(check_positions(entry, *r, inputs));
  for (size_t k = 0; k < info.inputs.size(); ++k) {
    if (r->input_state[k] >= 0) {
      const State& st = states_[r->input_state[k]];
      KILN_RETURN_IF_ERROR_IN_ENTRY(ctx.set_input(k, st.buf[st.cur].view()));
      stats.state_bytes_read += st.buf[st.cur].nbytes();
      continue;
    }
    const TensorView* given = nullptr;
    for (const auto& [name, view] : inputs)
      if (name == info.inputs[k].name) given = &view;
    if (!given) return InvalidArgument(entry_label(entry) + " needs input '" + info.inputs[k].name + "'");
    KILN_RETURN_IF_ERROR_IN_ENTRY(ctx.set_input(k, *given));
  }
  // State outputs are written straight into their buffer: the other half when the entry also
  // reads the state (it may still read rows the output overwrites), else the current one.
  for (size_t k = 0; k < info.outputs.size(); ++k) {
    if (r->output_state[k] < 0) continue;
    State& st = states_[r->output_state[k]];
    const Tensor& target = st.buf[r->reads_own[k] && !r->in_place[k] ? 1 - st.cur : st.cur];
    KILN_RETURN_IF_ERROR(ctx.bind_output(info.outputs[k].name, target.view()));
  }
  KILN_RETURN_IF_ERROR_IN_ENTRY(ctx.run());
  for (size_t k = 0; k < info.outputs.size(); ++k) {
    const TensorView& produced = ctx.output(k);
    if (r->output_state[k] < 0) {
      r->outs[k].second = produced;
      continue;
    }
    State& st = states_[r->output_state[k]];
    const int target = r->reads_own[k] && !r->in_place[k] ? 1 - st.cur : st.cur;
    if (produced.data == st.buf[st.cur].data()) {
      // Updated in place (its rows are counted below), or the state as read (a pass-through).
    } else {
      if (produced.data != st.buf[target].data()) {
        // Not written in place (e.g. the output is a constant of the model): copy it in.
        std::memcpy(st.buf[target].data(), produced.data, st.buf[target].nbytes());
        stats.state_bytes_copied += st.buf[target].nbytes();
      } else {
        stats.state_bytes_written += st.buf[target].nbytes();
      }
      st.cur = target;
    }
    r->outs[k].second = st.buf[st.cur].view();
  }
  stats.state_bytes_written += ctx.in_place_update_bytes();
  stats_ = std::move(stats);
  last_ = r;
  return std::span<const NamedView>(r->outs);
}

ExecutionContext* Session::context(const std::string& profile) const {
  for (const ProfileRun& r : runs_)
    if (engine_->profiles()[r.profile].name == profile) return r.ctx.get();
  return nullptr;
}

StatusOr<TensorView> Session::output(const std::string& name) const {
  if (!last_) return FailedPrecondition("no entry has run yet");
  for (const auto& [n, view] : last_->outs)
    if (n == name) return view;
  return NotFound("the last run (profile '" + engine_->profiles()[last_->profile].name + "') has no output '" + name + "'");
}

void Session::reset() {
  for (State& st : states_) {
    for (Tensor& t : st.buf)
      if (!t.empty() && t.nbytes()) std::memset(t.data(), 0, t.nbytes());
    st.cur = 0;
  }
}

StatusOr<TensorView> Session::state_view(const std::string& name) const {
  const int i = find_state(name);
  if (i < 0) return NotFound("the engine has no state '" + name + "'");
  return states_[i].buf[states_[i].cur].view();
}

StatusOr<Tensor> Session::read_state(const std::string& name) const {
  KILN_ASSIGN_OR_RETURN(TensorView v, state_view(name));
  return Tensor::copy_of(v);
}

Status Session::write_state(const std::string& name, const TensorView& value) {
  const int i = find_state(name);
  if (i < 0) return NotFound("the engine has no state '" + name + "'");
  State& st = states_[i];
  const Tensor& cur = st.buf[st.cur];
  if (value.dtype != cur.dtype() || value.shape != cur.shape())
    return InvalidArgument("state '" + name + "' is " + dtype_name(cur.dtype()) + " " + cur.shape().str() + ", got " + dtype_name(value.dtype) +
                           " " + value.shape.str());
  if (cur.nbytes()) std::memcpy(cur.data(), value.data, cur.nbytes());
  return Status::Ok();
}

uint64_t Session::state_buffer_bytes() const {
  uint64_t n = 0;
  for (const State& st : states_)
    for (const Tensor& t : st.buf) n += t.empty() ? 0 : t.nbytes();
  return n;
}

}  // namespace kiln
