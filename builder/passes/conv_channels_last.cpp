// conv_channels_last: oneDNN's convolutions compute in a layout of their own, NHWC on AVX-512 and
// nChw8c (channels in blocks of 8, [N, C/8, H, W, 8]) on AVX2, so a FusedConv reading and writing
// NCHW pays a reorder in, a reorder out and one for its residual: on mnasnet0_5 (AVX2) about 110
// reorders per inference. A value produced by a 2-D FusedConv and read only by 2-D FusedConvs (as X
// or residual), and not a graph output, is therefore kept in that layout: its producer writes it
// with y_layout, its readers take it with x_layout / residual_layout, and its recorded shape
// becomes the layout's ([N, H, W, C] or [N, C/8, H, W, 8]). A 2-D MaxPool or AveragePool between
// FusedConvs (ResNet's stem, GoogLeNet's inception branches, DenseNet's transitions) joins in with
// attribute layout when both its input and its output can be in the layout, and so does a Concat
// over the channels (SqueezeNet's fire modules, GoogLeNet's inception outputs, DenseNet's dense
// blocks) when all its inputs and its output can: the Concat kernel is layout-blind, only its axis
// moves (NHWC: 3; nChw8c: 1, the block axis, exact because every input's channels are whole
// blocks). Squeeze-excitation blocks join as well: a
// GlobalAveragePool (attribute layout; its [N, C, 1, 1] output in the layout) and elementwise ops
// all of whose inputs are in the layout (x * s broadcasts the same in it) or are constants varying
// at most along the channels (a BatchNormalization's scale and shift, which the pass rewrites into
// the layout's broadcast shape: DenseNet's pre-activation BN + ReLU on every dense Concat). A
// GlobalAveragePool whose readers cannot take the layout (a classifier head's Flatten) computes in
// it all the same, and a Reshape (a view: [N, C, 1, 1] has the same bytes in every layout) hands
// its readers NCHW. Every other value (graph inputs and outputs, what other ops read) keeps NCHW.
//
// The layout is the build machine's (cpu_info(), so KILN_MAX_CPU_ISA caps it): NHWC with AVX-512,
// nChw8c without. nChw8c needs the value's channels to be a multiple of 8: a value whose channels
// are not (or are unknown) stays NCHW rather than using padded blocks, so a tensor's shape always
// gives its channel count (FusedConv's kernels need it) and the convolution reorders it as before.
// In the torchvision zoo such values are 1x1 squeeze-excitation tensors, where a reorder is a few
// dozen floats, and ShuffleNet-V2's 58- and 116-channel branches, whose 1x1 convolutions run in
// NCHW on FusedConv's "nchw_direct" impl (runtime/kernels/nchw_conv_kernels.cpp). The layout is
// recorded in the attributes, so an engine built on one CPU runs unchanged on another: the kernels
// reorder where the recorded layout is not the one their primitive computes in.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "builder/passes/layout_ops.h"
#include "builder/passes/pass.h"
#include "runtime/cpu_features.h"

