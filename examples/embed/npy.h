// Just enough of NumPy's .npy format for this example: little-endian, C-order arrays of the dtypes
// kiln has, read into and written from a kiln::Tensor.
#pragma once

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <kiln/tensor.h>

namespace npy {

inline const char* descr_of(kiln::DType t) {
  switch (t) {
    case kiln::DType::kFloat32: return "<f4";
    case kiln::DType::kFloat64: return "<f8";
    case kiln::DType::kFloat16: return "<f2";
    case kiln::DType::kInt8: return "|i1";
    case kiln::DType::kUInt8: return "|u1";
    case kiln::DType::kInt16: return "<i2";
    case kiln::DType::kUInt16: return "<u2";
    case kiln::DType::kInt32: return "<i4";
    case kiln::DType::kUInt32: return "<u4";
    case kiln::DType::kInt64: return "<i8";
    case kiln::DType::kUInt64: return "<u8";
    case kiln::DType::kBool: return "|b1";
    default: return nullptr;
  }
}

inline kiln::StatusOr<kiln::Tensor> read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return kiln::IoError("cannot open '" + path + "'");
  char magic[8];
  f.read(magic, 8);
  if (!f || std::string(magic, 6) != "\x93NUMPY") return kiln::InvalidArgument("'" + path + "' is not a .npy file");
  uint32_t header_len = 0;
  unsigned char len[4] = {};
  f.read(reinterpret_cast<char*>(len), magic[6] == 1 ? 2 : 4);
  header_len = len[0] | len[1] << 8 | len[2] << 16 | static_cast<uint32_t>(len[3]) << 24;
  std::string header(header_len, '\0');
  f.read(header.data(), header_len);
  auto field = [&](const std::string& key) {
    const size_t k = header.find("'" + key + "'");
    return k == std::string::npos ? std::string() : header.substr(header.find(':', k) + 1);
  };
  if (field("fortran_order").find("True") < field("fortran_order").find(',')) return kiln::InvalidArgument("'" + path + "' is Fortran-ordered");
  const std::string descr_field = field("descr");
  const std::string descr = descr_field.substr(descr_field.find('\'') + 1, 3);
  kiln::DType dtype = kiln::DType::kUndefined;
  for (kiln::DType t : {kiln::DType::kFloat32, kiln::DType::kFloat64, kiln::DType::kFloat16, kiln::DType::kInt8, kiln::DType::kUInt8,
                        kiln::DType::kInt16, kiln::DType::kUInt16, kiln::DType::kInt32, kiln::DType::kUInt32, kiln::DType::kInt64,
                        kiln::DType::kUInt64, kiln::DType::kBool})
    if (descr == descr_of(t)) dtype = t;
  if (dtype == kiln::DType::kUndefined) return kiln::InvalidArgument("'" + path + "' has dtype " + descr + ", which kiln does not read");
  const std::string shape_field = field("shape");
  std::string dims = shape_field.substr(shape_field.find('(') + 1, shape_field.find(')') - shape_field.find('(') - 1);
  kiln::Shape shape;
  std::stringstream ss(dims);
  for (std::string d; std::getline(ss, d, ',');)
    if (d.find_first_of("0123456789") != std::string::npos) shape.push_back(std::stoll(d));
  auto t = kiln::Tensor::try_zeros(dtype, shape, "'" + path + "'");
  if (!t.ok()) return t.status();
  f.read(static_cast<char*>(t->data()), static_cast<std::streamsize>(t->nbytes()));
  if (!f) return kiln::IoError("'" + path + "' is truncated");
  return t;
}

inline kiln::Status write(const std::string& path, const kiln::TensorView& v) {
  const char* descr = descr_of(v.dtype);
  if (!descr) return kiln::InvalidArgument("cannot write dtype " + kiln::dtype_name(v.dtype) + " as .npy");
  std::string shape;
  for (int d = 0; d < v.shape.rank(); ++d) shape += std::to_string(v.shape[d]) + ", ";
  if (v.shape.rank() > 1) shape.resize(shape.size() - 2);
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  const uint16_t len = static_cast<uint16_t>(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  f.put(static_cast<char>(len & 0xff));
  f.put(static_cast<char>(len >> 8));
  f << header;
  f.write(static_cast<const char*>(v.data), static_cast<std::streamsize>(v.nbytes()));
  return f ? kiln::Status::Ok() : kiln::IoError("cannot write '" + path + "'");
}

}  // namespace npy
