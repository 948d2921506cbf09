#include "builder/quantization/calibration.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <fstream>
#include <set>
#include <sstream>

#include "builder/plan/int8_lowering.h"
#include "builder/input_generator.h"
#include "runtime/engine_format.h"
#include "runtime/execution_context.h"
#include "runtime/npy_io.h"

namespace kiln {

namespace {

constexpr const char* kCacheMagic = "# kiln int8 calibration cache 1";

std::string hex_float(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%a", static_cast<double>(v));
  return buf;
}

std::string gen_text(const InputGenerator& g) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s[%.17g,%.17g,%" PRId64 ",%" PRIu64 "]", g.kind.c_str(), g.low, g.high, g.block, g.seed);
  return buf;
}

StatusOr<uint64_t> file_checksum(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot open model '" + path + "' to key the calibration cache");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return checksum64(bytes.data(), bytes.size());
}

// Reads the cache when its header is `key`; nullopt when absent or for other settings.
StatusOr<std::optional<std::map<std::string, float>>> read_cache(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  if (!f) return std::optional<std::map<std::string, float>>();
  std::string line;
  if (!std::getline(f, line) || line != kCacheMagic) return IoError("calibration cache '" + path + "': not a kiln calibration cache");
  if (!std::getline(f, line) || line != key) return std::optional<std::map<std::string, float>>();
  std::map<std::string, float> scales;
  for (int n = 3; std::getline(f, line); ++n) {
    const size_t tab = line.find('\t');
    char* end = nullptr;
    const double v = tab == std::string::npos ? 0 : std::strtod(line.c_str(), &end);
    if (tab == std::string::npos || end != line.c_str() + tab || !(v > 0) || !std::isfinite(v))
      return IoError("calibration cache '" + path + "' line " + std::to_string(n) + ": expected SCALE<TAB>STEP, got '" + line + "'");
    scales[line.substr(tab + 1)] = static_cast<float>(v);
  }
  return std::optional<std::map<std::string, float>>(std::move(scales));
}

Status write_cache(const std::string& path, const std::string& key, const std::map<std::string, float>& scales) {
  std::error_code ec;
  if (const auto dir = std::filesystem::path(path).parent_path(); !dir.empty()) std::filesystem::create_directories(dir, ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << kCacheMagic << '\n' << key << '\n';
    for (const auto& [name, s] : scales) f << hex_float(s) << '\t' << name << '\n';
    if (!f) return IoError("cannot write calibration cache '" + tmp + "'");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return IoError("cannot write calibration cache '" + path + "': " + ec.message());
  }
  return Status::Ok();
}

// KL divergence of q from p, both normalized; where p holds mass and q none (a clipped tail the
// levels cannot show), q counts as 1e-8, a large but finite penalty.
double kl_divergence(const std::vector<double>& p, const std::vector<double>& q) {
  double sp = 0, sq = 0;
  for (double x : p) sp += x;
  for (double x : q) sq += x;
  if (sp <= 0 || sq <= 0) return INFINITY;
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0) kl += p[i] / sp * std::log((p[i] / sp) / std::max(q[i] / sq, 1e-8));
  return kl;
}

}  // namespace

void AbsHistogram::add(const float* x, int64_t n) {
  if (range <= 0) return;
  const double per_bin = kCalibrationBins / range;
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(static_cast<double>(x[i]));
    if (!std::isfinite(a)) continue;
    count[std::min<int64_t>(kCalibrationBins - 1, static_cast<int64_t>(a * per_bin))] += 1;
  }
}

double percentile_threshold(const AbsHistogram& h, double percentile) {
  double total = 0;
  for (double c : h.count) total += c;
  if (total <= 0) return 0;
  const double want = total * percentile / 100.0;
  double seen = 0;
  for (int i = 0; i < kCalibrationBins; ++i) {
    seen += h.count[i];
    if (seen >= want) return (i + 1) * h.range / kCalibrationBins;
  }
  return h.range;
}

