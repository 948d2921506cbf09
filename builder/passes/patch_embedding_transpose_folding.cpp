// patch_embedding_transpose_folding: a vision transformer turns its patch convolution's output into
// tokens with x.reshape(n, c, h * w).permute(0, 2, 1): Conv -> Reshape [N, C, H*W] -> Transpose(0, 2,
// 1) -> [N, H*W, C]. The Transpose is a strided copy of the whole activation (ViT-B/16: 768 x 196
// floats), while the tokens [N, H*W, C] are exactly the convolution's output in NHWC viewed as 3-D.
// FusedConv writes NHWC itself (y_layout), so the convolution writes NHWC, the Reshape becomes one to
// [N, H*W, C] (a view) and the Transpose's readers read it.
//
// Taken when the FusedConv is 2-D with no layout yet, its output [N, C, H, W] (C, H, W known) is read
// only by that Reshape, whose shape is a constant and whose output [N, C, H*W] is not a graph output
// and is read only by Transposes(0, 2, 1) whose outputs are not graph outputs either. Runs after
// conv_epilogue_fusion (it needs the FusedConvs) and before conv_channels_last, which would
// otherwise give the convolution the build CPU's blocked layout and leave the Transpose to undo it.
#include <optional>
#include <set>

#include "builder/passes/layout_ops.h"
#include "builder/passes/pass.h"

namespace kiln {

namespace {

bool is_token_transpose(const Node& n) {
  if (n.removed || !n.domain.empty() || n.op_type != "Transpose" || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  auto p = n.attrs.find("perm");
  return p != n.attrs.end() && p->second.ints == std::vector<int64_t>{0, 2, 1};
}

}  // namespace

Status patch_embedding_transpose_folding(Graph& g, PassContext& ctx) {
  const std::vector<bool> live = g.live_nodes();
  const std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  // Live readers of each value.
  std::vector<std::vector<int>> readers(g.values.size());
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    if (g.nodes[ni].removed || !live[ni]) continue;
    for (int v : g.nodes[ni].inputs)
      if (v >= 0) readers[v].push_back(static_cast<int>(ni));
  }
  int folded = 0;
  for (auto& reshape : g.nodes) {
    if (reshape.removed || !reshape.domain.empty() || reshape.op_type != "Reshape" || reshape.inputs.size() != 2) continue;
    auto allowzero = reshape.attrs.find("allowzero");
    if (allowzero != reshape.attrs.end() && allowzero->second.i != 0) continue;
    const int v = reshape.inputs[0], r = reshape.outputs[0];
    if (v < 0 || g.values[v].producer < 0 || !g.values[reshape.inputs[1]].is_constant()) continue;
    Node& conv = g.nodes[g.values[v].producer];
    if (!is_2d_fused_conv(g, conv) || fused_conv_has_layout(conv) || outputs.count(v) || outputs.count(r)) continue;
    if (readers[v].size() != 1 || readers[r].empty()) continue;
    bool all_transposes = true;
    for (int ni : readers[r]) all_transposes = all_transposes && is_token_transpose(g.nodes[ni]) && !outputs.count(g.nodes[ni].outputs[0]);
    if (!all_transposes) continue;
    // Copies: add_constant below grows g.values.
    const std::optional<SymShape> vs = g.values[v].shape, rs = g.values[r].shape;
    if (!vs || vs->size() != 4 || !rs || rs->size() != 3 || g.values[v].dtype != DType::kFloat32) continue;
    if (!(*vs)[1].is_known() || !(*vs)[2].is_known() || !(*vs)[3].is_known() || !(*rs)[1].is_known() || !(*rs)[2].is_known()) continue;
    const int64_t C = (*vs)[1].value, H = (*vs)[2].value, W = (*vs)[3].value;
    if ((*rs)[1].value != C || (*rs)[2].value != H * W || !((*rs)[0] == (*vs)[0])) continue;

    conv.attrs["y_layout"] = Attribute::String("nhwc");
    g.values[v].shape = SymShape{(*vs)[0], (*vs)[2], (*vs)[3], (*vs)[1]};
    // 0 copies N (allowzero is off), -1 is H*W: the same constant serves every batch size.
    reshape.inputs[1] = g.add_constant(g.unique_name(reshape.name + "_tokens_shape"), Tensor::from_vector<int64_t>({0, -1, C}, Shape{3}));
    g.values[r].shape = SymShape{(*rs)[0], Dim::known(H * W), Dim::known(C)};
    for (int ni : readers[r]) {
      Node& t = g.nodes[ni];
      g.replace_uses(t.outputs[0], r);
      t.removed = true;
    }
    ++folded;
  }
  if (folded > 0)
    ctx.log.push_back("patch_embedding_transpose_folding: " + std::to_string(folded) +
                      " convolutions write their tokens in NHWC; their Transposes removed");
  return Status::Ok();
}

}  // namespace kiln
