// attention_patterns.cpp: the pattern matchers of attention_fusion. SiteMatcher walks one Softmax
// back to QKᵀ and forward to ·V and proves the bsd / bhsd / sbd layouts, scales, masks (including
// the standard causal mask) and KV-cache Concats described in attention_fusion.cpp; the pass driver
// reaches it through match_site (attention_patterns.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "builder/passes/attention_patterns.h"

namespace kiln {
namespace attention_fusion_detail {

namespace {

struct Fail {
  std::string reason;
};

class SiteMatcher {
 public:
  SiteMatcher(Matcher& m, Node& softmax) : m_(m), g_(m.g_), sm_(softmax) {}

  // Returns an empty string on success (result in `f`), else why the site does not match.
  std::string run(Fused& f) {
    try {
      match(f);
      return {};
    } catch (const Fail& e) {
      return e.reason;
    }
  }

 private:
  [[noreturn]] static void fail(const std::string& r) { throw Fail{r}; }
  std::string vname(int v) const { return "'" + g_.values[v].name + "'"; }
  // Unknown dtypes pass: shape inference leaves some unset, and the plugin checks at build time.
  bool is_f32(int v) const { return !dtype_is_known(g_.values[v].dtype) || g_.values[v].dtype == DType::kFloat32; }
  void need_single(int v, const char* what) {
    if (!m_.single_use(v)) fail(std::string(what) + " " + vname(v) + " has other readers");
  }
  void take(Fused& f, Node* n) { f.core.push_back(m_.index_of(n)); }

  void match(Fused& f) {
    const int x = sm_.inputs.empty() ? -1 : sm_.inputs[0];
    if (x < 0 || sm_.outputs.size() != 1) fail("malformed Softmax");
    const int64_t axis = sm_.attrs.count("axis") ? sm_.attrs.at("axis").i : (g_.opset >= 13 ? -1 : 1);
    if (axis != -1 && !(m_.rank(x) > 0 && axis == m_.rank(x) - 1))
      fail("Softmax axis " + std::to_string(axis) + " is not the last axis");
    if (!is_f32(x)) fail("scores are not float32");
    take(f, &sm_);

    // Softmax -> MatMul with V.
    const int p = sm_.outputs[0];
    Node* pvp = nullptr;
    for (int c : m_.consumers_[p]) {
      Node& n = g_.nodes[c];
      if (n.op_type == "MatMul" && n.domain.empty() && n.inputs.size() == 2 && n.inputs[0] == p) pvp = &n;
    }
    if (!pvp) fail("Softmax output is not the left operand of a MatMul (no ·V)");
    if (!m_.single_use(p)) fail("Softmax output is also read by other nodes (or is a graph output)");
    Node& pv = *pvp;
    take(f, &pv);

    // Softmax input back to QKᵀ: mask (Where/Add) after scale (Div/Mul), each applied once.
    int s = x;
    bool seen_mask = false, seen_scale = false;  // walking up: what is applied later is seen first
    Node* qk = nullptr;
    for (int step = 0; step < 4 && !qk; ++step) {
      need_single(s, "score value");
      Node* n = m_.producer(s);
      if (!n || !n->domain.empty()) fail("scores " + vname(s) + " are not computed by an ONNX op");
      const std::string& op = n->op_type;
      if (op == "MatMul") {
        qk = n;
      } else if (op == "Where" && n->inputs.size() == 3) {
        if (seen_mask) fail("two masks on the scores");
        if (seen_scale) fail("the scores are scaled after the mask is applied");
        auto a = m_.scalar(n->inputs[1]), b = m_.scalar(n->inputs[2]);
        int cond = n->inputs[0];
        if (a && *a <= kMaskFillMax && !b) {
          f.mask_negate = true;
          s = n->inputs[2];
        } else if (b && *b <= kMaskFillMax && !a) {
          s = n->inputs[1];
        } else {
          fail("Where on the scores does not fill with -inf or a very negative constant");
        }
        if (dtype_is_known(g_.values[cond].dtype) && g_.values[cond].dtype != DType::kBool) fail("Where condition is not bool");
        f.mask = "bool";
        f.mask_value = cond;
        seen_mask = true;
        take(f, n);
      } else if (op == "Add" && n->inputs.size() == 2) {
        if (seen_mask) fail("two masks on the scores");
        if (seen_scale) fail("the scores are scaled after the mask is applied");
        const int a = n->inputs[0], b = n->inputs[1];
        const bool a_scores = leads_to_matmul(a), b_scores = leads_to_matmul(b);
        if (a_scores == b_scores) fail("cannot tell the scores from the mask in " + g_.describe_node(*n));
        const int mask = a_scores ? b : a;
        if (m_.scalar(mask)) fail("Add of a scalar to the scores is not a mask");
        if (!is_f32(mask)) fail("additive mask is not float32");
        f.mask = "additive";
        f.mask_value = mask;
        s = a_scores ? a : b;
        seen_mask = true;
        take(f, n);
      } else if (op == "Div" || op == "Mul") {
        seen_scale = true;
        s = peel_scale_node(f, n, s);
      } else {
        fail(g_.describe_node(*n) + " between the scores MatMul and the Softmax is not a scale or a mask");
      }
    }
    if (!qk) fail("no QK^T MatMul within the scale/mask chain");
    if (qk->inputs.size() != 2) fail("malformed MatMul");
    take(f, qk);
    int a = peel_scales(f, qk->inputs[0]);
    int b = peel_scales(f, qk->inputs[1]);
    const int vh = pv.inputs[1];

    // q split into heads by Reshape+Transpose suggests bsd (or sequence-first); GPT-2 splits q
    // that way too but concatenates K/V caches per head, so [B,H,S,Dh] is tried next.
    const Fused before = f;
    std::string first;
    auto attempt = [&](auto&& fn) {
      try {
        fn();
        return true;
      } catch (const Fail& e) {
        first = e.reason;
        f = before;
        return false;
      }
    };
    bool done = false;
    if (Node* tq = m_.transpose_of(a, {0, 2, 1, 3}); tq && m_.producer_op(tq->inputs[0], "Reshape"))
      done = attempt([&] { match_bsd(f, a, b, vh, pv); });
    else if (Node* tq3 = m_.transpose_of(a, {1, 0, 2}); tq3 && m_.producer_op(tq3->inputs[0], "Reshape"))
      done = attempt([&] { match_sbd(f, a, b, vh, pv); });
    if (!done) {
      try {
        match_bhsd(f, a, b, vh, pv);
      } catch (const Fail& e) {
        fail(first.empty() ? e.reason : first + " (as [B,H,S,Dh]: " + e.reason + ")");
      }
    }
    if (f.mask == "bool") resolve_bool_mask(f);
    else if (f.mask == "additive") resolve_additive_mask(f);
    if (f.mask == "bool" || f.mask == "additive") resolve_live_length(f);
    check_mask_shape(f, x);
    if (!std::isfinite(f.scale) || f.scale == 0) fail("scale is not a finite non-zero number");
    check_no_cycle(f);
  }

