// Placeholder: this family's kernels are being written.
#include "runtime/kernel.h"
#include "runtime/kernels/families.h"

namespace kiln {
void register_nn_kernels(KernelRegistry& r) { (void)r; }
}  // namespace kiln
