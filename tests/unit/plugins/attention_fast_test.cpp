// The tiled kiln::Attention kernel (every instruction-set path, f32 and bf16) against the double
// precision reference at sizes that straddle its tiles: 64 queries and 48 keys per tile, register
// blocks of 6 rows by 16 lanes, head sizes not a multiple of 16 (or even of 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "plugins/attention/attention_common.h"
#include "plugins/attention/attention_kernel.h"
#include "plugins/attention/attention_plugin.h"
#include "plugins/attention/attention_reference.h"

namespace kiln {
namespace {

using attention::Layout;
using attention::MaskKind;
using attention::Precision;

constexpr float kInf = std::numeric_limits<float>::infinity();

// bf16 keeps 8 significant bits (relative rounding error 2^-9 per operand): with inputs in
// [-1.5, 1.5] and Dh <= 64 the scores move by ~1e-2 at most, the softmax weights by ~1%, and the
// outputs (weighted means of V) by < 2e-2 absolute (the largest error seen over this sweep is
// between 5e-3 and 1e-2). f32 differs from the double reference only by summation order and the
// exp polynomial.
constexpr float kF32Tol = 1e-5f;
constexpr float kBf16Tol = 2e-2f;

struct Case {
  int64_t B = 1, H = 1, Dh = 64, Sq = 1, Sk_new = 1, Sc = 0;
  bool cache = false, in_place = false;
  Layout layout = Layout::kBSD;
  MaskKind mask = MaskKind::kNone;
  int64_t block = 0;
  Precision precision = Precision::kFp32;

