// Weights repacked once for a kernel and shared by every context of an engine.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "runtime/status.h"

namespace kiln {

// `src_bytes` of weights at `src` packed by `pack` into a new `packed_bytes` buffer (64-byte
// aligned; huge pages from 2 MiB, runtime/tensor.h). The result is cached process-wide while any
// kernel holds it, keyed by address, `layout` (what the packing is, including the source's layout)
// and a checksum of the bytes, so every context of an engine shares one packed copy and a different
// tensor at a reused address never hits a stale entry. `src` must not change while the result is
// held (the callers' weights are plan constants).
StatusOr<std::shared_ptr<void>> shared_packed_weights(const void* src, size_t src_bytes, const std::string& layout,
                                                      size_t packed_bytes, const std::function<Status(void* dst)>& pack);

}  // namespace kiln
