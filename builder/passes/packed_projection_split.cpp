// packed_projection_split: nn.MultiheadAttention (torchvision's ViT) projects q, k and v with one
// packed weight, x·W[E, 3E] + b[3E], and exports the three as Slices of that product along its
// last axis. Each Slice copies a third of the product, and
// selected_row_narrowing cannot narrow the queries' projection alone, since k and v, which every
// token needs, come from the same MatMul. Here each such Slice becomes its own MatMul with the
// matching columns of the constant weight (and Add of the bias' slice): the same FLOPs, no copies,
// and the query projection narrows with the attention's queries. Applied only when the product
// (and the bias sum) is read by nothing but these Slices, which together take at most its columns.
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "builder/passes/pass.h"

namespace kiln {

// Columns [begin, end) of the last axis (of `n` columns) that Slice node `s` keeps, when it slices
// only that axis with step 1 and constant bounds.
std::optional<std::pair<int64_t, int64_t>> last_axis_columns(const Graph& g, const Node& s, int rank, int64_t n) {
  if (s.op_type != "Slice" || !s.domain.empty() || s.inputs.size() < 4 || s.outputs.size() != 1) return std::nullopt;
  auto start = g.scalar_int(s.inputs[1]), end = g.scalar_int(s.inputs[2]), axis = g.scalar_int(s.inputs[3]);
  const auto step = s.inputs.size() > 4 && s.inputs[4] >= 0 ? g.scalar_int(s.inputs[4]) : std::optional<int64_t>(1);
  if (!start || !end || !axis || step != 1) return std::nullopt;
  if (*axis != -1 && *axis != rank - 1) return std::nullopt;
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  const int64_t b = clamp(*start), e = clamp(*end);
  if (e <= b) return std::nullopt;
  return std::make_pair(b, e);
}

namespace {

// Columns [begin, end) of a row-major [rows, cols] float tensor (rows = 1 for a vector).
Tensor columns(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t cols = t.shape()[t.shape().rank() - 1], rows = t.numel() / cols, w = end - begin;
  Shape shape = t.shape();
  shape[shape.rank() - 1] = w;
  Tensor r = Tensor::zeros(DType::kFloat32, shape);
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(r.as<float>() + i * w, t.as<const float>() + i * cols + begin, sizeof(float) * static_cast<size_t>(w));
  return r;
}

struct Site {
  int matmul = -1, bias_add = -1;  // node indices (bias_add -1: no bias)
  int bias = -1;                   // the bias constant [N]
  std::vector<int> slices;
};

}  // namespace

Status packed_projection_split(Graph& g, PassContext& ctx) {
  const std::vector<bool> live = g.live_nodes();
  std::vector<std::vector<int>> readers(g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (live[i])
      for (int v : g.nodes[i].inputs)
        if (v >= 0) readers[v].push_back(static_cast<int>(i));
  std::vector<bool> is_output(g.values.size(), false);
  for (int o : g.outputs) is_output[o] = true;

  std::vector<Site> sites;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& mm = g.nodes[i];
    if (!live[i] || mm.op_type != "MatMul" || !mm.domain.empty() || mm.inputs.size() != 2) continue;
    const Value& w = g.values[mm.inputs[1]];
    const Value& y = g.values[mm.outputs[0]];
    if (!w.is_constant() || w.constant.dtype() != DType::kFloat32 || w.constant.shape().rank() != 2) continue;
    if (!y.shape || y.shape->size() < 2 || is_output[mm.outputs[0]]) continue;
    const int64_t n = w.constant.shape()[1];
    Site s;
    s.matmul = static_cast<int>(i);
    int product = mm.outputs[0];
    // An optional bias: Add(product, b[N]) or Add(b[N], product), read by nothing else.
    if (readers[product].size() == 1) {
      const Node& add = g.nodes[readers[product][0]];
      if (add.op_type == "Add" && add.domain.empty() && add.inputs.size() == 2) {
        const int b = add.inputs[0] == product ? add.inputs[1] : add.inputs[0];
        const Value& bv = g.values[b];
        if (b != product && bv.is_constant() && bv.constant.dtype() == DType::kFloat32 &&
            bv.constant.shape() == Shape{n} && !is_output[add.outputs[0]]) {
          s.bias_add = readers[product][0];
          s.bias = b;
          product = add.outputs[0];
        }
      }
    }
    const int rank = static_cast<int>(y.shape->size());
    int64_t taken = 0;
    bool ok = !readers[product].empty();
    for (int r : readers[product]) {
      const Node& sl = g.nodes[r];
      auto cols = ok && sl.inputs[0] == product ? last_axis_columns(g, sl, rank, n) : std::nullopt;
      if (!cols || std::count(sl.inputs.begin(), sl.inputs.end(), product) != 1) {
        ok = false;
        break;
      }
      taken += cols->second - cols->first;
      s.slices.push_back(r);
    }
    // Overlapping Slices would compute some columns twice: keep the one packed product then.
    if (ok && taken <= n && s.slices.size() > 1) sites.push_back(std::move(s));
  }
  if (sites.empty()) return Status::Ok();

  // Each Slice's node is replaced, where it stands, by MatMul(x, W[:, cols]) (+ Add(b[cols])),
  // writing the Slice's own output value: readers and shapes after it are unchanged.
  std::vector<std::vector<Node>> replacement(g.nodes.size());
  for (const Site& s : sites) {
    const Node mm = g.nodes[s.matmul];
    // Copies: add_constant below grows g.values, which would leave references dangling.
    const Tensor w = Tensor::copy_of(g.values[mm.inputs[1]].constant.view());
    const Tensor bias = s.bias >= 0 ? Tensor::copy_of(g.values[s.bias].constant.view()) : Tensor();
    const int64_t n = w.shape()[1];
    const int rank = static_cast<int>(g.values[mm.outputs[0]].shape->size());
    for (int si : s.slices) {
      const Node& sl = g.nodes[si];
      const auto [b, e] = *last_axis_columns(g, sl, rank, n);
      const int out = sl.outputs[0];
      const std::string base = sl.name + "/" + mm.name.substr(mm.name.rfind('/') + 1) + "_cols";
      Node m;
      m.name = g.unique_name(base);
      m.op_type = "MatMul";
      m.inputs = {mm.inputs[0], g.add_constant(g.unique_name(base + "_weight"), columns(w, b, e))};
      if (s.bias >= 0) {
        const int mid = g.add_value(g.unique_name(base + "_product"));
        g.values[mid].dtype = DType::kFloat32;
        if (const auto& ys = g.values[out].shape) g.values[mid].shape = ys;
        m.outputs = {mid};
        Node a;
        a.name = g.unique_name(base + "_bias");
        a.op_type = "Add";
        a.inputs = {mid, g.add_constant(g.unique_name(base + "_bias"), columns(bias, b, e))};
        a.outputs = {out};
        replacement[si].push_back(std::move(m));
        replacement[si].push_back(std::move(a));
      } else {
        m.outputs = {out};
        replacement[si].push_back(std::move(m));
      }
    }
    g.nodes[s.matmul].removed = true;
    if (s.bias_add >= 0) g.nodes[s.bias_add].removed = true;
    ctx.log.push_back("packed_projection_split: '" + mm.name + "' (" + std::to_string(n) + " columns) split into " +
                      std::to_string(s.slices.size()) + " MatMuls, one per Slice of its product");
  }
  std::vector<Node> order;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (replacement[i].empty()) {
      order.push_back(std::move(g.nodes[i]));
    } else {
      for (Node& r : replacement[i]) order.push_back(std::move(r));
    }
  }
  g.nodes = std::move(order);
  g.compact();
  return Status::Ok();
}

}  // namespace kiln
