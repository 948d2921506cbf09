// kiln::Attention plugin: the fused kernel against the unfused reference, the KV-cache append
// (in place and copied), field validation and shape validation. Drives the plugin's creator,
// build and run halves directly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "plugins/attention/attention_common.h"
#include "plugins/attention/attention_kernel.h"
#include "plugins/attention/attention_plugin.h"
#include "plugins/attention/attention_reference.h"

namespace kiln {
namespace {

using attention::Layout;
using attention::MaskKind;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Case {
  int64_t B = 1, H = 1, Dh = 8, Sq = 4, Sk_new = 4, Sc = 0;
  bool cache = false;
  Layout layout = Layout::kBSD;
  MaskKind mask = MaskKind::kNone;
  int64_t block = 0;
  int mask_form = 0;  // explicit masks: 0 [Sq, Sk], 1 [B, 1, Sq, Sk], 2 [B, H, Sq, Sk], 3 [1, Sk], 4 [B, 1, 1, Sk]
  // Explicit masks: > 0 writes a block-causal pattern of this block size (whole tiles shown, hidden
  // and mixed) instead of random entries.
  int64_t mask_block = 0;

  std::string str() const {
    static const char* const masks[] = {"none", "bool", "additive", "causal", "block_causal"};
    return "B=" + std::to_string(B) + " H=" + std::to_string(H) + " Dh=" + std::to_string(Dh) +
           " Sq=" + std::to_string(Sq) + " Sk_new=" + std::to_string(Sk_new) + " Sc=" + std::to_string(Sc) +
           (cache ? " cache" : "") + " " + attention::layout_name(layout) + " mask=" +
           masks[static_cast<int>(mask)] + " block=" + std::to_string(block) + " form=" + std::to_string(mask_form) +
           " mask_block=" + std::to_string(mask_block);
  }
  Shape seq_shape(int64_t S) const { return attention::seq_shape(layout, B, S, H, Dh); }
  AttrMap fields() const {
    AttrMap f;
    f["num_heads"] = Attribute::Int(H);
    f["scale"] = Attribute::Float(1.0f / std::sqrt(static_cast<float>(Dh)));
    f["layout"] = Attribute::String(attention::layout_name(layout));
    static const char* const masks[] = {"none", "bool", "additive", "causal", "block_causal"};
    f["mask"] = Attribute::String(masks[static_cast<int>(mask)]);
    if (mask == MaskKind::kBlockCausal) f["block"] = Attribute::Int(block);
    f["kv_cache"] = Attribute::Int(cache ? 1 : 0);
    return f;
  }
  attention::Params params() const {
    attention::Params p;
    p.num_heads = H;
    p.scale = 1.0f / std::sqrt(static_cast<float>(Dh));
    p.layout = layout;
    p.mask = mask;
    p.block = block;
    p.kv_cache = cache;
    return p;
  }
};

Tensor random_tensor(const Shape& s, std::mt19937& rng) {
  Tensor t = Tensor::zeros(DType::kFloat32, s);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = u(rng);
  return t;
}

// An explicit mask with random entries, a key tile (keys 64..127) hidden from every query and
// query row 0 hidden from every key (that row must come out as zeros).
Tensor make_mask(const Case& c, std::mt19937& rng) {
  const int64_t Sk = c.Sc + c.Sk_new;
  Shape s;
  switch (c.mask_form) {
    case 0: s = Shape{c.Sq, Sk}; break;
    case 1: s = Shape{c.B, 1, c.Sq, Sk}; break;
    case 2: s = Shape{c.B, c.H, c.Sq, Sk}; break;
    case 4: s = Shape{c.B, 1, 1, Sk}; break;  // a padding mask: per batch, the same for every query
    default: s = Shape{1, Sk}; break;
  }
  const bool is_bool = c.mask == MaskKind::kBool;
  Tensor t = Tensor::zeros(is_bool ? DType::kBool : DType::kFloat32, s);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const int64_t rows = t.numel() / std::max<int64_t>(Sk, 1);
  const bool has_rows = c.mask_form < 3;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < Sk; ++j) {
      const int64_t q = has_rows ? r % c.Sq : -1;
      bool visible = u(rng) < 0.6f;
      if (j >= 64 && j < 128) visible = false;
      if (q == 0) visible = false;
      if (c.mask_block > 0) visible = j / c.mask_block <= (Sk - c.Sq + std::max<int64_t>(q, 0)) / c.mask_block;
      if (is_bool)
        t.as<bool>()[r * Sk + j] = visible;
      else
        t.as<float>()[r * Sk + j] = visible ? 3.0f * (u(rng) - 0.5f) : -kInf;
    }
  return t;
}

struct Inputs {
  std::vector<Tensor> owned;
  std::vector<TensorView> views;
};

Inputs make_inputs(const Case& c, std::mt19937& rng) {
  Inputs in;
  in.owned.push_back(random_tensor(c.seq_shape(c.Sq), rng));
  in.owned.push_back(random_tensor(c.seq_shape(c.Sk_new), rng));
  in.owned.push_back(random_tensor(c.seq_shape(c.Sk_new), rng));
  const bool explicit_mask = c.mask == MaskKind::kBool || c.mask == MaskKind::kAdditive;
  in.owned.push_back(explicit_mask ? make_mask(c, rng) : Tensor());
  if (c.cache) {
    in.owned.push_back(random_tensor(c.seq_shape(c.Sc), rng));
    in.owned.push_back(random_tensor(c.seq_shape(c.Sc), rng));
  }
  for (const Tensor& t : in.owned) in.views.push_back(t.view());
  if (!c.cache && !explicit_mask) in.views.pop_back();
  return in;
}

std::unique_ptr<PluginBuild> build_plugin(const AttrMap& fields) {
  auto b = attention_plugin_creator()->create(fields);
  EXPECT_TRUE(b.ok()) << b.status().message();
  return b.ok() ? std::move(b).value() : nullptr;
}

// Runs the plugin through its build and run halves; returns the error or fills `outputs`.
Status run_plugin(const AttrMap& fields, std::span<const TensorView> inputs, std::span<const TensorView> outputs) {
  auto built = attention_plugin_creator()->create(fields);
  if (!built.ok()) return built.status();
  PluginBuild& build = **built;
  std::vector<TensorDesc> descs;
  for (const TensorView& v : inputs) descs.push_back(v.desc());
  std::vector<TensorDesc> out_descs(build.num_outputs());
  KILN_RETURN_IF_ERROR(build.infer(descs, out_descs));
  std::vector<char> workspace(build.workspace_bytes(descs));
  auto run = build.create_run();
  if (!run.ok()) return run.status();
  std::vector<TensorDesc> run_descs(build.num_outputs());
  KILN_RETURN_IF_ERROR((*run)->infer(inputs, run_descs));
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (run_descs[i].shape != outputs[i].shape || run_descs[i].shape != out_descs[i].shape)
      return Internal("output " + std::to_string(i) + " shape " + run_descs[i].shape.str() + " != " +
                      outputs[i].shape.str());
  }
  KILN_RETURN_IF_ERROR((*run)->on_shape_change(inputs, outputs));
  return (*run)->run(inputs, outputs, workspace.data());
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int bad = 0;
  for (int64_t i = 0; i < got.numel() && bad < 5; ++i) {
    const float g = got.as<float>()[i], w = want.as<float>()[i];
    if (!(std::fabs(g - w) <= 1e-5f * std::max(1.0f, std::fabs(w)))) {
      ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
      ++bad;
    }
  }
}

