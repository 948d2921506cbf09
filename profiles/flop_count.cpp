#include "profiles/flop_count.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>

#include "runtime/kernel.h"
#include "runtime/kernel_runner.h"

namespace kiln {

namespace {

double numel(const TensorView& v) { return static_cast<double>(v.shape.numel()); }

int64_t attr_int(const PlanStep& step, const char* name, int64_t def) {
  auto it = step.attrs.find(name);
  return it != step.attrs.end() && it->second.kind == Attribute::Kind::kInt ? it->second.i : def;
}

std::string attr_string(const PlanStep& step, const char* name, const std::string& def) {
  auto it = step.attrs.find(name);
  return it != step.attrs.end() && it->second.kind == Attribute::Kind::kString ? it->second.s : def;
}

FlopCount attention_flops(const PlanStep& step, std::span<const TensorView> in) {
  if (in.size() < 3 || in[0].shape.rank() < 3 || in[1].shape.rank() < 3) return {};
  const int64_t H = attr_int(step, "num_heads", 1);
  if (H <= 0) return {};
  // Layouts (plugins/attention/CONTRACT.md): bsd [B, S, H·Dh], bhsd [B, H, S, Dh], sbd [S, B, H·Dh].
  const std::string layout = attr_string(step, "layout", "bsd");
  const bool bhsd = layout == "bhsd", sbd = layout == "sbd";
  if (bhsd && (in[0].shape.rank() < 4 || in[1].shape.rank() < 4)) return {};
  const std::string mask = attr_string(step, "mask", "none");
  const Shape& q = in[0].shape;
  const int seq_axis = bhsd ? 2 : sbd ? 0 : 1;
  const int64_t B = q[sbd ? 1 : 0];
  const int64_t Sq = q[seq_axis];
  const int64_t Dh = bhsd ? q[3] : q[2] / H;
  int64_t Sk = in[1].shape[seq_axis];
  if (attr_int(step, "kv_cache", 0) && in.size() > 4 && in[4].shape.rank() > seq_axis) Sk += in[4].shape[seq_axis];
  // Visible (query, key) pairs of one batch and head; query i sits at absolute position Sk - Sq + i.
  double pairs = static_cast<double>(Sq) * static_cast<double>(Sk);
  bool upper_bound = false;
  if (mask == "causal" || mask == "block_causal") {
    const int64_t block = mask == "causal" ? 1 : std::max<int64_t>(attr_int(step, "block", 1), 1);
    pairs = 0;
    for (int64_t i = 0; i < Sq; ++i) {
      const int64_t p = Sk - Sq + i;
      if (p >= 0) pairs += static_cast<double>(std::min(Sk, (p / block + 1) * block));
    }
  } else if (mask == "bool" && in.size() > 3 && in[3].dtype == DType::kBool && in[3].data && in[3].numel() > 0) {
    // A mask broadcast to [B, H, Sq, Sk] repeats each of its entries equally often: the visible
    // fraction of the mask is the visible fraction of every batch and head on average.
    const uint8_t* m = static_cast<const uint8_t*>(in[3].data);
    const double visible = static_cast<double>(std::count_if(m, m + in[3].numel(), [](uint8_t b) { return b != 0; }));
    pairs = visible / numel(in[3]) * static_cast<double>(Sq) * static_cast<double>(Sk);
  } else {
    upper_bound = mask == "bool" || mask == "additive";
  }
  return {4.0 * static_cast<double>(B * H * Dh) * pairs, upper_bound};
}

}  // namespace

const char* flop_precision_name(FlopPrecision p) {
  static const char* const kNames[kFlopPrecisions] = {"f32", "bf16", "int8"};
  return kNames[static_cast<int>(p)];
}

FlopPrecision step_precision(const PlanStep& step, std::string_view kernel_impl) {
  if (!is_kernel_domain(step.domain)) {
    const std::string precision = attr_string(step, "precision", "fp32");
    return precision == "bf16" ? FlopPrecision::kBf16 : precision == "int8" ? FlopPrecision::kInt8 : FlopPrecision::kF32;
  }
  if (kernel_impl.find("int8") != std::string_view::npos) return FlopPrecision::kInt8;
  if (kernel_impl.find("bf16") != std::string_view::npos) return FlopPrecision::kBf16;
  return FlopPrecision::kF32;
}

FlopCount step_flops(const PlanStep& step, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (step.domain == "kiln" && step.op_type == "Attention") return attention_flops(step, in);
  if (!is_kernel_domain(step.domain) || in.size() < 2 || out.empty()) return {};
  const std::string& op = step.op_type;
  const TensorView &a = in[0], &w = in[1], &y = out[0];
  // FusedMatMul (matmul_epilogue_fusion) is a MatMul with its bias/GELU/residual epilogue, which
  // is not counted (elementwise work, like Add).
  if (op == "MatMul" || op == "FusedMatMul") {
    if (a.shape.rank() == 0) return {};
    return {2.0 * static_cast<double>(a.shape[a.shape.rank() - 1]) * numel(y)};
  }
  // StridedMatMul (matmul_transpose_folding): a MatMul of Transpose(a, perm_a) and Transpose(b,
  // perm_b); K is the permuted A's last axis, stored A's axis perm_a[-1].
  if (op == "StridedMatMul") {
    const int rank = a.shape.rank();
    if (rank == 0) return {};
    const auto it = step.attrs.find("perm_a");
    const bool has_perm = it != step.attrs.end() && it->second.kind == Attribute::Kind::kInts && !it->second.ints.empty();
    const int64_t k_axis = has_perm ? it->second.ints.back() : rank - 1;
    if (k_axis < 0 || k_axis >= rank) return {};
    return {2.0 * static_cast<double>(a.shape[static_cast<int>(k_axis)]) * numel(y)};
  }
  if (op == "Gemm") {
    if (a.shape.rank() != 2) return {};
    const int64_t K = attr_int(step, "transA", 0) ? a.shape[0] : a.shape[1];
    return {2.0 * static_cast<double>(K) * numel(y)};
  }
  // Conv: W is [Cout, Cin/group, k...]; each output element is a dot product over one filter.
  if (op == "Conv" || op == "FusedConv") {  // FusedConv (conv_epilogue_fusion): inputs X, W, ...; epilogue not counted
    if (w.shape.rank() == 0 || w.shape[0] == 0) return {};
    return {2.0 * numel(y) * numel(w) / static_cast<double>(w.shape[0])};
  }
  // ConvTranspose: W is [Cin, Cout/group, k...]; each input element scatters into one filter's worth.
  if (op == "ConvTranspose") {
    if (w.shape.rank() == 0 || w.shape[0] == 0) return {};
    return {2.0 * numel(a) * numel(w) / static_cast<double>(w.shape[0])};
  }
  return {};
}

namespace {

// After a run, the data of graph inputs and constants is still valid; other values sit in arena
// buffers later steps may have reused. An attention mask computed from readable values by a short
// chain of standard steps (e.g. one row sliced out of the mask input for a narrowed query) is
// computed again here, off the timed path, so its visible pairs can still be counted.
class MaskReader {
 public:
  explicit MaskReader(const ExecutionContext& ctx) : ctx_(ctx), producer_(ctx.plan().values.size(), -1) {
    const Plan& plan = ctx.plan();
    readable_.assign(plan.values.size(), false);
    for (int v : plan.inputs) readable_[v] = true;
    for (size_t v = 0; v < plan.values.size(); ++v) readable_[v] = readable_[v] || plan.values[v].constant >= 0;
    for (size_t s = 0; s < plan.steps.size(); ++s)
      for (int v : plan.steps[s].outputs) producer_[v] = static_cast<int>(s);
  }

