// NumPy .npy reading and writing (format versions 1-3, little-endian, C order).
#pragma once

#include <string>

#include "runtime/tensor.h"

namespace kiln {

StatusOr<Tensor> read_npy(const std::string& path);
Status write_npy(const std::string& path, const TensorView& t);
// Replaces characters outside [A-Za-z0-9._-] by '_' (output file names).
std::string sanitize_file_name(const std::string& name);

}  // namespace kiln
