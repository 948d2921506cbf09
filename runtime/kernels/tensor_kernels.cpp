// Shape-only and constant-producing ops of the tensor family: Shape, Size, Reshape, Flatten,
// Squeeze, Unsqueeze, Identity, Dropout, Constant, ConstantOfShape, Range, EyeLike, Trilu.
// The other ops of the family live in tensor_layout_kernels.cpp, tensor_index_kernels.cpp and
// tensor_select_kernels.cpp; all are registered from register_tensor_kernels below.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/kernels/families.h"
#include "runtime/kernels/tensor_util.h"

namespace kiln {

namespace {

using KernelOr = StatusOr<std::unique_ptr<Kernel>>;

// Kernels whose output is the input's bytes under another shape.
Status run_copy(std::span<const TensorView> in, std::span<const TensorView> out) {
  copy_bytes(out[0], in[0]);
  return Status::Ok();
}

// ---- Shape, Size ----

KernelOr make_shape(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t start_attr, attrs.get_int("start", 0));
  KILN_ASSIGN_OR_RETURN(int64_t end_attr, attrs.get_int("end", std::numeric_limits<int64_t>::max()));
  auto range = [=](int rank, int64_t* s, int64_t* e) {
    auto clamp = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
    *s = clamp(start_attr);
    *e = clamp(end_attr);
  };
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        int64_t s, e;
        range(in[0].shape.rank(), &s, &e);
        out[0] = {DType::kInt64, Shape{std::max<int64_t>(0, e - s)}};
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        int64_t s, e;
        range(in[0].shape.rank(), &s, &e);
        for (int64_t i = s; i < e; ++i) out[0].as<int64_t>()[i - s] = in[0].shape[static_cast<int>(i)];
        return Status::Ok();
      });
}

KernelOr make_size(const KernelArgs&, AttrReader&) {
  return lambda_kernel(
      [](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        out[0] = {DType::kInt64, Shape{}};
        return Status::Ok();
      },
      [](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        *out[0].as<int64_t>() = in[0].numel();
        return Status::Ok();
      });
}

// ---- Reshape, Flatten, Squeeze, Unsqueeze ----

Status reshape_target(const Shape& in, const TensorView& shape_in, bool allowzero, Shape* out) {
  int64_t dims[kMaxRank];
  int n = 0;
  KILN_RETURN_IF_ERROR(read_small_ints(shape_in, dims, kMaxRank, &n, "input 1 (shape)"));
  int infer_at = -1;
  int64_t known = 1;
  out->resize(n);
  for (int i = 0; i < n; ++i) {
    int64_t d = dims[i];
    if (d == -1) {
      if (infer_at >= 0) return InvalidArgument("input 1 (shape) has more than one -1 (dims " +
                                                std::to_string(infer_at) + " and " + std::to_string(i) + ")");
      infer_at = i;
      continue;
    }
    if (d == 0 && !allowzero) {
      if (i >= in.rank())
        return InvalidArgument("input 1 (shape) dim " + std::to_string(i) + " is 0 (copy) but the input " +
                               in.str() + " has no such dim");
      d = in[i];
    } else if (d < 0) {
      return InvalidArgument("input 1 (shape) dim " + std::to_string(i) + " is " + std::to_string(d));
    }
    (*out)[i] = d;
    if (__builtin_mul_overflow(known, d, &known))
      return InvalidArgument("input 1 (shape) " + Shape(std::span<const int64_t>(dims, n)).str() + " has more elements than int64 can count");
  }
  if (infer_at >= 0) {
    if (known == 0 || in.numel() % known != 0)
      return InvalidArgument("cannot reshape " + in.str() + " to " + Shape(std::span<const int64_t>(dims, n)).str() +
                             ": the -1 dim cannot be inferred");
    (*out)[infer_at] = in.numel() / known;
  }
  if (out->numel() != in.numel())
    return InvalidArgument("cannot reshape " + in.str() + " (" + std::to_string(in.numel()) + " elements) to " +
                           out->str() + " (" + std::to_string(out->numel()) + " elements)");
  return Status::Ok();
}

KernelOr make_reshape(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t allowzero, attrs.get_int("allowzero", 0));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 2, 2));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        out[0].dtype = in[0].dtype;
        return reshape_target(in[0].shape, in[1], allowzero != 0, &out[0].shape);
      },
      run_copy);
}

