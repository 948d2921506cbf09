// engine-run ENGINE --generate: greedy generation with kiln::GreedyDecoder over a seq2seq engine
// (configs/seq2seq.yaml's layout).
#pragma once

#include <map>
#include <string>

#include "runtime/engine.h"

namespace kiln {

struct GenerateArgs {
  std::string engine;
  std::string output_dir;
  int max_new_tokens = 32;
  LoadOptions load;
};

// Inputs: the encoder's (input_ids, attention_mask). Writes OUT/tokens.npy (int64 [n]),
// OUT/logits.npy (float32 [n, V]: the row each token was chosen from) and OUT/timings.json
// (encoder, prefill and per-step ms with p50/p90/max, state bytes per step), and prints a summary.
// The output folder is written only after the generation succeeded.
Status run_generate(const GenerateArgs& args, const std::map<std::string, Tensor>& inputs);

}  // namespace kiln
