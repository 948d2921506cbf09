// kiln::Attention with live_length = 1: the kernel attends keys [0, live) only. Checked against the
// unfused reference given the equivalent mask (keys at or past live hidden) at awkward shapes: live
// 1, 17 and the whole key length, head dims that are not multiples of 16, a key length that is not
// a whole number of key tiles, the few-row (decoding) and vector-lane query paths, both the
// AVX-512 and the AVX2 tile code. The kernel's K/V rows and mask/bias columns at or past live are
// NaN, so reading any of them would show in its output.
#include <gtest/gtest.h>

#include <cmath>
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

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct LiveCase {
  int64_t B = 1, H = 3, Dh = 16, Sq = 1, Sk_new = 128, Sc = 0;
  bool cache = false;
  Layout layout = Layout::kBHSD;
  MaskKind mask = MaskKind::kAdditive;
  bool per_head_bias = true;  // explicit masks: [1, H, 1, Sk] (T5's position bias) or [Sq, Sk]
  int64_t live = 1;
  int64_t Sk() const { return Sc + Sk_new; }
  std::string str() const {
    static const char* const masks[] = {"none", "bool", "additive", "causal", "block_causal"};
    return "B=" + std::to_string(B) + " H=" + std::to_string(H) + " Dh=" + std::to_string(Dh) + " Sq=" + std::to_string(Sq) +
           " Sk_new=" + std::to_string(Sk_new) + " Sc=" + std::to_string(Sc) + " " + attention::layout_name(layout) +
           " mask=" + masks[static_cast<int>(mask)] + (per_head_bias ? " [1,H,1,Sk]" : " [Sq,Sk]") +
           " live=" + std::to_string(live);
  }
  Shape seq(int64_t S) const { return attention::seq_shape(layout, B, S, H, Dh); }
  Shape mask_shape() const { return per_head_bias ? Shape{1, H, 1, Sk()} : Shape{Sq, Sk()}; }
  attention::Params params(bool live_length, MaskKind m) const {
    attention::Params p;
    p.num_heads = H;
    p.scale = 1.0f;  // T5 does not scale
    p.layout = layout;
    p.mask = m;
    p.kv_cache = cache;
    p.live_length = live_length;
    return p;
  }
  AttrMap fields() const {
    static const char* const masks[] = {"none", "bool", "additive", "causal", "block_causal"};
    AttrMap f;
    f["num_heads"] = Attribute::Int(H);
    f["scale"] = Attribute::Float(1.0f);
    f["layout"] = Attribute::String(attention::layout_name(layout));
    f["mask"] = Attribute::String(masks[static_cast<int>(mask)]);
    f["kv_cache"] = Attribute::Int(cache ? 1 : 0);
    f["live_length"] = Attribute::Int(1);
    return f;
  }
};

Tensor random_tensor(const Shape& s, std::mt19937& rng) {
  Tensor t = Tensor::zeros(DType::kFloat32, s);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = u(rng);
  return t;
}

// Sets the rows of keys [from, S) of a q/k/v-shaped tensor (S rows) to NaN.
void poison_rows(const LiveCase& c, Tensor& t, int64_t S, int64_t from) {
  const attention::RowStrides rs = attention::row_strides(c.layout, c.B, S, c.H, c.Dh);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t j = std::max<int64_t>(from, 0); j < S; ++j)
        for (int64_t d = 0; d < c.Dh; ++d) t.as<float>()[b * rs.batch + h * rs.head + j * rs.row + d] = kNaN;
}

// Runs the plugin (build and run halves) with live_length = 1.
Status run_live(const LiveCase& c, std::span<const TensorView> inputs, std::span<const TensorView> outputs) {
  auto built = attention_plugin_creator()->create(c.fields());
  if (!built.ok()) return built.status();
  std::vector<TensorDesc> descs;
  for (const TensorView& v : inputs) descs.push_back(v.desc());
  std::vector<TensorDesc> out_descs((*built)->num_outputs());
  KILN_RETURN_IF_ERROR((*built)->infer(descs, out_descs));
  std::vector<char> workspace((*built)->workspace_bytes(descs));
  auto run = (*built)->create_run();
  if (!run.ok()) return run.status();
  KILN_RETURN_IF_ERROR((*run)->on_shape_change(inputs, outputs));
  return (*run)->run(inputs, outputs, workspace.data());
}

