// Conversion of ONNX TensorProto (initializers, Constant attributes, .pb test files) into kiln
// tensors: raw_data and the typed fields, and external data files.
#pragma once

#include <string>

#include "runtime/tensor.h"

namespace onnx {
class TensorProto;
}

namespace kiln {

// `base_dir` resolves external-data locations (the model file's folder). `what` names the tensor in
// errors ("initializer 'w'").
StatusOr<Tensor> tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir, const std::string& what);

// Reads a serialized TensorProto file (.pb); also returns the proto's own name.
StatusOr<Tensor> read_tensor_pb(const std::string& path, std::string* name_out);

}  // namespace kiln