// [d0, d1, d2] -> [d1, d0, d2]: between the sbd and bsd layouts.
Tensor swap01(const Tensor& t) {
  const Shape& s = t.shape();
  Tensor r = Tensor::zeros(DType::kFloat32, Shape{s[1], s[0], s[2]});
  for (int64_t i = 0; i < s[0]; ++i)
    for (int64_t j = 0; j < s[1]; ++j)
      std::memcpy(r.as<float>() + (j * s[0] + i) * s[2], t.as<float>() + (i * s[1] + j) * s[2], sizeof(float) * s[2]);
  return r;
}

// The sbd output against the bsd reference on transposed q/k/v, so that the sbd strides, which
// the kernel and the reference share (row_strides), are checked against an independent layout.
void check_sbd_against_bsd(const Case& c, const Inputs& in, const Tensor& got) {
  Case bsd = c;
  bsd.layout = Layout::kBSD;
  std::vector<Tensor> owned;
  std::vector<TensorView> views;
  for (size_t i = 0; i < in.views.size(); ++i) owned.push_back(i < 3 ? swap01(in.owned[i]) : Tensor());
  for (size_t i = 0; i < in.views.size(); ++i) views.push_back(i < 3 ? owned[i].view() : in.views[i]);
  Tensor want = Tensor::zeros(DType::kFloat32, bsd.seq_shape(c.Sq));
  TensorView want_v = want.view();
  Status st = attention::reference_attention(bsd.params(), views, std::span<const TensorView>(&want_v, 1));
  ASSERT_TRUE(st.ok()) << st.message();
  expect_close(got, swap01(want), c.str() + " output 0 against bsd");
}

void check_case(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in = make_inputs(c, rng);
  const int n_out = c.cache ? 3 : 1;
  std::vector<Tensor> got, want;
  std::vector<TensorView> got_v, want_v;
  for (int i = 0; i < n_out; ++i) {
    const Shape s = i == 0 ? c.seq_shape(c.Sq) : c.seq_shape(c.Sc + c.Sk_new);
    got.push_back(random_tensor(s, rng));  // garbage the plugin must overwrite
    want.push_back(Tensor::zeros(DType::kFloat32, s));
    got_v.push_back(got.back().view());
    want_v.push_back(want.back().view());
  }
  Status st = run_plugin(c.fields(), in.views, got_v);
  ASSERT_TRUE(st.ok()) << c.str() << ": " << st.message();
  Status rs = attention::reference_attention(c.params(), in.views, want_v);
  ASSERT_TRUE(rs.ok()) << rs.message();
  for (int i = 0; i < n_out; ++i) expect_close(got[i], want[i], c.str() + " output " + std::to_string(i));
  if (c.layout == Layout::kSBD) check_sbd_against_bsd(c, in, got[0]);

  // The explicit masks hide query row 0 from every key: it must be zeros, not NaN.
  if ((c.mask == MaskKind::kBool || c.mask == MaskKind::kAdditive) && c.mask_form < 3 && c.mask_block == 0 &&
      c.Sq > 0) {
    const attention::RowStrides rs0 = attention::row_strides(c.layout, c.B, c.Sq, c.H, c.Dh);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t d = 0; d < c.Dh; ++d)
          ASSERT_EQ(got[0].as<float>()[b * rs0.batch + h * rs0.head + d], 0.0f) << c.str();
  }
}

