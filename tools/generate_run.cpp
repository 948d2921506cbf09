#include "tools/generate_run.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "profiles/latency_stats.h"
#include "runtime/greedy_decoder.h"
#include "runtime/npy_io.h"

namespace kiln {

Status run_generate(const GenerateArgs& args, const std::map<std::string, Tensor>& inputs) {
  if (args.max_new_tokens < 1) return InvalidArgument("--max-new-tokens must be >= 1");
  KILN_ASSIGN_OR_RETURN(auto engine, Engine::load_file(args.engine, args.load));
  GreedyDecoderSpec spec;
  for (const auto& [name, t] : inputs)
    if (name != spec.input_ids && name != spec.attention_mask)
      return InvalidArgument("--generate takes --input " + spec.input_ids + "=FILE and --input " + spec.attention_mask + "=FILE; got '" + name + "'");
  auto ids = inputs.find(spec.input_ids);
  if (ids == inputs.end()) return InvalidArgument("missing input '" + spec.input_ids + "': pass --input " + spec.input_ids + "=FILE");
  Tensor mask;
  if (auto m = inputs.find(spec.attention_mask); m != inputs.end()) {
    mask = m->second;
  } else {  // no mask: every position is a token
    mask = Tensor::zeros(ids->second.dtype(), ids->second.shape());
    for (int64_t i = 0; i < mask.numel(); ++i) {
      if (mask.dtype() == DType::kInt64) mask.as<int64_t>()[i] = 1;
      else return InvalidArgument("input '" + spec.input_ids + "' must be int64");
    }
  }
  KILN_ASSIGN_OR_RETURN(auto decoder, GreedyDecoder::create(engine, spec));
  std::vector<float> logits;
  int64_t vocab = 0;
  GreedyResult r;
  KILN_RETURN_IF_ERROR(decoder->generate(ids->second.view(), mask.view(), args.max_new_tokens, &r, [&](size_t, const TensorView& l) {
    vocab = l.shape[l.shape.rank() - 1];
    const float* row = l.as<float>() + (l.numel() - vocab);
    logits.insert(logits.end(), row, row + vocab);
  }));

  const LatencyStats steps = compute_latency_stats(r.step_ms.empty() ? std::vector<double>{0.0} : r.step_ms);
  std::printf("generated %zu tokens%s: encoder %.3f ms, prefill %.3f ms, %zu steps: %s\n", r.tokens.size(),
              r.hit_cache_end ? " (stopped at the cache length)" : "", r.encoder_ms, r.prefill_ms, r.step_ms.size(), latency_line(steps).c_str());
  std::printf("state: cross-attention K/V %llu bytes written once; per step %llu bytes written in place; %llu bytes copied\n",
              static_cast<unsigned long long>(r.cross_kv_bytes_written), static_cast<unsigned long long>(r.step_state_bytes_written),
              static_cast<unsigned long long>(r.state_bytes_copied));
  if (args.output_dir.empty()) return Status::Ok();
  std::error_code ec;
  std::filesystem::create_directories(args.output_dir, ec);
  if (ec) return IoError("cannot create output directory '" + args.output_dir + "': " + ec.message());
  const std::filesystem::path dir(args.output_dir);
  Tensor tokens = Tensor::from_vector<int64_t>(r.tokens, Shape{static_cast<int64_t>(r.tokens.size())});
  KILN_RETURN_IF_ERROR(write_npy((dir / "tokens.npy").string(), tokens.view()));
  Tensor lt = Tensor::from_vector<float>(logits, Shape{static_cast<int64_t>(r.tokens.size()), vocab});
  KILN_RETURN_IF_ERROR(write_npy((dir / "logits.npy").string(), lt.view()));
  std::ostringstream j;
  j << "{\"tokens\": " << r.tokens.size() << ", \"encoder_ms\": " << r.encoder_ms << ", \"prefill_ms\": " << r.prefill_ms
    << ", \"step_ms\": [";
  for (size_t i = 0; i < r.step_ms.size(); ++i) j << (i ? ", " : "") << r.step_ms[i];
  j << "], \"step_latency_ms\": " << latency_json(steps) << ", \"hit_cache_end\": " << (r.hit_cache_end ? "true" : "false")
    << ", \"cross_kv_bytes_written_once\": " << r.cross_kv_bytes_written << ", \"step_state_bytes_written\": " << r.step_state_bytes_written
    << ", \"state_bytes_copied\": " << r.state_bytes_copied << "}\n";
  std::ofstream f(dir / "timings.json");
  f << j.str();
  if (!f) return IoError("cannot write '" + (dir / "timings.json").string() + "'");
  return Status::Ok();
}

}  // namespace kiln
