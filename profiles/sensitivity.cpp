#include "profiles/sensitivity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "builder/json_text.h"
#include "builder/quantization/calibration.h"
#include "runtime/execution_context.h"

namespace kiln {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Inputs of the held-out batches, and the fp32 outputs on them.
struct Reference {
  std::vector<std::vector<std::pair<std::string, Tensor>>> inputs;  // per batch
  std::vector<std::vector<Tensor>> outputs;                          // per batch, per output
  std::vector<double> scale;                                         // per output: max(1, max |fp32|)
};

// Runs `ctx` on every reference batch; the largest relative error over batches and outputs.
StatusOr<double> relative_error(ExecutionContext& ctx, const Reference& ref) {
  double worst = 0;
  for (size_t b = 0; b < ref.inputs.size(); ++b) {
    for (const auto& [name, t] : ref.inputs[b]) KILN_RETURN_IF_ERROR(ctx.set_input(name, t.view()));
    KILN_RETURN_IF_ERROR(ctx.run());
    for (size_t o = 0; o < ctx.num_outputs(); ++o) {
      const TensorView& got = ctx.output(o);
      const Tensor& want = ref.outputs[b][o];
      if (got.dtype != DType::kFloat32 || got.numel() != want.numel()) continue;
      double e = 0;
      for (int64_t i = 0; i < got.numel(); ++i) e = std::max(e, static_cast<double>(std::fabs(got.as<float>()[i] - want.as<float>()[i])));
      worst = std::max(worst, e / ref.scale[o]);
    }
  }
  return worst;
}

StatusOr<double> plan_error(const Plan& plan, const Reference& ref) {
  KILN_ASSIGN_OR_RETURN(auto ctx, ExecutionContext::create(std::make_shared<Plan>(plan)));
  return relative_error(*ctx, ref);
}

}  // namespace

StatusOr<SensitivityResult> rank_int8_sensitivity(const Plan& int8_plan, const Plan& fp32_plan, const std::string& profile,
                                                  const std::map<std::string, Shape>& shapes, const BuildConfig& cfg,
                                                  const std::function<void(const std::string&)>& progress) {
  if (int8_plan.steps.size() != fp32_plan.steps.size()) return Internal("sensitivity: the int8 and fp32 plans differ in steps");
  SensitivityResult r;
  r.profile = profile;
  r.batches = std::max(1, cfg.calibration.holdout);
  // The fp32 plan on held-out batches (after the calibration batches and the error report's).
  Reference ref;
  // Both whole plans stay loaded: their packed weights (fp32 and int8) are then shared by every
  // variant instead of packed again for each.
  KILN_ASSIGN_OR_RETURN(auto fp32, ExecutionContext::create(std::make_shared<Plan>(fp32_plan)));
  {
    for (int b = 0; b < r.batches; ++b) {
      KILN_ASSIGN_OR_RETURN(auto inputs, batch_inputs(fp32_plan, shapes, cfg, cfg.calibration.batches + cfg.calibration.holdout + 1 + b));
      for (const auto& [name, t] : inputs) KILN_RETURN_IF_ERROR(fp32->set_input(name, t.view()));
      KILN_RETURN_IF_ERROR(fp32->run());
      std::vector<Tensor> outs;
      for (size_t o = 0; o < fp32->num_outputs(); ++o) {
        outs.push_back(Tensor::copy_of(fp32->output(o)));
        if (ref.scale.size() <= o) ref.scale.push_back(1.0);
        for (int64_t i = 0; i < outs.back().numel(); ++i)
          if (outs.back().dtype() == DType::kFloat32) ref.scale[o] = std::max(ref.scale[o], static_cast<double>(std::fabs(outs.back().as<float>()[i])));
      }
      ref.inputs.push_back(std::move(inputs));
      ref.outputs.push_back(std::move(outs));
    }
  }
  KILN_ASSIGN_OR_RETURN(auto int8_ctx, ExecutionContext::create(std::make_shared<Plan>(int8_plan)));
  KILN_ASSIGN_OR_RETURN(r.all_int8, relative_error(*int8_ctx, ref));
  std::vector<size_t> quantized;
  for (size_t s = 0; s < int8_plan.steps.size(); ++s)
    if (int8_plan.steps[s].impl == "onednn_int8") quantized.push_back(s);
  progress("sensitivity: " + std::to_string(quantized.size()) + " int8 steps of profile '" + profile + "', each alone and each left out, on " +
           std::to_string(r.batches) + " held-out batch(es); all int8: error " + num(r.all_int8));
  for (size_t k = 0; k < quantized.size(); ++k) {
    const size_t s = quantized[k];
    LayerSensitivity l;
    l.step = int8_plan.steps[s].name;
    Plan alone = fp32_plan;
    alone.steps[s] = int8_plan.steps[s];
    KILN_ASSIGN_OR_RETURN(l.alone, plan_error(alone, ref));
    Plan all_but = int8_plan;
    all_but.steps[s] = fp32_plan.steps[s];
    KILN_ASSIGN_OR_RETURN(l.all_but, plan_error(all_but, ref));
    r.layers.push_back(l);
    if ((k + 1) % 10 == 0) progress("sensitivity: " + std::to_string(k + 1) + " of " + std::to_string(quantized.size()) + " steps");
  }
  std::stable_sort(r.layers.begin(), r.layers.end(), [](const auto& a, const auto& b) { return a.alone > b.alone; });
  return r;
}

std::string sensitivity_json(const SensitivityResult& r) {
  std::ostringstream os;
  os << "{\"profile\": " << json_string(r.profile) << ", \"heldout_batches\": " << r.batches << ", \"all_int8_error\": " << num(r.all_int8)
     << ", \"metric\": \"max over outputs of max |x - fp32| / max(1, max |fp32|)\", \"layers\": [";
  for (size_t i = 0; i < r.layers.size(); ++i)
    os << (i ? "," : "") << "\n  {\"step\": " << json_string(r.layers[i].step) << ", \"alone\": " << num(r.layers[i].alone)
       << ", \"all_but\": " << num(r.layers[i].all_but) << "}";
  os << "\n]}\n";
  return os.str();
}

}  // namespace kiln