struct MaskChoice {
  MaskKind kind;
  int64_t block;
};
const MaskChoice kMasks[] = {{MaskKind::kNone, 0},        {MaskKind::kBool, 0},
                             {MaskKind::kAdditive, 0},    {MaskKind::kCausal, 0},
                             {MaskKind::kBlockCausal, 7}, {MaskKind::kBlockCausal, 274}};

struct Dims {
  int64_t B, H, Dh, Sq, Sk_new, Sc;
  bool cache;
};

void sweep(const std::vector<Dims>& dims) {
  uint32_t seed = 1;
  for (const Dims& d : dims)
    for (Layout layout : {Layout::kBSD, Layout::kBHSD, Layout::kSBD})
      for (const MaskChoice& m : kMasks) {
        if (layout == Layout::kSBD && d.cache) continue;  // sbd has no KV cache
        Case c;
        c.B = d.B, c.H = d.H, c.Dh = d.Dh, c.Sq = d.Sq, c.Sk_new = d.Sk_new, c.Sc = d.Sc, c.cache = d.cache;
        c.layout = layout;
        c.mask = m.kind;
        c.block = m.block;
        c.mask_form = static_cast<int>(seed % 4);
        check_case(c, seed++);
        if (::testing::Test::HasFailure()) return;
      }
}

TEST(AttentionKernel, MatchesReferenceWithCache) {
  sweep({{1, 1, 1, 1, 1, 0, true},
         {2, 3, 7, 5, 5, 1, true},
         {1, 6, 64, 33, 33, 17, true},
         {2, 1, 64, 274, 274, 300, true},
         {1, 3, 7, 274, 274, 0, true},
         {2, 6, 1, 33, 33, 300, true},
         {1, 1, 64, 5, 5, 17, true},
         {2, 3, 64, 1, 1, 300, true},
         {1, 6, 7, 1, 1, 0, true},
         {2, 1, 1, 274, 274, 1, true}});
}

// A query tile's last 1-4 rows (past whole 16-query vectors) take the few-row path, keys on the
// lanes: every remainder, head sizes below, at and past one 64-float block, with and without a
// cache, every mask kind.
TEST(AttentionKernel, FewRowTailsMatchReference) {
  sweep({{1, 2, 7, 3, 3, 0, false},
         {2, 1, 80, 19, 19, 40, true},
         {1, 3, 128, 35, 35, 0, false},
         {1, 2, 64, 66, 66, 300, true},
         {2, 1, 1, 67, 67, 5, true},
         {1, 2, 40, 68, 68, 0, false},
         {1, 1, 64, 273, 273, 1370, true},
         {2, 2, 17, 1, 1, 50, true}});
}

// Head by head with key tiles outer (2-8 query tiles, heads dividing evenly over the threads)
// computes each query tile with the same tiles, masks and arithmetic as the tile-parallel order:
// the outputs are bitwise equal, with and without a cache, across the mask kinds. (Both orders
// also meet the reference in the sweeps above: B*H = 2 runs head by head, B*H = 1 or 3 not.)
TEST(AttentionKernel, HeadByHeadOrderMatchesTileOrderBitwise) {
  const Dims dims[] = {{2, 3, 64, 274, 274, 1370, true}, {1, 2, 7, 130, 130, 0, false}, {2, 2, 40, 200, 200, 65, true}};
  uint32_t seed = 500;
  for (const Dims& d : dims)
    for (const MaskChoice& m : kMasks) {
      Case c;
      c.B = d.B, c.H = d.H, c.Dh = d.Dh, c.Sq = d.Sq, c.Sk_new = d.Sk_new, c.Sc = d.Sc, c.cache = d.cache;
      c.layout = Layout::kBSD;
      c.mask = m.kind;
      c.block = m.block;
      c.mask_form = static_cast<int>(seed % 4);
      std::mt19937 rng(seed++);
      Inputs in = make_inputs(c, rng);
      Tensor out[2];
      for (int order = 0; order < 2; ++order) {
        attention::allow_stationary_heads(order == 0);
        out[order] = Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sq));
        std::vector<Tensor> kv;
        std::vector<TensorView> views{out[order].view()};
        if (c.cache)
          for (int i = 0; i < 2; ++i) {
            kv.push_back(Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sc + c.Sk_new)));
            views.push_back(kv.back().view());
          }
        Status st = run_plugin(c.fields(), in.views, views);
        ASSERT_TRUE(st.ok()) << c.str() << ": " << st.message();
      }
      attention::allow_stationary_heads(true);
      ASSERT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].nbytes()), 0) << c.str();
    }
}

// The AVX2 tile code (the default on machines without AVX-512) on the same shapes.
TEST(AttentionKernel, Avx2PathMatchesReference) {
  attention::allow_avx512(false);
  sweep({{2, 3, 7, 5, 5, 1, true},
         {1, 6, 64, 33, 33, 17, true},
         {2, 1, 64, 274, 274, 300, true},
         {1, 3, 64, 33, 100, 0, false},
         {2, 6, 1, 33, 33, 300, true}});
  attention::allow_avx512(true);
}