KernelOr make_flatten(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t axis, attrs.get_int("axis", 1));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        const int r = in[0].shape.rank();
        if (axis < -r || axis > r)
          return InvalidArgument("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
        const int a = static_cast<int>(axis < 0 ? axis + r : axis);
        out[0] = {in[0].dtype, Shape{in[0].shape.numel(0, a), in[0].shape.numel(a, r)}};
        return Status::Ok();
      },
      run_copy);
}

// Axes of Squeeze/Unsqueeze come from input 1 since opset 13 and from the attribute before.
Status squeeze_axes(std::span<const TensorView> in, bool has_attr, const std::vector<int64_t>& attr_axes,
                    int64_t* axes, int* n) {
  if (in.size() > 1 && in[1].present())
    return read_small_ints(in[1], axes, kMaxRank, n, "input 1 (axes)");
  if (attr_axes.size() > static_cast<size_t>(kMaxRank))
    return InvalidArgument("attribute 'axes' has " + std::to_string(attr_axes.size()) + " entries");
  *n = has_attr ? static_cast<int>(attr_axes.size()) : -1;
  std::copy(attr_axes.begin(), attr_axes.end(), axes);
  return Status::Ok();
}

KernelOr make_squeeze(const KernelArgs&, AttrReader& attrs) {
  const bool has_attr = attrs.has("axes");
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> attr_axes, attrs.get_ints("axes"));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 2));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        int64_t axes[kMaxRank];
        int n = 0;
        KILN_RETURN_IF_ERROR(squeeze_axes(in, has_attr, attr_axes, axes, &n));
        if (n == 0) n = -1;  // empty axes squeeze every unit dim, as in ONNX Runtime
        const Shape& s = in[0].shape;
        bool drop[kMaxRank] = {};
        if (n < 0) {
          for (int d = 0; d < s.rank(); ++d) drop[d] = s[d] == 1;
        } else {
          for (int i = 0; i < n; ++i) {
            KILN_ASSIGN_OR_RETURN(int a, normalize_axis(axes[i], s.rank(), "axes entry"));
            if (s[a] != 1)
              return InvalidArgument("cannot squeeze dim " + std::to_string(a) + " of size " + std::to_string(s[a]) +
                                     " (input shape " + s.str() + ")");
            drop[a] = true;
          }
        }
        out[0].dtype = in[0].dtype;
        out[0].shape = Shape{};
        for (int d = 0; d < s.rank(); ++d)
          if (!drop[d]) out[0].shape.push_back(s[d]);
        return Status::Ok();
      },
      run_copy);
}

KernelOr make_unsqueeze(const KernelArgs&, AttrReader& attrs) {
  const bool has_attr = attrs.has("axes");
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> attr_axes, attrs.get_ints("axes"));
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 2));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        int64_t axes[kMaxRank];
        int n = 0;
        KILN_RETURN_IF_ERROR(squeeze_axes(in, has_attr, attr_axes, axes, &n));
        if (n < 0) return InvalidArgument("axes are required (input 1 or attribute 'axes')");
        const Shape& s = in[0].shape;
        const int rank = s.rank() + n;
        if (rank > kMaxRank)
          return InvalidArgument("output rank " + std::to_string(rank) + " exceeds " + std::to_string(kMaxRank));
        bool inserted[kMaxRank] = {};
        for (int i = 0; i < n; ++i) {
          KILN_ASSIGN_OR_RETURN(int a, normalize_axis(axes[i], rank, "axes entry"));
          if (inserted[a]) return InvalidArgument("axes entry " + std::to_string(axes[i]) + " is repeated");
          inserted[a] = true;
        }
        out[0].dtype = in[0].dtype;
        out[0].shape.resize(rank);
        for (int d = 0, k = 0; d < rank; ++d) out[0].shape[d] = inserted[d] ? 1 : s[k++];
        return Status::Ok();
      },
      run_copy);
}

// ---- Identity, Dropout ----

KernelOr make_identity(const KernelArgs&, AttrReader&) {
  return lambda_kernel(
      [](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        out[0] = in[0].desc();
        return Status::Ok();
      },
      run_copy);
}

