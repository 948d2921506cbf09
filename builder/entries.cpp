#include "builder/entries.h"

#include <map>

#include "runtime/execution_context.h"

namespace kiln {

namespace {

using PointDescs = std::array<std::optional<TensorDesc>, 3>;

// Output shapes the shape evaluator could not tell (a Slice of a Concat on a symbolic length, a Pad
// by computed amounts): the plan runs once at each of the profile's min, opt and max points on
// zero inputs and the outputs' shapes are read off.
StatusOr<std::map<std::string, PointDescs>> probe_output_shapes(const BuiltProfile& bp) {
  std::map<std::string, PointDescs> out;
  KILN_ASSIGN_OR_RETURN(auto ctx, ExecutionContext::create(bp.plan));
  const ResolvedProfile::Point points[] = {ResolvedProfile::Point::kMin, ResolvedProfile::Point::kOpt, ResolvedProfile::Point::kMax};
  for (size_t i = 0; i < 3; ++i) {
    const auto shapes = bp.profile.shapes_at(points[i]);
    std::vector<Tensor> zeros;
    for (size_t k = 0; k < ctx->num_inputs(); ++k) {
      auto it = shapes.find(ctx->input_name(k));
      if (it == shapes.end()) return InvalidArgument("input '" + ctx->input_name(k) + "' has no shape in profile '" + bp.profile.name + "'");
      zeros.push_back(Tensor::zeros(bp.plan->values[bp.plan->inputs[k]].dtype, it->second));
      KILN_RETURN_IF_ERROR(ctx->set_input(k, zeros.back().view()));
    }
    KILN_RETURN_IF_ERROR(ctx->run().with_context("probing the output shapes of profile '" + bp.profile.name + "'"));
    for (size_t k = 0; k < ctx->num_outputs(); ++k) out[ctx->output_name(k)][i] = ctx->output(k).desc();
  }
  return out;
}

struct Bound {
  std::string what;   // "entry 'step' input 'cache_k'"
  TensorDesc desc;
};

std::string dims_text(const Shape& s) { return s.str(); }

}  // namespace

StatusOr<std::vector<StateBufferSpec>> check_state_bindings(const BuildConfig& cfg, const std::vector<BuiltProfile>& profiles,
                                                            const std::vector<std::string>& plan_entries) {
  std::vector<StateBufferSpec> out;
  std::map<size_t, std::map<std::string, PointDescs>> probed;  // per profile, run only when needed
  for (const StateBufferConfig& sb : cfg.state) {
    StateBufferSpec spec;
    spec.name = sb.name;
    std::optional<Bound> first;
    for (const StateBindingConfig& b : sb.bindings) {
      const std::string at = cfg.config_path + ":" + std::to_string(b.line) + ": state '" + sb.name + "': ";
      for (const auto& [kind, tensor] : {std::pair<std::string, std::string>{"input", b.input}, {"output", b.output}}) {
        if (tensor.empty()) continue;
        const std::string what = "entry '" + b.entry + "' " + kind + " '" + tensor + "'";
        for (size_t i = 0; i < profiles.size(); ++i) {
          if (plan_entries[i] != b.entry) continue;
          const BuiltProfile& bp = profiles[i];
          auto it = bp.io_descs.find(tensor);
          bool is_kind = false;
          for (int v : kind == "input" ? bp.plan->inputs : bp.plan->outputs) is_kind = is_kind || bp.plan->values[v].name == tensor;
          if (it == bp.io_descs.end() || !is_kind) return InvalidArgument(at + what + ": the entry's model has no " + kind + " named '" + tensor + "'");
          const PointDescs* dp = &it->second;
          if (kind == "output" && (!(*dp)[0] || !(*dp)[1] || !(*dp)[2])) {
            if (!probed.count(i)) {
              KILN_ASSIGN_OR_RETURN(probed[i], probe_output_shapes(bp));
            }
            dp = &probed[i][tensor];
          }
          const auto& d = *dp;
          if (!d[0] || !d[1] || !d[2])
            return InvalidArgument(at + what + ": its shape is unknown in profile '" + bp.profile.name + "'; a state needs a fixed shape");
          for (int k = 0; k < d[0]->shape.rank(); ++k)
            if (d[0]->shape != d[2]->shape && d[0]->shape[k] != d[2]->shape[k])
              return InvalidArgument(at + what + " dim " + std::to_string(k) + " ranges " + std::to_string(d[0]->shape[k]) + ".." +
                                     std::to_string(d[2]->shape[k]) + " in profile '" + bp.profile.name + "'; a state has one fixed shape");
          if (!first) {
            first = Bound{what, *d[0]};
            continue;
          }
          const TensorDesc& want = first->desc;
          const TensorDesc& got = *d[0];
          if (got.dtype != want.dtype)
            return InvalidArgument(at + what + " is " + dtype_name(got.dtype) + ", but " + first->what + " is " + dtype_name(want.dtype));
          if (got.shape.rank() != want.shape.rank())
            return InvalidArgument(at + what + " has rank " + std::to_string(got.shape.rank()) + " " + dims_text(got.shape) + ", but " +
                                   first->what + " has rank " + std::to_string(want.shape.rank()) + " " + dims_text(want.shape));
          for (int k = 0; k < got.shape.rank(); ++k)
            if (got.shape[k] != want.shape[k])
              return InvalidArgument(at + what + " dim " + std::to_string(k) + " is " + std::to_string(got.shape[k]) + ", but " +
                                     first->what + " has " + std::to_string(want.shape[k]));
        }
      }
      spec.bindings.push_back(StateBinding{b.entry, b.input, b.output});
    }
    if (!first) return InvalidArgument(cfg.config_path + ":" + std::to_string(sb.line) + ": state '" + sb.name + "' has no bound tensor");
    spec.dtype = first->desc.dtype;
    spec.dims = first->desc.shape.vec();
    out.push_back(std::move(spec));
  }
  return out;
}

}  // namespace kiln
