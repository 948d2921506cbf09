// libFuzzer target: the ONNX TensorProto reader (.pb inputs, builder/onnx_tensor.cpp).
#include "builder/onnx/onnx_tensor.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::cap_memory();
  kiln::fuzz::MemFile f(data, size);
  std::string name;
  auto t = kiln::read_tensor_pb(f.path(), &name);
  if (t.ok() && t->nbytes()) {
    volatile unsigned char sink = static_cast<const unsigned char*>(t->data())[t->nbytes() - 1];
    (void)sink;
  }
  return 0;
}
