// Shape inference for plugin nodes. A plugin that implements PluginBuild::infer_symbolic gets its
// inputs' symbolic shapes through a ShapeExprBuilder over kiln's interned dim expressions, so its
// outputs keep the model's dynamic dims (a KV cache grown by the new keys is `past + seq`). Other
// plugins are inferred by PluginBuild::infer once every input's dtype and shape are concrete; with
// symbolic dims only their output dtypes are taken, from a probe with each symbolic dim at 1 (a
// plugin that rejects the probe leaves them unknown until run time). Unregistered plugins and bad
// fields are reported when the plan is built.
#include "builder/shapes/shape_rules_common.h"
#include "plugins/plugin_api.h"
#include "runtime/plugin_host/plugin_registry.h"

namespace kiln::shape_rules {

namespace {

const ShapeExpr* to_api(const Dim& d) { return reinterpret_cast<const ShapeExpr*>(dim_expr(d)); }
Dim from_api(const ShapeExpr* e) { return dim_from_expr(reinterpret_cast<const DimExpr*>(e)); }

class DimExprBuilder final : public ShapeExprBuilder {
 public:
  const ShapeExpr* constant(int64_t value) noexcept override { return value >= 0 ? to_api(Dim::known(value)) : nullptr; }
  const ShapeExpr* operation(ShapeOp op, const ShapeExpr* a, const ShapeExpr* b) noexcept override {
    if (!a || !b) return nullptr;
    const Dim x = from_api(a), y = from_api(b);
    switch (op) {
      case ShapeOp::kSum: return to_api(dim_add(x, y));
      case ShapeOp::kSub: return to_api(dim_sub(x, y));
      case ShapeOp::kProd: return to_api(dim_mul(x, y));
      case ShapeOp::kFloorDiv: return to_api(dim_floordiv(x, y));
      case ShapeOp::kCeilDiv: return to_api(dim_floordiv(dim_add(x, dim_sub(y, Dim::known(1))), y));
    }
    return nullptr;
  }
  bool is_constant(const ShapeExpr* e, int64_t* value) const noexcept override {
    const Dim d = from_api(e);
    if (!d.is_known()) return false;
    *value = d.value;
    return true;
  }
  bool equal(const ShapeExpr* a, const ShapeExpr* b) const noexcept override { return a && b && a == b; }
};

// The symbolic form of a value for infer_symbolic (a constant's shape is concrete).
SymbolicTensorDesc symbolic_desc(const Value& val) {
  SymbolicTensorDesc d;
  d.dtype = val.dtype;
  if (val.is_constant()) {
    const Shape& s = val.constant.shape();
    d.rank = s.rank();
    for (int i = 0; i < s.rank(); ++i) d.dims[i] = to_api(Dim::known(s[i]));
  } else if (val.shape && Shape::fits_rank(val.shape->size())) {
    d.rank = static_cast<int>(val.shape->size());
    for (int i = 0; i < d.rank; ++i) d.dims[i] = to_api((*val.shape)[i]);
  }
  return d;
}

}  // namespace

Status plugin_rule(Graph& g, Node& n) {
  const PluginEntry* entry = PluginRegistry::global().find(n.domain, n.op_type);
  if (!entry) return Status::Ok();
  auto build = entry->creator->create(n.attrs);
  if (!build.ok() || !build.value()) return Status::Ok();
  const std::string where = g.describe_node(n) + " (plugin " + entry->id() + ")";

  // Concrete inputs: the plugin's own infer() gives (and checks) the exact output shapes.
  std::vector<TensorDesc> inputs;
  bool concrete = true, known = true;
  for (int v : n.inputs) {
    if (v < 0) {
      inputs.emplace_back();
      continue;
    }
    const Value& val = g.values[v];
    if (val.is_constant()) {
      inputs.push_back(val.constant.view().desc());
      continue;
    }
    if (!val.shape || !dtype_is_known(val.dtype)) {
      known = false;
      continue;
    }
    Shape s;
    for (const Dim& d : *val.shape) s.push_back(d.is_known() ? d.value : 1);
    concrete &= sym_shape_concrete(*val.shape);
    inputs.push_back(TensorDesc{val.dtype, s});
  }
  if (!known) return Status::Ok();
  if (!concrete) {
    std::vector<SymbolicTensorDesc> sym_in;
    for (int v : n.inputs) sym_in.push_back(v < 0 ? SymbolicTensorDesc{} : symbolic_desc(g.values[v]));
    std::vector<SymbolicTensorDesc> sym_out(n.outputs.size());
    DimExprBuilder exprs;
    Status sym = build.value()->infer_symbolic(sym_in, sym_out, exprs);
    if (sym.ok()) {
      for (size_t o = 0; o < n.outputs.size(); ++o) {
        const SymbolicTensorDesc& d = sym_out[o];
        std::optional<Dims> shape;
        if (d.rank >= 0 && d.rank <= kMaxRank) {
          Dims dims;
          for (int i = 0; i < d.rank; ++i) dims.push_back(d.dims[i] ? from_api(d.dims[i]) : Dim{});
          shape = std::move(dims);
        }
        set_out(g, n, o, d.dtype, shape);
      }
      return Status::Ok();
    }
    if (sym.code() != StatusCode::kUnimplemented) return sym.with_context(where);
  }
  // Concrete, or a plugin without symbolic inference probed with its symbolic dims at 1 (dtypes only).
  std::vector<TensorDesc> descs(n.outputs.size());
  Status st = build.value()->infer(inputs, descs);
  if (!st.ok()) return concrete ? st.with_context(where) : Status::Ok();
  for (size_t o = 0; o < n.outputs.size(); ++o)
    if (dtype_is_known(descs[o].dtype)) set_out(g, n, o, descs[o].dtype, concrete ? std::optional<Dims>(from_shape(descs[o].shape)) : std::nullopt);
  return Status::Ok();
}

}  // namespace kiln::shape_rules