// Explicit masks with whole key tiles shown, hidden and mixed (a block-causal pattern as the
// ControlTransformer's exported bool mask has), at sizes that split tiles and rows unevenly, with
// the mask per query row, per batch and per (batch, head): the bool path classifies tiles once per
// call and reads only mixed tiles again.
TEST(AttentionKernel, StructuredMasksMatchReference) {
  uint32_t seed = 100;
  for (bool avx512 : {true, false}) {
    attention::allow_avx512(avx512);
    for (MaskKind kind : {MaskKind::kBool, MaskKind::kAdditive})
      for (int form : {0, 1, 2})
        for (int64_t mb : {37, 274})
          for (const auto& [Sq, Sk_new, Sc] : {std::tuple<int64_t, int64_t, int64_t>{150, 150, 100}, {274, 274, 1370},
                                                {70, 70, 0}, {1, 1, 301}}) {
            Case c;
            c.B = 2, c.H = 3, c.Dh = 40, c.Sq = Sq, c.Sk_new = Sk_new, c.Sc = Sc, c.cache = true;
            c.mask = kind;
            c.mask_form = form;
            c.mask_block = mb;
            check_case(c, seed++);
            if (::testing::Test::HasFailure()) break;
          }
  }
  attention::allow_avx512(true);
}

// Masks that broadcast over the queries ([B,1,1,Sk] padding masks, [1,Sk]): the kernel reads one
// row per tile for all queries; query counts span several query tiles and a partial one.
TEST(AttentionKernel, QueryBroadcastMasksMatchReference) {
  uint32_t seed = 500;
  for (bool avx512 : {true, false}) {
    attention::allow_avx512(avx512);
    for (MaskKind kind : {MaskKind::kBool, MaskKind::kAdditive})
      for (int form : {3, 4})
        for (Layout layout : {Layout::kBSD, Layout::kBHSD, Layout::kSBD})
          for (int64_t Sq : {1, 37, 130}) {
            Case c;
            c.B = 2, c.H = 3, c.Dh = 40, c.Sq = Sq, c.Sk_new = Sq;
            c.layout = layout;
            c.mask = kind;
            c.mask_form = form;
            check_case(c, seed++);
            if (::testing::Test::HasFailure()) break;
          }
  }
  attention::allow_avx512(true);
}

TEST(AttentionKernel, MatchesReferenceWithoutCache) {
  sweep({{1, 3, 64, 33, 100, 0, false},
         {2, 1, 7, 274, 17, 0, false},
         {1, 6, 1, 5, 300, 0, false},
         {1, 1, 7, 40, 5, 0, false},  // more queries than keys: early rows see no key under causal
         {2, 3, 64, 274, 274, 0, false},
         {1, 1, 64, 1, 1, 0, false},
         {3, 2, 64, 197, 197, 0, false},  // ViT's token count over odd batches (sbd rows interleave)
         {2, 12, 64, 1, 197, 0, false}});  // the narrowed last layer: the class token's query only
}

TEST(AttentionKernel, EmptyCacheAndEmptyQueries) {
  Case c;
  c.cache = true;
  c.Sc = 0;
  c.B = 2, c.H = 3, c.Dh = 7, c.Sq = 0, c.Sk_new = 0;
  check_case(c, 7);
  c.Sq = 3;
  c.Sk_new = 0;
  c.Sc = 0;
  check_case(c, 8);  // no keys at all: zeros
}

// The state-buffer case: k_cache is the start of a buffer with room for the new rows, and k_all
// is the whole buffer. Out, k_all and v_all must equal the copy path's and the reference's.
void check_in_place(Layout layout, int64_t B, int64_t H, uint32_t seed) {
  Case c;
  c.cache = true;
  c.layout = layout;
  c.B = B, c.H = H, c.Dh = 7, c.Sq = 5, c.Sk_new = 5, c.Sc = 17;
  c.mask = MaskKind::kCausal;
  std::mt19937 rng(seed);
  Inputs in = make_inputs(c, rng);
  const Shape all = c.seq_shape(c.Sc + c.Sk_new);
  // Expected results from separate buffers, through the copy path.
  Tensor want_out = Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sq));
  Tensor want_k = Tensor::zeros(DType::kFloat32, all), want_v = Tensor::zeros(DType::kFloat32, all);
  std::vector<TensorView> want_views{want_out.view(), want_k.view(), want_v.view()};
  ASSERT_TRUE(run_plugin(c.fields(), in.views, want_views).ok());
  Tensor ref_out = Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sq));
  Tensor ref_k = Tensor::zeros(DType::kFloat32, all), ref_v = Tensor::zeros(DType::kFloat32, all);
  std::vector<TensorView> ref_views{ref_out.view(), ref_k.view(), ref_v.view()};
  ASSERT_TRUE(attention::reference_attention(c.params(), in.views, ref_views).ok());
  expect_close(want_out, ref_out, "copy path out");
  expect_close(want_k, ref_k, "copy path k_all");
  expect_close(want_v, ref_v, "copy path v_all");

  // State buffers: the cache occupies the front, the rest is garbage the plugin must fill.
  Tensor kbuf = random_tensor(all, rng), vbuf = random_tensor(all, rng);
  const size_t cache_bytes = in.views[attention::kKCache].nbytes();
  std::memcpy(kbuf.data(), in.views[attention::kKCache].data, cache_bytes);
  std::memcpy(vbuf.data(), in.views[attention::kVCache].data, cache_bytes);
  std::vector<TensorView> views = in.views;
  views[attention::kKCache].data = kbuf.data();
  views[attention::kVCache].data = vbuf.data();
  Tensor out = Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sq));
  TensorView k_all = kbuf.view(), v_all = vbuf.view();
  std::vector<TensorView> outs{out.view(), k_all, v_all};
  ASSERT_TRUE(run_plugin(c.fields(), views, outs).ok());
  expect_close(out, ref_out, "in-place out");
  expect_close(kbuf, ref_k, "in-place k_all");
  expect_close(vbuf, ref_v, "in-place v_all");
}

