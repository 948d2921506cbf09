// What a streaming session needs to know about an engine: which profile starts, which one steps,
// which outputs feed which inputs, and the window. engine-build records it in the engine file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct StreamingStateSpec {
  std::string output;  // produced by a step...
  std::string input;   // ...and fed to the next one
  int axis = 0;        // the axis the state grows along
};

struct StreamingSpec {
  std::string cold_start;  // profile of the first step
  std::string step;        // profile of every later step
  std::vector<StreamingStateSpec> state;
  int64_t tokens_per_step = 0;  // rows one timestep adds along a state axis
  int64_t max_steps = 0;        // the window: at most max_steps * tokens_per_step cached rows
  // A bool [new, total] mask input the session fills itself (block-causal in blocks of
  // mask_block tokens; true = may attend). Empty: the caller passes the mask.
  std::string mask_input;
  int64_t mask_block = 0;
};

// What one StreamingSession step did.
struct StreamingStepStats {
  bool cold_start = false;
  int64_t cached_rows = 0;           // cache rows the step attended to
  int64_t new_rows = 0;              // rows the step appended
  uint64_t state_bytes_copied = 0;   // bytes moved for state (compaction, fallbacks), not the appends
  uint64_t state_bytes_appended = 0; // the new rows the step wrote into the state buffers
  bool in_place = true;              // every state input was read and every state output written in place
};

}  // namespace kiln
