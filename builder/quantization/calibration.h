// int8 calibration (precision: int8, as TensorRT's INT8 calibrators): the activation scale of every
// step int8 lowering may quantize (builder/int8_lowering.h), measured by running the fp32 plan of
// one profile at its opt shapes on `batches` input batches from the config's generators (each
// batch with its own seeds). Per tensor, symmetric: scale = threshold / 127, where the threshold
// on |x| is
//   minmax:     the largest |x| seen;
//   percentile: the given percentile of |x| (a 2048-bin histogram up to the largest);
//   entropy:    TensorRT's: of the thresholds at bin edges 128..2048 of that histogram, the one whose
//               128-level quantization of the clipped distribution loses the least information
//               (smallest KL divergence from the original).
// A tensor with fewer than 16 samples per histogram bin over all batches (one-row activations)
// keeps its whole range whatever the method: so few samples leave most bins empty.
// The calibration cache (calibration.cache) is a text file: a header naming the model's checksum
// and every setting that changes the result, then one scale per line as a hexadecimal float; when
// the header matches, the scales are read instead of measured, so a rebuild with the cache skips
// calibration and writes the same engine bytes.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "builder/build_config.h"
#include "runtime/plan.h"

namespace kiln {

struct CalibrationResult {
  std::map<std::string, float> a_scale;  // by step name
  bool from_cache = false;
  int batches = 0;                        // batches run (0 from the cache)
};

// Histogram of |x| over [0, range) in kCalibrationBins bins, for the percentile and entropy methods.
constexpr int kCalibrationBins = 2048;
struct AbsHistogram {
  double range = 0;
  std::array<double, kCalibrationBins> count{};
  void add(const float* x, int64_t n);
};
// The |x| threshold a method picks from a histogram (percentile in (0, 100]).
double percentile_threshold(const AbsHistogram& h, double percentile);
double entropy_threshold(const AbsHistogram& h);

// Inputs of calibration batch `batch` (>= 1; batch 0 is what validation and benchmarks use) at
// `shapes`: the config's generators with seeds derived from the batch number; with
// `calibration.inputs: DIR`, the .npy files of batch_folder(batch), which must match `shapes`.
// Batches 1..batches calibrate; later numbers are held out.
StatusOr<std::vector<std::pair<std::string, Tensor>>> batch_inputs(const Plan& plan, const std::map<std::string, Shape>& shapes,
                                                                   const BuildConfig& cfg, int batch);

// With calibration.inputs: DIR, the subfolder of batch `batch`: 1..batches are the first
// subfolders; later numbers (the error report's, --sensitivity's) cycle through the last `holdout`.
const std::string& batch_folder(const CalibrationConfig& c, int batch);

// The cache header line for these settings (the model's bytes, the method, batches, profile shapes,
// generators, or a checksum of the calibrating .npy files of `plan`'s inputs).
StatusOr<std::string> calibration_cache_key(const Plan& plan, const BuildConfig& cfg, const std::string& profile,
                                            const std::map<std::string, Shape>& shapes);

// Scales for every int8 candidate of `fp32_plan` (the calibration profile's plan), from the cache
// when it matches, else measured (and the cache written).
StatusOr<CalibrationResult> calibrate(const Plan& fp32_plan, const std::string& profile, const std::map<std::string, Shape>& shapes,
                                      const BuildConfig& cfg, const std::function<void(const std::string&)>& progress);

}  // namespace kiln