  // Whether `v` is (a scaled) MatMul output: tells the scores operand of an Add from the mask.
  bool leads_to_matmul(int v) {
    for (int d = 0; d < 3; ++d) {
      Node* n = m_.producer(v);
      if (!n || !n->domain.empty()) return false;
      if (n->op_type == "MatMul") return true;
      if ((n->op_type != "Div" && n->op_type != "Mul") || n->inputs.size() != 2) return false;
      v = m_.scalar(n->inputs[1]) ? n->inputs[0] : n->inputs[1];
    }
    return false;
  }

  // Div(s, c) or Mul(s, c)/Mul(c, s) with a scalar c: folds c into the scale, returns s.
  int peel_scale_node(Fused& f, Node* n, int out) {
    if (n->inputs.size() != 2) fail("malformed " + g_.describe_node(*n));
    auto c1 = m_.scalar(n->inputs[1]);
    if (n->op_type == "Div") {
      if (!c1) fail(g_.describe_node(*n) + " does not divide by a constant scalar: " + m_.scalar_blocker(n->inputs[1]));
      if (*c1 == 0) fail(g_.describe_node(*n) + " divides by 0");
      f.scale /= *c1;
      take(f, n);
      return n->inputs[0];
    }
    auto c0 = m_.scalar(n->inputs[0]);
    if (c1 && !c0) {
      f.scale *= *c1;
      take(f, n);
      return n->inputs[0];
    }
    if (c0 && !c1) {
      f.scale *= *c0;
      take(f, n);
      return n->inputs[1];
    }
    fail(g_.describe_node(*n) + " does not multiply by a constant scalar" +
         (c0 || c1 ? std::string(" (both operands are numbers)") : ": " + m_.scalar_blocker(n->inputs[1])));
  }

  // q or k scaled by a constant scalar: right before QK^T (nn.MultiheadAttention divides q) or
  // before the head split (BERT-style q * Dh**-0.5 on [B,S,D]). A scalar commutes with the
  // Reshape/Transpose between, so either way it folds into the plugin's scale instead of
  // costing a pass over q.
  int peel_scales(Fused& f, int v) {
    for (int d = 0; d < 2; ++d) {
      Node* n = m_.producer(v);
      if (!n || !n->domain.empty() || (n->op_type != "Div" && n->op_type != "Mul")) return v;
      const bool scalar_operand = m_.scalar(n->inputs[1]) || (n->op_type == "Mul" && m_.scalar(n->inputs[0]));
      // A scaled value with other readers keeps its Mul/Div: the site fuses on the scaled value.
      if (!scalar_operand || !m_.single_use(v)) return v;
      v = peel_scale_node(f, n, v);
    }
    return v;
  }

