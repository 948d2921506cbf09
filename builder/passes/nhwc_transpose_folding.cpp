// nhwc_transpose_folding: models written channels-last around their convolutions move every value
// between NCHW and NHWC with Transposes. ConvNeXt's block is x -> depthwise Conv -> Transpose(0, 2,
// 3, 1) -> LayerNorm -> Linear -> GELU -> Linear -> Transpose(0, 3, 1, 2) -> layer scale -> + x,
// and its stem, downsampling layers and head put a LayerNorm between two Transposes: 46 Transposes
// in convnext_tiny, each a full copy of an activation with a strided side. FusedConv reads and writes
// NHWC itself (x_layout / residual_layout / y_layout), and layout-blind elementwise ops and
// GlobalAveragePool compute the same in NHWC, so such values are kept NHWC and the Transposes
// vanish:
//
// - a value is kept when it is 4-D, not a graph output, produced by a 2-D FusedConv (which then
//   writes it with y_layout "nhwc"), a Transpose(0, 3, 1, 2) (whose input already is that value in
//   NHWC: its readers read the input instead) or a layout follower (below), and read only by 2-D
//   FusedConvs as X or residual (x_layout / residual_layout "nhwc"), by followers, or by
//   Transposes(0, 2, 3, 1) (which become the value itself: their readers read it);
// - followers are the ops conv_channels_last lets into its layout: layout-blind elementwise ops
//   (per-channel constants such as the layer scale rewritten to [C]) and GlobalAveragePool
//   (attribute layout); each has its inputs and output all kept or none (a fixed point);
// - a set of kept values joined by followers is kept only when it removes a Transpose: without one
//   it would merely move FusedConvs from the layout conv_channels_last picks for the build CPU
//   (nChw8c with AVX2) to NHWC.
//
// Runs after conv_epilogue_fusion (it needs the FusedConvs) and before elementwise_fusion, so that
// matmul_scale_fusion sees the layer scale and residual Add right after their FusedMatMul, and before
// conv_channels_last, which leaves the FusedConvs given a layout here alone.
#include <map>
#include <numeric>
#include <set>

#include "builder/passes/layout_ops.h"
#include "builder/passes/pass.h"

namespace kiln {

namespace {

constexpr int64_t kToNhwc[] = {0, 2, 3, 1};
constexpr int64_t kToNchw[] = {0, 3, 1, 2};

bool is_transpose(const Node& n, const int64_t (&perm)[4]) {
  if (n.removed || !n.domain.empty() || n.op_type != "Transpose" || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  auto p = n.attrs.find("perm");
  return p != n.attrs.end() && p->second.ints == std::vector<int64_t>(std::begin(perm), std::end(perm));
}

bool is_follower(const Graph& g, const Node& n) {
  return !n.attrs.count("layout") && (is_layout_blind_elementwise(g, n) || is_2d_global_average_pool(g, n));
}

bool is_4d(const Graph& g, int v) {
  const auto& s = g.values[v].shape;
  return s && s->size() == 4 && g.values[v].dtype == DType::kFloat32;
}

// The channels of a 4-D NCHW value, -1 when unknown.
int64_t channels(const Graph& g, int v) {
  const auto& s = g.values[v].shape;
  return s && s->size() == 4 && (*s)[1].is_known() ? (*s)[1].value : -1;
}

int find(std::map<int, int>& parent, int v) {
  while (parent[v] != v) v = parent[v] = parent[parent[v]];
  return v;
}

}  // namespace

Status nhwc_transpose_folding(Graph& g, PassContext& ctx) {
  const std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  const std::vector<bool> live = g.live_nodes();
  auto free_conv = [&](const Node& n) { return is_2d_fused_conv(g, n) && !fused_conv_has_layout(n); };
  auto per_channel_operand = [&](const Node& n, int v) {
    return is_layout_blind_elementwise(g, n) && is_per_channel_constant(g, v, channels(g, n.outputs[0]));
  };
  // Candidates by their producer.
  std::set<int> kept;
  for (const auto& n : g.nodes) {
    if (n.removed || n.outputs.empty()) continue;
    if (!free_conv(n) && !is_transpose(n, kToNchw) && !is_follower(g, n)) continue;
    const int v = n.outputs[0];
    if (!outputs.count(v) && is_4d(g, v)) kept.insert(v);
  }
  // Readers that cannot take NHWC rule a value out (dead readers, left by folding, do not count).
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    if (n.removed || !live[ni]) continue;
    const bool conv = free_conv(n), follower = is_follower(g, n);
    const bool to_nhwc = is_transpose(n, kToNhwc) && !outputs.count(n.outputs[0]);
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!(conv && (i == 0 || i == 3)) && !follower && !to_nhwc) kept.erase(n.inputs[i]);
  }
  // A follower's inputs and output are all kept or none.
  keep_followers_whole(g, kept, [&](const Node& n) { return is_follower(g, n); }, per_channel_operand);
  // Components joined by followers; keep those touching a Transpose.
  std::map<int, int> parent;
  for (int v : kept) parent[v] = v;
  for (const auto& n : g.nodes) {
    if (!is_follower(g, n) || !kept.count(n.outputs[0])) continue;
    for (int v : n.inputs)
      if (v >= 0 && kept.count(v)) parent[find(parent, v)] = find(parent, n.outputs[0]);
  }
  std::set<int> useful;
  for (const auto& n : g.nodes) {
    if (is_transpose(n, kToNchw) && kept.count(n.outputs[0])) useful.insert(find(parent, n.outputs[0]));
    if (is_transpose(n, kToNhwc) && kept.count(n.inputs[0])) useful.insert(find(parent, n.inputs[0]));
  }
  for (auto it = kept.begin(); it != kept.end();) it = useful.count(find(parent, *it)) ? std::next(it) : kept.erase(it);
  if (kept.empty()) return Status::Ok();

