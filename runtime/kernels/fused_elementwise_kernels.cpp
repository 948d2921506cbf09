// kiln::FusedElementwise (runtime/kernels/fused_elementwise.h): a register program over blocks of
// the broadcast output, each instruction one vector loop of runtime/kernels/vec_kernels.h.
//
// The output is walked like the elementwise kernels walk theirs: size-1 dims dropped and dims
// merged where every input is contiguous across them, so the innermost dim reads every input at
// step 0 or 1. A value whose operands all read at step 0 along a run (a per-channel scale over a
// row of pixels) is computed once per run, not once per element.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/kernels/elementwise_common.h"
#include "runtime/kernels/fused_elementwise.h"
#include "runtime/kernels/softmax_row.h"
#include "runtime/kernels/vec_kernels.h"
#include "runtime/thread_pool.h"
#include "runtime/thread_scratch.h"

namespace kiln {
namespace {

using fused::kBlock;
using fused::kMaxInputs;
using fused::kMaxRegisters;

struct Instr {
  int op, dst, a, b, c;
};

enum class Norm { kNone, kLayer, kRms };

// The average pool after the program (attribute pool_layout): none, or 2x2 stride 2 over the
// spatial dims of an NCHW [N, C, H, W], NHWC [N, H, W, C] or nChw8c [N, C/8, H, W, 8] result.
enum class Pool { kNone, kNchw, kNhwc, kNchw8c };

// A pooled result seen as [outer, H, W, inner]: the dims before the spatial ones, and after them.
struct PoolDims {
  int64_t outer = 1, H = 0, W = 0, inner = 1;
};

// The dims of `s` (the program's result) around the spatial dims of `pool`'s layout, or an error
// when `s` does not have that layout's rank.
StatusOr<PoolDims> pool_dims(Pool pool, const Shape& s) {
  const int rank = pool == Pool::kNchw8c ? 5 : 4;
  if (s.rank() != rank || (pool == Pool::kNchw8c && s[4] != 8))
    return InvalidArgument("the pooled result must be " + std::string(pool == Pool::kNchw8c ? "[N, C/8, H, W, 8]" : "4-D") + ", got " + s.str());
  const int h = pool == Pool::kNhwc ? 1 : 2;
  PoolDims d;
  for (int i = 0; i < h; ++i) d.outer *= s[i];
  d.H = s[h];
  d.W = s[h + 1];
  for (int i = h + 2; i < rank; ++i) d.inner *= s[i];
  if (d.H < 2 || d.W < 2) return InvalidArgument("a 2x2 pool needs H and W of at least 2, got " + s.str());
  return d;
}

// y[ow, i] = ((r0[2ow, i] + r1[2ow, i]) + (r0[2ow+1, i] + r1[2ow+1, i])) / 4 over rows of [W, inner]
// (OW = W / 2, a last odd column dropped): the unfused AveragePool's order of additions (the
// window's rows, then its columns) and its divisor, so the result is the same to the bit.
void average_pool_2x2_rows(float* r0, const float* r1, float* y, int64_t OW, int64_t inner) {
  const int64_t n = 2 * OW * inner;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) r0[i] += r1[i];
  if (inner == 8) {
    const __m256 q = _mm256_set1_ps(0.25f);
    for (int64_t ow = 0; ow < OW; ++ow)
      _mm256_storeu_ps(y + ow * 8, _mm256_mul_ps(_mm256_add_ps(_mm256_loadu_ps(r0 + ow * 16), _mm256_loadu_ps(r0 + ow * 16 + 8)), q));
    return;
  }
  for (int64_t ow = 0; ow < OW; ++ow) {
    const float* a = r0 + 2 * ow * inner;
    float* yo = y + ow * inner;
#pragma omp simd
    for (int64_t i = 0; i < inner; ++i) yo[i] = (a[i] + a[i + inner]) * 0.25f;
  }
}

// The output walk: dims with every input's strides, the last dim contiguous or broadcast in each.
struct Walk {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxInputs][kMaxRank] = {};
  int64_t inner() const { return dims[rank - 1]; }
  void row_offsets(int64_t row, int n, int64_t* off) const {
    for (int k = 0; k < n; ++k) off[k] = 0;
    for (int d = rank - 2; d >= 0 && row > 0; --d) {
      const int64_t i = row % dims[d];
      row /= dims[d];
      for (int k = 0; k < n; ++k) off[k] += i * strides[k][d];
    }
  }
};

