#include "runtime/mirrored_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

namespace kiln {

size_t mirror_page_bytes() {
  const long page = ::sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<size_t>(page) : 4096;
}

std::shared_ptr<void> alloc_mirrored_slabs(size_t slabs, size_t slab_bytes) {
  if (slabs == 0 || slab_bytes == 0 || slab_bytes % mirror_page_bytes() != 0) return nullptr;
  const int fd = ::memfd_create("kiln-streaming-state", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  const size_t physical = slabs * slab_bytes, virtual_bytes = 2 * physical;
  void* base = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(physical)) == 0)
    base = ::mmap(nullptr, virtual_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  bool ok = base != MAP_FAILED;
  for (size_t k = 0; ok && k < slabs; ++k)
    for (int copy = 0; ok && copy < 2; ++copy) {
      char* at = static_cast<char*>(base) + (2 * k + copy) * slab_bytes;
      ok = ::mmap(at, slab_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, static_cast<off_t>(k * slab_bytes)) == at;
    }
  ::close(fd);  // the mappings keep the memory
  if (!ok) {
    if (base != MAP_FAILED) ::munmap(base, virtual_bytes);
    return nullptr;
  }
  return std::shared_ptr<void>(base, [virtual_bytes](void* p) { ::munmap(p, virtual_bytes); });
}

}  // namespace kiln