  int convs = 0, transposes = 0, followers = 0;
  std::map<int, int> constant_nhwc;  // per-channel constant -> its [C] copy
  for (auto& n : g.nodes) {
    if (n.removed) continue;
    if (free_conv(n)) {
      bool any = false;
      if (kept.count(n.inputs[0])) n.attrs["x_layout"] = Attribute::String("nhwc"), any = true;
      if (n.inputs.size() > 3 && n.inputs[3] >= 0 && kept.count(n.inputs[3])) n.attrs["residual_layout"] = Attribute::String("nhwc"), any = true;
      if (kept.count(n.outputs[0])) n.attrs["y_layout"] = Attribute::String("nhwc"), any = true;
      convs += any;
    } else if (is_follower(g, n) && kept.count(n.outputs[0])) {
      ++followers;
      if (is_2d_global_average_pool(g, n)) {
        n.attrs["layout"] = Attribute::String("nhwc");
        continue;
      }
      const int64_t C = channels(g, n.outputs[0]);
      for (int& v : n.inputs) {
        if (!is_per_channel_constant(g, v, C) || g.values[v].constant.numel() == 1) continue;
        auto it = constant_nhwc.find(v);
        if (it == constant_nhwc.end()) {
          const std::string name = g.unique_name(g.values[v].name + "_nhwc");
          it = constant_nhwc.emplace(v, g.add_constant(name, per_channel_in_layout(g.values[v].constant, 0))).first;
        }
        v = it->second;
      }
    }
  }
  // The Transposes go: a kept value's Transpose(0, 2, 3, 1) is the value itself, and a kept
  // Transpose(0, 3, 1, 2) output is its input. The first kind first: one reading a kept
  // Transpose(0, 3, 1, 2) output must still see it kept.
  for (auto& n : g.nodes) {
    if (!is_transpose(n, kToNhwc) || !kept.count(n.inputs[0])) continue;
    g.replace_uses(n.outputs[0], n.inputs[0]);
    n.removed = true;
    ++transposes;
  }
  for (auto& n : g.nodes) {
    if (!is_transpose(n, kToNchw) || !kept.count(n.outputs[0])) continue;
    g.replace_uses(n.outputs[0], n.inputs[0]);
    kept.erase(n.outputs[0]);
    n.removed = true;
    ++transposes;
  }
  for (int v : kept) {
    auto& s = *g.values[v].shape;
    s = SymShape{s[0], s[2], s[3], s[1]};
  }
  ctx.log.push_back("nhwc_transpose_folding: " + std::to_string(transposes) + " Transposes removed; " + std::to_string(kept.size()) +
                    " values kept NHWC (" + std::to_string(convs) + " FusedConvs, " + std::to_string(followers) + " elementwise ops and pools)");
  return Status::Ok();
}

}  // namespace kiln