// `keep_last`: the output's last dim stays a dim of its own (the normalised axis).
Walk make_walk(const Shape& out, std::span<const TensorView> in, bool keep_last) {
  Walk w;
  const int n = static_cast<int>(in.size());
  Shape st[kMaxInputs];
  for (int k = 0; k < n; ++k) st[k] = broadcast_strides(in[k].shape, out);
  for (int d = 0; d < out.rank(); ++d) {
    const bool last = d == out.rank() - 1;
    if (out[d] == 1 && !(keep_last && last)) continue;
    bool merge = w.rank > 0 && !(keep_last && last);
    for (int k = 0; k < n && merge; ++k) merge = w.strides[k][w.rank - 1] == st[k][d] * out[d];
    if (merge) {
      w.dims[w.rank - 1] *= out[d];
      for (int k = 0; k < n; ++k) w.strides[k][w.rank - 1] = st[k][d];
    } else {
      w.dims[w.rank] = out[d];
      for (int k = 0; k < n; ++k) w.strides[k][w.rank] = st[k][d];
      ++w.rank;
    }
  }
  if (w.rank == 0) {
    w.rank = 1;
    w.dims[0] = 1;
  }
  return w;
}

// A block of a bool input as 1.0f / 0.0f. In lanes: an attention mask is a bool input of every
// block of the scores, and the scalar loop took most of such a step's time.
void bools_to_floats(const uint8_t* b, int64_t n, float* out) {
  int64_t i = 0;
#ifdef __AVX2__
  const __m256i one = _mm256_set1_epi32(1);
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + i)));
    _mm256_storeu_ps(out + i, _mm256_cvtepi32_ps(_mm256_min_epu32(w, one)));
  }
#endif
  for (; i < n; ++i) out[i] = b[i] ? 1.0f : 0.0f;
}

// One register: where its current block is and whether it varies along it (step 1) or not (0).
struct Reg {
  const float* p;
  int64_t step;
};

