// kiln's own fused ops (kiln::FusedElementwise) are nodes of the "kiln" domain, kept out of the
// default ONNX domain, yet run by built-in kernels registered under their qualified name
// "kiln::Op"; every other custom-domain node is a plugin step.
#pragma once

#include <string>

namespace kiln {

inline std::string kernel_op_name(const std::string& domain, const std::string& op_type) {
  return domain.empty() ? op_type : domain + "::" + op_type;
}
// True for a node of a custom domain that no built-in kernel implements (runtime/kernels/registry.cpp).
bool is_plugin_op(const std::string& domain, const std::string& op_type);

}  // namespace kiln
