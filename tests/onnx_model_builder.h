// Builds small ONNX models in memory for tests, so each test states its graph next to its checks.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <variant>
#include <vector>

#include "builder/onnx/onnx_importer.h"

namespace kiln::testing {

using DimSpec = std::variant<int64_t, std::string>;

class OnnxModelBuilder {
 public:
  explicit OnnxModelBuilder(int opset = 17) {
    model_.set_ir_version(8);
    auto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
  }
  OnnxModelBuilder& input(const std::string& name, DType dt, const std::vector<DimSpec>& dims) {
    fill_value_info(model_.mutable_graph()->add_input(), name, dt, dims);
    return *this;
  }
  OnnxModelBuilder& output(const std::string& name) {
    model_.mutable_graph()->add_output()->set_name(name);
    return *this;
  }
  OnnxModelBuilder& initializer(const std::string& name, const std::vector<int64_t>& values, const std::vector<int64_t>& dims) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (auto d : dims) t->add_dims(d);
    for (auto v : values) t->add_int64_data(v);
    return *this;
  }
  OnnxModelBuilder& initializer_f(const std::string& name, const std::vector<float>& values, const std::vector<int64_t>& dims) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    return *this;
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
                        const std::string& name = "") {
    auto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(model_.graph().node_size()) : name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return *n;
  }
  static void int_attr(onnx::NodeProto& n, const std::string& name, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void float_attr(onnx::NodeProto& n, const std::string& name, float v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void ints_attr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
  }
  StatusOr<Graph> import() const { return import_onnx_model(model_, ".", "test model"); }
  onnx::ModelProto& proto() { return model_; }

 private:
  static void fill_value_info(onnx::ValueInfoProto* vi, const std::string& name, DType dt, const std::vector<DimSpec>& dims) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(static_cast<int>(dt));
    auto* shape = tt->mutable_shape();
    for (const auto& d : dims) {
      auto* dim = shape->add_dim();
      if (std::holds_alternative<int64_t>(d)) dim->set_dim_value(std::get<int64_t>(d));
      else dim->set_dim_param(std::get<std::string>(d));
    }
  }
  onnx::ModelProto model_;
};

}  // namespace kiln::testing