  std::string str() const {
    static const char* const masks[] = {"none", "bool", "additive", "causal", "block_causal"};
    return "B=" + std::to_string(B) + " H=" + std::to_string(H) + " Dh=" + std::to_string(Dh) +
           " Sq=" + std::to_string(Sq) + " Sk_new=" + std::to_string(Sk_new) + " Sc=" + std::to_string(Sc) +
           (cache ? (in_place ? " cache(in place)" : " cache(copy)") : "") +
           " " + attention::layout_name(layout) +
           " mask=" + masks[static_cast<int>(mask)] + " block=" + std::to_string(block) +
           (precision == Precision::kBf16 ? " bf16" : " fp32");
  }
  Shape seq_shape(int64_t S) const { return attention::seq_shape(layout, B, S, H, Dh); }
  attention::Params params() const {
    attention::Params p;
    p.num_heads = H;
    p.scale = 1.0f / std::sqrt(static_cast<float>(Dh));
    p.layout = layout;
    p.mask = mask;
    p.block = block;
    p.kv_cache = cache;
    p.precision = precision;
    return p;
  }
};

Tensor random_tensor(const Shape& s, std::mt19937& rng) {
  Tensor t = Tensor::zeros(DType::kFloat32, s);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = u(rng);
  return t;
}

// [B, 1, Sq, Sk] with random entries, the second key tile (keys 48..95) hidden from every query
// (the kernel skips it) and query 0 hidden from every key (its output must be zeros).
Tensor make_mask(const Case& c, std::mt19937& rng) {
  const int64_t Sk = c.Sc + c.Sk_new;
  const bool is_bool = c.mask == MaskKind::kBool;
  Tensor t = Tensor::zeros(is_bool ? DType::kBool : DType::kFloat32, Shape{c.B, 1, c.Sq, Sk});
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int64_t r = 0; r < c.B * c.Sq; ++r)
    for (int64_t j = 0; j < Sk; ++j) {
      const bool visible = u(rng) < 0.7f && !(j >= 48 && j < 96) && r % c.Sq != 0;
      if (is_bool)
        t.as<bool>()[r * Sk + j] = visible;
      else
        t.as<float>()[r * Sk + j] = visible ? 2.0f * (u(rng) - 0.5f) : -kInf;
    }
  return t;
}

void check(const Case& c, uint32_t seed) {
  SCOPED_TRACE(c.str());
  std::mt19937 rng(seed);
  const int64_t Sk = c.Sc + c.Sk_new;
  std::vector<Tensor> in{random_tensor(c.seq_shape(c.Sq), rng), random_tensor(c.seq_shape(c.Sk_new), rng),
                         random_tensor(c.seq_shape(c.Sk_new), rng)};
  const bool explicit_mask = c.mask == MaskKind::kBool || c.mask == MaskKind::kAdditive;
  in.push_back(explicit_mask ? make_mask(c, rng) : Tensor());
  // The in-place case: each cache is the front of a state buffer with room for the new rows
  // (bsd with B = 1 keeps the cached rows where the concat puts them).
  Tensor k_state, v_state;
  if (c.cache) {
    in.push_back(random_tensor(c.seq_shape(c.Sc), rng));
    in.push_back(random_tensor(c.seq_shape(c.Sc), rng));
  }
  std::vector<TensorView> iv;
  for (const Tensor& t : in) iv.push_back(t.view());
  if (!c.cache && !explicit_mask) iv.pop_back();

  std::vector<Tensor> want{Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sq))};
  std::vector<Tensor> got{random_tensor(c.seq_shape(c.Sq), rng)};  // garbage the kernel must overwrite
  if (c.cache)
    for (int t = 0; t < 2; ++t) {
      want.push_back(Tensor::zeros(DType::kFloat32, c.seq_shape(Sk)));
      got.push_back(random_tensor(c.seq_shape(Sk), rng));
    }
  std::vector<TensorView> wv, gv;
  for (const Tensor& t : want) wv.push_back(t.view());
  for (const Tensor& t : got) gv.push_back(t.view());
  ASSERT_TRUE(attention::reference_attention(c.params(), iv, wv).ok());

  std::vector<TensorView> run_in = iv;
  if (c.in_place) {
    ASSERT_TRUE(c.cache && c.layout == Layout::kBSD && c.B == 1);
    for (int t = 0; t < 2; ++t) {
      std::memcpy(got[1 + t].data(), iv[attention::kKCache + t].data, iv[attention::kKCache + t].nbytes());
      run_in[attention::kKCache + t].data = got[1 + t].data();
    }
  }
  std::vector<TensorDesc> descs;
  for (const TensorView& v : run_in) descs.push_back(v.desc());
  auto g = attention::validate_inputs(c.params(), descs);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const int slots = 2;
  std::vector<char> ws(attention::workspace_bytes(c.params(), *g, slots));
  ASSERT_TRUE(attention::run_attention(c.params(), *g, run_in, gv, ws.data(), slots).ok());

  const float tol = c.precision == Precision::kBf16 ? kBf16Tol : kF32Tol;
  for (size_t o = 0; o < got.size(); ++o) {
    int bad = 0;
    for (int64_t i = 0; i < got[o].numel() && bad < 5; ++i) {
      const float x = got[o].as<float>()[i], w = want[o].as<float>()[i];
      // The caches are copied exactly whatever the precision.
      const float t = o == 0 ? tol * std::max(1.0f, std::fabs(w)) : 0.0f;
      if (!(std::fabs(x - w) <= t)) {
        ADD_FAILURE() << "output " << o << " element " << i << ": got " << x << ", want " << w;
        ++bad;
      }
    }
  }
  if (explicit_mask && c.Sq > 0) {  // query 0 sees no key: exact zeros
    const attention::RowStrides rs = attention::row_strides(c.layout, c.B, c.Sq, c.H, c.Dh);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t d = 0; d < c.Dh; ++d) ASSERT_EQ(got[0].as<float>()[b * rs.batch + h * rs.head + d], 0.0f);
  }
}

struct MaskChoice {
  MaskKind kind;
  int64_t block;
};
const MaskChoice kMasks[] = {{MaskKind::kNone, 0},       {MaskKind::kBool, 0},        {MaskKind::kAdditive, 0},
                             {MaskKind::kCausal, 0},     {MaskKind::kBlockCausal, 7}, {MaskKind::kBlockCausal, 50},
                             {MaskKind::kBlockCausal, 274}};

struct Dims {
  int64_t B, H, Dh, Sq, Sk_new, Sc;
};

