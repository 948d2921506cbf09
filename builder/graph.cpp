#include "builder/graph.h"

#include <algorithm>

namespace kiln {

std::string sym_shape_str(const SymShape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += s[i].str();
  }
  return out + "]";
}

bool sym_shape_concrete(const SymShape& s) {
  for (const auto& d : s)
    if (!d.is_known()) return false;
  return true;
}

Shape to_shape(const SymShape& s) {
  Shape out;
  for (const auto& d : s) out.push_back(d.value);
  return out;
}

SymShape from_shape(const Shape& s) {
  SymShape out;
  for (int i = 0; i < s.rank(); ++i) out.push_back(Dim::known(s[i]));
  return out;
}

int Graph::add_value(const std::string& n) {
  values.push_back(Value{});
  values.back().name = n;
  const int id = static_cast<int>(values.size()) - 1;
  if (!n.empty()) by_name_[n] = id;
  return id;
}

int Graph::find_value(const std::string& n) const {
  auto it = by_name_.find(n);
  return it == by_name_.end() ? -1 : it->second;
}

int Graph::add_constant(const std::string& n, Tensor t) {
  const int id = add_value(unique_name(n));
  values[id].dtype = t.dtype();
  values[id].shape = from_shape(t.shape());
  values[id].constant = std::move(t);
  return id;
}

std::string Graph::unique_name(const std::string& base) {
  if (find_value(base) < 0) return base;
  for (int i = 1;; ++i) {
    std::string c = base + "_" + std::to_string(i);
    if (find_value(c) < 0) return c;
  }
}

void Graph::compact() {
  std::vector<Node> kept;
  kept.reserve(nodes.size());
  for (auto& n : nodes)
    if (!n.removed) kept.push_back(std::move(n));
  nodes = std::move(kept);
  for (auto& v : values) v.producer = -1;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int o : nodes[i].outputs)
      if (o >= 0) values[o].producer = static_cast<int>(i);
}

std::optional<int64_t> Graph::scalar_int(int v) const {
  if (v < 0 || !values[v].is_constant()) return std::nullopt;
  const Tensor& t = values[v].constant;
  if (t.numel() != 1) return std::nullopt;
  if (t.dtype() == DType::kInt64) return t.as<int64_t>()[0];
  if (t.dtype() == DType::kInt32) return t.as<int32_t>()[0];
  return std::nullopt;
}

std::vector<bool> Graph::live_nodes() const {
  std::vector<bool> live(nodes.size(), false);
  std::vector<bool> needed(values.size(), false);
  for (int o : outputs) needed[o] = true;
  for (int i = static_cast<int>(nodes.size()) - 1; i >= 0; --i) {
    const Node& n = nodes[i];
    if (n.removed) continue;
    for (int o : n.outputs) live[i] = live[i] || (o >= 0 && needed[o]);
    if (live[i])
      for (int v : n.inputs)
        if (v >= 0) needed[v] = true;
  }
  return live;
}

std::vector<int> Graph::use_counts() const {
  std::vector<int> uses(values.size(), 0);
  for (const auto& n : nodes) {
    if (n.removed) continue;
    for (int i : n.inputs)
      if (i >= 0) ++uses[i];
  }
  for (int o : outputs) ++uses[o];
  return uses;
}

std::vector<std::string> Graph::remove_unread_producers(std::vector<int> freed) {
  std::vector<std::string> removed;
  std::vector<int> uses = use_counts();
  while (!freed.empty()) {
    const int v = freed.back();
    freed.pop_back();
    if (v < 0 || uses[v] > 0 || values[v].producer < 0) continue;
    Node& p = nodes[values[v].producer];
    if (p.removed) continue;
    bool read = false;
    for (int o : p.outputs) read = read || (o >= 0 && uses[o] > 0);
    if (read) continue;
    p.removed = true;
    removed.push_back(describe_node(p));
    for (int i : p.inputs)
      if (i >= 0 && --uses[i] == 0) freed.push_back(i);
  }
  return removed;
}

void Graph::replace_uses(int from, int to) {
  for (auto& n : nodes)
    for (int& i : n.inputs)
      if (i == from) i = to;
  for (int& o : outputs)
    if (o == from) o = to;
}

bool Graph::bypass(Node& n, int x, int y) {
  const bool y_out = std::find(outputs.begin(), outputs.end(), y) != outputs.end();
  if (!y_out) {
    replace_uses(y, x);
  } else if (values[x].producer >= 0 && std::find(outputs.begin(), outputs.end(), x) == outputs.end() && !values[x].is_constant()) {
    Node& p = nodes[values[x].producer];
    for (int& o : p.outputs)
      if (o == x) o = y;
    replace_uses(x, y);
    values[y].producer = values[x].producer;
  } else {
    return false;
  }
  n.removed = true;
  return true;
}

std::string Graph::describe_node(const Node& n) const {
  return "node '" + n.name + "' (" + (n.domain.empty() ? "" : n.domain + "::") + n.op_type + ")";
}

}  // namespace kiln