TEST(AttentionKernel, InPlaceAppendWritesOnlyNewRows) {
  // bsd, B = 1: the cached rows are already where the concat puts them.
  Case c;
  c.cache = true;
  c.B = 1, c.H = 3, c.Dh = 7, c.Sq = 4, c.Sk_new = 4, c.Sc = 9;
  std::mt19937 rng(3);
  Inputs in = make_inputs(c, rng);
  const Shape all = c.seq_shape(c.Sc + c.Sk_new);
  Tensor kbuf = random_tensor(all, rng), vbuf = random_tensor(all, rng);
  const Tensor k_before = Tensor::copy_of(kbuf.view()), v_before = Tensor::copy_of(vbuf.view());
  std::vector<TensorView> views = in.views;
  views[attention::kKCache] = TensorView{kbuf.data(), DType::kFloat32, c.seq_shape(c.Sc)};
  views[attention::kVCache] = TensorView{vbuf.data(), DType::kFloat32, c.seq_shape(c.Sc)};
  Tensor out = Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sq));
  std::vector<TensorView> outs{out.view(), kbuf.view(), vbuf.view()};
  ASSERT_TRUE(run_plugin(c.fields(), views, outs).ok());
  const int64_t D = c.H * c.Dh, cached = c.Sc * D;
  EXPECT_EQ(std::memcmp(kbuf.data(), k_before.data(), cached * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(vbuf.data(), v_before.data(), cached * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(kbuf.as<float>() + cached, in.views[attention::kK].data, c.Sk_new * D * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(vbuf.as<float>() + cached, in.views[attention::kV].data, c.Sk_new * D * sizeof(float)), 0);

  Tensor ref_out = Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sq));
  Tensor ref_k = Tensor::zeros(DType::kFloat32, all), ref_v = Tensor::zeros(DType::kFloat32, all);
  std::vector<TensorView> rv{ref_out.view(), ref_k.view(), ref_v.view()};
  ASSERT_TRUE(attention::reference_attention(c.params(), views, rv).ok());
  expect_close(out, ref_out, "in-place out");
}

TEST(AttentionKernel, InPlaceAndCopyPathsAgree) {
  check_in_place(Layout::kBSD, 1, 3, 11);
  check_in_place(Layout::kBSD, 2, 3, 12);   // cached rows spread out per batch
  check_in_place(Layout::kBHSD, 1, 1, 13);  // rows already in place
  check_in_place(Layout::kBHSD, 2, 3, 14);  // cached rows spread out per (batch, head)
}

TEST(AttentionKernel, CopyPathLeavesCacheAlone) {
  Case c;
  c.cache = true;
  c.B = 2, c.H = 3, c.Dh = 7, c.Sq = 3, c.Sk_new = 3, c.Sc = 6;
  std::mt19937 rng(5);
  Inputs in = make_inputs(c, rng);
  const Tensor kc = Tensor::copy_of(in.views[attention::kKCache]);
  Tensor out = Tensor::zeros(DType::kFloat32, c.seq_shape(c.Sq));
  Tensor k_all = Tensor::zeros(DType::kFloat32, c.seq_shape(9)), v_all = Tensor::zeros(DType::kFloat32, c.seq_shape(9));
  std::vector<TensorView> outs{out.view(), k_all.view(), v_all.view()};
  ASSERT_TRUE(run_plugin(c.fields(), in.views, outs).ok());
  EXPECT_EQ(std::memcmp(kc.data(), in.views[attention::kKCache].data, kc.nbytes()), 0);
}

