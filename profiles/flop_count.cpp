#include "profiles/flop_count.h"

#include <algorithm>
#include <cstdint>

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
  const bool bhsd = attr_string(step, "layout", "bsd") == "bhsd";
  const std::string mask = attr_string(step, "mask", "none");
  const Shape& q = in[0].shape;
  const int64_t B = q[0];
  const int64_t Sq = bhsd ? q[2] : q[1];
  const int64_t Dh = bhsd ? q[3] : q[2] / H;
  const int seq_axis = bhsd ? 2 : 1;
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

FlopCount step_flops(const PlanStep& step, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (step.domain == "kiln" && step.op_type == "Attention") return attention_flops(step, in);
  if (!step.domain.empty() || in.size() < 2 || out.empty()) return {};
  const std::string& op = step.op_type;
  const TensorView &a = in[0], &w = in[1], &y = out[0];
  // FusedMatMul (matmul_epilogue_fusion) is a MatMul with its bias/GELU/residual epilogue, which
  // is not counted (elementwise work, like Add).
  if (op == "MatMul" || op == "FusedMatMul") {
    if (a.shape.rank() == 0) return {};
    return {2.0 * static_cast<double>(a.shape[a.shape.rank() - 1]) * numel(y)};
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

std::vector<FlopCount> plan_step_flops(const ExecutionContext& ctx) {
  const Plan& plan = ctx.plan();
  std::vector<bool> readable(plan.values.size(), false);  // data still valid after the run
  for (int v : plan.inputs) readable[v] = true;
  for (size_t v = 0; v < plan.values.size(); ++v) readable[v] = readable[v] || plan.values[v].constant >= 0;
  std::vector<FlopCount> out;
  std::vector<TensorView> in_views, out_views;
  for (const PlanStep& step : plan.steps) {
    in_views.clear();
    out_views.clear();
    for (int v : step.inputs) {
      TensorView view = v >= 0 ? ctx.value(v) : TensorView{};
      if (v >= 0 && !readable[v]) view.data = nullptr;  // an arena buffer later steps may have reused
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
