// kiln::ExecutionContext: runs one profile of an engine. Per thread: a context owns its kernels and
// its activation arena; the engine is shared. Create as many as you have threads.
//
//   auto ctx = engine->create_context("incremental").value();
//   ctx->set_input("x", kiln::TensorView{data, kiln::DType::kFloat32, {1, 274, 384}});
//   ctx->run();                       // Status: check ok()
//   const kiln::TensorView& y = ctx->output(0);   // valid until the next run()
//
// Inputs are not copied: their data must stay valid until run() returns. The first run at new input
// shapes plans the arena; later runs at those shapes allocate nothing.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::api {

class Engine;

class KILN_API ExecutionContext {
 public:
  ~ExecutionContext();
  ExecutionContext(const ExecutionContext&) = delete;
  ExecutionContext& operator=(const ExecutionContext&) = delete;

  // Binds an input (zero copy). Checks dtype, rank and dims against the profile's range; the error
  // names the input, the dim and the values.
  Status set_input(const std::string& name, const TensorView& view);
  Status set_input(size_t index, const TensorView& view);
  // Zero-copy outputs: the step producing `name` writes straight into `buffer`, whose dtype and
  // shape must be the output's (an error names both otherwise). An empty view unbinds.
  Status bind_output(const std::string& name, const TensorView& buffer);
  Status run();
  // Runs once at the profile's max and opt shapes on zeros, so the arena covers the whole range and
  // the first real run needs no preparation. Inputs must be set again afterwards.
  Status prepare_for_profile();

  const std::string& profile() const;
  size_t num_inputs() const;
  size_t num_outputs() const;
  const std::string& input_name(size_t i) const;
  const std::string& output_name(size_t i) const;
  int find_input(const std::string& name) const;    // -1 if absent
  int find_output(const std::string& name) const;   // -1 if absent
  // Valid after run() until the next run().
  const TensorView& output(size_t i) const;
  StatusOr<TensorView> output(const std::string& name) const;
  // Bytes of the activation arena as planned for the last shapes.
  size_t arena_bytes() const;

  struct Impl;   // kiln's own layers (the C API) reach the implementation through this

 private:
  friend class Engine;
  explicit ExecutionContext(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::api

#ifndef KILN_INTERNAL_BUILD
namespace kiln {
using api::ExecutionContext;
}
#endif