class FusedElementwiseKernel final : public Kernel {
 public:
  FusedElementwiseKernel(std::vector<Instr> prog, std::vector<float> imm, Norm norm, float eps, bool softmax, Pool pool,
                         int num_inputs, int num_regs)
      : prog_(std::move(prog)), imm_(std::move(imm)), norm_(norm), eps_(eps), softmax_(softmax), pool_(pool), ni_(num_inputs),
        nregs_(num_regs) {
    // The cost model's flops per element (ThreadPool::serial_ns counts 20 a nanosecond): one per
    // add, multiply or compare (an 8-lane vector op takes ~0.02 ns an element), a dozen per
    // exponential-based function (runtime/simd/vec_math.inc: 0.3-0.7 ns an element on AVX2), two
    // dozen per Pow of a tensor exponent.
    program_flops_ = 1.0;
    // A program adding up its inputs, each once, and nothing else (Swin's scores + bias + mask).
    sum_program_ = softmax_ && norm_ == Norm::kNone && imm_.empty() && !prog_.empty() && num_inputs >= 1 &&
                   num_inputs <= kMaxInputs && static_cast<int>(prog_.size()) == num_inputs - 1;
    {
      std::vector<int> reads(static_cast<size_t>(std::max(num_regs, num_inputs)), 0);
      for (const Instr& i : prog_) {
        if (!sum_program_) break;
        sum_program_ = i.op == fused::kBinaryBase + static_cast<int>(vec::Binary::kAdd) && i.a >= 0 && i.b >= 0 &&
                       i.a < static_cast<int>(reads.size()) && i.b < static_cast<int>(reads.size());
        if (sum_program_) ++reads[static_cast<size_t>(i.a)], ++reads[static_cast<size_t>(i.b)];
      }
      for (int k = 0; k < num_inputs && sum_program_; ++k) sum_program_ = reads[static_cast<size_t>(k)] == 1;
      // Every intermediate sum read once too, so the result holds each input once.
      for (size_t j = 0; j + 1 < prog_.size() && sum_program_; ++j)
        sum_program_ = prog_[j].dst >= 0 && prog_[j].dst < static_cast<int>(reads.size()) && reads[static_cast<size_t>(prog_[j].dst)] == 1;
    }
    for (const Instr& i : prog_) {
      const int op = i.op;
      const bool transcendental =
          op < fused::kBinaryBase &&
          (op == static_cast<int>(vec::Unary::kExp) || op == static_cast<int>(vec::Unary::kLog) ||
           op == static_cast<int>(vec::Unary::kTanh) || op == static_cast<int>(vec::Unary::kErf) ||
           op == static_cast<int>(vec::Unary::kSigmoid) || op == static_cast<int>(vec::Unary::kSoftplus) ||
           op == static_cast<int>(vec::Unary::kGeluErf) || op == static_cast<int>(vec::Unary::kGeluTanh) ||
           op == static_cast<int>(vec::Unary::kSilu));
      program_flops_ += op == fused::kBinaryBase + static_cast<int>(vec::Binary::kPow) ? 24.0 : transcendental ? 12.0 : 1.0;
    }
  }

  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override {
    if (static_cast<int>(in.size()) != ni_)
      return InvalidArgument("expects " + std::to_string(ni_) + " inputs (its program's), got " + std::to_string(in.size()));
    KILN_RETURN_IF_ERROR(ew::check_output_count(out, 1));
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].present()) return InvalidArgument("input " + std::to_string(i) + " is missing");
      KILN_RETURN_IF_ERROR(ew::check_dtype(ew::bit(DType::kFloat32) | ew::kBoolType, in[i].dtype, static_cast<int>(i)));
    }
    KILN_ASSIGN_OR_RETURN(Shape shape, ew::broadcast_all(in));
    if (norm_ != Norm::kNone && (in[0].shape != shape || in[0].dtype != DType::kFloat32 || shape.rank() == 0))
      return InvalidArgument("input 0 (the normalised x) has shape " + in[0].shape.str() + " and dtype " + dtype_name(in[0].dtype) +
                             "; it must be float32 of the output's shape " + shape.str() + ", rank >= 1");
    if (softmax_ && shape.rank() == 0) return InvalidArgument("softmax over the last axis needs an output of rank >= 1, got a scalar");
    if (pool_ != Pool::kNone) {
      KILN_ASSIGN_OR_RETURN(const PoolDims d, pool_dims(pool_, shape));
      const int h = pool_ == Pool::kNhwc ? 1 : 2;
      shape[h] = d.H / 2;
      shape[h + 1] = d.W / 2;
    }
    out[0] = TensorDesc{DType::kFloat32, shape};
    return Status::Ok();
  }

  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    over_ = 0;
    if (norm_ == Norm::kNone && !softmax_ && pool_ == Pool::kNone)
      for (size_t i = 0; i < in.size() && i < 32; ++i)
        if (in[i].dtype == DType::kFloat32 && in[i].shape == out[0].shape) over_ |= 1u << i;
    return Status::Ok();
  }
  // Elementwise programs only: only the last instruction writes the output, block by block, and
  // reads an input of the output's shape at the element it writes (see execute()), so the output
  // may be that input's buffer. Rows (norms, softmax) and pooled programs are left out.
  bool writes_over_input(size_t i) const override { return i < 32 && (over_ >> i & 1u); }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    const int64_t total = out[0].numel();
    if (total == 0) return Status::Ok();
    if (pool_ != Pool::kNone) return run_pooled(in, out[0]);
    Walk w = make_walk(out[0].shape, in, norm_ != Norm::kNone || softmax_);
    const uint32_t period8 = norm_ == Norm::kNone && !softmax_ ? merge_channel_blocks(w) : 0;
    const vec::Table& t = vec::table();
    float* y = out[0].as<float>();
    const int64_t inner = w.inner(), rows = total / inner;
    // On kiln's pool, not an OpenMP team: a team's end barrier waits for a descheduled thread, a
    // time slice per step on a shared machine. Per output element: the output, each input as much
    // as it is not broadcast (a squeeze-excite gate is one value per channel), and program_flops_.
    double bytes = 4.0;
    for (const TensorView& v : in) bytes += 4.0 * static_cast<double>(v.numel()) / static_cast<double>(total);
    const double flops = program_flops_;
    if (norm_ != Norm::kNone) {
      const double d = static_cast<double>(inner);
      parallel_for_each(rows, LoopCost{bytes * d, (flops + 6.0) * d}, [&](int64_t r) { norm_row(t, w, in, y, r); });
      return Status::Ok();
    }
    if (softmax_) {
      bool sum_rows = sum_program_;  // and every input float32 along the row
      for (int k = 0; k < ni_ && sum_rows; ++k) sum_rows = in[k].dtype == DType::kFloat32 && w.strides[k][w.rank - 1] == 1;
      // A chunk of rows walks its input offsets like an odometer: per-row index arithmetic (a
      // division per dim and input) cost as much as the work on Swin's rows of 49.
      const double d = static_cast<double>(inner);
      ThreadPool::global().parallel_for(rows, LoopCost{bytes * d, (flops + 30.0) * d}, [&](int64_t r0, int64_t r1, int) {
        Scratch s;
        int64_t off[kMaxInputs], idx[kMaxRank] = {};
        w.row_offsets(r0, ni_, off);
        for (int64_t q = r0, dd = w.rank - 2; dd >= 0; --dd) {
          idx[dd] = q % w.dims[dd];
          q /= w.dims[dd];
        }
        for (int64_t r = r0; r < r1; ++r) {
          softmax_row(t, w, in, y + r * inner, off, s, sum_rows);
          for (int dd = w.rank - 2; dd >= 0; --dd) {
            for (int k = 0; k < ni_; ++k) off[k] += w.strides[k][dd];
            if (++idx[dd] < w.dims[dd]) break;
            for (int k = 0; k < ni_; ++k) off[k] -= w.strides[k][dd] * w.dims[dd];
            idx[dd] = 0;
          }
        }
      });
      return Status::Ok();
    }
    const int64_t per_row = (inner + kBlock - 1) / kBlock, items = rows * per_row;
    const double per_item = static_cast<double>(std::min(inner, kBlock));
    ThreadPool::global().parallel_for(items, LoopCost{bytes * per_item, flops * per_item}, [&](int64_t b, int64_t e, int) {
      Scratch s;
      int64_t off[kMaxInputs];
      for (int64_t it = b; it < e; ++it) {
        const int64_t r = it / per_row, start = (it % per_row) * kBlock;
        w.row_offsets(r, ni_, off);
        bind_inputs(w, in, off, start, std::min(kBlock, inner - start), s, period8);
        execute(t, s, std::min(kBlock, inner - start), y + r * inner + start);
      }
    });
    return Status::Ok();
  }

 private:
  struct Scratch {
    Reg reg[kMaxRegisters];
    alignas(64) float temp[kMaxRegisters][kBlock];
    // Bool inputs converted to floats, or a period-8 input tiled over the block.
    alignas(64) float bools[kMaxInputs][kBlock];
    // The source and length of each input's tiling in `bools`, so a row's blocks tile it once.
    const void* tiled[kMaxInputs] = {};
    int64_t tiled_n[kMaxInputs] = {};
  };

  // A channel block broadcast over pixels (nChw8c's x [N, C/8, H, W, 8] with a squeeze-excitation
  // gate [N, C/8, 1, 1, 8]) walks in runs of 8, the program interpreted per pixel. When the walk
  // ends in (pixels, 8) and every input reads those two dims contiguously (strides 8, 1), with
  // period 8 (0, 1) or not at all (0, 0), they merge into one run; the period-8 inputs (the
  // returned bit mask) are bound as their 8 values tiled over the block. Blocks start at multiples
  // of kBlock into runs of a multiple of 8, so a tiling always starts at the period's start.
  static uint32_t merge_channel_blocks(Walk& w) {
    if (w.rank < 2 || w.inner() != 8) return 0;
    const int d = w.rank - 2, last = w.rank - 1;
    uint32_t period = 0;
    bool contiguous = false;
    for (int k = 0; k < kMaxInputs; ++k) {
      const int64_t sd = w.strides[k][d], sl = w.strides[k][last];
      if (sd == 8 && sl == 1) contiguous = true;
      else if (sd == 0 && sl == 1) period |= 1u << k;
      else if (sd != 0 || sl != 0) return 0;
    }
    if (!contiguous || period == 0) return 0;
    w.dims[d] *= 8;
    for (int k = 0; k < kMaxInputs; ++k) w.strides[k][d] = w.strides[k][d] == 8 ? 1 : 0;
    w.rank -= 1;
    static_assert(kBlock % 8 == 0);
    return period;
  }

  // Points the input registers at a block of `n` elements starting `start` elements into the run
  // whose operand offsets are `off`; bool inputs are converted into scratch, and the inputs of the
  // mask `period8` are tiled into it from their 8 values.
  void bind_inputs(const Walk& w, std::span<const TensorView> in, const int64_t* off, int64_t start, int64_t n, Scratch& s,
                   uint32_t period8 = 0) const {
    const int last = w.rank - 1;
    for (int k = 0; k < ni_; ++k) {
      const int64_t step = w.strides[k][last];
      const int64_t o = off[k] + start * step;
      if (period8 & (1u << k)) {
        const bool is_float = in[k].dtype == DType::kFloat32;
        const void* src = is_float ? static_cast<const void*>(in[k].as<const float>() + off[k]) : in[k].as<const bool>() + off[k];
        if (s.tiled[k] != src || s.tiled_n[k] < n) {
          float v[8];
          for (int i = 0; i < 8; ++i) v[i] = is_float ? static_cast<const float*>(src)[i] : (static_cast<const bool*>(src)[i] ? 1.0f : 0.0f);
          for (int64_t i = 0; i < n; i += 8) std::memcpy(s.bools[k] + i, v, sizeof(v));
          s.tiled[k] = src;
          s.tiled_n[k] = n;
        }
        s.reg[k] = {s.bools[k], 1};
        continue;
      }
      if (in[k].dtype == DType::kFloat32) {
        s.reg[k] = {in[k].as<const float>() + o, step};
      } else {
        bools_to_floats(reinterpret_cast<const uint8_t*>(in[k].as<const bool>() + o), step ? n : 1, s.bools[k]);
        s.reg[k] = {s.bools[k], step};
      }
    }
    for (size_t j = 0; j < imm_.size(); ++j) s.reg[ni_ + j] = {&imm_[j], 0};
  }

  // Runs the program over one block of n elements and writes the result to y[0..n).
  void execute(const vec::Table& t, Scratch& s, int64_t n, float* y) const {
    for (const Instr& ins : prog_) {
      const Reg a = s.reg[ins.a];
      int64_t step = a.step;
      // The last instruction writes the output itself when its result varies along the block
      // (an operand may be the output's own buffer: each vector loop reads an element before it
      // writes it).
      if (ins.op >= fused::kBinaryBase) step |= s.reg[ins.b].step;
      if (ins.op >= fused::kSelect) step |= s.reg[ins.c].step;
      float* dst = &ins == &prog_.back() && step ? y : s.temp[ins.dst - first_temp()];
      if (ins.op < fused::kBinaryBase) {
        vec::Params p;
        if (ins.b >= 0) p.alpha = *s.reg[ins.b].p;
        if (ins.c >= 0) p.beta = *s.reg[ins.c].p;
        t.unary[ins.op - fused::kUnaryBase](a.p, dst, step ? n : 1, p);
      } else if (ins.op < fused::kSelect) {
        const Reg b = s.reg[ins.b];
        t.binary[ins.op - fused::kBinaryBase](a.p, a.step, b.p, b.step, dst, step ? n : 1);
      } else {
        const Reg b = s.reg[ins.b], c = s.reg[ins.c];
        t.select(a.p, a.step, b.p, b.step, c.p, c.step, dst, step ? n : 1);
      }
      s.reg[ins.dst] = {dst, step};
    }
    const Reg r = s.reg[out_reg()];
    if (r.p == y) return;
    if (r.step) std::memcpy(y, r.p, sizeof(float) * static_cast<size_t>(n));
    else std::fill(y, y + n, *r.p);
  }

  // The program's result over the flat range [f, f + len) of its (unpooled) shape into dst, block
  // by block along the walk's rows.
  void eval_range(const vec::Table& t, const Walk& w, std::span<const TensorView> in, uint32_t period8, int64_t f, int64_t len,
                  float* dst, Scratch& s) const {
    const int64_t inner = w.inner();
    int64_t off[kMaxInputs];
    for (int64_t row = -1; len > 0;) {
      const int64_t r = f / inner, start = f % inner, n = std::min({kBlock, inner - start, len});
      if (r != row) w.row_offsets(row = r, ni_, off);
      bind_inputs(w, in, off, start, n, s, period8);
      execute(t, s, n, dst);
      f += n;
      dst += n;
      len -= n;
    }
  }

  // The 2x2 stride-2 average pool of the program's result: per output row, the program over its
  // two input rows into this thread's row buffer, pooled from there while it is in cache. The
  // unpooled result is never written to memory (DenseNet's BN + ReLU before a transition's pool).
  Status run_pooled(std::span<const TensorView> in, const TensorView& out) const {
    KILN_ASSIGN_OR_RETURN(const Shape pre, ew::broadcast_all(in));
    KILN_ASSIGN_OR_RETURN(const PoolDims d, pool_dims(pool_, pre));
    Walk w = make_walk(pre, in, false);
    const uint32_t period8 = merge_channel_blocks(w);
    const vec::Table& t = vec::table();
    const int64_t OH = d.H / 2, OW = d.W / 2, row_len = d.W * d.inner;
    float* y = out.as<float>();
    // Per output row: two input rows of each input (as much as it is not broadcast), the program
    // over them and one output row.
    const double per = 2.0 * static_cast<double>(row_len), total = static_cast<double>(pre.numel());
    double bytes = 4.0 * static_cast<double>(OW * d.inner);
    for (const TensorView& v : in) bytes += 4.0 * per * static_cast<double>(v.numel()) / total;
    std::atomic<bool> failed{false};
    ThreadPool::global().parallel_for(d.outer * OH, LoopCost{bytes, program_flops_ * per}, [&](int64_t b, int64_t e, int) {
      float* buf = static_cast<float*>(thread_scratch(ScratchSlot::kKernelRow, sizeof(float) * static_cast<size_t>(2 * row_len)));
      if (!buf) {
        failed.store(true, std::memory_order_relaxed);
        return;
      }
      Scratch s;
      for (int64_t item = b; item < e; ++item) {
        const int64_t o = item / OH, oh = item % OH;
        // Input rows 2oh and 2oh + 1 are consecutive: one range.
        eval_range(t, w, in, period8, (o * d.H + 2 * oh) * row_len, 2 * row_len, buf, s);
        average_pool_2x2_rows(buf, buf + row_len, y + item * OW * d.inner, OW, d.inner);
      }
    });
    if (failed.load(std::memory_order_relaxed)) return ResourceExhausted("FusedElementwise pool: out of memory for a row buffer");
    return Status::Ok();
  }

  // One row of the normalised axis: its statistics, then the program over it block by block with
  // the normalised values in the first temporary.
  void norm_row(const vec::Table& t, const Walk& w, std::span<const TensorView> in, float* y, int64_t r) const {
    Scratch s;
    const int64_t D = w.inner();
    int64_t off[kMaxInputs];
    w.row_offsets(r, ni_, off);
    const float* x = in[0].as<const float>() + off[0];
    float sum = 0, sq = 0, scale = 0, mean = 0;
    t.sum(x, D, &sum, &sq);
    const float inv_d = 1.0f / static_cast<float>(D);
    if (norm_ == Norm::kLayer) {
      // Two passes, as the unfused graph computes it: the squares of x - mean, not E[x^2] - mean^2,
      // which cancels when the mean is large against the spread.
      mean = sum * inv_d;
      float var = 0;
      for (int64_t b = 0; b < D; b += kBlock) {
        const int64_t n = std::min(kBlock, D - b);
        t.binary[static_cast<int>(vec::Binary::kSub)](x + b, 1, &mean, 0, s.temp[0], n);
        float ds = 0, dq = 0;
        t.sum(s.temp[0], n, &ds, &dq);
        var += dq;
      }
      scale = 1.0f / std::sqrt(var * inv_d + eps_);
    } else {
      scale = 1.0f / std::sqrt(sq * inv_d + eps_);
    }
    const vec::BinaryFn mul = t.binary[static_cast<int>(vec::Binary::kMul)], sub = t.binary[static_cast<int>(vec::Binary::kSub)];
    for (int64_t b = 0; b < D; b += kBlock) {
      const int64_t n = std::min(kBlock, D - b);
      bind_inputs(w, in, off, b, n, s);
      float* nv = s.temp[0];
      // (x - mean) * scale, not x * scale - mean * scale, which cancels when the mean is large.
      if (norm_ == Norm::kLayer) {
        sub(x + b, 1, &mean, 0, nv, n);
        mul(nv, 1, &scale, 0, nv, n);
      } else {
        mul(x + b, 1, &scale, 0, nv, n);
      }
      s.reg[first_temp()] = {nv, 1};
      if (prog_.empty()) std::memcpy(y + r * D + b, nv, sizeof(float) * static_cast<size_t>(n));
      else execute(t, s, n, y + r * D + b);
    }
  }

  // One row of the last axis: the program block by block into y, then the Softmax over the row in
  // place while it is still in cache (the unfused attention's scale and mask, then its Softmax).
  // The Softmax kernel's row (softmax_row.h): a row holding NaN (or only -inf) comes out NaN.
  void softmax_row(const vec::Table& t, const Walk& w, std::span<const TensorView> in, float* row, const int64_t* off,
                   Scratch& s, bool sum_rows) const {
    const int64_t D = w.inner();
#ifdef KILN_REDUCTION_AVX2
    if (sum_rows && D >= 8) {
      // Scores plus bias and mask, all read along the row: the sum and its max in one pass.
      const float* src[kMaxInputs] = {};
      for (int k = 0; k < ni_; ++k) src[k] = in[k].as<const float>() + off[k];
      auto sum8 = [&](int64_t i) {
        __m256 v = _mm256_loadu_ps(src[0] + i);
        for (int k = 1; k < ni_; ++k) v = _mm256_add_ps(v, _mm256_loadu_ps(src[k] + i));
        return v;
      };
      const int64_t last = D - 8;
      __m256 vm = sum8(last);
      const __m256 tail = vm;
      for (int64_t i = 0; i < (D & ~int64_t{7}); i += 8) {
        const __m256 v = sum8(i);
        _mm256_storeu_ps(row + i, v);
        vm = _mm256_max_ps(vm, v);
      }
      _mm256_storeu_ps(row + last, tail);
      softmax_row_with_max_f32(row, row, D, hmax8(vm));
      return;
    }
#endif
    for (int64_t b = 0; b < D; b += kBlock) {
      const int64_t n = std::min(kBlock, D - b);
      bind_inputs(w, in, off, b, n, s);
      execute(t, s, n, row + b);
    }
    softmax_row_f32(row, row, D, false);
  }

  int first_temp() const { return ni_ + static_cast<int>(imm_.size()); }
  int out_reg() const { return prog_.empty() ? first_temp() : prog_.back().dst; }

  std::vector<Instr> prog_;
  std::vector<float> imm_;
  Norm norm_;
  float eps_;
  bool softmax_;
  bool sum_program_ = false;  // see the constructor
  Pool pool_;
  int ni_, nregs_;
  uint32_t over_ = 0;  // the inputs output 0 may share a buffer with, as prepared
  double program_flops_ = 1.0;
};

