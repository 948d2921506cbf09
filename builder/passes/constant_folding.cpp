#include <set>

#include "builder/passes/pass.h"
#include "runtime/kernel_runner.h"

namespace kiln {

namespace {
const std::set<std::string> kNondeterministic = {"RandomNormal", "RandomNormalLike", "RandomUniform",
                                                 "RandomUniformLike", "Bernoulli", "Multinomial"};

// Shape/Size of a value whose shape is fully known becomes a constant even though the value itself
// is computed at run time: this is what collapses exporter shape subgraphs.
bool fold_shape_query(Graph& g, Node& n) {
  if (n.op_type != "Shape" && n.op_type != "Size") return false;
  if (n.inputs.empty() || n.inputs[0] < 0 || n.outputs.size() != 1) return false;
  Value& out = g.values[n.outputs[0]];
  if (n.op_type == "Shape") {
    if (!out.sym_value) return false;
    std::vector<int64_t> dims;
    for (const auto& d : *out.sym_value) {
      if (!d.is_known()) return false;
      dims.push_back(d.value);
    }
    out.constant = Tensor::from_vector<int64_t>(dims, Shape{static_cast<int64_t>(dims.size())});
  } else {
    const Value& x = g.values[n.inputs[0]];
    if (!x.shape || !sym_shape_concrete(*x.shape)) return false;
    out.constant = Tensor::scalar_i64(to_shape(*x.shape).numel());
  }
  out.dtype = DType::kInt64;
  out.shape = from_shape(out.constant.shape());
  return true;
}
}  // namespace

Status constant_folding(Graph& g, PassContext& ctx) {
  for (auto& n : g.nodes) {
    if (n.removed) continue;
    infer_node(g, n, ctx.dim_ranges);
    if (fold_shape_query(g, n)) {
      n.removed = true;
      ctx.log.push_back("constant_folding: folded " + g.describe_node(n));
      continue;
    }
    if (!n.domain.empty() || kNondeterministic.count(n.op_type)) continue;
    bool all_const = true;
    std::vector<TensorView> views;
    for (int i : n.inputs) {
      if (i >= 0 && !g.values[i].is_constant()) all_const = false;
      views.push_back(i >= 0 ? g.values[i].constant.view() : TensorView{});
    }
    if (!all_const) continue;
    KernelArgs args;
    args.op_type = n.op_type;
    args.node_name = n.name;
    args.opset = g.opset;
    args.num_inputs = static_cast<int>(n.inputs.size());
    args.num_outputs = static_cast<int>(n.outputs.size());
    auto kernel = KernelRegistry::builtin().create(args, n.attrs);
    if (!kernel.ok()) continue;  // unsupported ops are reported when the plan is built
    std::vector<TensorDesc> descs(n.outputs.size());
    if (!(*kernel)->infer(views, descs).ok()) continue;
    int64_t bytes = 0;
    for (const auto& d : descs) bytes += d.shape.numel() * static_cast<int64_t>(dtype_size(d.dtype));
    if (bytes > ctx.max_folded_bytes) continue;
    auto outs = run_kernel_once(**kernel, views, static_cast<int>(n.outputs.size()));
    if (!outs.ok()) return outs.status().with_context(g.describe_node(n));
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      Value& v = g.values[n.outputs[o]];
      v.constant = (*outs)[o];
      v.dtype = v.constant.dtype();
      v.shape = from_shape(v.constant.shape());
      v.producer = -1;
    }
    n.removed = true;
    ctx.log.push_back("constant_folding: folded " + g.describe_node(n));
  }
  return Status::Ok();
}

}  // namespace kiln