  // Whether reshape target element `t` provably equals input dim `in` (0 copies it).
  static bool target_matches(const Dim& t, const Dim& in, bool allowzero) {
    if (t.is_known() && t.value == 0 && !allowzero) return true;
    if (t.is_known() && t.value < 0) return false;
    return same_dim(t, in);
  }

  // Reshape [B,S,D] -> [B,S,H,Dh] (rank 4) or [S,B,D] -> [S,B·H,Dh] (rank 3); returns the source
  // value and sets heads/head_dim. One leading dim must provably be kept; the other follows from
  // the element count.
  int head_split(Fused& f, Node* r, int rank, const char* what) {
    if (!r) fail(std::string(what) + ": no head-split Reshape");
    const int src = r->inputs[0];
    need_single(r->outputs[0], "head-split value");
    const bool allowzero = r->attrs.count("allowzero") && r->attrs.at("allowzero").i;
    auto t = m_.dims_value(r->inputs.size() > 1 ? r->inputs[1] : -1);
    if (m_.rank(src) != 3) fail(std::string(what) + " " + vname(src) + " is not rank 3");
    const Dim d = m_.dim(src, 2);
    if (!d.is_known()) fail(std::string(what) + " " + vname(src) + " has an unknown model dim");
    if (!t || static_cast<int>(t->size()) != rank) fail(std::string(what) + ": head-split target is not known");
    int64_t heads = 0, head_dim = 0;
    if (rank == 4) {
      if (!(*t)[2].is_known() || !(*t)[3].is_known() || (*t)[2].value <= 0 || (*t)[3].value <= 0 ||
          (*t)[2].value * (*t)[3].value != d.value)
        fail(std::string(what) + ": head-split target " + sym_shape_str(*t) + " does not split " + d.str() + " into H x Dh");
      if (!target_matches((*t)[0], m_.dim(src, 0), allowzero) && !target_matches((*t)[1], m_.dim(src, 1), allowzero))
        fail(std::string(what) + ": head-split target " + sym_shape_str(*t) + " does not keep batch or sequence");
      heads = (*t)[2].value;
      head_dim = (*t)[3].value;
    } else {
      if (!(*t)[2].is_known() || (*t)[2].value <= 0 || d.value % (*t)[2].value)
        fail(std::string(what) + ": head-split target " + sym_shape_str(*t) + " does not split " + d.str() + " into heads");
      if (!target_matches((*t)[0], m_.dim(src, 0), allowzero))
        fail(std::string(what) + ": head-split target " + sym_shape_str(*t) + " does not keep the sequence dim");
      head_dim = (*t)[2].value;
      heads = d.value / head_dim;
    }
    if (f.heads && (f.heads != heads || f.head_dim != head_dim))
      fail(std::string(what) + ": head split into " + std::to_string(heads) + " x " + std::to_string(head_dim) +
           " differs from q's " + std::to_string(f.heads) + " x " + std::to_string(f.head_dim));
    f.heads = heads;
    f.head_dim = head_dim;
    take(f, r);
    return src;
  }

  // K or V [.., S, ..] = Concat(cache, new) along the sequence axis.
  Node* cache_concat(int v, int seq_axis) {
    Node* c = m_.producer_op(v, "Concat");
    if (!c || c->inputs.size() != 2 || !c->attrs.count("axis")) return nullptr;
    int64_t axis = c->attrs.at("axis").i;
    if (axis < 0) axis += m_.rank(v);
    return axis == seq_axis ? c : nullptr;
  }

  void set_kv(Fused& f, int k_src, int v_src, int seq_axis) {
    Node* ck = cache_concat(k_src, seq_axis);
    Node* cv = cache_concat(v_src, seq_axis);
    if (ck && cv && ck != cv) {
      f.kv_cache = true;
      f.k_cache = ck->inputs[0];
      f.k = ck->inputs[1];
      f.v_cache = cv->inputs[0];
      f.v = cv->inputs[1];
      f.k_all = k_src;
      f.v_all = v_src;
      take(f, ck);
      take(f, cv);
    } else {
      f.k = k_src;
      f.v = v_src;
    }
  }

