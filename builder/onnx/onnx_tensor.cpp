#include "builder/onnx/onnx_tensor.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace kiln {

namespace {

StatusOr<std::string> read_file_range(const std::string& path, int64_t offset, int64_t length) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot open external data file '" + path + "'");
  f.seekg(0, std::ios::end);
  const int64_t size = f.tellg();
  if (offset < 0 || offset > size) return DataLoss("external data offset " + std::to_string(offset) + " is beyond the end of '" + path + "'");
  if (length < 0) length = size - offset;
  if (length > size - offset)
    return DataLoss("external data range [" + std::to_string(offset) + ", +" + std::to_string(length) + ") is beyond the end of '" + path + "' (" + std::to_string(size) + " bytes)");
  std::string buf(static_cast<size_t>(length), '\0');
  f.seekg(offset);
  f.read(buf.data(), length);
  if (!f) return IoError("cannot read external data file '" + path + "'");
  return buf;
}

template <typename Field, typename Convert>
Status copy_typed(const Field& field, int64_t n, const std::string& what, Convert convert) {
  if (static_cast<int64_t>(field.size()) != n)
    return DataLoss(what + " has " + std::to_string(field.size()) + " values, its shape needs " + std::to_string(n));
  for (int64_t i = 0; i < n; ++i) convert(i, field.Get(static_cast<int>(i)));
  return Status::Ok();
}

}  // namespace

StatusOr<Tensor> tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir, const std::string& what) {
  const DType dt = static_cast<DType>(p.data_type());
  if (dt == DType::kString) return Unimplemented(what + ": string tensors are not supported");
  if (!dtype_is_known(dt)) return Unimplemented(what + ": unsupported data type " + std::to_string(p.data_type()));
  if (!Shape::fits_rank(p.dims_size())) return Unimplemented(what + ": rank " + std::to_string(p.dims_size()) + " exceeds kiln's maximum of 8");
  Shape shape;
  for (int i = 0; i < p.dims_size(); ++i) {
    if (p.dims(i) < 0) return DataLoss(what + ": negative dim " + std::to_string(p.dims(i)) + " at axis " + std::to_string(i));
    shape.push_back(p.dims(i));
  }
  // Every size the file claims is checked (overflow, the cap, and against the bytes actually
  // present) before the tensor is allocated.
  KILN_ASSIGN_OR_RETURN(const uint64_t nbytes, checked_nbytes(dt, shape, what));
  const int64_t n = shape.numel();
  const size_t esize = dtype_size(dt);
  auto allocate = [&]() { return Tensor::try_zeros(dt, shape, what); };

  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : p.external_data()) {
      if (kv.key() == "location") {
        location = kv.value();
      } else if (kv.key() == "offset" || kv.key() == "length") {
        char* end = nullptr;
        const long long v = std::strtoll(kv.value().c_str(), &end, 10);
        if (kv.value().empty() || *end || v < 0) return DataLoss(what + ": external data " + kv.key() + " '" + kv.value() + "' is not a non-negative integer");
        (kv.key() == "offset" ? offset : length) = v;
      }
    }
    if (location.empty()) return DataLoss(what + ": external data without a location");
    if (location.find("..") != std::string::npos || std::filesystem::path(location).is_absolute())
      return InvalidArgument(what + ": external data location '" + location + "' must be a relative path inside the model's folder");
    if (length >= 0 && static_cast<uint64_t>(length) != nbytes)
      return DataLoss(what + ": external data '" + location + "' length " + std::to_string(length) + " bytes, shape " + shape.str() + " needs " +
                      std::to_string(nbytes));
    auto read = read_file_range((std::filesystem::path(base_dir) / location).string(), offset, static_cast<int64_t>(nbytes));
    if (!read.ok()) return read.status().with_context(what);
    const std::string& bytes = *read;
    KILN_ASSIGN_OR_RETURN(Tensor t, allocate());
    if (!bytes.empty()) std::memcpy(t.data(), bytes.data(), bytes.size());
    return t;
  }
  if (p.has_raw_data()) {
    if (p.raw_data().size() != nbytes)
      return DataLoss(what + ": raw_data has " + std::to_string(p.raw_data().size()) + " bytes, shape " + shape.str() + " of " + dtype_name(dt) + " needs " + std::to_string(nbytes));
    KILN_ASSIGN_OR_RETURN(Tensor t, allocate());
    if (nbytes) std::memcpy(t.data(), p.raw_data().data(), nbytes);
    return t;
  }
  // Typed fields: their element count must match before anything is allocated.
  int64_t have = 0;
  switch (dt) {
    case DType::kFloat32: have = p.float_data_size(); break;
    case DType::kFloat64: have = p.double_data_size(); break;
    case DType::kInt64: have = p.int64_data_size(); break;
    case DType::kUInt32: case DType::kUInt64: have = p.uint64_data_size(); break;
    default: have = p.int32_data_size(); break;
  }
  if (have != n) return DataLoss(what + " has " + std::to_string(have) + " values, its shape " + shape.str() + " needs " + std::to_string(n));
  KILN_ASSIGN_OR_RETURN(Tensor t, allocate());
  char* dst = static_cast<char*>(t.data());
  switch (dt) {
    case DType::kFloat32:
      KILN_RETURN_IF_ERROR(copy_typed(p.float_data(), n, what, [&](int64_t i, float v) { reinterpret_cast<float*>(dst)[i] = v; }));
      break;
    case DType::kFloat64:
      KILN_RETURN_IF_ERROR(copy_typed(p.double_data(), n, what, [&](int64_t i, double v) { reinterpret_cast<double*>(dst)[i] = v; }));
      break;
    case DType::kInt64:
      KILN_RETURN_IF_ERROR(copy_typed(p.int64_data(), n, what, [&](int64_t i, int64_t v) { reinterpret_cast<int64_t*>(dst)[i] = v; }));
      break;
    case DType::kUInt32: case DType::kUInt64:
      KILN_RETURN_IF_ERROR(copy_typed(p.uint64_data(), n, what, [&](int64_t i, uint64_t v) {
        if (dt == DType::kUInt32) reinterpret_cast<uint32_t*>(dst)[i] = static_cast<uint32_t>(v);
        else reinterpret_cast<uint64_t*>(dst)[i] = v;
      }));
      break;
    default:  // int32, int16, int8, uint16, uint8, bool, float16, bfloat16 are all stored in int32_data
      KILN_RETURN_IF_ERROR(copy_typed(p.int32_data(), n, what, [&](int64_t i, int32_t v) {
        switch (esize) {
          case 1: reinterpret_cast<uint8_t*>(dst)[i] = static_cast<uint8_t>(v); break;
          case 2: reinterpret_cast<uint16_t*>(dst)[i] = static_cast<uint16_t>(v); break;
          default: reinterpret_cast<int32_t*>(dst)[i] = v; break;
        }
      }));
      break;
  }
  return t;
}

StatusOr<Tensor> read_tensor_pb(const std::string& path, std::string* name_out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot open '" + path + "'");
  onnx::TensorProto p;
  if (!p.ParseFromIstream(&f)) return DataLoss("'" + path + "' is not a valid ONNX TensorProto");
  if (name_out) *name_out = p.name();
  auto t = tensor_from_proto(p, std::filesystem::path(path).parent_path().string(), "tensor file '" + path + "'");
  return t;
}

}  // namespace kiln