// Every mask and layout, with and without a cache (copied, and in place where the layout allows).
void sweep(const std::vector<Dims>& dims, Precision precision) {
  uint32_t seed = 100;
  for (const Dims& d : dims)
    for (Layout layout : {Layout::kBSD, Layout::kBHSD, Layout::kSBD})
      for (int cache_mode = 0; cache_mode < 3; ++cache_mode)
        for (const MaskChoice& m : kMasks) {
          if (layout == Layout::kSBD && cache_mode > 0) continue;  // sbd has no KV cache
          Case c;
          c.B = d.B, c.H = d.H, c.Dh = d.Dh, c.Sq = d.Sq, c.Sk_new = d.Sk_new;
          c.cache = cache_mode > 0;
          c.in_place = cache_mode == 2;
          if (c.in_place && (layout != Layout::kBSD || d.B != 1)) continue;
          c.Sc = c.cache ? d.Sc : 0;
          c.layout = layout;
          c.mask = m.kind;
          c.block = m.block;
          c.precision = precision;
          check(c, seed++);
          if (::testing::Test::HasFailure()) return;
        }
}

// Tile-straddling sizes: Sq 1, 65 (a full query tile and one row), 130; keys 1, 49, 97, 150 (one
// past whole tiles, and remainders of the 6-row blocks); caches 0, 17, 30, 100; Dh 64, 128 and 80
// (more than one 64-lane block), 40 and 24 (not a multiple of 16), 13 (odd); H 1, 2 and 6.
const std::vector<Dims> kDims = {{1, 1, 64, 1, 1, 0},    {1, 6, 64, 65, 65, 17},  {2, 1, 40, 130, 49, 100},
                                 {1, 6, 24, 17, 97, 0},  {1, 1, 13, 65, 150, 17}, {2, 6, 64, 1, 5, 100},
                                 {1, 1, 64, 130, 130, 0}, {1, 2, 128, 65, 70, 30}, {1, 1, 80, 20, 33, 0}};

TEST(AttentionFast, F32MatchesReference) { sweep(kDims, Precision::kFp32); }

TEST(AttentionFast, Bf16MatchesReferenceWithinBf16Tolerance) { sweep(kDims, Precision::kBf16); }

// Caps the kernel's instruction sets for one test, as a smaller CPU (or KILN_MAX_CPU_ISA) would.
class IsaCap {
 public:
  explicit IsaCap(CpuIsa isa) : old_(attention::cap_isa_for_testing(isa)) {}
  ~IsaCap() { attention::cap_isa_for_testing(old_); }

 private:
  CpuIsa old_;
};

// The AVX512_BF16 path without AMX (vdpbf16ps), as an AMD EPYC runs it; on an AMX Xeon the cap
// below AMX selects it. Every mask, layout and awkward shape of the f32 sweep.
TEST(AttentionFast, Bf16WithoutAmxMatchesReference) {
  IsaCap cap(CpuIsa::kAvx512CoreBf16);
  if (!attention::bf16_supported()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  EXPECT_STREQ(attention::bf16_path(), "avx512_bf16");
  sweep(kDims, Precision::kBf16);
  // Many 64-key tiles and odd key counts; 2-row tails (on the lanes) and decoding's rows (few-row path).
  sweep({{1, 2, 64, 146, 74, 300}, {1, 1, 64, 67, 131, 0}, {1, 3, 32, 18, 1, 45}, {1, 2, 64, 3, 3, 200}}, Precision::kBf16);
}

// One run of a causal self-attention case with inputs from `seed`, at `precision`.
Tensor run_once(Case c, Precision precision, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor q = random_tensor(c.seq_shape(c.Sq), rng), k = random_tensor(c.seq_shape(c.Sk_new), rng),
         v = random_tensor(c.seq_shape(c.Sk_new), rng);
  std::vector<TensorView> iv{q.view(), k.view(), v.view()};
  std::vector<TensorDesc> descs;
  for (const TensorView& t : iv) descs.push_back(t.desc());
  c.precision = precision;
  Tensor out = Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sq));
  auto g = attention::validate_inputs(c.params(), descs);
  EXPECT_TRUE(g.ok());
  if (!g.ok()) return out;
  std::vector<char> ws(attention::workspace_bytes(c.params(), *g, 2));
  std::vector<TensorView> ov{out.view()};
  EXPECT_TRUE(attention::run_attention(c.params(), *g, iv, ov, ws.data(), 2).ok());
  return out;
}

