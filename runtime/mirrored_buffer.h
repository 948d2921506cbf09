// Slab buffers whose slabs are mapped twice in a row ("magic ring buffer"): slab k's bytes appear
// at base + k * 2 * slab_bytes and again right after, so a window of up to slab_bytes that starts
// anywhere in the first copy is contiguous in memory even when it wraps around the slab's end.
// A streaming cache kept this way slides forever without moving a byte.
#pragma once

#include <cstddef>
#include <memory>

namespace kiln {

// The page size mirrored slabs must be a multiple of.
size_t mirror_page_bytes();

// `slabs` mirrored slabs of `slab_bytes` each (a multiple of mirror_page_bytes()), zero-filled;
// null when the system cannot map them (the caller then uses a plain buffer).
std::shared_ptr<void> alloc_mirrored_slabs(size_t slabs, size_t slab_bytes);

}  // namespace kiln
