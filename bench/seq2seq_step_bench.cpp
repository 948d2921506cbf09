// Decoder step latency of a seq2seq engine (configs/seq2seq.yaml) at two cache positions, with the
// fixed-size cache updated in place (Session default) and double-buffered (whole-cache writes).
//
//   build/seq2seq-step-bench ENGINE [--positions 16,120] [--iterations 200] [--rounds 5]
//
// One session per mode runs the encoder and a prefill once on a fixed source; each timed step then
// starts from the same state: cur_pos set with write_state (untimed) before every step. The four
// (mode, position) cells alternate in rounds, each round timing `iterations` steps per cell; the
// table gives the median over all steps of a cell and the ratio between positions. Not a test.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/session.h"

using namespace kiln;

namespace {

int fail(const Status& st) {
  std::fprintf(stderr, "seq2seq-step-bench: %s\n", st.message().c_str());
  return 1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: seq2seq-step-bench ENGINE [--positions A,B] [--iterations N] [--rounds R]\n");
    return 2;
  }
  std::vector<int64_t> positions = {16, 120};
  int iterations = 200, rounds = 5;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], v = argv[i + 1];
    if (flag == "--positions") {
      positions.clear();
      for (size_t p = 0; p < v.size();) {
        size_t q = v.find(',', p);
        positions.push_back(std::stoll(v.substr(p, q - p)));
        p = q == std::string::npos ? v.size() : q + 1;
      }
    } else if (flag == "--iterations") iterations = std::atoi(v.c_str());
    else if (flag == "--rounds") rounds = std::atoi(v.c_str());
    else return fail(InvalidArgument("unknown option '" + flag + "'"));
  }
  auto engine = Engine::load_file(argv[1]);
  if (!engine.ok()) return fail(engine.status());
  struct Mode { const char* name; std::unique_ptr<Session> s; };
  std::vector<Mode> modes;
  for (bool in_place : {true, false}) {
    auto s = Session::create(*engine, true, in_place);
    if (!s.ok()) return fail(s.status());
    modes.push_back({in_place ? "in place" : "double-buffered", std::move(*s)});
  }
  // A source of 20 bytes in a 32-token window, a 1-token prefill.
  auto enc_shape = (*engine)->profiles()[(*engine)->find_profile("encoder/default")].inputs[0].min;
  Tensor ids = Tensor::zeros(DType::kInt64, enc_shape), mask = Tensor::zeros(DType::kInt64, enc_shape);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    ids.as<int64_t>()[i] = i < 20 ? 3 + (i * 37) % 256 : 0;
    mask.as<int64_t>()[i] = i < 20;
  }
  Tensor start = Tensor::zeros(DType::kInt64, Shape{1, 1}), tok = Tensor::zeros(DType::kInt64, Shape{1, 1});
  tok.as<int64_t>()[0] = 42;
  for (auto& m : modes) {
    const NamedView e[] = {{"input_ids", ids.view()}, {"attention_mask", mask.view()}};
    const NamedView p[] = {{"decoder_input_ids", start.view()}, {"encoder_attention_mask", mask.view()}};
    if (auto r = m.s->run("encoder", e); !r.ok()) return fail(r.status());
    if (auto r = m.s->run("prefill", p); !r.ok()) return fail(r.status());
  }
  const NamedView step_in[] = {{"last_token_id", tok.view()}, {"encoder_attention_mask", mask.view()}};
  std::vector<std::vector<double>> samples(modes.size() * positions.size());
  std::vector<uint64_t> bytes(samples.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t mi = 0; mi < modes.size(); ++mi)
      for (size_t pi = 0; pi < positions.size(); ++pi) {
        Session& s = *modes[mi].s;
        Tensor pos = Tensor::scalar_i64(positions[pi]);
        for (int it = -2; it < iterations; ++it) {  // two untimed warm-up steps per cell and round
          if (Status st = s.write_state("cur_pos", pos.view()); !st.ok()) return fail(st);
          const auto t0 = std::chrono::steady_clock::now();
          if (auto o = s.run("step", step_in); !o.ok()) return fail(o.status());
          const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          if (it >= 0) samples[mi * positions.size() + pi].push_back(ms);
        }
        bytes[mi * positions.size() + pi] = s.last_stats().state_bytes_written;
      }
  std::printf("decoder step of %s, %d rounds x %d steps per cell, median ms\n", argv[1], rounds, iterations);
  std::printf("%-16s", "mode");
  for (int64_t p : positions) std::printf("  cur_pos %-4lld", static_cast<long long>(p));
  std::printf("  ratio last/first  state bytes per step\n");
  for (size_t mi = 0; mi < modes.size(); ++mi) {
    std::printf("%-16s", modes[mi].name);
    for (size_t pi = 0; pi < positions.size(); ++pi) std::printf("  %-12.4f", median(samples[mi * positions.size() + pi]));
    std::printf("  %-17.2f  %llu\n", median(samples[mi * positions.size() + positions.size() - 1]) / median(samples[mi * positions.size()]),
                static_cast<unsigned long long>(bytes[mi * positions.size()]));
  }
  return 0;
}