void check(const LiveCase& c, uint32_t seed) {
  SCOPED_TRACE(c.str());
  std::mt19937 rng(seed);
  const int64_t Sk = c.Sk();
  Tensor q = random_tensor(c.seq(c.Sq), rng), k = random_tensor(c.seq(c.Sk_new), rng), v = random_tensor(c.seq(c.Sk_new), rng);
  Tensor kc = c.cache ? random_tensor(c.seq(c.Sc), rng) : Tensor(), vc = c.cache ? random_tensor(c.seq(c.Sc), rng) : Tensor();
  const bool explicit_mask = c.mask == MaskKind::kAdditive || c.mask == MaskKind::kBool;
  const Shape ms = c.mask_shape();
  const int64_t mrows = ms.numel() / Sk;
  Tensor mask = c.mask == MaskKind::kBool ? Tensor::zeros(DType::kBool, ms) : Tensor::zeros(DType::kFloat32, ms);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int64_t r = 0; r < mrows && explicit_mask; ++r)
    for (int64_t j = 0; j < Sk; ++j) {
      const bool shown = j == 0 || u(rng) < 0.8f;  // key 0 shown: live = 1 attends something
      if (c.mask == MaskKind::kBool) mask.as<bool>()[r * Sk + j] = shown;
      else mask.as<float>()[r * Sk + j] = shown ? 4.0f * (u(rng) - 0.5f) : -kInf;
    }

  // The reference: the same q/k/v, the live length as a bool mask [B, H, Sq, Sk] combined with the
  // case's own mask (and causal rule), no live_length.
  const Shape full{c.B, c.H, c.Sq, Sk};
  Tensor equiv = Tensor::zeros(DType::kBool, full);
  Tensor equiv_add = Tensor::zeros(DType::kFloat32, full);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.Sq; ++i)
        for (int64_t j = 0; j < Sk; ++j) {
          const int64_t o = ((b * c.H + h) * c.Sq + i) * Sk + j;
          const int64_t m = c.per_head_bias ? h * Sk + j : i * Sk + j;
          bool shown = j < c.live;
          if (c.mask == MaskKind::kCausal) shown = shown && j <= Sk - c.Sq + i;
          if (c.mask == MaskKind::kBool) shown = shown && mask.as<bool>()[m];
          equiv.as<bool>()[o] = shown;
          equiv_add.as<float>()[o] = !shown ? -kInf : c.mask == MaskKind::kAdditive ? mask.as<float>()[m] : 0.0f;
        }
  const MaskKind ref_kind = c.mask == MaskKind::kAdditive ? MaskKind::kAdditive : MaskKind::kBool;
  std::vector<TensorView> ref_in{q.view(), k.view(), v.view(), (ref_kind == MaskKind::kAdditive ? equiv_add : equiv).view()};
  if (c.cache) {
    ref_in.push_back(kc.view());
    ref_in.push_back(vc.view());
  }
  Tensor want = Tensor::zeros(DType::kFloat32, c.seq(c.Sq));
  std::vector<Tensor> want_kv, got_kv;
  std::vector<TensorView> want_out{want.view()};
  for (int t = 0; t < (c.cache ? 2 : 0); ++t) {
    want_kv.push_back(Tensor::zeros(DType::kFloat32, c.seq(Sk)));
    want_out.push_back(want_kv.back().view());
  }
  Status rs = attention::reference_attention(c.params(false, ref_kind), ref_in, want_out);
  ASSERT_TRUE(rs.ok()) << rs.message();

  // The kernel: rows and mask columns at or past live poisoned.
  if (c.cache) {
    poison_rows(c, kc, c.Sc, c.live);
    poison_rows(c, vc, c.Sc, c.live);
  }
  poison_rows(c, k, c.Sk_new, c.live - c.Sc);
  poison_rows(c, v, c.Sk_new, c.live - c.Sc);
  if (c.mask == MaskKind::kAdditive)
    for (int64_t r = 0; r < mrows; ++r)
      for (int64_t j = c.live; j < Sk; ++j) mask.as<float>()[r * Sk + j] = kNaN;
  Tensor live = Tensor::from_vector<int64_t>({c.live}, Shape{});
  std::vector<TensorView> in{q.view(), k.view(), v.view(), explicit_mask ? mask.view() : TensorView{}, TensorView{}, TensorView{},
                             live.view()};
  if (c.cache) {
    in[attention::kKCache] = kc.view();
    in[attention::kVCache] = vc.view();
  }
  Tensor got = Tensor::zeros(DType::kFloat32, c.seq(c.Sq));
  std::vector<TensorView> got_out{got.view()};
  for (int t = 0; t < (c.cache ? 2 : 0); ++t) {
    got_kv.push_back(Tensor::zeros(DType::kFloat32, c.seq(Sk)));
    got_out.push_back(got_kv.back().view());
  }
  Status st = run_live(c, in, got_out);
  ASSERT_TRUE(st.ok()) << st.message();
  int bad = 0;
  for (int64_t i = 0; i < got.numel() && bad < 5; ++i) {
    const float g = got.as<float>()[i], w = want.as<float>()[i];
    if (!(std::fabs(g - w) <= 1e-5f * std::max(1.0f, std::fabs(w)))) {
      ADD_FAILURE() << "element " << i << " got " << g << " want " << w;
      ++bad;
    }
  }
}

