#include "runtime/greedy_decoder.h"

#include <algorithm>
#include <chrono>

namespace kiln {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Argmax over the last position's row of logits [.., S, V] (first maximum wins, as torch.argmax).
StatusOr<int64_t> argmax_last(const TensorView& logits) {
  if (logits.dtype != DType::kFloat32 || logits.shape.rank() < 1 || logits.shape[logits.shape.rank() - 1] == 0)
    return InvalidArgument("logits must be float32 [..., V], got " + dtype_name(logits.dtype) + " " + logits.shape.str());
  const int64_t v = logits.shape[logits.shape.rank() - 1];
  const float* row = logits.as<float>() + (logits.numel() - v);
  int64_t best = 0;
  for (int64_t i = 1; i < v; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

StatusOr<TensorView> find_output(std::span<const NamedView> outs, const std::string& name, const std::string& entry) {
  for (const auto& [n, view] : outs)
    if (n == name) return view;
  return NotFound("entry '" + entry + "' has no output '" + name + "'");
}

}  // namespace

StatusOr<std::unique_ptr<GreedyDecoder>> GreedyDecoder::create(std::shared_ptr<const Engine> engine, GreedyDecoderSpec spec) {
  std::unique_ptr<GreedyDecoder> d(new GreedyDecoder());
  KILN_ASSIGN_OR_RETURN(d->session_, Session::create(std::move(engine)));
  d->spec_ = std::move(spec);
  for (const std::string* e : {&d->spec_.encoder, &d->spec_.prefill, &d->spec_.step}) {
    const auto entries = d->session_->engine()->entries();
    if (std::find(entries.begin(), entries.end(), *e) == entries.end())
      return NotFound("GreedyDecoder: the engine has no entry '" + *e + "'");
  }
  KILN_ASSIGN_OR_RETURN(TensorView cache, d->session_->state_view(d->spec_.cache));
  if (cache.shape.rank() < 2) return InvalidArgument("GreedyDecoder: state '" + d->spec_.cache + "' must be [..., max_len, d_kv]");
  d->cache_len_ = cache.shape[cache.shape.rank() - 2];
  KILN_ASSIGN_OR_RETURN(TensorView pos, d->session_->state_view(d->spec_.cur_pos));
  if (pos.numel() != 1) return InvalidArgument("GreedyDecoder: state '" + d->spec_.cur_pos + "' must be a scalar");
  d->token_ = Tensor::zeros(DType::kInt64, Shape{1, 1});
  d->start_ = Tensor::zeros(DType::kInt64, Shape{1, 1});
  return d;
}

Status GreedyDecoder::generate(const TensorView& input_ids, const TensorView& attention_mask, int max_new_tokens, GreedyResult* out,
                               const std::function<void(size_t, const TensorView&)>& on_logits) {
  if (max_new_tokens < 1) return InvalidArgument("max_new_tokens must be >= 1, got " + std::to_string(max_new_tokens));
  *out = GreedyResult{};
  out->tokens.reserve(static_cast<size_t>(max_new_tokens));
  out->step_ms.reserve(static_cast<size_t>(max_new_tokens));
  session_->reset();
  Session& s = *session_;

  auto t0 = std::chrono::steady_clock::now();
  const NamedView enc_in[] = {{spec_.input_ids, input_ids}, {spec_.attention_mask, attention_mask}};
  KILN_RETURN_IF_ERROR(s.run(spec_.encoder, enc_in).status());
  out->encoder_ms = ms_since(t0);
  out->state_bytes_copied += s.last_stats().state_bytes_copied;

  start_.as<int64_t>()[0] = spec_.start_token;
  t0 = std::chrono::steady_clock::now();
  const NamedView pre_in[] = {{spec_.decoder_input_ids, start_.view()}, {spec_.encoder_mask, attention_mask}};
  KILN_ASSIGN_OR_RETURN(auto outs, s.run(spec_.prefill, pre_in));
  KILN_ASSIGN_OR_RETURN(TensorView logits, find_output(outs, spec_.logits, spec_.prefill));
  KILN_ASSIGN_OR_RETURN(int64_t tok, argmax_last(logits));
  out->prefill_ms = ms_since(t0);
  out->state_bytes_copied += s.last_stats().state_bytes_copied;
  for (const std::string& cross : spec_.cross_states)
    if (auto v = s.state_view(cross); v.ok()) out->cross_kv_bytes_written += v->nbytes();
  if (on_logits) on_logits(0, logits);
  out->tokens.push_back(tok);

  const NamedView step_in[] = {{spec_.last_token, token_.view()}, {spec_.encoder_mask, attention_mask}};
  while (tok != spec_.end_token && static_cast<int>(out->tokens.size()) < max_new_tokens) {
    KILN_ASSIGN_OR_RETURN(TensorView pos, s.state_view(spec_.cur_pos));
    if (read_int(pos, 0) >= cache_len_) {  // seed 001: stop at the cache's length
      out->hit_cache_end = true;
      break;
    }
    token_.as<int64_t>()[0] = tok;
    t0 = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(auto souts, s.run(spec_.step, step_in));
    KILN_ASSIGN_OR_RETURN(TensorView step_logits, find_output(souts, spec_.logits, spec_.step));
    KILN_ASSIGN_OR_RETURN(tok, argmax_last(step_logits));
    out->step_ms.push_back(ms_since(t0));
    out->step_state_bytes_written = s.last_stats().state_bytes_written;
    out->state_bytes_copied += s.last_stats().state_bytes_copied;
    if (on_logits) on_logits(out->tokens.size(), step_logits);
    out->tokens.push_back(tok);
  }
  return Status::Ok();
}

}  // namespace kiln