Case causal_case() {
  Case c;
  c.H = 2, c.Dh = 40, c.Sq = 70, c.Sk_new = 70, c.mask = MaskKind::kCausal;
  return c;
}

bool same_bits(const Tensor& a, const Tensor& b) { return std::memcmp(a.data(), b.data(), a.nbytes()) == 0; }

// A query's bf16 result does not depend on how many queries share its call: the last 274 queries
// of 1644 (a full forward) and the same 274 as a step on 1370 cached keys give the same bits, so
// full(T) = full(T-1) + one step holds in a bf16 engine as in fp32.
TEST(AttentionFast, Bf16RowsDoNotDependOnTheQueryTiling) {
  if (!attention::bf16_supported()) GTEST_SKIP() << "no bf16 path on this CPU";
  Case full;
  full.H = 2, full.Dh = 64, full.Sq = 1644 / 4, full.Sk_new = 1644 / 4, full.mask = MaskKind::kBlockCausal, full.block = 274 / 4;
  full.precision = Precision::kBf16;
  std::mt19937 rng(9);
  Tensor q = random_tensor(full.seq_shape(full.Sq), rng), k = random_tensor(full.seq_shape(full.Sk_new), rng),
         v = random_tensor(full.seq_shape(full.Sk_new), rng);
  auto run = [&](const Case& c, std::vector<TensorView> iv) {
    std::vector<TensorDesc> descs;
    for (const TensorView& t : iv) descs.push_back(t.desc());
    auto g = attention::validate_inputs(c.params(), descs);
    EXPECT_TRUE(g.ok());
    Tensor out = Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sq));
    std::vector<Tensor> kv;
    std::vector<TensorView> ov{out.view()};
    if (c.cache)
      for (int t = 0; t < 2; ++t) {
        kv.push_back(Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sc + c.Sk_new)));
        ov.push_back(kv.back().view());
      }
    std::vector<char> ws(attention::workspace_bytes(c.params(), *g, 2));
    EXPECT_TRUE(attention::run_attention(c.params(), *g, iv, ov, ws.data(), 2).ok());
    return out;
  };
  const Tensor all = run(full, {q.view(), k.view(), v.view()});
  Case step = full;
  step.Sq = step.Sk_new = 66;  // four whole vectors and a 2-row tail, as a step's 274 rows
  step.Sc = full.Sq - step.Sq;
  step.cache = true;
  const int64_t row = full.H * full.Dh, skip = step.Sc * row * static_cast<int64_t>(sizeof(float));
  auto tail_view = [&](const Tensor& t, int64_t first, int64_t rows) {
    TensorView tv = t.view();
    tv.data = static_cast<char*>(tv.data) + first * row * static_cast<int64_t>(sizeof(float));
    tv.shape = step.seq_shape(rows);
    return tv;
  };
  const Tensor part = run(step, {tail_view(q, step.Sc, step.Sq), tail_view(k, step.Sc, step.Sq), tail_view(v, step.Sc, step.Sq),
                                 TensorView(), tail_view(k, 0, step.Sc), tail_view(v, 0, step.Sc)});
  EXPECT_EQ(std::memcmp(static_cast<const char*>(all.data()) + skip, part.data(), part.nbytes()), 0);
}

// Capped below AVX512_BF16, bf16 runs the f32 path: bitwise the f32 results.
TEST(AttentionFast, Bf16CappedBelowAvx512Bf16RunsF32) {
  IsaCap cap(CpuIsa::kAvx512Core);
  EXPECT_FALSE(attention::bf16_supported());
  EXPECT_STREQ(attention::bf16_path(), "none");
  EXPECT_TRUE(same_bits(run_once(causal_case(), Precision::kFp32, 5), run_once(causal_case(), Precision::kBf16, 5)));
}

// Capped at AVX2, the AVX2 f32 path runs whatever the CPU has: bitwise what it gives when the
// tests switch AVX-512 off, and within f32 tolerance of the reference.
TEST(AttentionFast, CapAtAvx2RunsTheAvx2Path) {
  attention::allow_avx512(false);
  const Tensor avx2 = run_once(causal_case(), Precision::kFp32, 6);
  attention::allow_avx512(true);
  IsaCap cap(CpuIsa::kAvx2);
  EXPECT_TRUE(same_bits(avx2, run_once(causal_case(), Precision::kFp32, 6)));
  EXPECT_TRUE(same_bits(avx2, run_once(causal_case(), Precision::kBf16, 6)));
  sweep({{1, 6, 24, 17, 97, 0}, {1, 1, 13, 65, 150, 17}}, Precision::kFp32);
}

