// The builder's graph IR. Values carry a dtype and a shape whose dims may be symbolic (expressions
// over the model's dim_params such as "cached_seq", builder/shapes/dim.h) or unknown. Nodes are
// kept in topological order; passes rewrite the graph and call compact() to drop what they removed.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "builder/shapes/dim.h"
#include "runtime/attributes.h"
#include "runtime/tensor.h"

namespace kiln {

using SymShape = std::vector<Dim>;
std::string sym_shape_str(const SymShape& s);
// True when every dim is a known size.
bool sym_shape_concrete(const SymShape& s);
Shape to_shape(const SymShape& s);  // requires sym_shape_concrete
SymShape from_shape(const Shape& s);

struct Value {
  std::string name;
  DType dtype = DType::kUndefined;
  std::optional<SymShape> shape;  // nullopt: rank unknown
  Tensor constant;                // initializer or folded constant when !constant.empty()
  // For small integer tensors of rank <= 1 (shape arithmetic): their elements as dims, possibly
  // symbolic, e.g. Shape(x) of x:[1, S, 384] is [1, S, 384]. Lets Reshape/Expand see through
  // Shape->Gather->Concat chains while dims are still symbolic.
  std::optional<std::vector<Dim>> sym_value;
  int producer = -1;              // index of the producing node, -1 for inputs/constants
  bool is_constant() const { return !constant.empty(); }
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;            // "" for the default ONNX domain
  std::vector<int> inputs;       // value ids; -1 = absent optional input
  std::vector<int> outputs;      // value ids
  AttrMap attrs;
  bool removed = false;          // set by passes; compact() erases
  std::vector<std::string> replaced_nodes;  // for fused nodes: names of the nodes they replaced
};

class Graph {
 public:
  std::string name;
  int opset = 17;                 // default-domain opset
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs;        // graph inputs (non-constant), in declaration order
  std::vector<int> outputs;

  int add_value(const std::string& name);
  int find_value(const std::string& name) const;  // -1 if absent
  int add_constant(const std::string& name, Tensor t);
  // Fresh value name based on `base` that does not collide with existing ones.
  std::string unique_name(const std::string& base);

  // Drops removed nodes and recomputes producers. Values stay (ids are stable).
  void compact();
  // Number of live uses of each value (node inputs + graph outputs).
  std::vector<int> use_counts() const;
  // Per node: whether some graph output depends on it. Folded shape arithmetic leaves dead readers
  // of a value until dead_node_elimination runs; passes that need a value's real readers skip them.
  std::vector<bool> live_nodes() const;
  // The value of a one-element int64/int32 constant (a Slice bound, an axis), or nullopt.
  std::optional<int64_t> scalar_int(int v) const;
  // Removes the producers of `values` that nothing reads any more, and theirs in turn (a Shape whose
  // only reader folded); returns the removed nodes as describe_node text. Touches nothing else.
  std::vector<std::string> remove_unread_producers(std::vector<int> values);
  // Replaces every use of value `from` by value `to` (node inputs and graph outputs).
  void replace_uses(int from, int to);
  // Removes node `n` whose output `y` equals its input `x` (an Identity, a no-op Dropout or Pad):
  // readers of y read x instead. When y is a graph output its name must survive, so x's producer
  // is made to write y directly; that is impossible when x is a graph input, constant or output,
  // and then nothing changes and the result is false.
  bool bypass(Node& n, int x, int y);
  std::string describe_node(const Node& n) const;  // "node 'name' (OpType)"

 private:
  std::map<std::string, int> by_name_;
};

}  // namespace kiln
