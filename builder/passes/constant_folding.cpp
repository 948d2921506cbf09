#include <set>

#include "builder/passes/pass.h"
#include "runtime/kernel_runner.h"

namespace kiln {

namespace {
const std::set<std::string> kNondeterministic = {"RandomNormal", "RandomNormalLike", "RandomUniform",
                                                 "RandomUniformLike", "Bernoulli", "Multinomial"};

// A small integer value whose elements shape inference knows (Value::sym_value) becomes a
// constant even though it is computed at run time from values that are not: Shape of a value whose
// shape is fully known, and, under a profile with a ranged dim (a batch of 1 to 2), the
// Shape -> Gather/Slice -> arithmetic chains that read only static dims of a value that also has a
// symbolic one (MHA's packed-projection Slice bounds come from Shape(x)[-1] = E). Elements that
// depend on a symbolic dim stay symbolic, so those nodes still run at run time.
bool fold_known_elements(Graph& g, Node& n) {
  if (!n.domain.empty() || n.outputs.size() != 1 || n.inputs.empty() || n.inputs[0] < 0) return false;
  Value& out = g.values[n.outputs[0]];
  if (!out.sym_value || !out.shape || out.shape->size() > 1) return false;
  // sym_value holds elements as dims, so only integer values are read from it (Cast keeps it only
  // for integer targets).
  if (out.dtype != DType::kInt64 && out.dtype != DType::kInt32) return false;
  const size_t count = out.sym_value->size();
  const bool scalar = out.shape->empty();
  if (scalar ? count != 1 : !((*out.shape)[0].is_known() && static_cast<size_t>((*out.shape)[0].value) == count))
    return false;
  std::vector<int64_t> elems;
  for (const auto& d : *out.sym_value) {
    if (!d.is_known()) return false;
    elems.push_back(d.value);
  }
  const Shape shape = scalar ? Shape{} : Shape{static_cast<int64_t>(count)};
  if (out.dtype == DType::kInt64) {
    out.constant = Tensor::from_vector<int64_t>(elems, shape);
  } else {
    std::vector<int32_t> narrow;
    for (int64_t e : elems) {
      if (e > INT32_MAX) return false;
      narrow.push_back(static_cast<int32_t>(e));
    }
    out.constant = Tensor::from_vector<int32_t>(narrow, shape);
  }
  out.producer = -1;
  return true;
}

// Size of a value whose shape is fully known.
bool fold_size(Graph& g, Node& n) {
  if (n.op_type != "Size" || n.inputs.empty() || n.inputs[0] < 0 || n.outputs.size() != 1) return false;
  Value& out = g.values[n.outputs[0]];
  const Value& x = g.values[n.inputs[0]];
  int64_t count = 0;
  if (!x.shape || !sym_shape_concrete(*x.shape) || !to_shape(*x.shape).checked_numel(&count)) return false;
  out.constant = Tensor::scalar_i64(count);
  out.dtype = DType::kInt64;
  out.shape = from_shape(out.constant.shape());
  out.producer = -1;
  return true;
}

// Cast to the dtype its input already has (T5's scores.float() on float scores, .type_as after
// Softmax): readers read the input instead, so the patterns behind it (attention's scores ->
// Softmax -> ·V) see producer -> consumer directly. Kept when its output is a graph output (the
// name must survive).
bool fold_noop_cast(Graph& g, Node& n, const std::vector<bool>& is_output) {
  if (n.op_type != "Cast" || !n.domain.empty() || n.inputs.size() != 1 || n.outputs.size() != 1 || n.inputs[0] < 0)
    return false;
  auto to = n.attrs.find("to");
  const DType in = g.values[n.inputs[0]].dtype;
  if (to == n.attrs.end() || !dtype_is_known(in) || static_cast<DType>(to->second.i) != in || is_output[n.outputs[0]])
    return false;
  g.replace_uses(n.outputs[0], n.inputs[0]);
  return true;
}

}  // namespace

Status constant_folding(Graph& g, PassContext& ctx) {
  std::vector<int> freed;  // inputs of folded nodes
  auto folded = [&](Node& n) {
    n.removed = true;
    ctx.log.push_back("constant_folding: folded " + g.describe_node(n));
    freed.insert(freed.end(), n.inputs.begin(), n.inputs.end());
  };
  std::vector<bool> is_output(g.values.size(), false);
  for (int o : g.outputs) is_output[o] = true;
  for (auto& n : g.nodes) {
    if (n.removed) continue;
    infer_node(g, n, ctx.dim_ranges);
    if (fold_noop_cast(g, n, is_output)) {
      n.removed = true;
      ctx.log.push_back("constant_folding: removed " + g.describe_node(n) + " (a Cast to its input's dtype)");
      continue;
    }
    if (fold_size(g, n) || fold_known_elements(g, n)) {
      folded(n);
      continue;
    }
    if (!is_kernel_domain(n.domain) || kNondeterministic.count(n.op_type)) continue;
    bool all_const = true;
    std::vector<TensorView> views;
    for (int i : n.inputs) {
      if (i >= 0 && !g.values[i].is_constant()) all_const = false;
      views.push_back(i >= 0 ? g.values[i].constant.view() : TensorView{});
    }
    if (!all_const) continue;
    const KernelArgs args = KernelArgs::of(n, g.opset);
    auto kernel = KernelRegistry::builtin().create(args, n.attrs);
    if (!kernel.ok()) continue;  // unsupported ops are reported when the plan is built
    std::vector<TensorDesc> descs(n.outputs.size());
    if (!(*kernel)->infer(views, descs).ok()) continue;
    // Overflow-checked: the shapes may come from the model's own (untrusted) shape tensors; what
    // does not fit is left unfolded for shape inference to reject.
    int64_t bytes = 0;
    bool fits = true;
    for (const auto& d : descs) {
      auto size = checked_nbytes(d.dtype, d.shape, "folded output");
      fits = fits && size.ok() && !__builtin_add_overflow(bytes, static_cast<int64_t>(*size), &bytes);
    }
    if (!fits || bytes > ctx.max_folded_bytes) continue;
    auto outs = run_kernel_once(**kernel, views, static_cast<int>(n.outputs.size()));
    if (!outs.ok()) return outs.status().with_context(g.describe_node(n));
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      Value& v = g.values[n.outputs[o]];
      v.constant = (*outs)[o];
      v.dtype = v.constant.dtype();
      v.shape = from_shape(v.constant.shape());
      v.producer = -1;
    }
    folded(n);
  }
  // The producers its folds leave unread go now, not at dead_node_elimination: a Shape whose reader
  // folded (Shape(v)[-1] for a scale) would stay a reader of v, and attention_fusion's single-use
  // checks would see it.
  for (const std::string& r : g.remove_unread_producers(std::move(freed)))
    ctx.log.push_back("constant_folding: removed " + r + " (its readers folded)");
  return Status::Ok();
}

}  // namespace kiln