// The AVX2 path (CPUs without AVX-512), and bf16 falling back to f32 there.
TEST(AttentionFast, Avx2PathMatchesReference) {
  attention::allow_avx512(false);
  sweep({{1, 6, 64, 65, 65, 17}, {2, 1, 40, 130, 49, 100}, {1, 1, 13, 65, 150, 17}}, Precision::kFp32);
  sweep({{1, 6, 24, 17, 97, 0}}, Precision::kBf16);
  attention::allow_avx512(true);
}

// The AVX2 path's remainders: register blocks of 6 keys (48-key tiles) or 6 queries by 16 lanes,
// query vectors of 16 with 1-4 row tails on the few-row path, head sizes ending in a partial
// vector (1, 7, 28, 36, 50, 72, 105) or on a whole one (8, 16), key counts that are not whole
// tiles or blocks, caches splitting tiles, and the head-stationary order (274 = 4 tiles of 64,
// one of 16 and 2 rows).
TEST(AttentionFast, Avx2BlockRemainders) {
  attention::allow_avx512(false);
  sweep({{1, 1, 1, 7, 7, 50}, {1, 2, 7, 21, 53, 0}, {1, 1, 8, 18, 47, 3}, {1, 1, 16, 33, 49, 96},
         {1, 3, 72, 70, 70, 25}, {1, 1, 105, 47, 145, 0}, {1, 1, 36, 130, 13, 50}, {1, 1, 28, 3, 3, 40},
         {1, 1, 50, 2, 2, 60}, {1, 2, 64, 274, 274, 100}},
        Precision::kFp32);
  attention::allow_avx512(true);
}

// Without AVX512_BF16 a bf16 plugin runs in f32; with it, bf16 results must differ from f32 (the
// path really runs) while staying within the bf16 tolerance (checked above).
TEST(AttentionFast, Bf16PathIsTaken) {
  if (!attention::bf16_supported()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or capped by KILN_MAX_CPU_ISA): the bf16 attention path needs AMX";
  Case c;
  c.H = 2, c.Sq = 33, c.Sk_new = 70;
  std::mt19937 rng(3);
  Tensor q = random_tensor(c.seq_shape(c.Sq), rng), k = random_tensor(c.seq_shape(c.Sk_new), rng),
         v = random_tensor(c.seq_shape(c.Sk_new), rng);
  std::vector<TensorView> iv{q.view(), k.view(), v.view()};
  std::vector<TensorDesc> descs;
  for (const TensorView& t : iv) descs.push_back(t.desc());
  auto g = attention::validate_inputs(c.params(), descs);
  ASSERT_TRUE(g.ok());
  c.precision = Precision::kBf16;
  std::vector<char> ws(attention::workspace_bytes(c.params(), *g, 2));
  c.precision = Precision::kFp32;
  Tensor f32 = Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sq));
  Tensor bf16 = Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sq));
  std::vector<TensorView> o1{f32.view()}, o2{bf16.view()};
  ASSERT_TRUE(attention::run_attention(c.params(), *g, iv, o1, ws.data(), 2).ok());
  c.precision = Precision::kBf16;
  ASSERT_TRUE(attention::run_attention(c.params(), *g, iv, o2, ws.data(), 2).ok());
  EXPECT_NE(std::memcmp(f32.data(), bf16.data(), f32.nbytes()), 0);
}

AttrMap base_fields() {
  AttrMap f;
  f["num_heads"] = Attribute::Int(2);
  f["scale"] = Attribute::Float(0.5f);
  return f;
}

