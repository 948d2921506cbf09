// libFuzzer target: the .npy reader (runtime/npy_io.cpp), bytes as a file.
#include "tests/fuzz/fuzz_common.h"
#include "runtime/npy_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::cap_memory();
  kiln::fuzz::MemFile f(data, size);
  auto t = kiln::read_npy(f.path());
  if (t.ok() && t->nbytes()) {
    volatile unsigned char sink = static_cast<const unsigned char*>(t->data())[t->nbytes() - 1];
    (void)sink;
  }
  return 0;
}
