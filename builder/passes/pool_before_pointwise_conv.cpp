// pool_before_pointwise_conv: AveragePool(Conv1x1(x)) = Conv1x1(AveragePool(x)).
//
// A 1x1, stride-1, unpadded convolution is the same linear map W x + b at every pixel, and an
// average pool without padding takes weighted sums of pixels whose weights add up to 1, so the two
// commute, bias included. Pooling first runs the convolution on the pooled pixels: DenseNet's
// transitions (BN, ReLU, 1x1 conv, 2x2/2 average pool) do a quarter of their convolution FLOPs
// (205 -> 51 MFLOP each in densenet121), against a pool over the conv's input channels instead of
// its output channels.
//
// Conditions: the Conv has a constant weight [OC, C/group, 1, 1] (any group: a grouped 1x1 is
// per-pixel linear too), no padding, stride and dilation 1, and its output is read by the
// AveragePool alone (and is no graph output); the AveragePool is 2-D with no padding, dilation 1,
// and not count_include_pad with ceil_mode (a partial window whose divisor would count taps past
// the image: there the bias would not average to itself). Nothing between them may be an
// activation: the pool must read the Conv's output directly.
#include "builder/passes/pass.h"

namespace kiln {

namespace {

bool all_equal(const Node& n, const char* attr, int64_t v) {
  auto it = n.attrs.find(attr);
  if (it == n.attrs.end()) return true;
  for (int64_t x : it->second.ints)
    if (x != v) return false;
  return true;
}

int64_t int_attr(const Node& n, const char* attr, int64_t dflt) {
  auto it = n.attrs.find(attr);
  return it == n.attrs.end() ? dflt : it->second.i;
}

bool no_auto_pad(const Node& n) {
  auto it = n.attrs.find("auto_pad");
  return it == n.attrs.end() || it->second.s == "NOTSET" || it->second.s == "VALID";
}

bool is_pointwise_conv(const Graph& g, const Node& n) {
  if (n.removed || !n.domain.empty() || n.op_type != "Conv" || n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  const Value& w = g.values[n.inputs[1]];
  if (!w.is_constant() || w.constant.shape().rank() != 4 || w.constant.shape()[2] != 1 || w.constant.shape()[3] != 1) return false;
  if (n.inputs.size() > 2 && n.inputs[2] >= 0 && !g.values[n.inputs[2]].is_constant()) return false;
  return no_auto_pad(n) && all_equal(n, "pads", 0) && all_equal(n, "strides", 1) && all_equal(n, "dilations", 1);
}

bool is_unpadded_average_pool(const Node& n) {
  if (n.removed || !n.domain.empty() || n.op_type != "AveragePool" || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  auto k = n.attrs.find("kernel_shape");
  if (k == n.attrs.end() || k->second.ints.size() != 2) return false;
  if (int_attr(n, "count_include_pad", 0) != 0 && int_attr(n, "ceil_mode", 0) != 0) return false;
  return no_auto_pad(n) && all_equal(n, "pads", 0) && all_equal(n, "dilations", 1);
}

}  // namespace

Status pool_before_pointwise_conv(Graph& g, PassContext& ctx) {
  const std::vector<int> uses = g.use_counts();
  std::vector<int> producer(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!g.nodes[i].removed)
      for (int o : g.nodes[i].outputs) producer[o] = static_cast<int>(i);
  std::vector<bool> is_output(g.values.size(), false);
  for (int o : g.outputs) is_output[o] = true;
  for (size_t pi = 0; pi < g.nodes.size(); ++pi) {
    if (!is_unpadded_average_pool(g.nodes[pi])) continue;
    const int c = g.nodes[pi].inputs[0];
    if (c < 0 || producer[c] < 0 || uses[c] != 1 || is_output[c]) continue;
    const size_t ci = static_cast<size_t>(producer[c]);
    if (!is_pointwise_conv(g, g.nodes[ci])) continue;
    const int x = g.nodes[ci].inputs[0], y = g.nodes[pi].outputs[0];
    const Value& xv = g.values[x];
    const Value& yv = g.values[y];
    if (!xv.shape || xv.shape->size() != 4 || !yv.shape || yv.shape->size() != 4) continue;
    // c becomes the pooled x: x's batch and channels, the pool's output pixels.
    g.values[c].shape = SymShape{(*xv.shape)[0], (*xv.shape)[1], (*yv.shape)[2], (*yv.shape)[3]};
    g.values[c].dtype = xv.dtype;
    Node pool = std::move(g.nodes[pi]), conv = std::move(g.nodes[ci]);
    pool.inputs[0] = x;
    pool.outputs[0] = c;
    conv.inputs[0] = c;
    conv.outputs[0] = y;
    // The pool takes the conv's place (after x's producer), the conv the pool's (before y's readers).
    g.nodes[ci] = std::move(pool);
    g.nodes[pi] = std::move(conv);
    producer[c] = static_cast<int>(ci);
    producer[y] = static_cast<int>(pi);
    ctx.log.push_back("pool_before_pointwise_conv: " + g.describe_node(g.nodes[ci]) + " now before " + g.describe_node(g.nodes[pi]));
  }
  return Status::Ok();
}

}  // namespace kiln