TEST(AttentionFast, PrecisionField) {
  AttrMap f = base_fields();
  auto plain = attention_plugin_creator()->create(f);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->fields().count("precision"), 0u);  // fp32 engines keep their fields
  f["precision"] = Attribute::String("bf16");
  auto bf16 = attention_plugin_creator()->create(f);
  ASSERT_TRUE(bf16.ok());
  const AttrMap saved = (*bf16)->fields();
  ASSERT_EQ(saved.count("precision"), 1u);
  EXPECT_EQ(saved.at("precision").s, "bf16");
  EXPECT_TRUE(attention_plugin_creator()->create(saved).ok());
  f["precision"] = Attribute::String("fp32");
  EXPECT_TRUE(attention_plugin_creator()->create(f).ok());
  f["precision"] = Attribute::String("fp16");
  auto bad = attention_plugin_creator()->create(f);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'precision'"), std::string::npos) << bad.status().message();
  f["precision"] = Attribute::Int(1);
  bad = attention_plugin_creator()->create(f);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'precision'"), std::string::npos) << bad.status().message();
}

// Through the plugin's build and run halves: the workspace the build half sizes from the input
// shapes must hold the bf16 path's packed K/V (a cache, block_causal, bhsd, B = 2).
TEST(AttentionFast, Bf16ThroughThePlugin) {
  Case c;
  c.B = 2, c.H = 3, c.Dh = 40, c.Sq = 70, c.Sk_new = 70, c.Sc = 90, c.cache = true;
  c.layout = Layout::kBHSD;
  c.mask = MaskKind::kBlockCausal;
  c.block = 70;
  c.precision = Precision::kBf16;
  AttrMap f;
  f["num_heads"] = Attribute::Int(c.H);
  f["scale"] = Attribute::Float(c.params().scale);
  f["layout"] = Attribute::String("bhsd");
  f["mask"] = Attribute::String("block_causal");
  f["block"] = Attribute::Int(c.block);
  f["kv_cache"] = Attribute::Int(1);
  f["precision"] = Attribute::String("bf16");
  auto build = attention_plugin_creator()->create(f);
  ASSERT_TRUE(build.ok()) << build.status().message();
  std::mt19937 rng(21);
  std::vector<Tensor> in{random_tensor(c.seq_shape(c.Sq), rng), random_tensor(c.seq_shape(c.Sk_new), rng),
                         random_tensor(c.seq_shape(c.Sk_new), rng), Tensor(),
                         random_tensor(c.seq_shape(c.Sc), rng), random_tensor(c.seq_shape(c.Sc), rng)};
  std::vector<TensorView> iv;
  std::vector<TensorDesc> descs;
  for (const Tensor& t : in) {
    iv.push_back(t.view());
    descs.push_back(t.view().desc());
  }
  const int64_t Sk = c.Sc + c.Sk_new;
  std::vector<Tensor> got, want;
  for (int64_t S : {c.Sq, Sk, Sk}) {
    got.push_back(Tensor::zeros(DType::kFloat32, c.seq_shape(S)));
    want.push_back(Tensor::zeros(DType::kFloat32, c.seq_shape(S)));
  }
  std::vector<TensorView> gv, wv;
  for (const Tensor& t : got) gv.push_back(t.view());
  for (const Tensor& t : want) wv.push_back(t.view());
  std::vector<char> ws((*build)->workspace_bytes(descs));
  AttrMap f32_fields = f;
  f32_fields.erase("precision");
  auto f32_build = attention_plugin_creator()->create(f32_fields);
  ASSERT_TRUE(f32_build.ok());
  // K and V of every (batch, head) in bf16: Sk = 160 keys (a multiple of 32) by Dh = 40 padded to 64.
  EXPECT_GE(ws.size(), (*f32_build)->workspace_bytes(descs) + 2 * c.B * c.H * 160 * 64 * 2);
  auto run = (*build)->create_run();
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE((*run)->on_shape_change(iv, gv).ok());
  Status st = (*run)->run(iv, gv, ws.data());
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(attention::reference_attention(c.params(), iv, wv).ok());
  for (int64_t i = 0; i < got[0].numel(); ++i)
    ASSERT_NEAR(got[0].as<float>()[i], want[0].as<float>()[i],
                kBf16Tol * std::max(1.0f, std::fabs(want[0].as<float>()[i])))
        << "element " << i;
  EXPECT_EQ(std::memcmp(got[1].data(), want[1].data(), got[1].nbytes()), 0);
}

}  // namespace
}  // namespace kiln