  bool readable(int v) const { return readable_[v]; }

  // The value's data, recomputed through at most `depth` producing steps; an absent view if not.
  TensorView read(int v, int depth = 3) {
    if (readable_[v]) return ctx_.value(v);
    if (auto it = recomputed_.find(v); it != recomputed_.end()) return it->second.view();
    const int s = producer_[v];
    if (depth == 0 || s < 0) return {};
    const PlanStep& step = ctx_.plan().steps[s];
    if (!is_kernel_domain(step.domain) || step.outputs.size() != 1) return {};
    std::vector<Tensor> inputs;
    for (int in : step.inputs) {
      if (in < 0) {
        inputs.emplace_back();
        continue;
      }
      const TensorView view = read(in, depth - 1);
      if (!view.data && view.numel() > 0) return {};
      Tensor t = Tensor::zeros(view.dtype, view.shape);
      if (view.numel() > 0) std::memcpy(t.data(), view.data, t.nbytes());
      inputs.push_back(std::move(t));
    }
    auto out = run_op_once(step.op_type, step.attrs, inputs, 1, {}, ctx_.plan().opset);
    if (!out.ok()) return {};
    return recomputed_.emplace(v, std::move((*out)[0])).first->second.view();
  }

 private:
  const ExecutionContext& ctx_;
  std::vector<int> producer_;
  std::vector<bool> readable_;
  std::map<int, Tensor> recomputed_;
};

}  // namespace

std::vector<FlopCount> plan_step_flops(const ExecutionContext& ctx) {
  const Plan& plan = ctx.plan();
  MaskReader reader(ctx);
  std::vector<FlopCount> out;
  std::vector<TensorView> in_views, out_views;
  for (const PlanStep& step : plan.steps) {
    in_views.clear();
    out_views.clear();
    const bool attention = step.domain == "kiln" && step.op_type == "Attention";
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      const int v = step.inputs[i];
      TensorView view = v >= 0 ? ctx.value(v) : TensorView{};
      if (v >= 0 && !reader.readable(v)) view = attention && i == 3 ? reader.read(v) : TensorView{nullptr, view.dtype, view.shape};
      in_views.push_back(view);
    }
    for (int v : step.outputs) out_views.push_back(TensorView{nullptr, ctx.value(v).dtype, ctx.value(v).shape});
    out.push_back(step_flops(step, in_views, out_views));
  }
  return out;
}

FlopCount total_flops(const std::vector<FlopCount>& steps) {
  FlopCount t;
  for (const auto& s : steps) {
    t.flops += s.flops;
    t.upper_bound = t.upper_bound || s.upper_bound;
  }
  return t;
}

}  // namespace kiln
