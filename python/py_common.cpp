#include "py_common.h"

#include <cstring>

namespace kiln::python {

namespace {

PyObject* g_error = nullptr;

const char* code_name(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kUnimplemented: return "unimplemented";
    case StatusCode::kOutOfRange: return "out_of_range";
    case StatusCode::kDataLoss: return "data_loss";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kIo: return "io";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    case StatusCode::kCancelled: return "cancelled";
  }
  return "unknown";
}

}  // namespace

void register_error(py::module_& m) {
  static py::exception<std::runtime_error> error(m, "Error", PyExc_RuntimeError);
  error.doc() = "A kiln call failed; str(e) is its one-line message, e.code names the kind (e.g. 'invalid_argument').";
  g_error = error.ptr();
}

py::object error_object(const Status& st) {
  py::object e = py::reinterpret_borrow<py::object>(g_error)(st.message());
  e.attr("code") = code_name(st.code());
  return e;
}

void raise(const Status& st) {
  py::object e = error_object(st);
  PyErr_SetObject(g_error, e.ptr());
  throw py::error_already_set();
}

py::dtype numpy_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return py::dtype::of<float>();
    case DType::kFloat64: return py::dtype::of<double>();
    case DType::kInt8: return py::dtype::of<int8_t>();
    case DType::kUInt8: return py::dtype::of<uint8_t>();
    case DType::kInt16: return py::dtype::of<int16_t>();
    case DType::kUInt16: return py::dtype::of<uint16_t>();
    case DType::kInt32: return py::dtype::of<int32_t>();
    case DType::kUInt32: return py::dtype::of<uint32_t>();
    case DType::kInt64: return py::dtype::of<int64_t>();
    case DType::kUInt64: return py::dtype::of<uint64_t>();
    case DType::kBool: return py::dtype::of<bool>();
    case DType::kFloat16: return py::dtype("float16");
    case DType::kBFloat16: return py::dtype::of<uint16_t>();   // numpy has no bfloat16: the raw bits
    default: raise(InvalidArgument("dtype " + dtype_name(dtype) + " has no numpy equivalent"));
  }
}

DType kiln_dtype(const py::dtype& d) {
  // The descriptor's fields directly: this runs for every input of every run.
  if (d.byteorder() == '>') return DType::kUndefined;   // big-endian data: kiln is little-endian
  const auto size = d.itemsize();
  switch (d.kind()) {
    case 'f': return size == 4 ? DType::kFloat32 : size == 8 ? DType::kFloat64 : size == 2 ? DType::kFloat16 : DType::kUndefined;
    case 'i': return size == 1 ? DType::kInt8 : size == 2 ? DType::kInt16 : size == 4 ? DType::kInt32 : size == 8 ? DType::kInt64 : DType::kUndefined;
    case 'u': return size == 1 ? DType::kUInt8 : size == 2 ? DType::kUInt16 : size == 4 ? DType::kUInt32 : size == 8 ? DType::kUInt64 : DType::kUndefined;
    case 'b': return size == 1 ? DType::kBool : DType::kUndefined;
    default: return DType::kUndefined;
  }
}

py::array as_input_array(const py::handle& obj, DType expected, const std::string& what) {
  py::array a = py::array::ensure(obj);
  if (!a) raise(InvalidArgument(what + " is not an array (got " + std::string(py::str(py::type::of(obj))) + ")"));
  const DType got = kiln_dtype(a.dtype());
  const bool same = got == expected || (expected == DType::kBFloat16 && got == DType::kUInt16);
  if (!same)
    raise(InvalidArgument(what + " must be " + dtype_name(expected) + ", got numpy " + std::string(py::str(a.dtype()))));
  if (!(a.flags() & py::array::c_style)) a = py::array::ensure(a, py::array::c_style | py::array::forcecast);
  return a;
}

TensorView view_of(const py::array& a) {
  TensorView v;
  v.data = const_cast<void*>(a.data());
  v.dtype = kiln_dtype(a.dtype());
  if (a.ndim() > kMaxRank) raise(InvalidArgument("array has rank " + std::to_string(a.ndim()) + ", above kiln's 8"));
  for (py::ssize_t d = 0; d < a.ndim(); ++d) v.shape.push_back(a.shape(d));
  return v;
}

TensorView input_view(const py::handle& value, DType dtype, const std::string& name, std::vector<py::array>& held) {
  held.push_back(as_input_array(value, dtype, "input '" + name + "'"));
  TensorView v = view_of(held.back());
  v.dtype = dtype;   // bfloat16 arrives as numpy uint16
  return v;
}

py::array copy_to_numpy(const TensorView& v) {
  std::vector<py::ssize_t> shape(v.shape.begin(), v.shape.end());
  py::array a(numpy_dtype(v.dtype), shape);
  if (v.nbytes()) std::memcpy(a.mutable_data(), v.data, v.nbytes());
  return a;
}

py::array tensor_to_numpy(Tensor t) {
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  auto* keep = new Tensor(t);
  py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(numpy_dtype(t.dtype()), shape, t.data(), owner);
}

}  // namespace kiln::python
