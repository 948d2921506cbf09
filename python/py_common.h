// Shared by the pybind11 sources of the Python package: kiln.Error, numpy <-> kiln conversions.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::python {

namespace py = pybind11;

// Registers kiln.Error (a RuntimeError subclass with a `code` attribute: "invalid_argument",
// "not_found", ..., "deadline_exceeded", "cancelled").
void register_error(py::module_& m);
// Raises kiln.Error with the status's one-line message.
[[noreturn]] void raise(const Status& st);
// The exception object for `st`, for futures completed from worker threads (GIL held).
py::object error_object(const Status& st);
inline void check(const Status& st) {
  if (!st.ok()) raise(st);
}

py::dtype numpy_dtype(DType dtype);
DType kiln_dtype(const py::dtype& dtype);   // kUndefined for types kiln has no code for

// A C-contiguous array of `expected` dtype viewing `obj` when it already is one (zero copy), a
// contiguous copy otherwise; kiln.Error when the dtype differs. `what` names the input in errors.
py::array as_input_array(const py::handle& obj, DType expected, const std::string& what);
TensorView view_of(const py::array& a);
// Input `name` from a Python value, as as_input_array() takes it; `held` keeps the array alive
// until the caller's run returns.
TensorView input_view(const py::handle& value, DType dtype, const std::string& name, std::vector<py::array>& held);
// A new numpy array holding a copy of `v` (what run() returns: valid after later runs).
py::array copy_to_numpy(const TensorView& v);
// A numpy array sharing a Tensor's storage (kept alive by the array).
py::array tensor_to_numpy(Tensor t);

}  // namespace kiln::python
