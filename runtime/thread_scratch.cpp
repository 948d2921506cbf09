#include "runtime/thread_scratch.h"

#include <memory>

#include "runtime/tensor.h"

namespace kiln {

void* thread_scratch(ScratchSlot slot, size_t bytes) {
  struct Buffer {
    std::shared_ptr<void> memory;
    size_t capacity = 0;
  };
  thread_local Buffer buffers[static_cast<int>(ScratchSlot::kCount)];
  Buffer& b = buffers[static_cast<int>(slot)];
  if (bytes > b.capacity) {
    b.memory.reset();  // free first: the old and the new buffer need not both exist
    b.capacity = 0;
    b.memory = aligned_alloc_shared(bytes);
    if (!b.memory) return nullptr;
    b.capacity = bytes;
  }
  return b.memory.get();
}

}  // namespace kiln
