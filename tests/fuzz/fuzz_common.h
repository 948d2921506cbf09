// Shared by the libFuzzer targets: an input as a file (readers that take paths read it through a
// memfd, so nothing touches the disk), and the limits that keep one input from asking for more
// memory than a fuzzing process has.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/memory_budget.h"

namespace kiln::fuzz {

// An in-memory file holding `data`, named /proc/self/fd/N; closed when this goes.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size, const char* suffix = "") {
    fd_ = ::memfd_create("kiln-fuzz", MFD_CLOEXEC);
    size_t off = 0;
    while (fd_ >= 0 && off < size) {
      const ssize_t w = ::write(fd_, data + off, size - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
    (void)suffix;
  }
  ~MemFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// A fuzz input may claim any size; the memory cap turns a large claim into an error, as it would
// for a user with --max-memory, rather than into the fuzzer's out-of-memory report.
inline void cap_memory() { set_max_memory(uint64_t{256} << 20); }

}  // namespace kiln::fuzz
