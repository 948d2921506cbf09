// libFuzzer target: the ONNX importer, then shape inference and the pass pipeline at a small fixed
// profile (every dynamic dim 2), lowered to a plan: what engine-build and engine-run do with a
// model file before running it.
#include <onnx/onnx_pb.h>

#include <google/protobuf/io/coded_stream.h>

#include "builder/plan/build_plan.h"
#include "builder/onnx/onnx_importer.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::cap_memory();
  google::protobuf::io::CodedInputStream coded(data, static_cast<int>(size));
  onnx::ModelProto model;
  if (!model.ParseFromCodedStream(&coded) || !model.has_graph()) return 0;
  // External data names files relative to the model's folder: a folder with nothing in it.
  auto graph = kiln::import_onnx_model(model, "/nonexistent-fuzz-dir", "fuzz.onnx");
  if (!graph.ok()) return 0;
  kiln::BuildOptions options;
  for (int id : graph->inputs) {
    const kiln::Value& v = graph->values[id];
    if (!v.shape) continue;
    kiln::Shape s;
    if (!kiln::Shape::fits_rank(v.shape->size())) return 0;
    for (const auto& d : *v.shape) s.push_back(d.is_known() ? d.value : 2);
    options.input_shapes[v.name] = s;
  }
  auto plan = kiln::build_plan(std::move(graph).value(), options);
  (void)plan;
  return 0;
}
