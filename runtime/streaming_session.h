// StreamingSession: a stateful control loop over one engine. The first step runs the cold-start
// profile (say "full": T timesteps, empty cache); every later step runs the step profile ("incremental":
// one new timestep attending to the cached ones). State outputs (the KV cache, the projected
// embeddings) are fed back as the next step's state inputs.
//
// The session owns one buffer per state, laid out as slabs with room to grow along the state axis,
// and both profiles' contexts read and write those buffers in place (ExecutionContext::
// set_state_input / bind_state_output): nothing is copied between profiles, the attention plugin
// appends the new K/V rows in place, and the window slides by moving a start offset. Each slab is
// a ring mapped twice in a row (runtime/mirrored_buffer.h), so the window stays contiguous when it
// wraps and no row ever moves; where such mappings are unavailable, the live rows are compacted to
// the front when the room runs out (a buffer of twice the window: one step's rows per step on
// average). state_bytes_copied counts every byte moved for state outside the model's computation.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/engine.h"
#include "runtime/streaming_spec.h"

namespace kiln {

class StreamingSession {
 public:
  // Both profiles' contexts are created prepared (ExecutionContext::prepare_for_profile).
  static StatusOr<std::unique_ptr<StreamingSession>> create(std::shared_ptr<const Engine> engine, const StreamingSpec& spec);
  // With the streaming spec recorded in the engine (engine-build's `streaming` section).
  static StatusOr<std::unique_ptr<StreamingSession>> create(std::shared_ptr<const Engine> engine);

  // One control step. `inputs` are the per-step inputs by name: everything except the state
  // inputs and a session-generated mask. The first step after create() or reset() is a cold start.
  Status step(std::span<const std::pair<std::string, TensorView>> inputs);

  // A non-state output of the last step (valid until the next step).
  StatusOr<TensorView> output(const std::string& name) const;
  // A contiguous copy of a state output of the last step (for checks; a step never needs it).
  StatusOr<Tensor> state(const std::string& output) const;
  const StreamingStepStats& last_stats() const { return stats_; }
  int64_t cached_rows() const { return rows_; }
  int64_t steps_run() const { return steps_; }
  uint64_t state_buffer_bytes() const;
  // Whether the state buffers are double-mapped rings (then sliding never copies a row).
  bool ring_buffers() const { return mirrored_; }
  // The next step is a cold start again. `scrub` also fills the state buffers with NaN (float
  // states) or zeros, so a check comparing two runs cannot pass on stale rows of the first.
  void reset(bool scrub = false);

 private:
  struct State {
    StreamingStateSpec spec;
    DType dtype = DType::kUndefined;
    Shape slab_dims;            // dims before the axis
    Shape inner_dims;           // dims after the axis
    int64_t slabs = 1;
    size_t row_bytes = 0;       // one row of one slab
    std::shared_ptr<void> buffer;   // slabs x capacity_ rows
    Tensor fallback;            // contiguous copy for a context that cannot read the slabs in place
    Shape shape(int64_t rows) const;
  };

  StreamingSession() = default;
  // Slab stride: a mirrored slab takes twice its bytes of address space.
  int64_t pitch(const State& st) const { return (mirrored_ ? 2 : 1) * capacity_ * static_cast<int64_t>(st.row_bytes); }
  char* row(const State& st, int64_t slab, int64_t r) const {
    return static_cast<char*>(st.buffer.get()) + slab * pitch(st) + r * static_cast<int64_t>(st.row_bytes);
  }
  Status reserve(int64_t rows_needed, uint64_t* copied);
  // Rows of a state to carry over into new buffers: the first row of slab 0 and the slab stride.
  struct Rows { const char* data; int64_t pitch; };
  Status reallocate(int64_t capacity, const std::vector<Rows>& sources, int64_t rows, uint64_t* copied);
  Status bind_state(ExecutionContext& ctx, uint64_t* copied, bool* in_place);
  Status fill_mask(ExecutionContext& ctx, int64_t new_rows);
  int64_t new_rows_of(std::span<const std::pair<std::string, TensorView>> inputs) const;

  std::shared_ptr<const Engine> engine_;
  StreamingSpec spec_;
  std::unique_ptr<ExecutionContext> cold_, warm_;
  std::vector<State> states_;
  // Per step-profile input: the axis along which it counts timesteps (-1 = none), with its size
  // in the step profile's opt shape; a step with k times that many adds k * tokens_per_step rows.
  std::vector<std::pair<std::string, std::pair<int, int64_t>>> timestep_axes_;
  Tensor mask_;
  std::vector<TensorView> outs_scratch_;   // per state: its output view of the last step
  int64_t capacity_ = 0;   // rows per slab of every state buffer
  bool mirrored_ = false;  // slabs are double-mapped rings (no compaction ever)
  int64_t start_ = 0, rows_ = 0, steps_ = 0;   // the live window is rows [start_, start_ + rows_)
  ExecutionContext* last_ = nullptr;
  StreamingStepStats stats_;
};

}  // namespace kiln