TEST(AttentionKernel, RerunWithNewShapes) {
  // One run object across shape changes (the streaming case: the cache grows every step).
  Case c;
  c.cache = true;
  c.B = 1, c.H = 2, c.Dh = 8, c.Sq = 3, c.Sk_new = 3;
  c.mask = MaskKind::kBlockCausal;
  c.block = 3;
  auto build = build_plugin(c.fields());
  ASSERT_TRUE(build);
  auto run = build->create_run();
  ASSERT_TRUE(run.ok());
  std::mt19937 rng(9);
  for (int64_t Sc : {0, 3, 6}) {
    c.Sc = Sc;
    Inputs in = make_inputs(c, rng);
    std::vector<TensorDesc> descs;
    for (const TensorView& v : in.views) descs.push_back(v.desc());
    std::vector<char> ws(build->workspace_bytes(descs));
    Tensor out = Tensor::zeros(DType::kFloat32, c.seq_shape(3));
    Tensor k_all = Tensor::zeros(DType::kFloat32, c.seq_shape(Sc + 3));
    Tensor v_all = Tensor::zeros(DType::kFloat32, c.seq_shape(Sc + 3));
    std::vector<TensorView> outs{out.view(), k_all.view(), v_all.view()};
    ASSERT_TRUE((*run)->run(in.views, outs, ws.data()).ok());  // no on_shape_change: run notices
    Tensor ref = Tensor::zeros(DType::kFloat32, c.seq_shape(3));
    Tensor rk = Tensor::zeros(DType::kFloat32, c.seq_shape(Sc + 3)), rv = Tensor::zeros(DType::kFloat32, c.seq_shape(Sc + 3));
    std::vector<TensorView> refs{ref.view(), rk.view(), rv.view()};
    ASSERT_TRUE(attention::reference_attention(c.params(), in.views, refs).ok());
    expect_close(out, ref, "Sc=" + std::to_string(Sc));
  }
}

TEST(AttentionKernel, RunRejectsMismatchedOutputs) {
  Case c;
  c.B = 1, c.H = 2, c.Dh = 4, c.Sq = 3, c.Sk_new = 3;
  std::mt19937 rng(4);
  Inputs in = make_inputs(c, rng);
  auto build = build_plugin(c.fields());
  ASSERT_TRUE(build);
  auto run = build->create_run();
  ASSERT_TRUE(run.ok());
  std::vector<TensorDesc> descs;
  for (const TensorView& v : in.views) descs.push_back(v.desc());
  std::vector<char> ws(build->workspace_bytes(descs));
  Tensor small = Tensor::zeros(DType::kFloat32, Shape{1, 2, 8});
  std::vector<TensorView> outs{small.view()};
  Status st = (*run)->run(in.views, outs, ws.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("output 0"), std::string::npos) << st.message();
  std::vector<TensorView> seven = in.views;
  seven.resize(7, in.views[0]);
  std::vector<TensorDesc> out_descs(1);
  st = (*run)->infer(seven, out_descs);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("got 7"), std::string::npos) << st.message();
}

// ---- creator and fields ----

AttrMap base_fields() {
  AttrMap f;
  f["num_heads"] = Attribute::Int(2);
  f["scale"] = Attribute::Float(0.5f);
  return f;
}

void expect_field_error(const AttrMap& f, const std::string& needle) {
  auto r = attention_plugin_creator()->create(f);
  ASSERT_FALSE(r.ok()) << "expected an error mentioning " << needle;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(AttentionPlugin, Identity) {
  PluginCreator* c = attention_plugin_creator();
  EXPECT_STREQ(c->name(), "Attention");
  EXPECT_STREQ(c->plugin_namespace(), "kiln");
  EXPECT_STREQ(c->version(), "1");
  EXPECT_EQ(c, attention_plugin_creator());
  std::vector<std::string> names;
  for (const PluginFieldSpec& s : c->field_specs()) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"num_heads", "scale", "layout", "mask", "block", "kv_cache", "precision", "live_length"}));
}

TEST(AttentionPlugin, FieldErrorsNameTheField) {
  AttrMap f = base_fields();
  f["heads"] = Attribute::Int(2);
  expect_field_error(f, "'heads'");
  f = base_fields();
  f.erase("num_heads");
  expect_field_error(f, "'num_heads'");
  f = base_fields();
  f.erase("scale");
  expect_field_error(f, "'scale'");
  f = base_fields();
  f["num_heads"] = Attribute::Float(2);
  expect_field_error(f, "'num_heads'");
  f = base_fields();
  f["layout"] = Attribute::Int(0);
  expect_field_error(f, "'layout'");
  f = base_fields();
  f["num_heads"] = Attribute::Int(0);
  expect_field_error(f, "'num_heads'");
  f = base_fields();
  f["num_heads"] = Attribute::Int(-3);
  expect_field_error(f, "'num_heads'");
  f = base_fields();
  f["scale"] = Attribute::Float(kInf);
  expect_field_error(f, "'scale'");
  f = base_fields();
  f["layout"] = Attribute::String("sdb");
  expect_field_error(f, "'layout'");
  f = base_fields();
  f["layout"] = Attribute::String("sbd");
  f["kv_cache"] = Attribute::Int(1);
  expect_field_error(f, "'kv_cache'");
  f = base_fields();
  f["mask"] = Attribute::String("sliding");
  expect_field_error(f, "'mask'");
  f = base_fields();
  f["mask"] = Attribute::String("block_causal");
  expect_field_error(f, "'block'");
  f["block"] = Attribute::Int(0);
  expect_field_error(f, "'block'");
  f = base_fields();
  f["mask"] = Attribute::String("causal");
  f["block"] = Attribute::Int(4);
  expect_field_error(f, "'block'");
  f = base_fields();
  f["kv_cache"] = Attribute::Int(2);
  expect_field_error(f, "'kv_cache'");
}

