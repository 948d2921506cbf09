// conv_channels_last: oneDNN's AVX-512 convolutions compute in NHWC, so a FusedConv reading and
// writing NCHW pays a reorder in, a reorder out and one for its residual: in ResNet-18 about 40
// small parallel regions per inference, each one a wake-up of the OpenMP workers. A value produced
// by a 2-D FusedConv and read only by 2-D FusedConvs (as X or residual), and not a graph output,
// is therefore kept as NHWC: its producer writes it with y_layout "nhwc", its readers take it with
// x_layout / residual_layout "nhwc", and its recorded shape becomes [N, H, W, C]. A 2-D MaxPool
// between FusedConvs (ResNet's stem) joins in with layout "nhwc" when both its input and its output
// can be NHWC. Every other value (graph inputs and outputs, what other ops read) keeps NCHW, so
// nothing but FusedConv and those MaxPools ever sees the layout.
#include <set>

#include "builder/passes/pass.h"

namespace kiln {

namespace {

bool is_2d_fused_conv(const Graph& g, const Node& n) {
  return !n.removed && n.domain == kKilnDomain && n.op_type == "FusedConv" && n.inputs.size() >= 2 && n.inputs[1] >= 0 &&
         g.values[n.inputs[1]].is_constant() && g.values[n.inputs[1]].constant.shape().rank() == 4;
}

// MaxPool over 2 spatial dims without the Indices output.
bool is_2d_max_pool(const Node& n) {
  if (n.removed || !n.domain.empty() || n.op_type != "MaxPool" || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  auto k = n.attrs.find("kernel_shape");
  return k != n.attrs.end() && k->second.ints.size() == 2;
}

}  // namespace

Status conv_channels_last(Graph& g, PassContext& ctx) {
  std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  // Values produced by a 2-D FusedConv or MaxPool: candidates until a reader that cannot take NHWC
  // rules them out. NHWC thus only ever starts at a FusedConv, so it is always float32.
  std::set<int> nhwc;
  for (const auto& n : g.nodes)
    if ((is_2d_fused_conv(g, n) || is_2d_max_pool(n)) && !outputs.count(n.outputs[0])) nhwc.insert(n.outputs[0]);
  for (const auto& n : g.nodes) {
    if (n.removed) continue;
    const bool conv = is_2d_fused_conv(g, n), pool = is_2d_max_pool(n);
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!(conv && (i == 0 || i == 3)) && !pool) nhwc.erase(n.inputs[i]);
  }
  // A MaxPool has one layout for input and output: both NHWC or neither (which may undo others).
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& n : g.nodes)
      if (is_2d_max_pool(n) && nhwc.count(n.inputs[0]) != nhwc.count(n.outputs[0])) {
        nhwc.erase(n.inputs[0]);
        nhwc.erase(n.outputs[0]);
        changed = true;
      }
  }
  if (nhwc.empty()) return Status::Ok();
  for (auto& n : g.nodes) {
    if (is_2d_max_pool(n) && nhwc.count(n.outputs[0])) n.attrs["layout"] = Attribute::String("nhwc");
    if (!is_2d_fused_conv(g, n)) continue;
    if (nhwc.count(n.inputs[0])) n.attrs["x_layout"] = Attribute::String("nhwc");
    if (n.inputs.size() > 3 && nhwc.count(n.inputs[3])) n.attrs["residual_layout"] = Attribute::String("nhwc");
    if (nhwc.count(n.outputs[0])) n.attrs["y_layout"] = Attribute::String("nhwc");
  }
  for (int v : nhwc) {
    auto& shape = g.values[v].shape;
    if (shape && shape->size() == 4) shape = SymShape{(*shape)[0], (*shape)[2], (*shape)[3], (*shape)[1]};
    else shape.reset();
  }
  ctx.log.push_back("conv_channels_last: " + std::to_string(nhwc.size()) + " values between FusedConvs (and MaxPools) kept as NHWC");
  return Status::Ok();
}

}  // namespace kiln