double entropy_threshold(const AbsHistogram& h) {
  constexpr int kLevels = 128;  // |q| in 0..127: the symmetric int8 levels of one sign
  std::vector<double> tail(kCalibrationBins + 1, 0.0);  // tail[i] = mass of bins >= i
  for (int i = kCalibrationBins - 1; i >= 0; --i) tail[i] = tail[i + 1] + h.count[i];
  double best_kl = INFINITY;
  int best = kCalibrationBins;
  std::vector<double> p, q;
  for (int i = kLevels; i <= kCalibrationBins; ++i) {
    // p: the first i bins, what lies beyond clipped into the last one (the clipped distribution).
    p.assign(h.count.begin(), h.count.begin() + i);
    p[i - 1] += tail[i];
    // q: the first i bins without the clipped tail, merged into kLevels levels, each level's mass
    // spread evenly over the bins where p holds any. The tail is what q lacks: a threshold that
    // clips much pays for it in the last bin, one that keeps much pays in coarse levels.
    q.assign(static_cast<size_t>(i), 0.0);
    for (int l = 0; l < kLevels; ++l) {
      const int b0 = l * i / kLevels, b1 = (l + 1) * i / kLevels;
      double mass = 0;
      int used = 0;
      for (int b = b0; b < b1; ++b) {
        mass += h.count[b];
        used += p[b] > 0;
      }
      for (int b = b0; b < b1; ++b)
        if (p[b] > 0) q[b] = mass / used;
    }
    const double kl = kl_divergence(p, q);
    if (kl < best_kl) {
      best_kl = kl;
      best = i;
    }
  }
  return best * h.range / kCalibrationBins;  // the upper edge of the kept bins
}

const std::string& batch_folder(const CalibrationConfig& c, int batch) {
  if (batch >= 1 && batch <= c.batches) return c.batch_folders[static_cast<size_t>(batch - 1)];
  const size_t n = c.batch_folders.size(), h = static_cast<size_t>(c.holdout);
  return c.batch_folders[n - h + static_cast<size_t>(std::max(0, batch - c.batches - 1)) % h];
}

namespace {

std::string batch_file(const std::string& folder, const std::string& input) {
  return (std::filesystem::path(folder) / (sanitize_file_name(input) + ".npy")).string();
}

Status missing_batch_file(const std::string& file, const std::string& input) {
  return InvalidArgument("calibration file '" + file + "' is missing (input '" + input + "' of every batch subfolder)");
}

// One batch subfolder: `<input>.npy` (engine-run's file names) for every plan input, each with the
// input's dtype and exactly its shape in `shapes` (the calibration profile's opt shapes).
StatusOr<std::vector<std::pair<std::string, Tensor>>> folder_batch_inputs(const Plan& plan, const std::map<std::string, Shape>& shapes,
                                                                          const std::string& folder) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (int id : plan.inputs) {
    const PlanValue& pv = plan.values[id];
    auto it = shapes.find(pv.name);
    if (it == shapes.end()) return Internal("calibration: no shape for input '" + pv.name + "'");
    const std::string file = batch_file(folder, pv.name);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) return missing_batch_file(file, pv.name);
    auto t = read_npy(file);
    if (!t.ok()) return InvalidArgument("calibration: input '" + pv.name + "': " + t.status().message());
    const Shape& want = it->second;
    const std::string at_opt = " (calibration runs at the calibration profile's opt shapes, " + pv.name + want.str() + ")";
    if (t->dtype() != pv.dtype)
      return InvalidArgument("calibration file '" + file + "': input '" + pv.name + "' has dtype " + dtype_name(t->dtype()) + ", expected " +
                             dtype_name(pv.dtype));
    const Shape& got = t->shape();
    if (got.rank() != want.rank())
      return InvalidArgument("calibration file '" + file + "': input '" + pv.name + "' has rank " + std::to_string(got.rank()) + " " + got.str() +
                             ", expected rank " + std::to_string(want.rank()) + at_opt);
    for (int d = 0; d < want.rank(); ++d)
      if (got[d] != want[d])
        return InvalidArgument("calibration file '" + file + "': input '" + pv.name + "' dim " + std::to_string(d) + " is " + std::to_string(got[d]) +
                               ", expected " + std::to_string(want[d]) + at_opt);
    out.emplace_back(pv.name, std::move(*t));
  }
  return out;
}

