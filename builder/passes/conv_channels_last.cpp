// conv_channels_last: oneDNN's convolutions compute in a layout of their own, NHWC on AVX-512 and
// nChw8c (channels in blocks of 8, [N, C/8, H, W, 8]) on AVX2, so a FusedConv reading and writing
// NCHW pays a reorder in, a reorder out and one for its residual: on mnasnet0_5 (AVX2) about 110
// reorders per inference. A value produced by a 2-D FusedConv and read only by 2-D FusedConvs (as X
// or residual), and not a graph output, is therefore kept in that layout: its producer writes it
// with y_layout, its readers take it with x_layout / residual_layout, and its recorded shape
// becomes the layout's ([N, H, W, C] or [N, C/8, H, W, 8]). A 2-D MaxPool between FusedConvs
// (ResNet's stem, GoogLeNet's inception branches) joins in with attribute layout when both its
// input and its output can be in the layout, and so does a Concat over the channels (SqueezeNet's
// fire modules, GoogLeNet's inception outputs) when all its inputs and its output can: the Concat
// kernel is layout-blind, only its axis moves (NHWC: 3; nChw8c: 1, the block axis, exact because
// every input's channels are whole blocks). Squeeze-excitation blocks join as well: a
// GlobalAveragePool (attribute layout; its [N, C, 1, 1] output in the layout) and elementwise ops
// all of whose inputs are in the layout (x * s broadcasts the same in it). Every other value (graph
// inputs and outputs, what other ops read) keeps NCHW.
//
// The layout is the build machine's (cpu_info(), so KILN_MAX_CPU_ISA caps it): NHWC with AVX-512,
// nChw8c without. nChw8c needs the value's channels to be a multiple of 8: a value whose channels
// are not (or are unknown) stays NCHW rather than using padded blocks, so a tensor's shape always
// gives its channel count (FusedConv's kernels need it) and the convolution reorders it as before.
// In the torchvision zoo the only such values are 1x1 squeeze-excitation tensors, where a reorder
// is a few dozen floats. The layout is recorded in the attributes, so an engine built on one CPU
// runs unchanged on another: the kernels reorder where the recorded layout is not the one their
// primitive computes in.
#include <algorithm>
#include <map>
#include <set>

#include "builder/passes/pass.h"
#include "runtime/cpu_features.h"

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

// Concat of 4-D values over the channels (axis 1 or -3).
bool is_channel_concat(const Graph& g, const Node& n) {
  if (n.removed || !n.domain.empty() || n.op_type != "Concat" || n.inputs.empty() || n.outputs.size() != 1) return false;
  auto a = n.attrs.find("axis");
  const auto& shape = g.values[n.outputs[0]].shape;
  return a != n.attrs.end() && (a->second.i == 1 || a->second.i == -3) && shape && shape->size() == 4;
}

// GlobalAveragePool of a 4-D value (squeeze-excitation's squeeze).
bool is_2d_global_average_pool(const Graph& g, const Node& n) {
  if (n.removed || !n.domain.empty() || n.op_type != "GlobalAveragePool" || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  const auto& shape = g.values[n.outputs[0]].shape;
  return shape && shape->size() == 4;
}

// An elementwise op whose kernel is blind to the layout when every input is in it: the inputs then
// broadcast against each other in the layout's shapes exactly as in NCHW (a kept value's channels
// are never a broadcast 1 in nChw8c, being a multiple of 8; NHWC moves C and keeps the others'
// order). Squeeze-excitation's rescaling x * s, s of shape [N, C, 1, 1], is the case that matters.
bool is_layout_blind_elementwise(const Graph& g, const Node& n) {
  if (n.removed || n.outputs.size() != 1 || n.inputs.empty()) return false;
  const auto& shape = g.values[n.outputs[0]].shape;
  if (!shape || shape->size() != 4) return false;
  if (n.domain == kKilnDomain && n.op_type == "FusedElementwise") {
    auto norm = n.attrs.find("norm");
    return norm == n.attrs.end() || norm->second.s == "none";
  }
  static const std::set<std::string> kOps = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Relu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid"};
  return n.domain.empty() && kOps.count(n.op_type) > 0;
}

// Nodes whose one output takes the layout of their inputs (and needs them all in it).
bool is_layout_follower(const Graph& g, const Node& n) {
  return is_2d_max_pool(n) || is_channel_concat(g, n) || is_2d_global_average_pool(g, n) || is_layout_blind_elementwise(g, n);
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
      if (is_2d_fused_conv(g, n)) {
        ch = g.values[n.inputs[1]].constant.shape()[0];
      } else if (is_2d_max_pool(n) || is_2d_global_average_pool(g, n)) {
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
  const std::map<int, int64_t> channels = channel_counts(g);
  // Values produced by a 2-D FusedConv, MaxPool or channel Concat: candidates until a reader that
  // cannot take the layout rules them out. The layout thus only ever starts at a FusedConv, so it
  // is always float32.
  std::set<int> kept;
  for (const auto& n : g.nodes) {
    if (!is_2d_fused_conv(g, n) && !is_layout_follower(g, n)) continue;
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
    const bool conv = is_2d_fused_conv(g, n), follower = is_layout_follower(g, n);
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!(conv && (i == 0 || i == 3)) && !follower) kept.erase(n.inputs[i]);
  }
  // A MaxPool or Concat has one layout for its inputs and output: all kept or none (which may undo
  // others, hence the fixed point).
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& n : g.nodes) {
      if (!is_layout_follower(g, n)) continue;
      bool all = kept.count(n.outputs[0]) > 0, any = all;
      for (int v : n.inputs) {
        all = all && v >= 0 && kept.count(v);
        any = any || (v >= 0 && kept.count(v));
      }
      if (all || !any) continue;
      for (int v : n.inputs)
        if (v >= 0) kept.erase(v);
      kept.erase(n.outputs[0]);
      changed = true;
    }
  }
  if (kept.empty()) return Status::Ok();
  int pools = 0, concats = 0, elementwise = 0;
  for (auto& n : g.nodes) {
    if ((is_2d_max_pool(n) || is_2d_global_average_pool(g, n)) && kept.count(n.outputs[0])) {
      n.attrs["layout"] = Attribute::String(layout);
      ++pools;
    }
    if (is_layout_blind_elementwise(g, n) && kept.count(n.outputs[0])) ++elementwise;
    if (is_channel_concat(g, n) && kept.count(n.outputs[0])) {
      n.attrs["axis"] = Attribute::Int(blocked ? 1 : 3);
      ++concats;
    }
    if (!is_2d_fused_conv(g, n)) continue;
    if (kept.count(n.inputs[0])) n.attrs["x_layout"] = Attribute::String(layout);
    if (n.inputs.size() > 3 && n.inputs[3] >= 0 && kept.count(n.inputs[3])) n.attrs["residual_layout"] = Attribute::String(layout);
    if (kept.count(n.outputs[0])) n.attrs["y_layout"] = Attribute::String(layout);
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
                    " elementwise ops joined) kept as " + layout);
  return Status::Ok();
}

}  // namespace kiln
