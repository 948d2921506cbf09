// The kiln plugin API: custom layers that the builder places in a plan and the runtime executes.
//
// Modeled on TensorRT's IPluginV3, simplified:
//   - identity: namespace::name + version; a creator describes the plugin's fields (named, typed);
//   - two halves: PluginBuild (build time: output shapes, dtypes, workspace, configure for a
//     profile, the fields to save) and PluginRun (run time: shape change, run);
//   - state in the engine: a plugin is saved as its creator identity plus its named, typed fields
//     (kiln::AttrMap) and recreated from them at load: never positional bytes;
//   - no exception crosses the API: every method is noexcept and reports errors as Status;
//   - external libraries export ONE extern "C" entry point, kiln_plugin_library(), returning a
//     table stamped with kKilnPluginApiVersion; the loader rejects other versions. The table names
//     the library and its version: an engine records both (with the library's file name) and the
//     loader finds the library again on a search path and checks them (docs/embedding.md).
//
// Plugins see only this header (and the header-only runtime value types it includes, and kiln's CPU
// feature detector, kiln/cpu_features.h, so an ISA cap applies to plugins as to built-in
// kernels); they never include builder/ or other runtime internals.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/attributes.h"
#include "kiln/cpu_features.h"
#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

// 2: KilnPluginLibrary gained library_version (engines record libraries by name and version);
//    PluginBuild gained infer_symbolic.
constexpr uint32_t kKilnPluginApiVersion = 2;

// A field of a plugin: its name, its type, and whether it must be given.
struct PluginFieldSpec {
  std::string name;
  Attribute::Kind kind = Attribute::Kind::kInt;
  bool required = false;
};

// Run-time half: one per execution context (never shared across threads).
class KILN_API PluginRun {
 public:
  virtual ~PluginRun() = default;
  // Output dtypes and shapes for concrete input shapes (called on every run, before run()).
  virtual Status infer(std::span<const TensorView> inputs, std::span<TensorDesc> outputs) noexcept = 0;
  // Input shapes changed: size scratch, choose code paths. Not called again while shapes stay.
  virtual Status on_shape_change(std::span<const TensorView> inputs, std::span<const TensorView> outputs) noexcept {
    (void)inputs;
    (void)outputs;
    return Status::Ok();
  }
  // Computes the outputs. `workspace` is workspace_bytes() of scratch owned by the context.
  virtual Status run(std::span<const TensorView> inputs, std::span<const TensorView> outputs, void* workspace) noexcept = 0;
};

// Symbolic shapes at build time (TensorRT's IExprBuilder / getOutputShapes): a profile's ranged
// dims are expressions over the model's dim symbols, and a plugin that derives its output shapes
// from its inputs' with these operations lets the builder keep them symbolic past the plugin (and
// evaluate them at the profile's min, opt and max) instead of losing them.
class ShapeExpr;  // opaque; owned by the builder, valid for the duration of the call
enum class ShapeOp { kSum, kSub, kProd, kFloorDiv, kCeilDiv };

class KILN_API ShapeExprBuilder {
 public:
  virtual const ShapeExpr* constant(int64_t value) noexcept = 0;
  // nullptr (an unknown dim) in either operand gives nullptr.
  virtual const ShapeExpr* operation(ShapeOp op, const ShapeExpr* a, const ShapeExpr* b) noexcept = 0;
  // The value when the expression is a known size.
  virtual bool is_constant(const ShapeExpr* e, int64_t* value) const noexcept = 0;
  // Whether two expressions are provably equal (same canonical form).
  virtual bool equal(const ShapeExpr* a, const ShapeExpr* b) const noexcept = 0;

 protected:
  ~ShapeExprBuilder() = default;
};

// A tensor's dtype and symbolic shape; rank < 0 when unknown, a nullptr dim when that dim is.
struct SymbolicTensorDesc {
  DType dtype = DType::kUndefined;
  int rank = -1;
  const ShapeExpr* dims[kMaxRank] = {};
};

// A shape range of one input, for configure().
struct PluginInputRange {
  DType dtype = DType::kUndefined;
  Shape min, opt, max;
};

// Build-time half.
class KILN_API PluginBuild {
 public:
  virtual ~PluginBuild() = default;
  virtual int num_outputs() const noexcept = 0;
  // Whether the plugin runs with these input dtypes (the builder reports a clear error if not).
  virtual bool supports(std::span<const DType> input_dtypes) const noexcept = 0;
  // Output dtypes and shapes for concrete input shapes; used by shape inference at build time.
  virtual Status infer(std::span<const TensorDesc> inputs, std::span<TensorDesc> outputs) const noexcept = 0;
  // Output dtypes and symbolic shapes from the inputs' (an absent optional input has dtype
  // kUndefined). Unimplemented (the default) makes the builder fall back to infer() where the
  // input shapes are concrete, and leave the output shapes unknown elsewhere.
  virtual Status infer_symbolic(std::span<const SymbolicTensorDesc> inputs, std::span<SymbolicTensorDesc> outputs,
                                ShapeExprBuilder& exprs) const noexcept {
    (void)inputs;
    (void)outputs;
    (void)exprs;
    return Status(StatusCode::kUnimplemented, "no symbolic shape inference");
  }
  // Scratch bytes the run needs at the given (max) input shapes.
  virtual size_t workspace_bytes(std::span<const TensorDesc> max_inputs) const noexcept {
    (void)max_inputs;
    return 0;
  }
  // Called once per optimization profile with the inputs' ranges, before the plan is saved.
  virtual Status configure(std::span<const PluginInputRange> inputs) noexcept {
    (void)inputs;
    return Status::Ok();
  }
  // The named, typed fields that recreate this plugin at load (through its creator).
  virtual AttrMap fields() const noexcept = 0;
  // A fresh run-time half.
  virtual StatusOr<std::unique_ptr<PluginRun>> create_run() const noexcept = 0;
};

class KILN_API PluginCreator {
 public:
  virtual ~PluginCreator() = default;
  virtual const char* name() const noexcept = 0;
  virtual const char* plugin_namespace() const noexcept = 0;
  virtual const char* version() const noexcept = 0;
  virtual std::vector<PluginFieldSpec> field_specs() const noexcept = 0;
  // From fields (an ONNX node's attributes, or the fields saved in an engine). Unknown fields,
  // missing required fields and wrong types are errors naming the field.
  virtual StatusOr<std::unique_ptr<PluginBuild>> create(const AttrMap& fields) const noexcept = 0;
};

}  // namespace kiln

// The table an external plugin library returns. Plain C layout.
extern "C" {
struct KilnPluginLibrary {
  uint32_t api_version;                 // kKilnPluginApiVersion the library was built against
  const char* library_name;             // the library's identity in engines, e.g. "acme layers"
  uint32_t num_creators;
  kiln::PluginCreator* const* creators;  // owned by the library, valid while it is loaded
  const char* library_version;          // e.g. "1.2": an engine loads only the version it was built with
};
// Every external plugin library defines exactly this symbol.
typedef const KilnPluginLibrary* (*KilnPluginLibraryEntry)();
}
#define KILN_PLUGIN_LIBRARY_ENTRY "kiln_plugin_library"
// Put on the entry point's definition: it stays exported when the library is compiled with
// -fvisibility=hidden (as kiln's own are).
#define KILN_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))
