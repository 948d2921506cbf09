#include "builder/onnx/onnx_importer.h"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <set>
#include <fstream>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include "builder/onnx/onnx_tensor.h"

namespace kiln {

namespace {

// Opsets whose default-domain semantics the kernels implement. Older models are accepted: an op
// whose attributes changed since then fails with "unsupported attribute", never silently.
constexpr int kMinOpset = 6;
constexpr int kMaxOpset = 18;

// A model below kMinOpset (opset 1-5) is read where each of its default-domain ops means there what
// it means at kMinOpset: ONNX's own schema registry says in which opset the definition kiln
// implements was introduced (GlobalAveragePool, Not, Softplus, ...: opset 1). An op redefined since
// the model's opset (Add, Relu, BatchNormalization: consumed_inputs, legacy broadcasting) is
// rejected by name rather than run with semantics it did not have.
Status check_legacy_opset_op(const onnx::NodeProto& np, int opset, const std::string& where) {
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(np.op_type(), kMinOpset, "");
  if (schema != nullptr && schema->SinceVersion() <= opset) return Status::Ok();
  const std::string min = std::to_string(kMinOpset);
  const std::string why = schema == nullptr ? "is not an ONNX op at opset " + min
                                            : "was redefined in opset " + std::to_string(schema->SinceVersion()) +
                                                  " and kiln implements only the newer definition";
  return Unimplemented(where + ": the model's opset is " + std::to_string(opset) + ", and " + np.op_type() + " " + why +
                       " (re-export the model at opset " + min + " or later)");
}

StatusOr<Attribute> convert_attribute(const onnx::AttributeProto& a, const std::string& base_dir, const std::string& where) {
  const std::string what = where + ": attribute '" + a.name() + "'";
  switch (a.type()) {
    case onnx::AttributeProto::INT: return Attribute::Int(a.i());
    case onnx::AttributeProto::FLOAT: return Attribute::Float(a.f());
    case onnx::AttributeProto::STRING: return Attribute::String(a.s());
    case onnx::AttributeProto::INTS: return Attribute::Ints({a.ints().begin(), a.ints().end()});
    case onnx::AttributeProto::FLOATS: return Attribute::Floats({a.floats().begin(), a.floats().end()});
    case onnx::AttributeProto::STRINGS: return Attribute::Strings({a.strings().begin(), a.strings().end()});
    case onnx::AttributeProto::TENSOR: {
      KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(a.t(), base_dir, what));
      return Attribute::TensorValue(std::move(t));
    }
    case onnx::AttributeProto::GRAPH: case onnx::AttributeProto::GRAPHS:
      return Unimplemented(what + " is a subgraph; control flow (If/Loop/Scan) is not supported");
    default:
      return Unimplemented(what + " has unsupported attribute type " + std::to_string(a.type()));
  }
}

Status read_type(const onnx::TypeProto& type, Value& v, const std::string& what) {
  if (!type.has_tensor_type()) return Unimplemented(what + " is not a tensor (sequence/map/optional types are not supported)");
  const auto& tt = type.tensor_type();
  v.dtype = static_cast<DType>(tt.elem_type());
  if (!dtype_is_known(v.dtype)) return Unimplemented(what + " has unsupported element type " + dtype_name(v.dtype));
  if (!tt.has_shape()) return Status::Ok();
  if (!Shape::fits_rank(tt.shape().dim_size())) return Unimplemented(what + " has rank " + std::to_string(tt.shape().dim_size()) + " above kiln's maximum of 8");
  SymShape s;
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) return InvalidArgument(what + " declares a negative dim " + std::to_string(d.dim_value()));
      s.push_back(Dim::known(d.dim_value()));
    } else if (d.has_dim_param() && !d.dim_param().empty()) {
      s.push_back(Dim::sym(d.dim_param()));
    } else {
      s.push_back(Dim{});
    }
  }
  v.shape = std::move(s);
  return Status::Ok();
}

// Constant node -> tensor, for each of the value attributes the spec allows.
StatusOr<Tensor> constant_node_value(const Node& n) {
  if (n.attrs.size() != 1) return InvalidArgument("a Constant node needs exactly one value attribute");
  const auto& [name, a] = *n.attrs.begin();
  if (name == "value" && a.kind == Attribute::Kind::kTensor) return a.tensor;
  if (name == "value_float" && a.kind == Attribute::Kind::kFloat) return Tensor::from_vector<float>({a.f}, Shape{});
  if (name == "value_floats" && a.kind == Attribute::Kind::kFloats)
    return Tensor::from_vector<float>(a.floats, Shape{static_cast<int64_t>(a.floats.size())});
  if (name == "value_int" && a.kind == Attribute::Kind::kInt) return Tensor::from_vector<int64_t>({a.i}, Shape{});
  if (name == "value_ints" && a.kind == Attribute::Kind::kInts)
    return Tensor::from_vector<int64_t>(a.ints, Shape{static_cast<int64_t>(a.ints.size())});
  return Unimplemented("Constant attribute '" + name + "' is not supported");
}

}  // namespace