// Inference-only Dropout: the output is the input and the mask is all true. Training with a
// non-zero ratio would need random numbers and is not supported.
KernelOr make_dropout(const KernelArgs& args, AttrReader& attrs) {
  attrs.ignore("seed");  // only matters in training mode, which is rejected unless ratio == 0
  KILN_ASSIGN_OR_RETURN(float ratio_attr, attrs.get_float("ratio", 0.5f));
  KILN_ASSIGN_OR_RETURN(int64_t is_test, attrs.get_int("is_test", 1));
  if (is_test == 0 && ratio_attr != 0.0f)
    return Unimplemented("attribute 'is_test'=0 (training) is not supported");
  // Before opset 10 the mask has the input's dtype.
  const bool bool_mask = args.opset >= 10;
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 3));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 2));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        if (in.size() > 2 && in[2].present()) {
          if (in[2].dtype != DType::kBool || in[2].numel() != 1)
            return InvalidArgument("input 2 (training_mode) must be a bool scalar");
          double ratio = 0.5;
          if (in[1].present()) {
            if (in[1].numel() != 1 || !dtype_is_float(in[1].dtype))
              return InvalidArgument("input 1 (ratio) must be a float scalar");
            ratio = read_double(in[1], 0);
          }
          if (*in[2].as<bool>() && ratio != 0.0)
            return Unimplemented("training_mode=true with ratio " + std::to_string(ratio) + " is not supported");
        }
        out[0] = in[0].desc();
        if (out.size() > 1) out[1] = {bool_mask ? DType::kBool : in[0].dtype, in[0].shape};
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        copy_bytes(out[0], in[0]);
        if (out.size() > 1 && out[1].numel() > 0) {
          if (bool_mask) {
            std::memset(out[1].data, 1, out[1].nbytes());
          } else {
            const size_t es = dtype_size(out[1].dtype);
            for (int64_t i = 0; i < out[1].numel(); ++i)
              KILN_RETURN_IF_ERROR(store_double(out[1].dtype, static_cast<char*>(out[1].data) + i * es, 1.0));
          }
        }
        return Status::Ok();
      });
}

// ---- Constant, ConstantOfShape ----

KernelOr make_constant(const KernelArgs&, AttrReader& attrs) {
  for (const char* name : {"value_string", "value_strings", "sparse_value"})
    if (attrs.has(name)) {
      attrs.ignore(name);
      return Unimplemented(std::string("attribute '") + name + "' is not supported");
    }
  Tensor value;
  int found = 0;
  if (attrs.has("value")) {
    KILN_ASSIGN_OR_RETURN(value, attrs.get_tensor("value"));
    ++found;
  }
  if (attrs.has("value_float")) {
    KILN_ASSIGN_OR_RETURN(float v, attrs.get_float("value_float", 0));
    value = Tensor::from_vector<float>({v}, Shape{});
    ++found;
  }
  if (attrs.has("value_floats")) {
    KILN_ASSIGN_OR_RETURN(std::vector<float> v, attrs.get_floats("value_floats"));
    value = Tensor::from_vector<float>(v, Shape{static_cast<int64_t>(v.size())});
    ++found;
  }
  if (attrs.has("value_int")) {
    KILN_ASSIGN_OR_RETURN(int64_t v, attrs.get_int("value_int", 0));
    value = Tensor::scalar_i64(v);
    ++found;
  }
  if (attrs.has("value_ints")) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, attrs.get_ints("value_ints"));
    value = Tensor::from_vector<int64_t>(v, Shape{static_cast<int64_t>(v.size())});
    ++found;
  }
  if (found != 1)
    return InvalidArgument("exactly one of the value attributes must be set, got " + std::to_string(found));
  if (!dtype_is_known(value.dtype()))
    return Unimplemented("attribute 'value' dtype " + dtype_name(value.dtype()) + " is not supported");
  return lambda_kernel(
      [value](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 0, 0));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        out[0] = value.view().desc();
        return Status::Ok();
      },
      [value](std::span<const TensorView>, std::span<const TensorView> out) -> Status {
        copy_bytes(out[0], value.view());
        return Status::Ok();
      });
}

// Fills `out` with copies of the single element at `elem`.
void fill_elements(const TensorView& out, const void* elem) {
  const size_t es = dtype_size(out.dtype);
  char* p = static_cast<char*>(out.data);
  for (int64_t i = 0; i < out.numel(); ++i) std::memcpy(p + i * es, elem, es);
}