  void match_bsd(Fused& f, int a, int b, int vh, Node& pv) {
    f.layout = "bsd";
    Node* tq = m_.transpose_of(a, {0, 2, 1, 3});
    need_single(a, "q heads");
    take(f, tq);
    f.q = peel_scales(f, head_split(f, m_.producer_op(tq->inputs[0], "Reshape"), 4, "q"));

    need_single(b, "k heads");
    Node* rk = nullptr;
    if (Node* tk = m_.transpose_of(b, {0, 2, 3, 1})) {
      take(f, tk);
      rk = m_.producer_op(tk->inputs[0], "Reshape");
    } else if (Node* tk2 = m_.transpose_of(b, {0, 1, 3, 2})) {
      Node* tk1 = m_.transpose_of(tk2->inputs[0], {0, 2, 1, 3});
      if (!tk1) fail("k is not split into heads like q");
      need_single(tk2->inputs[0], "k heads");
      take(f, tk2);
      take(f, tk1);
      rk = m_.producer_op(tk1->inputs[0], "Reshape");
    } else {
      fail("k is not transposed to [B,H,Dh,S] for QK^T");
    }
    const int k_src = peel_scales(f, head_split(f, rk, 4, "k"));

    Node* tv = m_.transpose_of(vh, {0, 2, 1, 3});
    if (!tv) fail("v is not split into heads like q");
    need_single(vh, "v heads");
    take(f, tv);
    const int v_src = head_split(f, m_.producer_op(tv->inputs[0], "Reshape"), 4, "v");

    // ·V -> Transpose back to [B,S,H,Dh] -> Reshape [B,S,D].
    const int o = pv.outputs[0];
    need_single(o, "attention output");
    Node* to = &g_.nodes[m_.consumers_[o][0]];
    if (to->op_type != "Transpose" || Matcher::perm(*to) != Ints{0, 2, 1, 3}) fail("heads are not merged back by Transpose");
    need_single(to->outputs[0], "merged heads");
    Node* rm = &g_.nodes[m_.consumers_[to->outputs[0]][0]];
    if (rm->op_type != "Reshape" || rm->inputs.size() < 2) fail("heads are not merged back by Reshape");
    auto t = m_.dims_value(rm->inputs[1]);
    const bool allowzero = rm->attrs.count("allowzero") && rm->attrs.at("allowzero").i;
    const int64_t d = f.heads * f.head_dim;
    if (!t || t->size() != 3 || !(*t)[2].is_known() || (*t)[2].value != d ||
        !(target_matches((*t)[0], m_.dim(f.q, 0), allowzero) || target_matches((*t)[1], m_.dim(f.q, 1), allowzero)))
      fail("head-merge Reshape target is not [B, S, " + std::to_string(d) + "]");
    take(f, to);
    take(f, rm);
    f.out = rm->outputs[0];
    set_kv(f, k_src, v_src, 1);
    for (int v : {f.q, f.k, f.v})
      if (!is_f32(v)) fail("q/k/v are not float32");
  }

  void match_sbd(Fused& f, int a, int b, int vh, Node& pv) {
    f.layout = "sbd";
    f.seq_first = true;
    Node* tq = m_.transpose_of(a, {1, 0, 2});
    need_single(a, "q heads");
    take(f, tq);
    f.q = peel_scales(f, head_split(f, m_.producer_op(tq->inputs[0], "Reshape"), 3, "q"));

    need_single(b, "k heads");
    Node* rk = nullptr;
    if (Node* tk = m_.transpose_of(b, {1, 2, 0})) {
      take(f, tk);
      rk = m_.producer_op(tk->inputs[0], "Reshape");
    } else if (Node* tk2 = m_.transpose_of(b, {0, 2, 1})) {
      Node* tk1 = m_.transpose_of(tk2->inputs[0], {1, 0, 2});
      if (!tk1) fail("k is not split into heads like q");
      need_single(tk2->inputs[0], "k heads");
      take(f, tk2);
      take(f, tk1);
      rk = m_.producer_op(tk1->inputs[0], "Reshape");
    } else {
      fail("k is not transposed to [B*H,Dh,S] for QK^T");
    }
    f.k = peel_scales(f, head_split(f, rk, 3, "k"));
    Node* tv = m_.transpose_of(vh, {1, 0, 2});
    if (!tv) fail("v is not split into heads like q");
    need_single(vh, "v heads");
    take(f, tv);
    f.v = head_split(f, m_.producer_op(tv->inputs[0], "Reshape"), 3, "v");
    // Batch is dim 1 of [S,B,D]: q, k and v must agree on it.
    if (!same_dim(m_.dim(f.q, 1), m_.dim(f.k, 1)) || !same_dim(m_.dim(f.q, 1), m_.dim(f.v, 1)))
      fail("q, k and v batch dims are not provably equal");

    const int o = pv.outputs[0];
    need_single(o, "attention output");
    Node* to = &g_.nodes[m_.consumers_[o][0]];
    if (to->op_type != "Transpose" || Matcher::perm(*to) != Ints{1, 0, 2}) fail("heads are not merged back by Transpose");
    take(f, to);
    f.out = to->outputs[0];
    for (int v : {f.q, f.k, f.v})
      if (!is_f32(v)) fail("q/k/v are not float32");
  }

