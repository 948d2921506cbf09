// A graph's tensor shapes at points of an optimization profile, read off the graph the pass
// pipeline rewrote once with the profile's ranged dims left symbolic: each node's kernel (or
// plugin) infers its outputs from its inputs' shapes at the point, reading constant inputs and
// the point's values of symbolic shape tensors (sym_value), so a profile whose dims contradict the
// graph fails at the node where they meet, and each plugin gets its inputs' min/opt/max, without
// running the pipeline again per point.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "builder/graph.h"
#include "runtime/kernel.h"
#include "runtime/status.h"

namespace kiln {

class PluginBuild;

class ShapeEvaluator {
 public:
  // Creates each live node's kernel (or plugin build) once, for every point.
  static StatusOr<ShapeEvaluator> create(const Graph& g);
  ShapeEvaluator(ShapeEvaluator&&) noexcept;
  ShapeEvaluator& operator=(ShapeEvaluator&&) noexcept;
  ~ShapeEvaluator();

  // Every value's dtype and shape with the graph inputs at `inputs` (inputs not given keep their
  // declared shape, evaluated at the symbols the given ones bind); nullopt where a shape depends
  // on data only a run computes. An error names the node, its input shapes and the kernel's reason.
  StatusOr<std::vector<std::optional<TensorDesc>>> at(const std::map<std::string, Shape>& inputs) const;

 private:
  explicit ShapeEvaluator(const Graph& g);
  struct NodeInfer;
  const Graph* g_;
  std::vector<std::unique_ptr<NodeInfer>> nodes_;  // per live node, in order
};

}  // namespace kiln
