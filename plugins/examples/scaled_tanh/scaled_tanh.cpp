// example::ScaledTanh@1, the template for external kiln plugin libraries: y = alpha * tanh(beta * x)
// on float32 tensors of any shape.
//
// A plugin library includes only plugins/plugin_api.h (and the runtime value headers it pulls
// in), uses only their header-inline parts, and exports only kiln_plugin_library() (see
// exports.map). It never links kiln itself: the kiln that loads it owns the registry.
#include <cmath>
#include <new>

#include <kiln/plugin_api.h>

namespace {

using kiln::AttrMap;
using kiln::Attribute;
using kiln::DType;
using kiln::Status;
using kiln::StatusOr;
using kiln::TensorDesc;
using kiln::TensorView;

constexpr const char* kNamespace = "example";
constexpr const char* kName = "ScaledTanh";
constexpr const char* kVersion = "1";

Status check_inputs(size_t n, DType dtype) {
  if (n != 1) return kiln::InvalidArgument("ScaledTanh takes 1 input, got " + std::to_string(n));
  if (dtype != DType::kFloat32) return kiln::InvalidArgument("ScaledTanh input 0 must be float32");
  return Status::Ok();
}

class ScaledTanhRun final : public kiln::PluginRun {
 public:
  ScaledTanhRun(float alpha, float beta) : alpha_(alpha), beta_(beta) {}

  Status infer(std::span<const TensorView> inputs, std::span<TensorDesc> outputs) noexcept override {
    KILN_RETURN_IF_ERROR(check_inputs(inputs.size(), inputs.empty() ? DType::kUndefined : inputs[0].dtype));
    if (outputs.size() != 1) return kiln::InvalidArgument("ScaledTanh has 1 output, got " + std::to_string(outputs.size()));
    outputs[0] = TensorDesc{DType::kFloat32, inputs[0].shape};
    return Status::Ok();
  }

  Status run(std::span<const TensorView> inputs, std::span<const TensorView> outputs, void* workspace) noexcept override {
    const float* x = inputs[0].as<const float>();
    float* y = outputs[0].as<float>();
    const int64_t n = inputs[0].numel();
    for (int64_t i = 0; i < n; ++i) y[i] = alpha_ * std::tanh(beta_ * x[i]);
    return Status::Ok();
  }

 private:
  float alpha_, beta_;
};

class ScaledTanhBuild final : public kiln::PluginBuild {
 public:
  ScaledTanhBuild(float alpha, float beta) : alpha_(alpha), beta_(beta) {}

  int num_outputs() const noexcept override { return 1; }
  bool supports(std::span<const DType> input_dtypes) const noexcept override {
    return input_dtypes.size() == 1 && input_dtypes[0] == DType::kFloat32;
  }
  Status infer(std::span<const TensorDesc> inputs, std::span<TensorDesc> outputs) const noexcept override {
    KILN_RETURN_IF_ERROR(check_inputs(inputs.size(), inputs.empty() ? DType::kUndefined : inputs[0].dtype));
    if (outputs.size() != 1) return kiln::InvalidArgument("ScaledTanh has 1 output, got " + std::to_string(outputs.size()));
    outputs[0] = TensorDesc{DType::kFloat32, inputs[0].shape};
    return Status::Ok();
  }
  // Elementwise: the output has the input's (possibly symbolic) shape, so the builder keeps the
  // model's dynamic dims past this op.
  Status infer_symbolic(std::span<const kiln::SymbolicTensorDesc> inputs, std::span<kiln::SymbolicTensorDesc> outputs,
                        kiln::ShapeExprBuilder&) const noexcept override {
    KILN_RETURN_IF_ERROR(check_inputs(inputs.size(), inputs.empty() ? DType::kUndefined : inputs[0].dtype));
    if (outputs.size() != 1) return kiln::InvalidArgument("ScaledTanh has 1 output, got " + std::to_string(outputs.size()));
    outputs[0] = inputs[0];
    outputs[0].dtype = DType::kFloat32;
    return Status::Ok();
  }
  // Every field, defaults included, so the engine recreates exactly this plugin.
  AttrMap fields() const noexcept override { return {{"alpha", Attribute::Float(alpha_)}, {"beta", Attribute::Float(beta_)}}; }
  StatusOr<std::unique_ptr<kiln::PluginRun>> create_run() const noexcept override {
    std::unique_ptr<kiln::PluginRun> run(new (std::nothrow) ScaledTanhRun(alpha_, beta_));
    if (!run) return kiln::Internal("out of memory creating ScaledTanh");
    return run;
  }

 private:
  float alpha_, beta_;
};

class ScaledTanhCreator final : public kiln::PluginCreator {
 public:
  const char* name() const noexcept override { return kName; }
  const char* plugin_namespace() const noexcept override { return kNamespace; }
  const char* version() const noexcept override { return kVersion; }
  std::vector<kiln::PluginFieldSpec> field_specs() const noexcept override {
    return {{"alpha", Attribute::Kind::kFloat, true}, {"beta", Attribute::Kind::kFloat, false}};
  }
  StatusOr<std::unique_ptr<kiln::PluginBuild>> create(const AttrMap& fields) const noexcept override {
    float alpha = 0, beta = 1;
    bool has_alpha = false;
    for (const auto& [key, value] : fields) {
      if (key != "alpha" && key != "beta") return kiln::InvalidArgument("ScaledTanh has no field '" + key + "' (fields: alpha, beta)");
      if (value.kind != Attribute::Kind::kFloat) return kiln::InvalidArgument("ScaledTanh field '" + key + "' must be a float");
      if (key == "alpha") {
        alpha = value.f;
        has_alpha = true;
      } else {
        beta = value.f;
      }
    }
    if (!has_alpha) return kiln::InvalidArgument("ScaledTanh field 'alpha' is required");
    std::unique_ptr<kiln::PluginBuild> build(new (std::nothrow) ScaledTanhBuild(alpha, beta));
    if (!build) return kiln::Internal("out of memory creating ScaledTanh");
    return build;
  }
};

}  // namespace

KILN_PLUGIN_EXPORT const KilnPluginLibrary* kiln_plugin_library() {
  static ScaledTanhCreator creator;
  static kiln::PluginCreator* const creators[] = {&creator};
  static const KilnPluginLibrary library = {kiln::kKilnPluginApiVersion, "kiln example plugins", 1, creators, "1.0"};
  return &library;
}
