#include "plugins/attention/attention_plugin.h"

#include "runtime/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <new>

#include "plugins/attention/attention_common.h"
#include "plugins/attention/attention_kernel.h"

namespace kiln {
namespace {

using attention::Geometry;
using attention::Layout;
using attention::MaskKind;
using attention::Params;

// The inputs' descriptors without touching the heap (infer runs before every run).
struct InputDescs {
  TensorDesc d[attention::kMaxInputs];
  size_t n = 0;
  explicit InputDescs(std::span<const TensorView> views) : n(std::min<size_t>(views.size(), attention::kMaxInputs)) {
    for (size_t i = 0; i < n; ++i) d[i] = views[i].desc();
  }
  std::span<const TensorDesc> span() const { return {d, n}; }
};

Status check_input_limit(size_t n) {
  if (n > attention::kMaxInputs)
    return InvalidArgument("kiln::Attention takes at most " + std::to_string(attention::kMaxInputs) + " inputs, got " +
                           std::to_string(n));
  return Status::Ok();
}

Status check_output_count(const Params& p, size_t n) {
  const int want = attention::num_outputs(p);
  if (n != static_cast<size_t>(want))
    return InvalidArgument("kiln::Attention expects " + std::to_string(want) + " output(s), got " + std::to_string(n));
  return Status::Ok();
}

class AttentionRun final : public PluginRun {
 public:
  AttentionRun(Params p, int slots) : p_(p), slots_(slots) {}

  Status infer(std::span<const TensorView> inputs, std::span<TensorDesc> outputs) noexcept override {
    try {
      KILN_RETURN_IF_ERROR(check_output_count(p_, outputs.size()));
      KILN_RETURN_IF_ERROR(check_input_limit(inputs.size()));
      KILN_ASSIGN_OR_RETURN(Geometry g, attention::validate_inputs(p_, InputDescs(inputs).span()));
      attention::output_descs(p_, g, outputs);
      return Status::Ok();
    } catch (const std::bad_alloc&) {
      return Internal("kiln::Attention: out of memory in infer");
    }
  }

  Status on_shape_change(std::span<const TensorView> inputs, std::span<const TensorView> outputs) noexcept override {
    try {
      KILN_RETURN_IF_ERROR(check_output_count(p_, outputs.size()));
      KILN_RETURN_IF_ERROR(check_input_limit(inputs.size()));
      KILN_ASSIGN_OR_RETURN(geometry_, attention::validate_inputs(p_, InputDescs(inputs).span()));
      attention::output_descs(p_, geometry_, std::span<TensorDesc>(expected_out_, outputs.size()));
      num_seen_ = inputs.size();
      for (size_t i = 0; i < num_seen_; ++i) seen_[i] = inputs[i].desc();
      return Status::Ok();
    } catch (const std::bad_alloc&) {
      num_seen_ = 0;
      return Internal("kiln::Attention: out of memory in on_shape_change");
    }
  }

  Status run(std::span<const TensorView> inputs, std::span<const TensorView> outputs, void* workspace) noexcept override {
    // Inputs are validated again only when their shapes change; outputs are checked every time
    // because the kernel writes them by the inputs' geometry.
    if (!same_shapes(inputs)) KILN_RETURN_IF_ERROR(on_shape_change(inputs, outputs));
    KILN_RETURN_IF_ERROR(check_output_count(p_, outputs.size()));
    for (size_t i = 0; i < outputs.size(); ++i)
      if (outputs[i].dtype != expected_out_[i].dtype || outputs[i].shape != expected_out_[i].shape)
        return InvalidArgument("kiln::Attention: output " + std::to_string(i) + " is " + dtype_name(outputs[i].dtype) +
                               " " + outputs[i].shape.str() + ", expected " + dtype_name(expected_out_[i].dtype) +
                               " " + expected_out_[i].shape.str());
    if (!p_.live_length) return attention::run_attention(p_, geometry_, inputs, outputs, workspace, slots_);
    // The live length is a value, not a shape: read every run, the geometry copied (no allocation).
    Geometry g = geometry_;
    KILN_ASSIGN_OR_RETURN(g.live, attention::read_live_length(g, inputs[attention::kLive]));
    return attention::run_attention(p_, g, inputs, outputs, workspace, slots_);
  }

