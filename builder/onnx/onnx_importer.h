// ONNX ModelProto -> Graph. Handles initializers (raw and typed fields), external data, Constant
// nodes (turned into constant values), and named dynamic dims kept as symbols. Every error names the
// file, node or value involved.
#pragma once

#include <string>

#include "builder/graph.h"

namespace onnx {
class ModelProto;
}

namespace kiln {

StatusOr<Graph> import_onnx_file(const std::string& path);
// `base_dir` resolves external data; `source` names the model in errors.
StatusOr<Graph> import_onnx_model(const onnx::ModelProto& model, const std::string& base_dir, const std::string& source);

}  // namespace kiln
