// The explicit table of kernel families. Static linking never drops a kernel because every family
// is named here (MNN-style), and this one list feeds the runtime, the conformance runner's
// supported-op list and the kernel-vs-reference tests.
#include <algorithm>
#include <set>

#include "runtime/kernel.h"
#include "runtime/kernels/families.h"

namespace kiln {

namespace {
KernelRegistry build_registry() {
  KernelRegistry r;
  register_elementwise_kernels(r);
  register_reduction_kernels(r);
  register_tensor_kernels(r);
  register_nn_kernels(r);
  register_onednn_kernels(r);
  register_quantize_kernels(r);
  return r;
}
}  // namespace

const KernelRegistry& KernelRegistry::builtin() {
  static const KernelRegistry registry = build_registry();
  return registry;
}

bool KernelRegistry::supports(std::string_view op_type) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const KernelEntry& e) { return e.op_type == op_type; });
}

bool KernelRegistry::supports(std::string_view domain, std::string_view op_type) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const KernelEntry& e) { return e.op_type == op_type && e.domain == domain; });
}

std::vector<std::string> KernelRegistry::op_types() const {
  std::set<std::string> s;
  for (const auto& e : entries_) s.insert(e.op_type);
  return {s.begin(), s.end()};
}

std::vector<const KernelEntry*> KernelRegistry::implementations(std::string_view op_type) const {
  std::vector<const KernelEntry*> out;
  for (const auto& e : entries_)
    if (e.op_type == op_type) out.push_back(&e);
  std::stable_sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->priority > b->priority; });
  return out;
}

MemoryRule KernelRegistry::memory_rule(std::string_view domain, std::string_view op_type) const {
  for (const auto& e : entries_)
    if (e.op_type == op_type && e.domain == domain && e.memory) return e.memory;
  return nullptr;
}

void KernelRegistry::set_memory_rule(std::string_view op_type, MemoryRule rule) {
  for (auto& e : entries_)
    if (e.op_type == op_type && e.domain.empty()) e.memory = rule;
}

StatusOr<std::unique_ptr<Kernel>> KernelRegistry::create(const KernelArgs& args, const AttrMap& attrs,
                                                         std::string_view impl) const {
  const std::string where = "node '" + std::string(args.node_name) + "' (" + std::string(args.op_type) + ")";
  auto impls = implementations(args.op_type);
  if (impls.empty()) return Unimplemented(where + ": unsupported op type '" + std::string(args.op_type) + "'");
  // Every op has at least one output; kernels write out[0] without asking.
  if (args.num_outputs < 1) return InvalidArgument(where + ": the node has no outputs");
  const KernelEntry* chosen = nullptr;
  for (auto* e : impls)
    if (impl.empty() || e->impl == impl) {
      chosen = e;
      break;
    }
  if (!chosen) return NotFound(where + ": no implementation named '" + std::string(impl) + "'");
  AttrReader reader(attrs);
  auto kernel = chosen->make(args, reader);
  if (!kernel.ok()) return kernel.status().with_context(where);
  if (std::string unread = reader.first_unread(); !unread.empty())
    return Unimplemented(where + ": unsupported attribute '" + unread + "'");
  return kernel;
}

}  // namespace kiln