KernelOr make_constant_of_shape(const KernelArgs&, AttrReader& attrs) {
  Tensor value = Tensor::from_vector<float>({0.0f}, Shape{1});
  if (attrs.has("value")) {
    KILN_ASSIGN_OR_RETURN(value, attrs.get_tensor("value"));
    if (value.numel() != 1)
      return InvalidArgument("attribute 'value' must have one element, got shape " + value.shape().str());
    if (!dtype_is_known(value.dtype()))
      return Unimplemented("attribute 'value' dtype " + dtype_name(value.dtype()) + " is not supported");
  }
  return lambda_kernel(
      [value](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        int64_t dims[kMaxRank];
        int n = 0;
        KILN_RETURN_IF_ERROR(read_small_ints(in[0], dims, kMaxRank, &n, "input 0 (shape)"));
        for (int i = 0; i < n; ++i)
          if (dims[i] < 0)
            return InvalidArgument("input 0 (shape) dim " + std::to_string(i) + " is " + std::to_string(dims[i]));
        out[0] = {value.dtype(), Shape(std::span<const int64_t>(dims, n))};
        return Status::Ok();
      },
      [value](std::span<const TensorView>, std::span<const TensorView> out) -> Status {
        fill_elements(out[0], value.data());
        return Status::Ok();
      });
}

// ---- Range ----

template <typename T>
int64_t range_count(T start, T limit, T delta) {
  if constexpr (std::is_integral_v<T>) {
    const int64_t s = start, l = limit, d = delta;
    if (d > 0) return l > s ? (l - s + d - 1) / d : 0;
    return s > l ? (s - l - d - 1) / -d : 0;
  } else {
    const double n = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) / static_cast<double>(delta));
    return n > 0 ? static_cast<int64_t>(n) : 0;
  }
}

Status dispatch_range(DType dt, auto&& f) {
  switch (dt) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kInt16: return f(int16_t{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
    default: return InvalidArgument("input 0 dtype " + dtype_name(dt) + " is not supported by Range");
  }
}

KernelOr make_range(const KernelArgs&, AttrReader&) {
  return lambda_kernel(
      [](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 3, 3));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        for (int i = 0; i < 3; ++i) {
          if (in[i].dtype != in[0].dtype)
            return InvalidArgument("input " + std::to_string(i) + " dtype " + dtype_name(in[i].dtype) +
                                   " differs from input 0 dtype " + dtype_name(in[0].dtype));
          if (in[i].numel() != 1)
            return InvalidArgument("input " + std::to_string(i) + " must be a scalar, got shape " + in[i].shape.str());
        }
        return dispatch_range(in[0].dtype, [&](auto t) -> Status {
          using T = decltype(t);
          const T delta = *in[2].as<T>();
          if (delta == T(0)) return InvalidArgument("input 2 (delta) is 0");
          const int64_t n = range_count<T>(*in[0].as<T>(), *in[1].as<T>(), delta);
          if (n < 0 || n > (int64_t{1} << 40)) return InvalidArgument("Range would produce " + std::to_string(n) + " elements");
          out[0] = {in[0].dtype, Shape{n}};
          return Status::Ok();
        });
      },
      [](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        return dispatch_range(in[0].dtype, [&](auto t) -> Status {
          using T = decltype(t);
          const T start = *in[0].as<T>(), delta = *in[2].as<T>();
          T* o = out[0].as<T>();
          for (int64_t i = 0; i < out[0].numel(); ++i) o[i] = static_cast<T>(start + static_cast<T>(i) * delta);
          return Status::Ok();
        });
      });
}

// ---- EyeLike, Trilu ----

KernelOr make_eye_like(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t k, attrs.get_int("k", 0));
  KILN_ASSIGN_OR_RETURN(int64_t dtype_attr, attrs.get_int("dtype", 0));
  const DType dtype = static_cast<DType>(dtype_attr);
  if (dtype_attr != 0 && !dtype_is_known(dtype))
    return Unimplemented("attribute 'dtype'=" + std::to_string(dtype_attr) + " is not supported");
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 1));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        if (in[0].shape.rank() != 2) return InvalidArgument("input 0 must be 2-D, got shape " + in[0].shape.str());
        const DType dt = dtype_attr != 0 ? dtype : in[0].dtype;
        if (!dtype_is_known(dt)) return Unimplemented("output dtype " + dtype_name(dt) + " is not supported");
        out[0] = {dt, in[0].shape};
        return Status::Ok();
      },
      [=](std::span<const TensorView>, std::span<const TensorView> out) -> Status {
        const int64_t rows = out[0].shape[0], cols = out[0].shape[1];
        const size_t es = dtype_size(out[0].dtype);
        if (out[0].nbytes()) std::memset(out[0].data, 0, out[0].nbytes());
        char one[8];
        KILN_RETURN_IF_ERROR(store_double(out[0].dtype, one, 1.0));
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t j = i + k;
          if (j >= 0 && j < cols) std::memcpy(static_cast<char*>(out[0].data) + (i * cols + j) * es, one, es);
        }
        return Status::Ok();
      });
}

