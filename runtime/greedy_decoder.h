// GreedyDecoder: greedy generation over a Session of a seq2seq engine in seed 001's layout (an
// encoder entry, a decoder prefill entry, a decoder step entry, with the state buffers of
// configs/seq2seq.yaml). A helper outside the engine: it runs the encoder once, the prefill once on
// the start token, then the step until the end token, the token limit or the cache length, taking
// the argmax of each step's logits. Everything else (the caches, the cross-attention K/V, cur_pos)
// stays in the session's state buffers, written and read in place.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/session.h"

namespace kiln {

struct GreedyDecoderSpec {
  std::string encoder = "encoder", prefill = "prefill", step = "step";        // entry names
  std::string input_ids = "input_ids", attention_mask = "attention_mask";     // encoder inputs
  std::string decoder_input_ids = "decoder_input_ids";                        // prefill input
  std::string last_token = "last_token_id";                                   // step input
  std::string encoder_mask = "encoder_attention_mask";                        // prefill and step input
  std::string logits = "logits";                                              // prefill and step output
  std::string cur_pos = "cur_pos";                                            // state: next cache row
  std::string cache = "cache_k";                                              // state: its dim -2 is the cache length
  std::vector<std::string> cross_states = {"cross_k", "cross_v"};             // states the prefill writes once (for the report)
  int64_t start_token = 0;   // T5: the pad token starts the decoder
  int64_t end_token = 1;     // T5: eos
};

struct GreedyResult {
  std::vector<int64_t> tokens;           // generated tokens (the end token included when reached)
  double encoder_ms = 0, prefill_ms = 0;
  std::vector<double> step_ms;           // per step after the prefill
  bool hit_cache_end = false;            // stopped because cur_pos reached the cache length
  uint64_t step_state_bytes_written = 0; // per step: state written in place (last step)
  uint64_t state_bytes_copied = 0;       // over the whole generation
  uint64_t cross_kv_bytes_written = 0;   // cross-attention K/V written (once, by the prefill)
};

class GreedyDecoder {
 public:
  static StatusOr<std::unique_ptr<GreedyDecoder>> create(std::shared_ptr<const Engine> engine, GreedyDecoderSpec spec = {});

  // input_ids and attention_mask as the encoder takes them. `on_logits(i, logits)` (optional) sees
  // the logits each token was chosen from: i = 0 from the prefill, then one per step.
  Status generate(const TensorView& input_ids, const TensorView& attention_mask, int max_new_tokens, GreedyResult* out,
                  const std::function<void(size_t, const TensorView&)>& on_logits = {});

  Session& session() { return *session_; }

 private:
  GreedyDecoder() = default;
  std::unique_ptr<Session> session_;
  GreedyDecoderSpec spec_;
  int64_t cache_len_ = 0;
  Tensor token_, start_;   // [1, 1] int64 inputs
};

}  // namespace kiln