  void match_bhsd(Fused& f, int a, int b, int vh, Node& pv) {
    f.layout = "bhsd";
    if (m_.rank(a) != 4) fail("q is neither split into heads by Reshape+Transpose nor rank 4 [B,H,S,Dh]");
    const Dim h = m_.dim(a, 1), dh = m_.dim(a, 3);
    if (!h.is_known() || !dh.is_known()) fail("q [B,H,S,Dh] has unknown H or Dh");
    f.heads = h.value;
    f.head_dim = dh.value;
    f.q = a;
    Node* tk = m_.transpose_of(b, {0, 1, 3, 2});
    if (!tk) fail("k is not transposed [B,H,S,Dh] -> [B,H,Dh,S] for QK^T");
    need_single(b, "transposed k");
    take(f, tk);
    const int k4 = tk->inputs[0];
    for (int v : {k4, vh}) {
      if (m_.rank(v) != 4 || !same_dim(m_.dim(v, 1), h) || !same_dim(m_.dim(v, 3), dh))
        fail(vname(v) + " is not [B, " + h.str() + ", S, " + dh.str() + "] like q");
      if (!same_dim(m_.dim(v, 0), m_.dim(a, 0))) fail("q, k and v batch dims are not provably equal");
    }
    f.out = pv.outputs[0];
    set_kv(f, k4, vh, 2);
    for (int v : {f.q, f.k, f.v})
      if (!is_f32(v)) fail("q/k/v are not float32");
    if (f.kv_cache)
      for (int v : {f.k, f.v, f.k_cache, f.v_cache})
        if (m_.rank(v) != 4) fail("K/V cache operands are not rank 4");
  }

  // Sq and Sk_total of the scores, in the graph's own dims.
  std::pair<Dim, Dim> score_dims() {
    if (f_layout_bhsd_) return {m_.dim(q4_, 2), m_.dim(k_total_, 2)};
    return {m_.dim(q3_, seq_first_ ? 0 : 1), m_.dim(k_total_, seq_first_ ? 0 : 1)};
  }

  // Peels Not / Cast(bool) off the Where condition; prefers a value that means "may attend" so the
  // inverted chain dies. Then checks whether it is provably the standard causal mask.
  void resolve_bool_mask(Fused& f) {
    int v = f.mask_value;
    bool neg = f.mask_negate;
    int best = neg ? -1 : v;
    for (int d = 0; d < 4; ++d) {
      Node* n = m_.producer(v);
      if (!n || !n->domain.empty() || n->inputs.empty()) break;
      if (n->op_type == "Not") {
        neg = !neg;
      } else if (n->op_type == "Cast" && n->attrs.count("to") && n->attrs.at("to").i == static_cast<int64_t>(DType::kBool) &&
                 g_.values[n->inputs[0]].dtype == DType::kBool) {
      } else {
        break;
      }
      v = n->inputs[0];
      if (!neg) best = v;
    }
    if (best < 0 && g_.values[v].is_constant() && g_.values[v].constant.dtype() == DType::kBool) {
      // A constant "hidden" mask (masked_fill(~mask) of a bool buffer, folded at fixed shapes) is
      // inverted here rather than by a Not at run time, and may then prove causal.
      Tensor attend = Tensor::copy_of(g_.values[v].constant.view());
      bool* b = attend.as<bool>();
      for (int64_t i = 0; i < attend.numel(); ++i) b[i] = !b[i];
      best = g_.add_constant(g_.values[v].name + "/attend", std::move(attend));
    }
    if (best >= 0) {
      f.mask_value = best;
      f.mask_negate = false;
    } else {
      f.mask_value = v;
      f.mask_negate = true;
      return;  // an inverted mask is never the causal one
    }
    set_score_refs(f);
    if (is_causal(f.mask_value)) {
      f.mask = "causal";
      f.mask_value = -1;
    }
  }

  // What score_dims and is_len read: the layout and the q / total K / total V values.
  void set_score_refs(const Fused& f) {
    f_layout_bhsd_ = f.layout == "bhsd";
    seq_first_ = f.seq_first;
    q4_ = q3_ = f.q;
    k_total_ = f.kv_cache ? f.k_all : f.k;
    v_total_ = f.kv_cache ? f.v_all : f.v;
  }

  // A constant additive mask that is 0 where j <= Sk - Sq + i and -inf (or <= kMaskFillMax, the
  // Where fill rule) elsewhere, with leading dims 1, is the causal mask. Llama-style exports build
  // it at run time (full(-inf).triu(past + 1)); with the shapes fixed, constant folding turns it
  // into such a constant. As "causal" the kernel skips the masked key tiles instead of adding
  // -inf to them, and reads no mask.
  void resolve_additive_mask(Fused& f) {
    const Value& mv = g_.values[f.mask_value];
    if (!mv.is_constant()) return;
    set_score_refs(f);
    auto [sq, sk] = score_dims();
    const Shape& s = mv.constant.shape();
    if (s.rank() < 2 || !sq.is_known() || !sk.is_known()) return;
    for (int i = 0; i < s.rank() - 2; ++i)
      if (s[i] != 1) return;
    const int64_t q = s[s.rank() - 2], k = s[s.rank() - 1];
    if (q != sq.value || k != sk.value || q > k) return;
    for (int64_t i = 0; i < q; ++i)
      for (int64_t j = 0; j < k; ++j) {
        const double x = read_double(mv.constant.view(), i * k + j);
        if (j <= k - q + i ? x != 0 : !(x <= kMaskFillMax)) return;
      }
    f.mask = "causal";
    f.mask_value = -1;
  }