TEST(AttentionPlugin, FieldsRoundTrip) {
  AttrMap f = base_fields();
  f["layout"] = Attribute::String("bhsd");
  f["mask"] = Attribute::String("block_causal");
  f["block"] = Attribute::Int(274);
  f["kv_cache"] = Attribute::Int(1);
  auto b = build_plugin(f);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->num_outputs(), 3);
  AttrMap saved = b->fields();
  EXPECT_EQ(saved.size(), 6u);
  EXPECT_EQ(saved["layout"].s, "bhsd");
  EXPECT_EQ(saved["mask"].s, "block_causal");
  EXPECT_EQ(saved["block"].i, 274);
  EXPECT_EQ(saved["scale"].f, 0.5f);
  auto again = build_plugin(saved);
  ASSERT_TRUE(again);
  AttrMap saved2 = again->fields();
  EXPECT_EQ(saved2.size(), saved.size());
  for (const auto& [k, v] : saved) {
    EXPECT_EQ(saved2[k].kind, v.kind) << k;
    EXPECT_EQ(saved2[k].i, v.i) << k;
    EXPECT_EQ(saved2[k].f, v.f) << k;
    EXPECT_EQ(saved2[k].s, v.s) << k;
  }
  auto plain = build_plugin(base_fields());
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->num_outputs(), 1);
  EXPECT_EQ(plain->fields().count("block"), 0u);
}

TEST(AttentionPlugin, Supports) {
  using D = DType;
  auto plain = build_plugin(base_fields());
  EXPECT_TRUE(plain->supports(std::vector<D>{D::kFloat32, D::kFloat32, D::kFloat32}));
  EXPECT_FALSE(plain->supports(std::vector<D>{D::kFloat64, D::kFloat32, D::kFloat32}));
  EXPECT_FALSE(plain->supports(std::vector<D>{D::kFloat32, D::kFloat16, D::kFloat32}));
  AttrMap f = base_fields();
  f["mask"] = Attribute::String("bool");
  auto with_bool = build_plugin(f);
  EXPECT_TRUE(with_bool->supports(std::vector<D>{D::kFloat32, D::kFloat32, D::kFloat32, D::kBool}));
  EXPECT_FALSE(with_bool->supports(std::vector<D>{D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32}));
  f["mask"] = Attribute::String("additive");
  auto with_add = build_plugin(f);
  EXPECT_TRUE(with_add->supports(std::vector<D>{D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32}));
  EXPECT_FALSE(with_add->supports(std::vector<D>{D::kFloat32, D::kFloat32, D::kFloat32, D::kBool}));
}

// ---- shape validation ----

TensorDesc f32(Shape s) { return TensorDesc{DType::kFloat32, s}; }

void expect_shape_error(const AttrMap& f, std::vector<TensorDesc> in, std::vector<std::string> needles) {
  auto b = build_plugin(f);
  ASSERT_TRUE(b);
  std::vector<TensorDesc> out(b->num_outputs());
  Status st = b->infer(in, out);
  ASSERT_FALSE(st.ok()) << "expected: " << needles[0];
  for (const std::string& n : needles) EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
}

TEST(AttentionPlugin, InferShapes) {
  AttrMap f = base_fields();
  f["kv_cache"] = Attribute::Int(1);
  auto b = build_plugin(f);
  std::vector<TensorDesc> out(3);
  std::vector<TensorDesc> in{f32({1, 5, 8}), f32({1, 5, 8}), f32({1, 5, 8}), TensorDesc{}, f32({1, 7, 8}),
                             f32({1, 7, 8})};
  ASSERT_TRUE(b->infer(in, out).ok());
  EXPECT_EQ(out[0].shape, (Shape{1, 5, 8}));
  EXPECT_EQ(out[1].shape, (Shape{1, 12, 8}));
  EXPECT_EQ(out[2].shape, (Shape{1, 12, 8}));
  EXPECT_EQ(out[1].dtype, DType::kFloat32);
  EXPECT_GT(b->workspace_bytes(in), 0u);

  f["layout"] = Attribute::String("bhsd");
  auto b2 = build_plugin(f);
  in = {f32({2, 2, 5, 4}), f32({2, 2, 5, 4}), f32({2, 2, 5, 4}), TensorDesc{}, f32({2, 2, 0, 4}), f32({2, 2, 0, 4})};
  ASSERT_TRUE(b2->infer(in, out).ok());
  EXPECT_EQ(out[0].shape, (Shape{2, 2, 5, 4}));
  EXPECT_EQ(out[1].shape, (Shape{2, 2, 5, 4}));

  AttrMap sbd = base_fields();
  sbd["layout"] = Attribute::String("sbd");
  auto b3 = build_plugin(sbd);
  std::vector<TensorDesc> out1(1);
  in = {f32({5, 3, 8}), f32({7, 3, 8}), f32({7, 3, 8})};
  ASSERT_TRUE(b3->infer(in, out1).ok());
  EXPECT_EQ(out1[0].shape, (Shape{5, 3, 8}));
  EXPECT_GT(b3->workspace_bytes(in), 0u);
  EXPECT_EQ(b3->fields()["layout"].s, "sbd");
}