 private:
  bool same_shapes(std::span<const TensorView> inputs) const {
    if (num_seen_ == 0 || inputs.size() != num_seen_) return false;
    for (size_t i = 0; i < num_seen_; ++i)
      if (inputs[i].dtype != seen_[i].dtype || inputs[i].shape != seen_[i].shape) return false;
    return true;
  }

  Params p_;
  int slots_;
  Geometry geometry_;
  // Inputs geometry_ was derived from (num_seen_ == 0 before the first validation).
  TensorDesc seen_[attention::kMaxInputs];
  size_t num_seen_ = 0;
  TensorDesc expected_out_[3];
};

class AttentionBuild final : public PluginBuild {
 public:
  explicit AttentionBuild(Params p) : p_(p), slots_(std::max(1, ThreadPool::global().max_threads())) {}

  int num_outputs() const noexcept override { return attention::num_outputs(p_); }

  bool supports(std::span<const DType> dt) const noexcept override {
    for (size_t i = 0; i < dt.size(); ++i) {
      if (i == attention::kMask) {
        const DType want = p_.mask == MaskKind::kBool       ? DType::kBool
                           : p_.mask == MaskKind::kAdditive ? DType::kFloat32
                                                            : DType::kUndefined;
        if (dt[i] != want) return false;
      } else if (i == attention::kLive) {
        if (!p_.live_length || dt[i] != DType::kInt64) return false;
      } else if ((i == attention::kKCache || i == attention::kVCache) && !p_.kv_cache) {
        if (!p_.live_length || dt[i] != DType::kUndefined) return false;
      } else if (dt[i] != DType::kFloat32) {
        return false;
      }
    }
    return true;
  }

  Status infer(std::span<const TensorDesc> inputs, std::span<TensorDesc> outputs) const noexcept override {
    try {
      KILN_RETURN_IF_ERROR(check_output_count(p_, outputs.size()));
      KILN_ASSIGN_OR_RETURN(Geometry g, attention::validate_inputs(p_, inputs));
      attention::output_descs(p_, g, outputs);
      return Status::Ok();
    } catch (const std::bad_alloc&) {
      return Internal("kiln::Attention: out of memory in infer");
    }
  }

  // The output is shaped like q; with a KV cache, the K/V outputs are the caches grown by the new
  // keys along the layout's sequence axis (Sc + Sk_new). Shapes are checked by infer() at run time.
  Status infer_symbolic(std::span<const SymbolicTensorDesc> inputs, std::span<SymbolicTensorDesc> outputs,
                        ShapeExprBuilder& exprs) const noexcept override {
    KILN_RETURN_IF_ERROR(check_output_count(p_, outputs.size()));
    if (inputs.empty()) return InvalidArgument("kiln::Attention: no inputs");
    outputs[0] = inputs[attention::kQ];
    outputs[0].dtype = DType::kFloat32;
    if (p_.kv_cache) {
      if (inputs.size() <= static_cast<size_t>(attention::kKCache)) return InvalidArgument("kiln::Attention: kv_cache = 1 expects 6 inputs");
      const SymbolicTensorDesc& cache = inputs[attention::kKCache];
      const SymbolicTensorDesc& fresh = inputs[attention::kK];
      const int axis = attention::seq_axis(p_.layout);
      SymbolicTensorDesc grown = cache;
      grown.dtype = DType::kFloat32;
      if (cache.rank > axis && fresh.rank == cache.rank) grown.dims[axis] = exprs.operation(ShapeOp::kSum, cache.dims[axis], fresh.dims[axis]);
      else grown.rank = -1;
      outputs[1] = grown;
      outputs[2] = grown;
    }
    return Status::Ok();
  }

