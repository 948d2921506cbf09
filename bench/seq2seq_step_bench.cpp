// Decoder step latency of seq2seq engines (configs/seq2seq.yaml) at several cache positions, with
// the fixed-size cache updated in place (Session default) and double-buffered (whole-cache writes).
//
//   build/seq2seq-step-bench ENGINE [ENGINE ...] [--positions 16,120] [--iterations 200] [--rounds 5]
//
// Several engines (say one built with the live-length attention and one with fusions.attention:
// off) are compared in one process. Per engine, one session per mode runs the encoder and a
// prefill once on a fixed source; each timed step then starts from the same state: cur_pos set
// with write_state (untimed) before every step. The (engine, mode, position) cells alternate in
// rounds, each round timing `iterations` steps per cell; the table gives the median over all steps
// of a cell and the ratio between the last and first position. A profiled pass per round and
// engine (in-place session, per-kernel timing on) gives the median time per step of the step's
// self-attention kernels: the kiln::Attention steps whose keys are the cache (none when unfused).
// Not a test.
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

struct Cell {
  std::string label;
  Session* s = nullptr;
  ExecutionContext* profiled = nullptr;  // the attention pass: the step's context, else null
  std::vector<char> attention_step;      // per plan step of `profiled`
  std::vector<std::vector<double>> ms;   // per position
  uint64_t bytes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths;
  std::vector<int64_t> positions = {16, 120};
  int iterations = 200, rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag.rfind("--", 0) != 0) {
      paths.push_back(flag);
      continue;
    }
    if (i + 1 >= argc) return fail(InvalidArgument("option '" + flag + "' needs a value"));
    const std::string v = argv[++i];
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
  if (paths.empty() || positions.empty()) {
    std::fprintf(stderr, "usage: seq2seq-step-bench ENGINE [ENGINE ...] [--positions A,B] [--iterations N] [--rounds R]\n");
    return 2;
  }
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<Cell> cells, attention;
  Tensor tok = Tensor::zeros(DType::kInt64, Shape{1, 1}), start = Tensor::zeros(DType::kInt64, Shape{1, 1});
  tok.as<int64_t>()[0] = 42;
  std::vector<Tensor> masks;
  for (size_t e = 0; e < paths.size(); ++e) {
    auto engine = Engine::load_file(paths[e]);
    if (!engine.ok()) return fail(engine.status());
    // A source of 20 bytes in a 32-token window, a 1-token prefill.
    const int enc = (*engine)->find_profile("encoder/default");
    if (enc < 0) return fail(NotFound(paths[e] + " has no profile 'encoder/default'"));
    const Shape enc_shape = (*engine)->profiles()[enc].inputs[0].min;
    Tensor ids = Tensor::zeros(DType::kInt64, enc_shape), mask = Tensor::zeros(DType::kInt64, enc_shape);
    for (int64_t i = 0; i < ids.numel(); ++i) {
      ids.as<int64_t>()[i] = i < 20 ? 3 + (i * 37) % 256 : 0;
      mask.as<int64_t>()[i] = i < 20;
    }
    for (bool in_place : {true, false}) {
      auto s = Session::create(*engine, true, in_place);
      if (!s.ok()) return fail(s.status());
      const NamedView ein[] = {{"input_ids", ids.view()}, {"attention_mask", mask.view()}};
      const NamedView pin[] = {{"decoder_input_ids", start.view()}, {"encoder_attention_mask", mask.view()}};
      if (auto r = (*s)->run("encoder", ein); !r.ok()) return fail(r.status());
      if (auto r = (*s)->run("prefill", pin); !r.ok()) return fail(r.status());
      Cell c;
      c.label = "[" + std::to_string(e + 1) + "] " + (in_place ? "in place" : "double-buffered");
      c.s = s->get();
      c.ms.resize(positions.size());
      cells.push_back(c);
      if (in_place) {
        c.label = "[" + std::to_string(e + 1) + "] self-attention";
        c.profiled = (*s)->context("step/default");
        if (!c.profiled) return fail(NotFound(paths[e] + " has no profile 'step/default'"));
        attention.push_back(c);
      }
      sessions.push_back(std::move(*s));
    }
    masks.push_back(std::move(mask));
  }
  // The cells of engine e are cells[2e], cells[2e + 1] and attention[e].
  auto step_in = [&](size_t e) {
    return std::vector<NamedView>{{"last_token_id", tok.view()}, {"encoder_attention_mask", masks[e].view()}};
  };
  for (int r = 0; r < rounds; ++r) {
    for (size_t ci = 0; ci < cells.size(); ++ci)
      for (size_t pi = 0; pi < positions.size(); ++pi) {
        Cell& c = cells[ci];
        const auto in = step_in(ci / 2);
        Tensor pos = Tensor::scalar_i64(positions[pi]);
        for (int it = -2; it < iterations; ++it) {  // two untimed warm-up steps per cell and round
          if (Status st = c.s->write_state("cur_pos", pos.view()); !st.ok()) return fail(st);
          const auto t0 = std::chrono::steady_clock::now();
          if (auto o = c.s->run("step", in); !o.ok()) return fail(o.status());
          const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          if (it >= 0) c.ms[pi].push_back(ms);
        }
        c.bytes = c.s->last_stats().state_bytes_written;
      }
    for (size_t e = 0; e < attention.size(); ++e)
      for (size_t pi = 0; pi < positions.size(); ++pi) {
        Cell& c = attention[e];
        const auto in = step_in(e);
        Tensor pos = Tensor::scalar_i64(positions[pi]);
        c.profiled->set_profiling(true);
        for (int it = -2; it < iterations; ++it) {
          if (Status st = c.s->write_state("cur_pos", pos.view()); !st.ok()) return fail(st);
          // step_ms() accumulates over the profiled runs: a step's share is the difference.
          auto total = [&] {
            double ms = 0;
            for (size_t i = 0; i < c.attention_step.size() && i < c.profiled->step_ms().size(); ++i)
              if (c.attention_step[i]) ms += c.profiled->step_ms()[i];
            return ms;
          };
          const double before = total();
          if (auto o = c.s->run("step", in); !o.ok()) return fail(o.status());
          if (c.attention_step.empty()) {
            // Self-attention: kiln::Attention steps whose keys (input 1, [B, H, S, Dh]) span the cache.
            const int64_t cache_len = c.s->states().empty() ? 0 : [&] {
              for (const auto& st : c.s->states())
                if (st.name == "cache_k" && st.dims.size() == 5) return st.dims[3];
              return int64_t{0};
            }();
            const Plan& plan = c.profiled->plan();
            c.attention_step.assign(plan.steps.size(), 0);
            for (size_t i = 0; i < plan.steps.size(); ++i) {
              const PlanStep& st = plan.steps[i];
              if (st.domain != "kiln" || st.op_type != "Attention" || st.inputs.size() < 2) continue;
              const Shape k = c.profiled->value_desc(st.inputs[1]).shape;
              c.attention_step[i] = k.rank() == 4 && k[2] == cache_len;
            }
            continue;
          }
          if (it >= 0) c.ms[pi].push_back(total() - before);
        }
        c.profiled->set_profiling(false);
      }
  }
  std::printf("decoder step, %d rounds x %d steps per cell, median ms\n", rounds, iterations);
  for (size_t e = 0; e < paths.size(); ++e) std::printf("  [%zu] %s\n", e + 1, paths[e].c_str());
  std::printf("%-24s", "cell");
  for (int64_t p : positions) std::printf("  cur_pos %-4lld", static_cast<long long>(p));
  std::printf("  ratio last/first  state bytes per step\n");
  auto row = [&](const Cell& c, const std::string& extra) {
    std::printf("%-24s", c.label.c_str());
    for (size_t pi = 0; pi < positions.size(); ++pi) std::printf("  %-12.4f", median(c.ms[pi]));
    const double first = median(c.ms.front());
    std::printf("  %-17.2f  %s\n", first > 0 ? median(c.ms.back()) / first : 0.0, extra.c_str());
  };
  for (size_t e = 0; e < paths.size(); ++e) {
    row(cells[2 * e], std::to_string(cells[2 * e].bytes));
    row(cells[2 * e + 1], std::to_string(cells[2 * e + 1].bytes));
    int n = 0;
    for (char a : attention[e].attention_step) n += a;
    row(attention[e], "(" + std::to_string(n) + " kiln::Attention steps over the cache, profiled)");
  }
  return 0;
}
