// Entries and state buffers of a multi-entry engine (engine-build's `entries:` and `state:`; design
// in docs/multi_entry.md). An entry is one ONNX model with its own profiles; its plans are stored
// as the engine's profiles named "<entry>/<profile>", so every tool that runs profiles runs them.
// A state buffer is a named tensor of one fixed dtype and shape that a Session keeps between calls
// and binds, in place, to entry inputs (read) and outputs (written).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/dtype.h"

namespace kiln {

struct StateBinding {
  std::string entry;
  std::string input;    // the entry reads the buffer here ("" = it does not read it)
  std::string output;   // the entry writes the buffer here ("" = it does not write it)
};

struct StateBufferSpec {
  std::string name;
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;
  std::vector<StateBinding> bindings;
};

// What one Session::run moved through the state buffers.
struct SessionRunStats {
  std::string_view profile;         // the engine profile that ran (its name in the engine)
  uint64_t state_bytes_read = 0;    // state-bound inputs, read in place
  uint64_t state_bytes_written = 0; // state-bound outputs, written in place by the kernels (for an
                                    // in-place update: the rows it wrote)
  uint64_t state_bytes_copied = 0;  // state bytes moved outside the model's computation (0 when all in place)
};

// The engine profile name of an entry's profile.
inline std::string entry_profile_name(const std::string& entry, const std::string& profile) { return entry + "/" + profile; }

}  // namespace kiln
