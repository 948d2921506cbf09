// elementwise_pool_fusion: a 2x2, stride-2 AveragePool without padding whose input is a
// kiln::FusedElementwise (norm none, no softmax) that nothing else reads becomes part of that node
// (attribute pool_layout, runtime/kernels/fused_elementwise.h): the program runs over two input
// rows at a time and they are pooled while in cache, so its full-resolution result is never
// written by one step and read back by the next. DenseNet's transitions are the case: their
// pre-activation BN + ReLU feeds the 2x2 pool that pool_before_pointwise_conv moved ahead of the 1x1
// convolution (in densenet121 a 3.2 MB activation a transition, written and read once less).
//
// The pool's order of additions and divisor are the unfused kernel's, so the result is the same to
// the bit. Conditions: kernel_shape [2, 2], strides [2, 2], no padding (pads 0, auto_pad NOTSET or
// VALID), dilations 1, ceil_mode 0 (floor: an odd last row or column is dropped, as with the
// unfused pool; count_include_pad then changes nothing), one output. Runs after
// conv_channels_last, which gives the pool its layout attribute (nhwc / nchw8c; absent: NCHW) and
// the FusedElementwise its layout's shapes; the fused node takes over the pool's layout.
#include "builder/passes/pass.h"

namespace kiln {

namespace {

bool ints_equal(const Node& n, const char* attr, std::initializer_list<int64_t> want, bool absent_ok) {
  auto it = n.attrs.find(attr);
  if (it == n.attrs.end()) return absent_ok;
  return std::vector<int64_t>(want) == it->second.ints;
}

bool all_zero(const Node& n, const char* attr) {
  auto it = n.attrs.find(attr);
  if (it == n.attrs.end()) return true;
  for (int64_t v : it->second.ints)
    if (v != 0) return false;
  return true;
}

// The layout name of a fusable pool ("nchw", "nhwc", "nchw8c"), or empty.
std::string fusable_pool_layout(const Node& n) {
  if (n.removed || !n.domain.empty() || n.op_type != "AveragePool" || n.inputs.size() != 1 || n.outputs.size() != 1) return "";
  if (!ints_equal(n, "kernel_shape", {2, 2}, false) || !ints_equal(n, "strides", {2, 2}, false)) return "";
  if (!ints_equal(n, "dilations", {1, 1}, true) || !all_zero(n, "pads")) return "";
  auto ap = n.attrs.find("auto_pad");
  if (ap != n.attrs.end() && ap->second.s != "NOTSET" && ap->second.s != "VALID") return "";
  auto cm = n.attrs.find("ceil_mode");
  if (cm != n.attrs.end() && cm->second.i != 0) return "";
  auto lay = n.attrs.find("layout");
  const std::string layout = lay == n.attrs.end() ? "nchw" : lay->second.s;
  return layout == "nchw" || layout == "nhwc" || layout == "nchw8c" ? layout : "";
}

bool is_plain_fused(const Node& n) {
  if (n.removed || n.domain != kKilnDomain || n.op_type != "FusedElementwise" || n.outputs.size() != 1) return false;
  auto norm = n.attrs.find("norm");
  auto sm = n.attrs.find("softmax");
  return (norm == n.attrs.end() || norm->second.s == "none") && (sm == n.attrs.end() || sm->second.i == 0) && !n.attrs.count("pool_layout");
}

}  // namespace

Status elementwise_pool_fusion(Graph& g, PassContext& ctx) {
  const std::vector<int> uses = g.use_counts();
  std::vector<bool> is_output(g.values.size(), false);
  for (int v : g.outputs) is_output[static_cast<size_t>(v)] = true;
  int fused = 0;
  for (Node& pool : g.nodes) {
    const std::string layout = fusable_pool_layout(pool);
    if (layout.empty()) continue;
    const int v = pool.inputs[0];
    const int p = v >= 0 ? g.values[v].producer : -1;
    if (p < 0 || !is_plain_fused(g.nodes[p]) || uses[v] != 1 || is_output[v]) continue;
    const auto& shape = g.values[v].shape;
    if (!shape || shape->size() != (layout == "nchw8c" ? 5u : 4u) || g.values[v].dtype != DType::kFloat32) continue;
    Node& f = g.nodes[p];
    f.attrs["pool_layout"] = Attribute::String(layout);
    f.outputs = pool.outputs;
    f.replaced_nodes.push_back(pool.name);
    pool.removed = true;
    ctx.log.push_back("elementwise_pool_fusion: " + pool.name + " -> into " + f.name);
    ++fused;
  }
  if (fused) {
    g.compact();
    ctx.log.push_back("elementwise_pool_fusion: " + std::to_string(fused) + " AveragePools joined the kiln::FusedElementwise before them");
  }
  return Status::Ok();
}

}  // namespace kiln