  // A mask that shows key j iff j <= pos (or j < pos) for one runtime scalar pos: the fixed-size
  // cache of a decoder step, whose rows past cur_pos are not written yet. Additive: Where(cond,
  // fill, bias) (or Where(cond, bias, fill)) with fill <= kMaskFillMax; the bias stays the mask.
  // Bool: the Where condition on the scores itself; no mask stays. Either way the fused node reads
  // the live length instead, and its kernel never visits the keys past it.
  void resolve_live_length(Fused& f) {
    set_score_refs(f);
    const Dim sk = score_dims().second;
    if (!sk.is_known()) return;
    if (f.mask == "bool") {
      if (auto live = live_condition(f.mask_value, !f.mask_negate, sk.value)) {
        f.mask = "none";
        f.mask_value = -1;
        f.mask_negate = false;
        f.live_pos = live->first;
        f.live_offset = live->second;
      }
      return;
    }
    Node* w = m_.producer_op(f.mask_value, "Where");
    if (!w || w->inputs.size() != 3) return;
    const auto a = m_.scalar(w->inputs[1]), b = m_.scalar(w->inputs[2]);
    int bias = -1;
    std::optional<std::pair<int, int64_t>> live;
    if (a && *a <= kMaskFillMax && !b) {  // cond true = hidden
      bias = w->inputs[2];
      live = live_condition(w->inputs[0], false, sk.value);
    } else if (b && *b <= kMaskFillMax && !a) {  // cond true = shown
      bias = w->inputs[1];
      live = live_condition(w->inputs[0], true, sk.value);
    }
    if (!live || !is_f32(bias)) return;
    f.mask_value = bias;
    f.live_pos = live->first;
    f.live_offset = live->second;
  }

  // When `cond` (true = shown if `shown_if_true`) shows exactly the keys [0, pos + offset) of
  // sk: (pos, offset). Through Not, Cast to bool, Unsqueeze, Squeeze, Reshape and Identity (all
  // keep the element order), down to a comparison of a constant arange(sk) with one scalar; the
  // condition's shape must be [1, ..., 1, sk], so element j is key j for every query and head.
  std::optional<std::pair<int, int64_t>> live_condition(int cond, bool shown_if_true, int64_t sk) {
    const auto cs = m_.shape(cond);
    if (!cs || cs->empty() || !same_dim(cs->back(), Dim::known(sk))) return std::nullopt;
    for (size_t i = 0; i + 1 < cs->size(); ++i)
      if (!(*cs)[i].is_known() || (*cs)[i].value != 1) return std::nullopt;
    int v = cond;
    for (int d = 0; d < 8; ++d) {
      Node* n = m_.producer(v);
      if (!n || !n->domain.empty() || n->inputs.empty()) return std::nullopt;
      const std::string& op = n->op_type;
      if (op == "Not") {
        shown_if_true = !shown_if_true;
      } else if (op == "Cast") {
        if (!n->attrs.count("to") || n->attrs.at("to").i != static_cast<int64_t>(DType::kBool) ||
            g_.values[n->inputs[0]].dtype != DType::kBool)
          return std::nullopt;
      } else if (op != "Unsqueeze" && op != "Squeeze" && op != "Reshape" && op != "Identity") {
        return compare_arange(*n, shown_if_true, sk);
      }
      v = n->inputs[0];
    }
    return std::nullopt;
  }

  // `n` compares arange(sk) (a constant) with a runtime scalar: (scalar, offset) when the keys it
  // shows (true = shown if `shown_if_true`) are [0, scalar + offset).
  std::optional<std::pair<int, int64_t>> compare_arange(const Node& n, bool shown_if_true, int64_t sk) {
    static const std::map<std::string, std::string> kMirror = {
        {"Less", "Greater"}, {"Greater", "Less"}, {"LessOrEqual", "GreaterOrEqual"}, {"GreaterOrEqual", "LessOrEqual"}};
    if (!kMirror.count(n.op_type) || n.inputs.size() != 2) return std::nullopt;
    int arange = n.inputs[0], pos = n.inputs[1];
    std::string op = n.op_type;  // as "arange op pos"
    if (!is_arange(arange, sk)) {
      std::swap(arange, pos);
      op = kMirror.at(op);
      if (!is_arange(arange, sk)) return std::nullopt;
    }
    const Value& pv = g_.values[pos];
    if (pv.is_constant() || (pv.dtype != DType::kInt64 && pv.dtype != DType::kInt32)) return std::nullopt;
    const auto ps = m_.shape(pos);
    if (!ps) return std::nullopt;
    for (const Dim& d : *ps)
      if (!d.is_known() || d.value != 1) return std::nullopt;
    // j <= pos / j < pos are a prefix of the keys when true; j > pos / j >= pos when false.
    const bool prefix_if_true = op == "LessOrEqual" || op == "Less";
    if (prefix_if_true != shown_if_true) return std::nullopt;
    const int64_t offset = op == "LessOrEqual" || op == "Greater" ? 1 : 0;
    return std::make_pair(pos, offset);
  }

