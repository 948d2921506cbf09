// kiln::Session: state that persists across calls to the entries of a multi-entry engine (an
// encoder, a decoder prefill and step sharing a fixed-size cache; docs/multi_entry.md). Each
// `state:` buffer of the engine is owned by the session, zero at creation and after reset(), and
// bound in place to the entry inputs that read it and the outputs that write it.
//
//   auto session = kiln::Session::create(engine).value();
//   session->run("encoder", {{"input_ids", ids}, {"attention_mask", mask}});
//   auto outs = session->run("step", {{"last_token_id", tok}, {"encoder_attention_mask", mask}}).value();
//   kiln::Tensor cache = session->read_state("cache_k").value();
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>

#include "kiln/engine.h"
#include "kiln/entry_spec.h"
#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::api {

class KILN_API Session {
 public:
  // One execution context per engine profile, each prepared for its range, so no run allocates.
  static StatusOr<std::unique_ptr<Session>> create(std::shared_ptr<const Engine> engine);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Runs `entry` ("" in a single-model engine) with every input it does not read from state, by
  // name (read in place until run returns). `profile` picks one of the entry's profiles by its
  // config name; "" takes the first whose ranges hold the inputs. Returns every output (state-bound
  // ones as views of their buffer), valid until the next run of the same profile.
  StatusOr<std::span<const std::pair<std::string, TensorView>>> run(const std::string& entry,
                                                                    std::span<const std::pair<std::string, TensorView>> inputs,
                                                                    const std::string& profile = "");
  // An output of the last run.
  StatusOr<TensorView> output(const std::string& name) const;
  // Zeroes every state buffer.
  void reset();
  // A copy of a state buffer's contents.
  StatusOr<Tensor> read_state(const std::string& name) const;
  // Overwrites a state buffer with `value` of the state's dtype and shape.
  Status write_state(const std::string& name, const TensorView& value);
  // The state bytes the last run read, wrote in place and copied.
  const SessionRunStats& last_stats() const;

  struct Impl;

 private:
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::api

#ifndef KILN_INTERNAL_BUILD
namespace kiln {
using api::Session;
}
#endif