  // One scratch slot per OpenMP thread the run may use (the run never uses more than slots_), and
  // the bf16 path's packed K/V. Read from the shapes without validating them: the run reports
  // shape errors, and ranges need not be consistent at their maxima.
  size_t workspace_bytes(std::span<const TensorDesc> max_inputs) const noexcept override {
    const int rank = attention::layout_rank(p_.layout), seq_axis = attention::seq_axis(p_.layout);
    auto seq = [&](size_t i) -> int64_t {
      if (i >= max_inputs.size() || max_inputs[i].shape.rank() != rank) return 0;
      return max_inputs[i].shape[seq_axis];
    };
    if (max_inputs.empty() || max_inputs[attention::kQ].shape.rank() != rank) return 0;
    const Shape& q = max_inputs[attention::kQ].shape;
    Geometry g;
    g.B = q[attention::batch_axis(p_.layout)];
    g.H = p_.num_heads;
    g.Dh = p_.layout == Layout::kBHSD ? q[3] : q[2] / p_.num_heads;
    g.Sq = seq(attention::kQ);
    g.Sk_new = seq(attention::kK);
    g.Sc = p_.kv_cache ? seq(attention::kKCache) : 0;
    return attention::workspace_bytes(p_, g, slots_);
  }

  AttrMap fields() const noexcept override {
    AttrMap f;
    f["num_heads"] = Attribute::Int(p_.num_heads);
    f["scale"] = Attribute::Float(p_.scale);
    f["layout"] = Attribute::String(attention::layout_name(p_.layout));
    static const char* const masks[] = {"none", "bool", "additive", "causal", "block_causal"};
    f["mask"] = Attribute::String(masks[static_cast<int>(p_.mask)]);
    if (p_.mask == MaskKind::kBlockCausal) f["block"] = Attribute::Int(p_.block);
    f["kv_cache"] = Attribute::Int(p_.kv_cache ? 1 : 0);
    // Written only when not the default, so fp32 engines keep their fields.
    if (p_.precision == attention::Precision::kBf16) f["precision"] = Attribute::String("bf16");
    if (p_.live_length) f["live_length"] = Attribute::Int(1);
    return f;
  }

  StatusOr<std::unique_ptr<PluginRun>> create_run() const noexcept override {
    try {
      return std::unique_ptr<PluginRun>(std::make_unique<AttentionRun>(p_, slots_));
    } catch (const std::bad_alloc&) {
      return Internal("kiln::Attention: out of memory creating the run");
    }
  }

 private:
  Params p_;
  int slots_;
};

class AttentionCreator final : public PluginCreator {
 public:
  const char* name() const noexcept override { return "Attention"; }
  const char* plugin_namespace() const noexcept override { return "kiln"; }
  const char* version() const noexcept override { return "1"; }

  std::vector<PluginFieldSpec> field_specs() const noexcept override {
    using K = Attribute::Kind;
    return {{"num_heads", K::kInt, true}, {"scale", K::kFloat, true},   {"layout", K::kString, false},
            {"mask", K::kString, false},  {"block", K::kInt, false},    {"kv_cache", K::kInt, false},
            {"precision", K::kString, false}, {"live_length", K::kInt, false}};
  }

  StatusOr<std::unique_ptr<PluginBuild>> create(const AttrMap& fields) const noexcept override {
    try {
      return create_impl(fields);
    } catch (const std::bad_alloc&) {
      return Internal("kiln::Attention: out of memory creating the plugin");
    }
  }