  // A constant holding 0, 1, ..., n - 1 (any shape, one non-1 dim).
  bool is_arange(int v, int64_t n) {
    const Value& c = g_.values[v];
    if (!c.is_constant() || c.constant.numel() != n) return false;
    const Shape& s = c.constant.shape();
    for (int i = 0; i < s.rank(); ++i)
      if (s[i] != 1 && s[i] != n) return false;
    for (int64_t i = 0; i < n; ++i)
      if (read_double(c.constant.view(), i) != static_cast<double>(i)) return false;
    return true;
  }

  bool is_tril_ones(const Value& c) {
    const Shape& s = c.constant.shape();
    if (s.rank() < 2) return false;
    const int64_t rows = s[s.rank() - 2], cols = s[s.rank() - 1];
    if (c.constant.numel() != rows * cols) return false;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        if ((read_double(c.constant.view(), i * cols + j) != 0) != (j <= i)) return false;
    return true;
  }

  bool is_causal(int m) {
    auto [sq, sk] = score_dims();
    const Value& mv = g_.values[m];
    if (mv.is_constant()) {
      // Folded: mask[i][j] == (j <= Sk - Sq + i) with leading dims 1.
      const Shape& s = mv.constant.shape();
      if (s.rank() < 2 || !sq.is_known() || !sk.is_known()) return false;
      for (int i = 0; i < s.rank() - 2; ++i)
        if (s[i] != 1) return false;
      const int64_t q = s[s.rank() - 2], k = s[s.rank() - 1];
      if (q != sq.value || k != sk.value) return false;
      for (int64_t i = 0; i < q; ++i)
        for (int64_t j = 0; j < k; ++j)
          if ((read_int(mv.constant.view(), i * k + j) != 0) != (j <= k - q + i)) return false;
      return true;
    }
    // bias[..., Sk-Sq:Sk, :Sk] of a lower-triangular ones buffer, as one or two Slices.
    std::map<int64_t, std::pair<int, int>> bounds;  // axis -> (start, end) values
    int v = m;
    for (int d = 0; d < 2 && !g_.values[v].is_constant(); ++d) {
      Node* n = m_.producer_op(v, "Slice");
      if (!n || n->inputs.size() < 4) return false;
      auto ax = m_.dims_value(n->inputs[3]);
      if (!ax || ax->size() != 1) return false;  // one axis per Slice, as the exporter writes it
      if (n->inputs.size() > 4 && n->inputs[4] >= 0) {
        auto steps = m_.dims_value(n->inputs[4]);
        if (!steps) return false;
        for (const auto& s : *steps)
          if (!s.is_known() || s.value != 1) return false;
      }
      const int r = m_.rank(n->inputs[0]);
      for (size_t i = 0; i < ax->size(); ++i) {
        if (!(*ax)[i].is_known() || r < 0) return false;
        int64_t a = (*ax)[i].value < 0 ? (*ax)[i].value + r : (*ax)[i].value;
        if (bounds.count(a)) return false;
        bounds[a] = {n->inputs[1], n->inputs[2]};
      }
      v = n->inputs[0];
    }
    // The buffer: [N, N] or with leading 1s ([1, 1, N, N] as GPT-2 registers it).
    const Value& bias = g_.values[v];
    if (!bias.is_constant() || bias.constant.shape().rank() < 2 || bounds.size() != 2) return false;
    const Shape& bs = bias.constant.shape();
    const int br = bs.rank();
    for (int i = 0; i < br - 2; ++i)
      if (bs[i] != 1) return false;
    if (!bounds.count(br - 2) || !bounds.count(br - 1) || !is_tril_ones(bias)) return false;
    auto [rs, re] = bounds[br - 2];
    auto [cs, ce] = bounds[br - 1];
    auto zero = m_.dims_value(cs);
    if (!(is_len(rs, sub_dim(sk, sq), -1) && is_len(re, sk, 1) && zero && zero->size() == 1 && (*zero)[0].is_known() &&
          (*zero)[0].value == 0 && is_len(ce, sk, 1)))
      return why("the slice of the lower-triangular buffer is not provably [Sk-Sq : Sk, 0 : Sk] (Sq " + sq.str() + ", Sk " +
                 sk.str() + ")");
    // The slice is exact only while it stays inside the buffer (Slice clamps silently) and starts at
    // a row >= 0: for every shape of the profile, Sq <= Sk <= the buffer's rows and columns.
    const auto sk_b = dim_bounds(sk, m_.ranges_), start_b = dim_bounds(sub_dim(sk, sq), m_.ranges_);
    const int64_t room = std::min(bs[br - 2], bs[br - 1]);
    if (!sk_b || sk_b->second > room)
      return why("key length " + sk.str() + (sk_b && sk_b->second != kUnbounded ? " reaches " + std::to_string(sk_b->second) : " is not bounded") +
                 " in this profile but the causal buffer has " + std::to_string(room) + " positions");
    if (!start_b || start_b->first < 0) return why("Sk - Sq = " + sub_dim(sk, sq).str() + " is not provably >= 0");
    return true;
  }