StatusOr<std::unique_ptr<Kernel>> make_fused_elementwise(const KernelArgs& args, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> code, attrs.get_ints("program"));
  KILN_ASSIGN_OR_RETURN(std::vector<float> imm, attrs.get_floats("immediates"));
  KILN_ASSIGN_OR_RETURN(std::string norm_name, attrs.get_string("norm", "none"));
  KILN_ASSIGN_OR_RETURN(float eps, attrs.get_float("epsilon", 1e-5f));
  KILN_ASSIGN_OR_RETURN(int64_t softmax, attrs.get_int("softmax", 0));
  KILN_ASSIGN_OR_RETURN(std::string pool_name, attrs.get_string("pool_layout", "none"));
  Pool pool = Pool::kNone;
  if (pool_name == "nchw") pool = Pool::kNchw;
  else if (pool_name == "nhwc") pool = Pool::kNhwc;
  else if (pool_name == "nchw8c") pool = Pool::kNchw8c;
  else if (pool_name != "none") return InvalidArgument("attribute 'pool_layout' must be none, nchw, nhwc or nchw8c, got '" + pool_name + "'");
  Norm norm = Norm::kNone;
  if (norm_name == "layer") norm = Norm::kLayer;
  else if (norm_name == "rms") norm = Norm::kRms;
  else if (norm_name != "none") return InvalidArgument("attribute 'norm' must be none, layer or rms, got '" + norm_name + "'");
  const int ni = args.num_inputs;
  if (ni < 1 || ni > kMaxInputs) return InvalidArgument("has " + std::to_string(ni) + " inputs; 1 to " + std::to_string(kMaxInputs) + " allowed");
  if (code.size() % fused::kFieldsPerInstr != 0) return InvalidArgument("attribute 'program' has " + std::to_string(code.size()) + " ints, not a multiple of 5");
  if (code.empty() && norm == Norm::kNone) return InvalidArgument("attribute 'program' is empty");
  if (softmax != 0 && softmax != 1) return InvalidArgument("attribute 'softmax' must be 0 or 1, got " + std::to_string(softmax));
  if (softmax && norm != Norm::kNone) return InvalidArgument("attribute 'softmax' cannot follow a normalisation stage");
  if (pool != Pool::kNone && (softmax || norm != Norm::kNone))
    return InvalidArgument("attribute 'pool_layout' cannot follow a normalisation stage or a softmax");
  const int first_temp = ni + static_cast<int>(imm.size());
  std::vector<Instr> prog;
  int next = first_temp + (norm != Norm::kNone ? 1 : 0);  // registers defined so far
  for (size_t i = 0; i < code.size(); i += fused::kFieldsPerInstr) {
    const Instr ins{static_cast<int>(code[i]), static_cast<int>(code[i + 1]), static_cast<int>(code[i + 2]), static_cast<int>(code[i + 3]),
                    static_cast<int>(code[i + 4])};
    const std::string where = "program instruction " + std::to_string(i / fused::kFieldsPerInstr) + ": ";
    const bool unary = ins.op >= fused::kUnaryBase && ins.op < static_cast<int>(vec::Unary::kCount);
    const bool binary = ins.op >= fused::kBinaryBase && ins.op < fused::kBinaryBase + static_cast<int>(vec::Binary::kCount);
    if (!unary && !binary && ins.op != fused::kSelect) return InvalidArgument(where + "unknown opcode " + std::to_string(ins.op));
    if (ins.dst < first_temp || ins.dst > next || ins.dst >= kMaxRegisters)
      return InvalidArgument(where + "writes register " + std::to_string(ins.dst) + " outside the temporaries [" + std::to_string(first_temp) +
                             ", " + std::to_string(std::min(next, kMaxRegisters - 1)) + "]");
    auto readable = [&](int r) { return r >= 0 && r < next; };
    const bool ok = unary ? readable(ins.a) && (ins.b < 0 || (ins.b >= ni && ins.b < first_temp)) && (ins.c < 0 || (ins.c >= ni && ins.c < first_temp))
                          : readable(ins.a) && readable(ins.b) && (binary || readable(ins.c));
    if (!ok) return InvalidArgument(where + "reads a register not yet defined (or a non-immediate parameter)");
    next = std::max(next, ins.dst + 1);
    prog.push_back(ins);
  }
  return std::unique_ptr<Kernel>(std::make_unique<FusedElementwiseKernel>(std::move(prog), std::move(imm), norm, eps, softmax != 0, pool, ni, next));
}

}  // namespace

void register_fused_elementwise_kernels(KernelRegistry& r) {
  r.add_kiln_op({"FusedElementwise", "vector", 0, make_fused_elementwise});
}

}  // namespace kiln
