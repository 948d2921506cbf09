#include "builder/plan/plan_winograd_layout.h"

#include "builder/plan/plan_passes.h"
#include "runtime/kernel.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

namespace {

constexpr const char* kWinograd = "onednn_winograd";
constexpr int64_t kBlock = 16;  // nChw16c's channel block

bool is_winograd_conv(const PlanStep& s) { return s.domain == kKilnDomain && s.op_type == "FusedConv" && s.impl == kWinograd; }

std::string layout_attr(const PlanStep& s, const char* name) {
  auto it = s.attrs.find(name);
  return it == s.attrs.end() || it->second.kind != Attribute::Kind::kString ? "nchw" : it->second.s;
}

// The output channels of a FusedConv: dim 0 of its constant weights, or -1 when unknown.
int64_t output_channels(const Plan& plan, const PlanStep& s) {
  if (s.inputs.size() < 2 || s.inputs[1] < 0) return -1;
  const int c = plan.values[s.inputs[1]].constant;
  if (c < 0 || plan.constants[c].shape().rank() != 4) return -1;
  return plan.constants[c].shape()[0];
}

}  // namespace

int keep_nchw16c_between_winograd_convs(Plan& plan) {
  // readers[v]: (step, input slot) pairs.
  std::vector<std::vector<std::pair<size_t, size_t>>> readers(plan.values.size());
  for (size_t s = 0; s < plan.steps.size(); ++s)
    for (size_t k = 0; k < plan.steps[s].inputs.size(); ++k)
      if (const int v = plan.steps[s].inputs[k]; v >= 0) readers[v].push_back({s, k});
  int switched = 0;
  for (auto& producer : plan.steps) {
    if (!is_winograd_conv(producer) || producer.outputs.empty() || layout_attr(producer, "y_layout") != "nhwc") continue;
    const int v = producer.outputs[0];
    const int64_t channels = output_channels(plan, producer);
    if (channels <= 0 || channels % kBlock != 0 || readers[v].empty()) continue;
    if (std::find(plan.outputs.begin(), plan.outputs.end(), v) != plan.outputs.end()) continue;
    const bool all_winograd = std::all_of(readers[v].begin(), readers[v].end(), [&](const auto& r) {
      const PlanStep& reader = plan.steps[r.first];
      const char* attr = r.second == 0 ? "x_layout" : r.second == 3 ? "residual_layout" : nullptr;
      return attr && is_winograd_conv(reader) && layout_attr(reader, attr) == "nhwc";
    });
    if (!all_winograd) continue;
    producer.attrs["y_layout"] = Attribute::String("nchw16c");
    for (const auto& [s, k] : readers[v]) plan.steps[s].attrs[k == 0 ? "x_layout" : "residual_layout"] = Attribute::String("nchw16c");
    ++switched;
  }
  return switched;
}

// Plan pass winograd_layout.
Status winograd_layout(Plan& plan, PlanPassContext& ctx) {
  if (const int n = keep_nchw16c_between_winograd_convs(plan))
    ctx.log.push_back("winograd_layout: " + std::to_string(n) + " values between Winograd convolutions kept in nChw16c");
  return Status::Ok();
}

}  // namespace kiln