// One checksum over every calibrating file (name and contents), so changed data recalibrates.
StatusOr<uint64_t> folder_checksum(const Plan& plan, const CalibrationConfig& c) {
  std::string sums;
  for (int b = 1; b <= c.batches; ++b)
    for (int id : plan.inputs) {
      const std::string file = batch_file(batch_folder(c, b), plan.values[id].name);
      std::ifstream f(file, std::ios::binary);
      if (!f) return missing_batch_file(file, plan.values[id].name);
      std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      char line[40];
      std::snprintf(line, sizeof line, "%016" PRIx64 "\n", checksum64(bytes.data(), bytes.size()));
      sums += file.substr(c.folder.size()) + " " + line;
    }
  return checksum64(sums.data(), sums.size());
}

}  // namespace

StatusOr<std::vector<std::pair<std::string, Tensor>>> batch_inputs(const Plan& plan, const std::map<std::string, Shape>& shapes,
                                                                   const BuildConfig& cfg, int batch) {
  if (!cfg.calibration.folder.empty()) return folder_batch_inputs(plan, shapes, batch_folder(cfg.calibration, batch));
  std::vector<std::pair<std::string, Tensor>> out;
  for (int id : plan.inputs) {
    const PlanValue& pv = plan.values[id];
    auto it = shapes.find(pv.name);
    if (it == shapes.end()) return Internal("calibration: no shape for input '" + pv.name + "'");
    auto g = cfg.inputs.find(pv.name);
    InputGenerator gen;
    if (g != cfg.inputs.end()) gen = g->second;
    else gen.kind = dtype_is_float(pv.dtype) ? "uniform" : pv.dtype == DType::kBool ? "ones" : "zeros";
    // A seed per (input, batch): splitmix of the name's hash (or the configured seed) and the batch.
    uint64_t h = gen.seed ? gen.seed : 1469598103934665603ULL;
    if (!gen.seed)
      for (unsigned char c : pv.name) h = (h ^ c) * 1099511628211ULL;
    h += 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(batch);
    h = (h ^ (h >> 31)) * 0xbf58476d1ce4e5b9ULL;
    gen.seed = h ? h : 1;
    KILN_ASSIGN_OR_RETURN(Tensor t, generate_input(pv.name, pv.dtype, it->second, &gen));
    out.emplace_back(pv.name, std::move(t));
  }
  return out;
}

StatusOr<std::string> calibration_cache_key(const Plan& plan, const BuildConfig& cfg, const std::string& profile,
                                            const std::map<std::string, Shape>& shapes) {
  KILN_ASSIGN_OR_RETURN(uint64_t model, file_checksum(cfg.model));
  const CalibrationConfig& c = cfg.calibration;
  std::ostringstream os;
  char sum[32];
  std::snprintf(sum, sizeof sum, "%016" PRIx64, model);
  os << "model " << sum << " method " << c.method;
  if (c.method == "percentile") os << " " << hex_float(static_cast<float>(c.percentile));
  os << " batches " << c.batches << " profile " << profile << " shapes";
  for (const auto& [name, s] : shapes) os << " " << name << s.str();
  if (!c.folder.empty()) {
    KILN_ASSIGN_OR_RETURN(uint64_t data, folder_checksum(plan, c));
    std::snprintf(sum, sizeof sum, "%016" PRIx64, data);
    os << " folder " << sum;
    return os.str();
  }
  os << " generators";
  for (const auto& [name, g] : cfg.inputs) os << " " << name << "=" << gen_text(g);
  return os.str();
}