TEST(AttentionPlugin, ShapeErrorsNameInputDimAndValues) {
  const AttrMap f = base_fields();
  expect_shape_error(f, {f32({1, 5, 9}), f32({1, 5, 9}), f32({1, 5, 9})}, {"input 0", "dim 2 = 9", "num_heads = 2"});
  expect_shape_error(f, {f32({1, 5, 8}), f32({2, 5, 8}), f32({2, 5, 8})}, {"input 1", "dim 0 = 2", "expected 1"});
  expect_shape_error(f, {f32({1, 5, 8}), f32({1, 5, 6}), f32({1, 5, 6})}, {"input 1", "dim 2 = 6"});
  expect_shape_error(f, {f32({1, 5, 8}), f32({1, 6, 8}), f32({1, 5, 8})}, {"input 2", "dim 1 = 5", "expected 6"});
  expect_shape_error(f, {f32({1, 5, 8}), f32({1, 5, 8})}, {"3 or 4 inputs", "got 2"});
  expect_shape_error(f, {f32({5, 8}), f32({1, 5, 8}), f32({1, 5, 8})}, {"input 0", "rank 3"});
  expect_shape_error(f, {TensorDesc{DType::kFloat64, Shape{1, 5, 8}}, f32({1, 5, 8}), f32({1, 5, 8})},
                     {"input 0", "float32", "float64"});
  expect_shape_error(f, {f32({1, 5, 8}), f32({1, 5, 8}), f32({1, 5, 8}), f32({5, 5})}, {"input 3", "not bool or additive"});

  AttrMap bhsd = base_fields();
  bhsd["layout"] = Attribute::String("bhsd");
  expect_shape_error(bhsd, {f32({1, 3, 5, 4}), f32({1, 3, 5, 4}), f32({1, 3, 5, 4})}, {"input 0", "dim 1 = 3", "num_heads = 2"});
  expect_shape_error(bhsd, {f32({1, 2, 5, 4}), f32({1, 2, 5, 3}), f32({1, 2, 5, 3})}, {"input 1", "dim 3 = 3", "expected 4"});

  AttrMap sbd = base_fields();
  sbd["layout"] = Attribute::String("sbd");
  expect_shape_error(sbd, {f32({5, 2, 8}), f32({7, 3, 8}), f32({7, 3, 8})}, {"input 1", "dim 1 = 3", "expected 2"});
  expect_shape_error(sbd, {f32({5, 2, 8}), f32({7, 2, 8}), f32({6, 2, 8})}, {"input 2", "dim 0 = 6", "expected 7"});
  expect_shape_error(sbd, {f32({2, 5, 2, 8}), f32({7, 2, 8}), f32({7, 2, 8})}, {"input 0", "rank 3", "sbd"});
  expect_shape_error(sbd, {f32({5, 2, 9}), f32({7, 2, 9}), f32({7, 2, 9})}, {"input 0", "dim 2 = 9", "num_heads = 2"});

  AttrMap cache = base_fields();
  cache["kv_cache"] = Attribute::Int(1);
  expect_shape_error(cache, {f32({1, 5, 8}), f32({1, 5, 8}), f32({1, 5, 8})}, {"6 inputs", "got 3"});
  expect_shape_error(cache, {f32({1, 5, 8}), f32({1, 5, 8}), f32({1, 5, 8}), TensorDesc{}, f32({1, 7, 6}), f32({1, 7, 6})},
                     {"input 4", "dim 2 = 6", "expected 8"});
  expect_shape_error(cache, {f32({1, 5, 8}), f32({1, 5, 8}), f32({1, 5, 8}), TensorDesc{}, f32({1, 7, 8}), f32({1, 6, 8})},
                     {"input 5", "dim 1 = 6", "expected 7"});

  AttrMap boolm = base_fields();
  boolm["mask"] = Attribute::String("bool");
  expect_shape_error(boolm, {f32({1, 5, 8}), f32({1, 5, 8}), f32({1, 5, 8})}, {"input 3", "required"});
  expect_shape_error(boolm, {f32({1, 5, 8}), f32({1, 5, 8}), f32({1, 5, 8}), f32({5, 5})}, {"input 3", "bool", "float32"});
  expect_shape_error(boolm, {f32({1, 5, 8}), f32({1, 5, 8}), f32({1, 5, 8}), TensorDesc{DType::kBool, Shape{5, 4}}},
                     {"input 3", "dim 1 = 4", "broadcastable to 5"});
  expect_shape_error(boolm, {f32({1, 5, 8}), f32({1, 5, 8}), f32({1, 5, 8}), TensorDesc{DType::kBool, Shape{1, 3, 5, 5}}},
                     {"input 3", "dim 1 = 3", "broadcastable to 2"});
  expect_shape_error(boolm, {f32({1, 5, 8}), f32({1, 5, 8}), f32({1, 5, 8}), TensorDesc{DType::kBool, Shape{1, 1, 1, 5, 5}}},
                     {"input 3", "rank above 4"});
  AttrMap add = base_fields();
  add["mask"] = Attribute::String("additive");
  expect_shape_error(add, {f32({1, 5, 8}), f32({1, 5, 8}), f32({1, 5, 8}), TensorDesc{DType::kBool, Shape{5, 5}}},
                     {"input 3", "float32", "bool"});

  // Output count mismatch is an error too.
  auto b = build_plugin(cache);
  std::vector<TensorDesc> one(1);
  std::vector<TensorDesc> in{f32({1, 5, 8}), f32({1, 5, 8}), f32({1, 5, 8}), TensorDesc{}, f32({1, 7, 8}),
                             f32({1, 7, 8})};
  EXPECT_FALSE(b->infer(in, one).ok());
}

}  // namespace
}  // namespace kiln
