// attention_patterns.h: internals of the attention_fusion pass (attention_fusion.cpp), shared by
// its files and by nothing else. Matcher (attention_shape_helpers.cpp) is the graph view the
// matchers use: producers, readers, shapes derived where shape inference left them unknown, and
// scalars/dims computed from constants and Shape arithmetic. match_site (attention_patterns.cpp)
// proves one Softmax site is an attention of a recognized layout and describes it as a Fused.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "builder/passes/pass.h"
#include "builder/shapes/dim.h"

namespace kiln {
namespace attention_fusion_detail {

using Ints = std::vector<int64_t>;

// A masked-out score is at or below this: exp() of it relative to any visible score is 0 in float.
constexpr double kMaskFillMax = -1e4;

struct Fused {
  std::string layout;
  int64_t heads = 0, head_dim = 0;
  double scale = 1.0;
  std::string mask = "none";
  int mask_value = -1;          // bool/additive mask input
  bool mask_negate = false;     // the graph has the inverse of the mask: insert a Not
  bool kv_cache = false;
  int q = -1, k = -1, v = -1, k_cache = -1, v_cache = -1;
  int out = -1, k_all = -1, v_all = -1;  // values the fused node produces (taken over)
  bool seq_first = false;       // sbd: q/k/v are [S,B,D]; out needs a Reshape to [S,B·H,Dh]
  // A validity mask built from a position (key j shown iff j <= pos, as `arange(N) <= cur_pos`):
  // the fused node gets live length pos + live_offset as input 6 and no mask for it.
  int live_pos = -1;
  int64_t live_offset = 0;
  std::vector<int> core;        // nodes replaced
};

class Matcher {
 public:
  Matcher(Graph& g, const DimRanges& ranges) : g_(g), ranges_(ranges) { refresh(); }

  void refresh();

  Node* producer(int v) {
    if (v < 0) return nullptr;
    const int p = g_.values[v].producer;
    if (p < 0 || g_.nodes[p].removed) return nullptr;
    return &g_.nodes[p];
  }
  int index_of(const Node* n) const { return static_cast<int>(n - g_.nodes.data()); }
  Node* producer_op(int v, const char* op) {
    Node* n = producer(v);
    return n && n->domain.empty() && n->op_type == op ? n : nullptr;
  }
  // Exactly one reader, which is not a graph output: the value may disappear with the chain.
  bool single_use(int v) const { return v >= 0 && consumers_[v].size() == 1 && !is_output_[v]; }

  // The value's shape; where shape inference left it unknown (symbolic slices, positions from
  // Range, ...), derived here from the producers' operands, with unknown dims where needed.
  const std::optional<SymShape>& shape(int v);

  static Dim merge_broadcast(const std::vector<Dim>& ds);
  std::optional<SymShape> broadcast_of(const std::vector<int>& vs);
  std::optional<SymShape> derive(int v);

  int rank(int v) { return shape(v) ? static_cast<int>(shape(v)->size()) : -1; }
  Dim dim(int v, int axis) {
    const int r = rank(v);
    if (r < 0) return Dim{};
    if (axis < 0) axis += r;
    return axis >= 0 && axis < r ? (*shape(v))[axis] : Dim{};
  }

  static std::optional<Ints> perm(const Node& n) {
    auto it = n.attrs.find("perm");
    if (it == n.attrs.end()) return std::nullopt;
    return it->second.ints;
  }
  Node* transpose_of(int v, const Ints& p) {
    Node* t = producer_op(v, "Transpose");
    return t && perm(*t) == p ? t : nullptr;
  }

  // (value, axis) when `v` is one dim of a value's shape: Shape(x)[i] via Gather or a one-element
  // Slice, through Squeeze/Unsqueeze/Cast.
  std::optional<std::pair<int, int>> dim_ref(int v, int depth = 0);

  // The value of a scalar computed from constants and known dims (e.g. GPT-2's
  // Pow(Cast(Shape(v)[-1]), 0.5)); nullopt when it is not provably one number.
  std::optional<double> scalar(int v, int depth = 0);
  // Why scalar(v) fails, naming the operand (e.g. a dim that is symbolic in this profile).
  std::string scalar_blocker(int v, int depth = 0);

  // Elements of a small integer operand (a reshape target, slice bounds), possibly symbolic.
  std::optional<std::vector<Dim>> dims_value(int v);

  Graph& g_;
  const DimRanges& ranges_;  // the profile's ranged symbols
  std::map<int, std::optional<SymShape>> derived_;
  std::vector<std::vector<int>> consumers_;
  std::vector<bool> is_output_;
};

bool same_dim(const Dim& a, const Dim& b);

// Mirrors shape inference's naming of a symbolic difference, so a slice start computed by the
// exporter's Shape arithmetic compares equal to key_len - query_len.
Dim sub_dim(const Dim& a, const Dim& b);

// Proves the site at `softmax` is one attention and describes it in `f`; returns an empty string on
// success, else why the site does not match (`f` is then unspecified).
std::string match_site(Matcher& m, Node& softmax, Fused& f);

}  // namespace attention_fusion_detail
}  // namespace kiln
