// infer-queue-bench: kiln::InferQueue's throughput with dynamic batching against one request at a
// time, on a profile with a ranged dim 0 (bench/configs/resnet18_batch.yaml).
//
//   build/infer-queue-bench ENGINE PROFILE [--requests N] [--max-batch B] [--delay-us D] [--rounds R]
//
// Each round runs both modes, alternating which goes first: N requests of one row each are
// submitted at once to a queue of one worker, (a) with max_batch 1, (b) with max_batch B and
// max_delay_us D; the time until the last result is in gives requests per second. Prints every
// round and the medians; the ratio b/a is the gain of batching on this machine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/engine.h"
#include "kiln/infer_queue.h"

namespace {

using kiln::api::Engine;

kiln::TensorMap one_row_inputs(const kiln::ProfileInfo& profile) {
  kiln::TensorMap inputs;
  for (const auto& b : profile.inputs) {
    kiln::Shape shape = b.opt;
    shape[0] = 1;
    kiln::Tensor t = kiln::Tensor::zeros(b.dtype, shape);
    if (b.dtype == kiln::DType::kFloat32)
      for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
    inputs.emplace(b.name, t);
  }
  return inputs;
}

double requests_per_second(const std::shared_ptr<Engine>& engine, const std::string& profile, const kiln::TensorMap& inputs, int requests,
                           int max_batch, int64_t delay_us) {
  auto q = kiln::InferQueue::create(engine, profile,
                                    {.workers = 1, .capacity = static_cast<size_t>(requests), .max_batch = max_batch, .max_delay_us = delay_us});
  if (!q.ok()) {
    std::fprintf(stderr, "infer-queue-bench: %s\n", q.status().message().c_str());
    std::exit(1);
  }
  if (!(*q)->submit(inputs).get().ok()) std::exit(1);   // warm: the worker plans at one row
  std::vector<std::future<kiln::InferResult>> futures;
  futures.reserve(static_cast<size_t>(requests));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < requests; ++i) futures.push_back((*q)->submit(inputs));
  for (auto& f : futures)
    if (kiln::InferResult r = f.get(); !r.ok()) {
      std::fprintf(stderr, "infer-queue-bench: %s\n", r.status().message().c_str());
      std::exit(1);
    }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return requests / s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: infer-queue-bench ENGINE PROFILE [--requests N] [--max-batch B] [--delay-us D] [--rounds R]\n");
    return 2;
  }
  int requests = 256, max_batch = 8, rounds = 5;
  int64_t delay_us = 2000;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long v = std::strtol(argv[i + 1], nullptr, 10);
    if (flag == "--requests") requests = static_cast<int>(v);
    else if (flag == "--max-batch") max_batch = static_cast<int>(v);
    else if (flag == "--delay-us") delay_us = v;
    else if (flag == "--rounds") rounds = static_cast<int>(v);
    else return std::fprintf(stderr, "infer-queue-bench: unknown option %s\n", flag.c_str()), 2;
  }
  auto engine = Engine::load_file(argv[1]);
  if (!engine.ok()) return std::fprintf(stderr, "infer-queue-bench: %s\n", engine.status().message().c_str()), 1;
  const int p = (*engine)->find_profile(argv[2]);
  if (p < 0) return std::fprintf(stderr, "infer-queue-bench: no profile '%s'\n", argv[2]), 1;
  const kiln::TensorMap inputs = one_row_inputs((*engine)->profiles()[p]);
  std::vector<double> single, batched, ratio;
  for (int r = 0; r < rounds; ++r) {
    double a = 0, b = 0;
    if (r % 2 == 0) {
      a = requests_per_second(*engine, argv[2], inputs, requests, 1, 0);
      b = requests_per_second(*engine, argv[2], inputs, requests, max_batch, delay_us);
    } else {
      b = requests_per_second(*engine, argv[2], inputs, requests, max_batch, delay_us);
      a = requests_per_second(*engine, argv[2], inputs, requests, 1, 0);
    }
    single.push_back(a);
    batched.push_back(b);
    ratio.push_back(b / a);
    std::printf("round %d: one at a time %.1f req/s, batched (max_batch %d, max_delay_us %lld) %.1f req/s, %.2fx\n", r + 1, a, max_batch,
                static_cast<long long>(delay_us), b, b / a);
  }
  std::printf("median of %d rounds, %d requests each: one at a time %.1f req/s, batched %.1f req/s, ratio %.2fx (median of per-round ratios)\n",
              rounds, requests, median(single), median(batched), median(ratio));
  return 0;
}
