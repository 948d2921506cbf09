// engine-build --sensitivity: which layers lose accuracy in int8 (as Polygraphy's precision
// debugging does for TensorRT). On the calibration profile at its opt shapes, with inputs no
// calibration batch used, every quantized step is tried alone in int8 (the rest fp32) and left out
// alone (the rest int8); each variant's error is the largest over the outputs of
// max |variant - fp32| / max(1, max |fp32|). Ranked by the error the step causes alone: the top
// entries are what to put in precision_overrides, and "all but" shows what keeping one out buys.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "builder/build_config.h"
#include "runtime/plan.h"

namespace kiln {

struct LayerSensitivity {
  std::string step;
  double alone = 0;       // error with only this step in int8
  double all_but = 0;     // error with every quantized step but this one in int8
};

struct SensitivityResult {
  std::string profile;
  double all_int8 = 0;    // error of the int8 plan as built
  int batches = 0;
  std::vector<LayerSensitivity> layers;  // most sensitive (largest `alone`) first
};

// `int8_plan` and `fp32_plan` are one profile's plans (same steps; the int8 one after lowering).
StatusOr<SensitivityResult> rank_int8_sensitivity(const Plan& int8_plan, const Plan& fp32_plan, const std::string& profile,
                                                  const std::map<std::string, Shape>& shapes, const BuildConfig& cfg,
                                                  const std::function<void(const std::string&)>& progress);

std::string sensitivity_json(const SensitivityResult& r);

}  // namespace kiln