  bool why(const std::string& r) {
    causal_why_ = r;
    return false;
  }

  // Whether one-element `v` is `expect` (by value, or symbolically as the exporter computes it:
  // which = 1 key length, 0 query length, -1 key length - query length).
  bool is_len(int v, const Dim& expect, int which) {
    if (auto d = m_.dims_value(v); d && d->size() == 1 && same_dim((*d)[0], expect)) return true;
    if (which < 0) {
      Node* n = m_.producer(v);
      while (n && n->domain.empty() && (n->op_type == "Unsqueeze" || n->op_type == "Squeeze" || n->op_type == "Cast"))
        n = m_.producer(n->inputs[0]);
      return n && n->domain.empty() && n->op_type == "Sub" && n->inputs.size() == 2 && is_len(n->inputs[0], Dim{}, 1) &&
             is_len(n->inputs[1], Dim{}, 0);
    }
    auto ref = m_.dim_ref(v);
    if (!ref) return false;
    const int seq_axis = f_layout_bhsd_ ? 2 : (seq_first_ ? 0 : 1);
    if (ref->second != seq_axis) return false;
    if (which == 1) return ref->first == k_total_ || ref->first == v_total_;
    return ref->first == q4_;
  }

  // The mask broadcasts into the scores without enlarging them.
  void check_mask_shape(Fused& f, int scores) {
    if (f.mask_value < 0) return;
    const int mr = m_.rank(f.mask_value), sr = m_.rank(scores);
    if (mr < 0 || sr < 0) fail("mask rank is unknown");
    const int max_rank = f.seq_first ? 2 : 4;  // [B·H,Sq,Sk] scores: a batch-wise mask would not map to [B,H,...]
    if (mr > sr || mr > max_rank) fail("mask " + vname(f.mask_value) + " has more dims than the scores");
    for (int i = 0; i < mr; ++i) {
      const Dim md = m_.dim(f.mask_value, i), sd = m_.dim(scores, sr - mr + i);
      const bool ok = (md.is_known() && md.value == 1) || md == sd || !(sd.is_known() && sd.value == 1);
      if (!ok || (md.is_known() && sd.is_known() && md.value != 1 && md.value != sd.value))
        fail("mask " + vname(f.mask_value) + " " + sym_shape_str(*m_.shape(f.mask_value)) + " would broadcast the scores " +
             sym_shape_str(*m_.shape(scores)));
    }
  }

  // The fused node's inputs must not be computed from what it replaces (e.g. a bool mask sliced
  // with Shape(present_key) would read the node's own output).
  void check_no_cycle(const Fused& f) {
    std::set<int> core(f.core.begin(), f.core.end());
    std::vector<int> stack;
    for (int v : {f.q, f.k, f.v, f.mask_value, f.k_cache, f.v_cache, f.live_pos})
      if (v >= 0) stack.push_back(v);
    std::set<int> seen;
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      if (!seen.insert(v).second) continue;
      Node* n = m_.producer(v);
      if (!n) continue;
      if (core.count(m_.index_of(n)))
        fail("an input of the attention is computed from the attention itself (" + vname(v) + ")" +
             (causal_why_.empty() ? "" : "; the mask is not proven causal: " + causal_why_));
      for (int i : n->inputs)
        if (i >= 0) stack.push_back(i);
    }
  }

  Matcher& m_;
  Graph& g_;
  Node& sm_;
  bool f_layout_bhsd_ = false, seq_first_ = false;
  std::string causal_why_;  // why a bool mask is not proven causal, for the report
  int q4_ = -1, q3_ = -1, k_total_ = -1, v_total_ = -1;
};

}  // namespace

std::string match_site(Matcher& m, Node& softmax, Fused& f) { return SiteMatcher(m, softmax).run(f); }

}  // namespace attention_fusion_detail
}  // namespace kiln