StatusOr<Graph> import_onnx_model(const onnx::ModelProto& model, const std::string& base_dir, const std::string& source) {
  Graph g;
  const auto& gp = model.graph();
  g.name = gp.name();
  int opset = -1;
  for (const auto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = static_cast<int>(o.version());
  if (opset < 0) return InvalidArgument(source + ": model imports no opset of the default ONNX domain");
  if (opset < 1 || opset > kMaxOpset)
    return Unimplemented(source + ": opset " + std::to_string(opset) + " is not supported (kiln supports 1.." +
                         std::to_string(kMaxOpset) + ", ops older than opset " + std::to_string(kMinOpset) +
                         " only where they are unchanged since; tested on 13..17)");
  g.opset = opset;

  if (gp.sparse_initializer_size() > 0) return Unimplemented(source + ": sparse initializers are not supported");
  for (const auto& init : gp.initializer()) {
    if (init.name().empty()) return InvalidArgument(source + ": an initializer has no name");
    if (g.find_value(init.name()) >= 0) return InvalidArgument(source + ": initializer '" + init.name() + "' is defined twice");
    KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(init, base_dir, source + ": initializer '" + init.name() + "'"));
    const int id = g.add_value(init.name());
    g.values[id].dtype = t.dtype();
    g.values[id].shape = from_shape(t.shape());
    g.values[id].constant = std::move(t);
  }
  std::set<std::string> input_names;
  for (const auto& in : gp.input()) {
    if (!input_names.insert(in.name()).second) return InvalidArgument(source + ": input '" + in.name() + "' is listed twice");
    if (g.find_value(in.name()) >= 0) continue;  // an input with an initializer is a constant (overridable in ONNX; not here)
    const int id = g.add_value(in.name());
    KILN_RETURN_IF_ERROR(read_type(in.type(), g.values[id], source + ": input '" + in.name() + "'"));
    g.inputs.push_back(id);
  }

  int index = 0;
  for (const auto& np : gp.node()) {
    Node n;
    n.op_type = np.op_type();
    n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
    n.name = np.name().empty() ? n.op_type + "_" + std::to_string(index) : np.name();
    ++index;
    const std::string where = source + ": " + g.describe_node(n);
    if (opset < kMinOpset && n.domain.empty()) KILN_RETURN_IF_ERROR(check_legacy_opset_op(np, opset, where));
    for (const auto& a : np.attribute()) {
      KILN_ASSIGN_OR_RETURN(Attribute attr, convert_attribute(a, base_dir, where));
      n.attrs[a.name()] = std::move(attr);
    }
    for (const auto& in : np.input()) {
      if (in.empty()) {
        n.inputs.push_back(-1);
        continue;
      }
      const int id = g.find_value(in);
      if (id < 0) return InvalidArgument(where + ": input '" + in + "' is not produced by any earlier node, input or initializer");
      n.inputs.push_back(id);
    }
    while (!n.inputs.empty() && n.inputs.back() < 0) n.inputs.pop_back();
    if (n.op_type == "Constant" && n.domain.empty()) {
      if (np.output_size() != 1) return InvalidArgument(where + ": a Constant node needs exactly one output");
      auto value = constant_node_value(n);
      if (!value.ok()) return value.status().with_context(where);
      if (g.find_value(np.output(0)) >= 0) return InvalidArgument(where + ": output '" + np.output(0) + "' is already defined");
      const int id = g.add_value(np.output(0));
      g.values[id].dtype = value->dtype();
      g.values[id].shape = from_shape(value->shape());
      g.values[id].constant = std::move(value).value();
      continue;
    }
    for (const auto& out : np.output()) {
      if (!out.empty() && g.find_value(out) >= 0) return InvalidArgument(where + ": output '" + out + "' is already defined (the graph is not in SSA form)");
      const int id = g.add_value(out.empty() ? std::string() : out);
      g.values[id].producer = static_cast<int>(g.nodes.size());
      n.outputs.push_back(id);
    }
    g.nodes.push_back(std::move(n));
  }
  for (const auto& out : gp.output()) {
    const int id = g.find_value(out.name());
    if (id < 0) return InvalidArgument(source + ": graph output '" + out.name() + "' is not produced by any node");
    g.outputs.push_back(id);
  }
  return g;
}

StatusOr<Graph> import_onnx_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot open model '" + path + "'");
  google::protobuf::io::IstreamInputStream raw(&f);
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(INT32_MAX);
  onnx::ModelProto model;
  if (!model.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    return DataLoss("'" + path + "' is not a valid ONNX model (protobuf parse failed)");
  if (!model.has_graph()) return DataLoss("'" + path + "' has no graph");
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  return import_onnx_model(model, dir, path);
}

}  // namespace kiln