namespace kiln {

namespace {

// A 2-D FusedConv no earlier pass has given a layout (nhwc_transpose_folding's NHWC ones keep theirs).
bool is_free_2d_fused_conv(const Graph& g, const Node& n) { return is_2d_fused_conv(g, n) && !fused_conv_has_layout(n); }

// MaxPool (without the Indices output) or AveragePool over 2 spatial dims.
bool is_2d_pool(const Node& n) {
  if (n.removed || !n.domain.empty() || (n.op_type != "MaxPool" && n.op_type != "AveragePool") || n.inputs.size() != 1 ||
      n.outputs.size() != 1)
    return false;
  auto k = n.attrs.find("kernel_shape");
  return k != n.attrs.end() && k->second.ints.size() == 2;
}

// Concat of 4-D values over the channels (axis 1 or -3).
bool is_channel_concat(const Graph& g, const Node& n) {
  if (n.removed || !n.domain.empty() || n.op_type != "Concat" || n.inputs.empty() || n.outputs.size() != 1) return false;
  auto a = n.attrs.find("axis");
  const auto& shape = g.values[n.outputs[0]].shape;
  return a != n.attrs.end() && (a->second.i == 1 || a->second.i == -3) && shape && shape->size() == 4;
}

// Nodes whose one output takes the layout of their inputs (and needs them all in it).
bool is_layout_follower(const Graph& g, const Node& n) {
  if (n.attrs.count("layout")) return false;  // an earlier layout pass's pool
  return is_2d_pool(n) || is_channel_concat(g, n) || is_2d_global_average_pool(g, n) || is_layout_blind_elementwise(g, n);
}

// The channels of each value a FusedConv or a follower produces, where known: a FusedConv's from
// its weights, a pool's from its input, a Concat's summed over its inputs, an elementwise op's
// from its shape or its widest input.
std::map<int, int64_t> channel_counts(const Graph& g) {
  std::map<int, int64_t> c;
  auto known = [&](int v) -> int64_t {
    if (auto it = c.find(v); it != c.end()) return it->second;
    const auto& s = g.values[v].shape;
    return s && s->size() == 4 && (*s)[1].is_known() ? (*s)[1].value : -1;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& n : g.nodes) {
      int64_t ch = -1;
      if (is_free_2d_fused_conv(g, n)) {
        ch = g.values[n.inputs[1]].constant.shape()[0];
      } else if (is_2d_pool(n) || is_2d_global_average_pool(g, n)) {
        ch = known(n.inputs[0]);
      } else if (is_layout_blind_elementwise(g, n)) {
        ch = known(n.outputs[0]);
        for (int v : n.inputs) ch = v < 0 ? ch : std::max(ch, known(v));
      } else if (is_channel_concat(g, n)) {
        ch = 0;
        for (int v : n.inputs) ch = v < 0 || known(v) < 0 || ch < 0 ? -1 : ch + known(v);
      } else {
        continue;
      }
      if (ch >= 0 && !c.count(n.outputs[0])) {
        c[n.outputs[0]] = ch;
        changed = true;
      }
    }
  }
  return c;
}

}  // namespace

const char* conv_activation_layout_for_host() { return cpu_info().avx512 ? "nhwc" : "nchw8c"; }

