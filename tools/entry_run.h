// engine-run ENGINE --entry NAME: one entry of a multi-entry engine through a fresh kiln::Session.
#pragma once

#include <map>
#include <string>

#include "runtime/engine.h"

namespace kiln {

struct EntryRunArgs {
  std::string engine, entry, profile;   // profile: the entry's profile name in the config ("" = by input shapes)
  std::string output_dir;
  int iterations = 0;
  std::string json;
  LoadOptions load;
};

// Inputs naming a state-bound input of the entry set that state (write_state) before the run; the
// others are the entry's inputs. Every output (state outputs as the state after the run) goes to
// OUT/<name>.npy; one line on stdout gives the profile and the state bytes read, written and copied.
Status run_entry(const EntryRunArgs& args, const std::map<std::string, Tensor>& inputs);

}  // namespace kiln