StatusOr<CalibrationResult> calibrate(const Plan& fp32_plan, const std::string& profile, const std::map<std::string, Shape>& shapes,
                                      const BuildConfig& cfg, const std::function<void(const std::string&)>& progress) {
  const CalibrationConfig& c = cfg.calibration;
  CalibrationResult result;
  std::string key;
  if (!c.cache.empty()) {
    KILN_ASSIGN_OR_RETURN(key, calibration_cache_key(fp32_plan, cfg, profile, shapes));
    KILN_ASSIGN_OR_RETURN(auto cached, read_cache(c.cache, key));
    // A cache missing a candidate (written before that op type was quantized) is stale.
    const auto candidates = int8_candidate_steps(fp32_plan);
    const bool complete = cached && std::all_of(candidates.begin(), candidates.end(), [&](const std::string& n) { return cached->count(n) > 0; });
    if (cached && !complete) progress("calibration: cache " + c.cache + " lacks some of this plan's int8 steps; recalibrating");
    if (complete) {
      progress("calibration: " + std::to_string(cached->size()) + " scales from cache " + c.cache + " (skipping calibration)");
      result.a_scale = std::move(*cached);
      result.from_cache = true;
      return result;
    }
  }
  // The plan with every candidate's activation as an extra output, so its data outlives the run.
  auto plan = std::make_shared<Plan>(fp32_plan);
  std::map<std::string, size_t> output_of;  // step -> index among the plan's outputs
  for (const std::string& name : int8_candidate_steps(fp32_plan)) {
    for (const auto& step : plan->steps) {
      if (step.name != name) continue;
      const int v = step.inputs[0];
      auto pos = std::find(plan->outputs.begin(), plan->outputs.end(), v);
      if (pos == plan->outputs.end()) pos = plan->outputs.insert(plan->outputs.end(), v);
      output_of[name] = static_cast<size_t>(pos - plan->outputs.begin());
      break;
    }
  }
  KILN_ASSIGN_OR_RETURN(auto ctx, ExecutionContext::create(plan));
  std::map<std::string, AbsHistogram> hist;
  std::map<std::string, double> amax;
  const bool histogram = c.method != "minmax";
  const std::string source = c.folder.empty() ? "" : " read from folder " + c.folder + " (" + std::to_string(c.holdout) + " more held out)";
  progress("calibration: method " + c.method + ", " + std::to_string(c.batches) + " batches" + source + " of profile '" + profile + "' at opt shapes, " +
           std::to_string(output_of.size()) + " activations" + (histogram ? " (two passes: ranges, then histograms)" : ""));
  for (int pass = 0; pass < (histogram ? 2 : 1); ++pass) {
    for (int b = 1; b <= c.batches; ++b) {
      KILN_ASSIGN_OR_RETURN(auto inputs, batch_inputs(*plan, shapes, cfg, b));
      for (const auto& [name, t] : inputs) KILN_RETURN_IF_ERROR(ctx->set_input(name, t.view()).with_context("calibration"));
      KILN_RETURN_IF_ERROR(ctx->run().with_context("calibration run, batch " + std::to_string(b)));
      for (const auto& [name, o] : output_of) {
        const TensorView& v = ctx->output(o);
        if (v.dtype != DType::kFloat32) continue;
        const float* x = v.as<const float>();
        if (pass == 0) {
          double m = amax[name];
          for (int64_t i = 0; i < v.numel(); ++i)
            if (std::isfinite(x[i])) m = std::max(m, static_cast<double>(std::fabs(x[i])));
          amax[name] = m;
        } else {
          AbsHistogram& h = hist[name];
          h.range = amax[name];
          h.add(x, v.numel());
        }
      }
    }
  }
  for (const auto& [name, m] : amax) {
    double threshold = m;
    // A histogram of few samples has empty bins everywhere, and the thresholds it gives are noise
    // (a one-row activation: 384 values a batch): such tensors keep their whole range.
    double samples = 0;
    for (double n : hist[name].count) samples += n;
    const bool enough = samples >= 16.0 * kCalibrationBins;
    if (enough && c.method == "percentile") threshold = percentile_threshold(hist[name], c.percentile);
    if (enough && c.method == "entropy") threshold = entropy_threshold(hist[name]);
    // An all-zero activation still needs a positive scale: its quantized values are zeros either way.
    result.a_scale[name] = threshold > 0 ? static_cast<float>(threshold / 127.0) : 1.0f;
  }
  result.batches = c.batches;
  if (!c.cache.empty()) {
    KILN_RETURN_IF_ERROR(write_cache(c.cache, key, result.a_scale));
    progress("calibration: wrote " + std::to_string(result.a_scale.size()) + " scales to " + c.cache);
  }
  return result;
}

}  // namespace kiln