struct Shape6 {
  int64_t B, H, Dh, Sq, Sk_new, Sc;
  bool cache;
};

void sweep(const std::vector<Shape6>& shapes) {
  uint32_t seed = 7;
  for (const Shape6& s : shapes)
    for (Layout layout : {Layout::kBHSD, Layout::kBSD})
      for (MaskKind m : {MaskKind::kAdditive, MaskKind::kNone, MaskKind::kBool, MaskKind::kCausal})
        for (bool per_head : {true, false}) {
          if (per_head && m != MaskKind::kAdditive && m != MaskKind::kBool) continue;
          const int64_t Sk = s.Sc + s.Sk_new;
          for (int64_t live : {int64_t{1}, int64_t{17}, Sk - 1, Sk}) {
            if (live > Sk || live < 1) continue;
            LiveCase c;
            c.B = s.B, c.H = s.H, c.Dh = s.Dh, c.Sq = s.Sq, c.Sk_new = s.Sk_new, c.Sc = s.Sc, c.cache = s.cache;
            c.layout = layout;
            c.mask = m;
            c.per_head_bias = per_head;
            c.live = live;
            check(c, seed++);
            if (::testing::Test::HasFailure()) return;
          }
        }
}

// The seq2seq step's shapes (one query over a 128-row cache, 3 heads of 16) and awkward ones.
const std::vector<Shape6> kShapes = {
    {1, 3, 16, 1, 128, 0, false},   // T5 step: [1, H, 1, 128] bias
    {2, 2, 7, 1, 130, 0, false},    // Dh 7, keys not a whole number of tiles
    {1, 3, 20, 3, 97, 0, false},    // few-row tail of 3
    {1, 2, 33, 20, 150, 0, false},  // 16 rows on the lanes + 4 few rows
    {2, 1, 64, 1, 5, 60, true},     // cache + new keys, live inside the cache part
    {1, 3, 9, 70, 70, 30, true},    // lane tiles with a cache
};

TEST(AttentionLiveLength, MatchesReferenceWithEquivalentMask) { sweep(kShapes); }

TEST(AttentionLiveLength, Avx2MatchesReferenceWithEquivalentMask) {
  attention::allow_avx512(false);
  sweep(kShapes);
  attention::allow_avx512(true);
}

TEST(AttentionLiveLength, LiveOutsideTheKeysIsAnError) {
  LiveCase c;
  std::mt19937 rng(3);
  Tensor q = random_tensor(c.seq(1), rng), k = random_tensor(c.seq(128), rng), v = random_tensor(c.seq(128), rng);
  Tensor bias = random_tensor(c.mask_shape(), rng), out = Tensor::zeros(DType::kFloat32, c.seq(1));
  for (int64_t bad : {int64_t{0}, int64_t{129}, int64_t{-3}}) {
    Tensor live = Tensor::from_vector<int64_t>({bad}, Shape{});
    std::vector<TensorView> in{q.view(), k.view(), v.view(), bias.view(), TensorView{}, TensorView{}, live.view()};
    TensorView o = out.view();
    Status st = run_live(c, in, std::span<const TensorView>(&o, 1));
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("input 6 (live length) = " + std::to_string(bad) + " is outside [1, 128]"), std::string::npos)
        << st.message();
  }
  // A float live length is rejected by shape validation.
  Tensor f = Tensor::zeros(DType::kFloat32, Shape{});
  std::vector<TensorView> in{q.view(), k.view(), v.view(), bias.view(), TensorView{}, TensorView{}, f.view()};
  TensorView o = out.view();
  Status st = run_live(c, in, std::span<const TensorView>(&o, 1));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("input 6 (live) must be one int64"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace kiln
