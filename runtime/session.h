// Session: state that persists across calls to the entries of one engine (docs/multi_entry.md).
//
// An engine built from `entries:` holds several models (an encoder, a decoder prefill, a decoder
// step; seed 003's set_cache and get_cache) and `state:` buffers bound to their inputs and outputs.
// A session owns one buffer per state, zero at creation and after reset(). run(entry, inputs) binds
// every state-bound input to its buffer (read in place, zero copy) and every state-bound output to
// its buffer (the producing kernel writes there: no copy back). An entry that reads and writes the
// same state writes the other half of a double buffer and the halves swap, so a kernel never
// overwrites rows it still has to read; except where the output is an in-place update of the input
// (a fixed-size cache written at cur_pos by ScatterND, ExecutionContext::allow_update_in_place):
// then only the new rows are written, into the state's one current buffer. Weights live in the engine: any number of sessions over one
// engine share them, each with its own state and activation arenas.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

#include "kiln/entry_spec.h"
#include "runtime/engine.h"
#include "runtime/position_bounds.h"

namespace kiln {

using NamedView = std::pair<std::string, TensorView>;

class Session {
 public:
  // One execution context per engine profile, prepared for its range (ExecutionContext::
  // prepare_for_profile) unless `prepare` is false. `update_in_place` false keeps every read-and-
  // written state double-buffered (whole-tensor writes; for comparisons).
  static StatusOr<std::unique_ptr<Session>> create(std::shared_ptr<const Engine> engine, bool prepare = true, bool update_in_place = true);

  // Runs `entry` ("" in a single-model engine) on `inputs`: every input of the entry except the
  // state-bound ones, by name (bound zero copy; they must stay valid until run returns). `profile`
  // picks one of the entry's profiles by its name in the config; "" takes the first whose ranges
  // hold the inputs. Returns every output (state-bound ones as views of their state buffer), valid
  // until the next run of the same profile. A steady-state run allocates nothing.
  StatusOr<std::span<const NamedView>> run(const std::string& entry, std::span<const NamedView> inputs, const std::string& profile = "");
  // An output of the last run.
  StatusOr<TensorView> output(const std::string& name) const;

  // Zero every state buffer (seed 003's init).
  void reset();
  // A state buffer's current contents: a view (valid until the next run or reset) or a copy.
  StatusOr<TensorView> state_view(const std::string& name) const;
  StatusOr<Tensor> read_state(const std::string& name) const;
  // Overwrites a state buffer with `value` of the state's dtype and shape.
  Status write_state(const std::string& name, const TensorView& value);

  const SessionRunStats& last_stats() const { return stats_; }
  // The execution context that runs engine profile `profile` (e.g. "step/default"), or null: for
  // tools that profile a step's kernels (ExecutionContext::set_profiling).
  ExecutionContext* context(const std::string& profile) const;
  const std::shared_ptr<const Engine>& engine() const { return engine_; }
  // Whether `entry` reads state `name` through input `input` (engine-run uses it for --input).
  int state_of_input(const std::string& entry, const std::string& input) const;
  const std::vector<StateBufferSpec>& states() const { return engine_->info().state; }
  uint64_t state_buffer_bytes() const;

 private:
  struct State {
    const StateBufferSpec* spec = nullptr;
    Tensor buf[2];      // buf[1] only for a state some entry reads and writes
    int cur = 0;        // the half holding the current contents
  };
  struct ProfileRun {
    size_t profile = 0;
    std::unique_ptr<ExecutionContext> ctx;
    std::vector<int> input_state;    // per plan input: the state it reads, or -1
    std::vector<int> output_state;   // per plan output: the state it writes, or -1
    std::vector<char> reads_own;     // per plan output: the entry also reads that state (write the other half)
    std::vector<char> in_place;      // per plan output: an in-place update of the state's input (same half)
    std::vector<NamedView> outs;
    // Position inputs (runtime/position_bounds.h), checked before every run: the plan input index
    // of each, its bound, and what it indexes for the error ("state 'cache_k'").
    struct Position {
      size_t input = 0;
      PositionBound bound;
      std::string indexes;
    };
    std::vector<Position> positions;
  };

  Session() = default;
  Status check_positions(const std::string& entry, const ProfileRun& r, std::span<const NamedView> inputs) const;
  StatusOr<ProfileRun*> pick(const std::string& entry, std::span<const NamedView> inputs, const std::string& profile);
  int find_state(const std::string& name) const;

  std::shared_ptr<const Engine> engine_;
  std::vector<State> states_;
  std::vector<ProfileRun> runs_;
  ProfileRun* last_ = nullptr;
  SessionRunStats stats_;
};

}  // namespace kiln
