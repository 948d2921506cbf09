#include "runtime/kernels/packed_weights.h"

#include <mutex>
#include <vector>

#include "runtime/engine_format.h"
#include "runtime/tensor.h"

namespace kiln {

namespace {
struct PackedEntry {
  const void* src;
  std::string layout;
  uint64_t checksum;
  std::weak_ptr<void> packed;
};
}  // namespace

StatusOr<std::shared_ptr<void>> shared_packed_weights(const void* src, size_t src_bytes, const std::string& layout,
                                                      size_t packed_bytes, const std::function<Status(void* dst)>& pack) {
  static std::mutex mu;
  static std::vector<PackedEntry> cache;
  const uint64_t sum = checksum64(src, src_bytes);
  std::lock_guard<std::mutex> lock(mu);
  std::erase_if(cache, [](const PackedEntry& e) { return e.packed.expired(); });
  for (const auto& e : cache)
    if (e.src == src && e.checksum == sum && e.layout == layout)
      if (auto p = e.packed.lock()) return p;
  std::shared_ptr<void> packed = aligned_alloc_shared(packed_bytes);
  if (!packed) return ResourceExhausted("cannot allocate " + std::to_string(packed_bytes) + " bytes of packed weights");
  KILN_RETURN_IF_ERROR(pack(packed.get()));
  cache.push_back({src, layout, sum, packed});
  return packed;
}

}  // namespace kiln