 private:
  StatusOr<std::unique_ptr<PluginBuild>> create_impl(const AttrMap& fields) const {
    const std::vector<PluginFieldSpec> specs = field_specs();
    for (const auto& [name, attr] : fields) {
      const PluginFieldSpec* spec = nullptr;
      for (const PluginFieldSpec& s : specs)
        if (s.name == name) spec = &s;
      if (!spec) return InvalidArgument("kiln::Attention: unknown field '" + name + "'");
      if (attr.kind != spec->kind)
        return InvalidArgument("kiln::Attention: field '" + name + "' must be of type " +
                               attribute_kind_name(spec->kind) + ", got " + attribute_kind_name(attr.kind));
    }
    for (const PluginFieldSpec& s : specs)
      if (s.required && !fields.count(s.name))
        return InvalidArgument("kiln::Attention: required field '" + s.name + "' is missing");

    Params p;
    p.num_heads = fields.at("num_heads").i;
    if (p.num_heads <= 0)
      return InvalidArgument("kiln::Attention: field 'num_heads' = " + std::to_string(p.num_heads) + " must be > 0");
    p.scale = fields.at("scale").f;
    if (!std::isfinite(p.scale))
      return InvalidArgument("kiln::Attention: field 'scale' = " + std::to_string(p.scale) + " must be finite");
    if (auto it = fields.find("layout"); it != fields.end()) {
      if (it->second.s == "bsd") p.layout = Layout::kBSD;
      else if (it->second.s == "bhsd") p.layout = Layout::kBHSD;
      else if (it->second.s == "sbd") p.layout = Layout::kSBD;
      else return InvalidArgument("kiln::Attention: field 'layout' = '" + it->second.s + "' is not bsd, bhsd or sbd");
    }
    if (auto it = fields.find("mask"); it != fields.end()) {
      const std::string& m = it->second.s;
      if (m == "none") p.mask = MaskKind::kNone;
      else if (m == "bool") p.mask = MaskKind::kBool;
      else if (m == "additive") p.mask = MaskKind::kAdditive;
      else if (m == "causal") p.mask = MaskKind::kCausal;
      else if (m == "block_causal") p.mask = MaskKind::kBlockCausal;
      else
        return InvalidArgument("kiln::Attention: field 'mask' = '" + m +
                               "' is not one of none, bool, additive, causal, block_causal");
    }
    const auto block = fields.find("block");
    if (p.mask == MaskKind::kBlockCausal) {
      if (block == fields.end())
        return InvalidArgument("kiln::Attention: field 'block' is required with mask = block_causal");
      p.block = block->second.i;
      if (p.block <= 0)
        return InvalidArgument("kiln::Attention: field 'block' = " + std::to_string(p.block) + " must be > 0");
    } else if (block != fields.end()) {
      return InvalidArgument("kiln::Attention: field 'block' is only valid with mask = block_causal");
    }
    if (auto it = fields.find("kv_cache"); it != fields.end()) {
      if (it->second.i != 0 && it->second.i != 1)
        return InvalidArgument("kiln::Attention: field 'kv_cache' = " + std::to_string(it->second.i) +
                               " must be 0 or 1");
      p.kv_cache = it->second.i == 1;
    }
    // A cache appended along the sequence axis of [S, B, D] would interleave batches on every
    // step; sequence-first attention (nn.MultiheadAttention) has no cache to keep.
    if (p.kv_cache && p.layout == Layout::kSBD)
      return InvalidArgument("kiln::Attention: field 'kv_cache' = 1 is not supported with layout = 'sbd'");
    if (auto it = fields.find("precision"); it != fields.end()) {
      if (it->second.s == "fp32") p.precision = attention::Precision::kFp32;
      else if (it->second.s == "bf16") p.precision = attention::Precision::kBf16;
      else return InvalidArgument("kiln::Attention: field 'precision' = '" + it->second.s + "' is not fp32 or bf16");
    }
    if (auto it = fields.find("live_length"); it != fields.end()) {
      if (it->second.i != 0 && it->second.i != 1)
        return InvalidArgument("kiln::Attention: field 'live_length' = " + std::to_string(it->second.i) + " must be 0 or 1");
      p.live_length = it->second.i == 1;
    }
    return std::unique_ptr<PluginBuild>(std::make_unique<AttentionBuild>(p));
  }
};

}  // namespace

PluginCreator* attention_plugin_creator() {
  static AttentionCreator creator;
  return &creator;
}

}  // namespace kiln