KernelOr make_trilu(const KernelArgs&, AttrReader& attrs) {
  KILN_ASSIGN_OR_RETURN(int64_t upper, attrs.get_int("upper", 1));
  auto read_k = [](std::span<const TensorView> in, int64_t* k) -> Status {
    *k = 0;
    if (in.size() > 1 && in[1].present()) return read_scalar_int(in[1], k, "input 1 (k)");
    return Status::Ok();
  };
  return lambda_kernel(
      [=](std::span<const TensorView> in, std::span<TensorDesc> out) -> Status {
        KILN_RETURN_IF_ERROR(check_input_count(in, 1, 2));
        KILN_RETURN_IF_ERROR(check_output_count(out, 1, 1));
        KILN_RETURN_IF_ERROR(check_known_dtype(in[0], 0));
        if (in[0].shape.rank() < 2)
          return InvalidArgument("input 0 must have rank >= 2, got shape " + in[0].shape.str());
        int64_t k;
        KILN_RETURN_IF_ERROR(read_k(in, &k));
        out[0] = in[0].desc();
        return Status::Ok();
      },
      [=](std::span<const TensorView> in, std::span<const TensorView> out) -> Status {
        int64_t k;
        KILN_RETURN_IF_ERROR(read_k(in, &k));
        const Shape& s = in[0].shape;
        const int64_t rows = s[s.rank() - 2], cols = s[s.rank() - 1];
        const int64_t mats = rows * cols == 0 ? 0 : in[0].numel() / (rows * cols);
        const size_t es = dtype_size(in[0].dtype);
        const char* src = static_cast<const char*>(in[0].data);
        char* dst = static_cast<char*>(out[0].data);
        for (int64_t m = 0; m < mats; ++m)
          for (int64_t i = 0; i < rows; ++i) {
            const size_t off = static_cast<size_t>((m * rows + i) * cols) * es;
            // Kept columns: j >= i + k (upper) or j <= i + k (lower), clamped to [0, cols].
            const int64_t edge = std::clamp<int64_t>(upper ? i + k : i + k + 1, 0, cols);
            const int64_t keep0 = upper ? edge : 0, keep1 = upper ? cols : edge;
            std::memset(dst + off, 0, cols * es);
            if (keep1 > keep0) std::memcpy(dst + off + keep0 * es, src + off + keep0 * es, (keep1 - keep0) * es);
          }
        return Status::Ok();
      });
}

// Reshape-likes: output 0 is input 0's bytes under another shape, never a copy.
StepMemory view_of_input(const MemoryQuery& q) {
  if (q.num_outputs != 1 || q.constant_inputs.empty()) return {};
  return view_memory(OutputAlias::kView);
}

}  // namespace

void register_tensor_kernels(KernelRegistry& r) {
  r.add({"Shape", "reference", 0, make_shape});
  r.add({"Size", "reference", 0, make_size});
  r.add({"Reshape", "reference", 0, make_reshape});
  r.add({"Flatten", "reference", 0, make_flatten});
  r.add({"Squeeze", "reference", 0, make_squeeze});
  r.add({"Unsqueeze", "reference", 0, make_unsqueeze});
  r.add({"Identity", "reference", 0, make_identity});
  r.add({"Dropout", "reference", 0, make_dropout});
  r.add({"Constant", "reference", 0, make_constant});
  r.add({"ConstantOfShape", "reference", 0, make_constant_of_shape});
  r.add({"Range", "reference", 0, make_range});
  r.add({"EyeLike", "reference", 0, make_eye_like});
  r.add({"Trilu", "reference", 0, make_trilu});
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) r.set_memory_rule(op, view_of_input);
  register_tensor_layout_kernels(r);
  register_tensor_index_kernels(r);
  register_tensor_select_kernels(r);
}

}  // namespace kiln