Status conv_channels_last(Graph& g, PassContext& ctx) {
  const std::string layout = ctx.conv_layout.empty() ? conv_activation_layout_for_host() : ctx.conv_layout;
  if (layout != "nhwc" && layout != "nchw8c") return InvalidArgument("conv layout must be nhwc or nchw8c, got '" + layout + "'");
  const bool blocked = layout == "nchw8c";
  constexpr int64_t kBlock = 8;
  std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  std::map<int, int64_t> channels = channel_counts(g);
  // Values produced by a 2-D FusedConv, MaxPool or channel Concat: candidates until a reader that
  // cannot take the layout rules them out. The layout thus only ever starts at a FusedConv, so it
  // is always float32.
  std::set<int> kept;
  for (const auto& n : g.nodes) {
    if (!is_free_2d_fused_conv(g, n) && !is_layout_follower(g, n)) continue;
    const int v = n.outputs[0];
    if (outputs.count(v)) continue;
    if (blocked) {
      auto c = channels.find(v);
      if (c == channels.end() || c->second % kBlock != 0) continue;
    }
    kept.insert(v);
  }
  for (const auto& n : g.nodes) {
    if (n.removed) continue;
    const bool conv = is_free_2d_fused_conv(g, n), follower = is_layout_follower(g, n);
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!(conv && (i == 0 || i == 3)) && !follower) kept.erase(n.inputs[i]);
  }
  // The channels of a follower's output, for its per-channel constant operands.
  auto out_channels = [&](const Node& n) -> int64_t {
    auto c = channels.find(n.outputs[0]);
    return c == channels.end() ? -1 : c->second;
  };
  auto per_channel_operand = [&](const Node& n, int v) {
    return is_layout_blind_elementwise(g, n) && is_per_channel_constant(g, v, out_channels(n));
  };
  // A GlobalAveragePool's [N, C, 1, 1] output has the same bytes in every layout, so one whose
  // input is kept and whose readers cannot take the layout (a classifier head's Flatten) computes
  // in the layout and a Reshape gives its readers the NCHW shape.
  auto head_pool = [&](const Node& n) { return is_2d_global_average_pool(g, n) && kept.count(n.inputs[0]) && !kept.count(n.outputs[0]); };
  // A pool, Concat or elementwise op has one layout for its inputs and output: all kept or none
  // (which may undo others, hence the fixed point).
  keep_followers_whole(g, kept, [&](const Node& n) { return is_layout_follower(g, n) && !head_pool(n); }, per_channel_operand);
  if (kept.empty()) return Status::Ok();
  int pools = 0, concats = 0, elementwise = 0, heads = 0;
  std::map<int, int> constant_in_layout;  // per-channel constant -> its copy in the layout's shape
  std::vector<std::pair<size_t, Node>> reshapes;  // Reshapes to insert after the head pool at that index
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    Node& n = g.nodes[ni];
    if (head_pool(n)) {
      // The pool writes a new value in the layout; the Reshape [0, -1, 1, 1] writes the old one.
      const int old_y = n.outputs[0];
      const int y = g.add_value(g.unique_name(g.values[old_y].name + "_" + layout));
      g.values[y].dtype = g.values[old_y].dtype;
      g.values[y].shape = g.values[old_y].shape;  // made the layout's below
      channels[y] = channels.at(old_y);
      kept.insert(y);
      const int target = g.add_constant(g.unique_name(n.name + "_nchw_shape"), Tensor::from_vector<int64_t>({0, -1, 1, 1}, Shape{4}));
      Node r;
      r.name = n.name + "_nchw";
      r.op_type = "Reshape";
      r.inputs = {y, target};
      r.outputs = {old_y};
      g.nodes[ni].outputs[0] = y;
      g.nodes[ni].attrs["layout"] = Attribute::String(layout);
      reshapes.emplace_back(ni, std::move(r));
      ++pools;
      ++heads;
      continue;
    }
    if ((is_2d_pool(n) || is_2d_global_average_pool(g, n)) && kept.count(n.outputs[0])) {
      n.attrs["layout"] = Attribute::String(layout);
      ++pools;
    }
    if (is_layout_blind_elementwise(g, n) && kept.count(n.outputs[0])) {
      ++elementwise;
      for (int& v : n.inputs) {
        if (!is_per_channel_constant(g, v, out_channels(n)) || g.values[v].constant.numel() == 1) continue;
        auto it = constant_in_layout.find(v);
        if (it == constant_in_layout.end()) {
          Tensor t = per_channel_in_layout(g.values[v].constant, blocked ? kBlock : 0);
          const std::string name = g.unique_name(g.values[v].name + "_" + layout);
          it = constant_in_layout.emplace(v, g.add_constant(name, std::move(t))).first;
        }
        v = it->second;
      }
    }
    if (is_channel_concat(g, n) && kept.count(n.outputs[0])) {
      n.attrs["axis"] = Attribute::Int(blocked ? 1 : 3);
      ++concats;
    }
    if (!is_free_2d_fused_conv(g, n)) continue;
    if (kept.count(n.inputs[0])) n.attrs["x_layout"] = Attribute::String(layout);
    if (n.inputs.size() > 3 && n.inputs[3] >= 0 && kept.count(n.inputs[3])) n.attrs["residual_layout"] = Attribute::String(layout);
    if (kept.count(n.outputs[0])) n.attrs["y_layout"] = Attribute::String(layout);
  }
  if (!reshapes.empty()) {
    std::vector<Node> nodes;
    nodes.reserve(g.nodes.size() + reshapes.size());
    size_t next = 0;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      nodes.push_back(std::move(g.nodes[i]));
      if (next < reshapes.size() && reshapes[next].first == i) nodes.push_back(std::move(reshapes[next++].second));
    }
    g.nodes = std::move(nodes);
  }
  for (int v : kept) {
    auto& shape = g.values[v].shape;
    if (!shape || shape->size() != 4) {
      shape.reset();
    } else if (blocked) {
      const int64_t c = channels.at(v);
      shape = SymShape{(*shape)[0], Dim::known(c / kBlock), (*shape)[2], (*shape)[3], Dim::known(kBlock)};
    } else {
      shape = SymShape{(*shape)[0], (*shape)[2], (*shape)[3], (*shape)[1]};
    }
  }
  ctx.log.push_back("conv_channels_last: " + std::to_string(kept.size()) + " values between FusedConvs (" + std::to_string(pools) +
                    " pools, " + std::to_string(concats) + " Concats, " + std::to_string(elementwise) +
                    " elementwise ops joined) kept as " + layout + "; " + std::to_string(heads) +
                    " GlobalAveragePools reshaped back to NCHW for their readers");
  return Status::Ok();
}

}  // namespace kiln
