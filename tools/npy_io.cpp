#include "tools/npy_io.h"

#include <cstring>
#include <fstream>
#include <regex>

namespace kiln {

namespace {

StatusOr<DType> dtype_from_descr(const std::string& d, const std::string& path) {
  static const std::pair<const char*, DType> table[] = {
      {"<f4", DType::kFloat32}, {"<f8", DType::kFloat64}, {"<f2", DType::kFloat16}, {"<i8", DType::kInt64},
      {"<i4", DType::kInt32},   {"<i2", DType::kInt16},   {"|i1", DType::kInt8},    {"|u1", DType::kUInt8},
      {"<u2", DType::kUInt16},  {"<u4", DType::kUInt32},  {"<u8", DType::kUInt64},  {"|b1", DType::kBool}};
  for (const auto& [name, dt] : table)
    if (d == name) return dt;
  return Unimplemented("'" + path + "': unsupported .npy dtype '" + d + "' (big-endian, strings and objects are not supported)");
}

std::string descr_of(DType dt) {
  switch (dt) {
    case DType::kFloat32: return "<f4";
    case DType::kFloat64: return "<f8";
    case DType::kFloat16: return "<f2";
    case DType::kInt64: return "<i8";
    case DType::kInt32: return "<i4";
    case DType::kInt16: return "<i2";
    case DType::kInt8: return "|i1";
    case DType::kUInt8: return "|u1";
    case DType::kUInt16: return "<u2";
    case DType::kUInt32: return "<u4";
    case DType::kUInt64: return "<u8";
    case DType::kBool: return "|b1";
    default: return "";
  }
}

}  // namespace

StatusOr<Tensor> read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot open '" + path + "'");
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) return DataLoss("'" + path + "' is not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2];
    if (!f.read(reinterpret_cast<char*>(b), 2)) return DataLoss("'" + path + "' is truncated in its header");
    header_len = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!f.read(reinterpret_cast<char*>(b), 4)) return DataLoss("'" + path + "' is truncated in its header");
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  } else {
    return Unimplemented("'" + path + "': .npy format version " + std::to_string(major) + " is not supported");
  }
  if (header_len > (1u << 20)) return DataLoss("'" + path + "' has an implausible header length " + std::to_string(header_len));
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) return DataLoss("'" + path + "' is truncated in its header");
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr'\\s*:\\s*'([^']*)'"))) return DataLoss("'" + path + "': header has no descr");
  KILN_ASSIGN_OR_RETURN(DType dt, dtype_from_descr(m[1].str(), path));
  if (!std::regex_search(header, m, std::regex("'fortran_order'\\s*:\\s*(True|False)"))) return DataLoss("'" + path + "': header has no fortran_order");
  if (m[1].str() == "True") return Unimplemented("'" + path + "': Fortran-order arrays are not supported; save with C order");
  if (!std::regex_search(header, m, std::regex("'shape'\\s*:\\s*\\(([^)]*)\\)"))) return DataLoss("'" + path + "': header has no shape");
  Shape shape;
  std::string dims = m[1].str();
  std::regex num("\\d+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it) {
    if (shape.rank() >= kMaxRank) return Unimplemented("'" + path + "': rank above 8 is not supported");
    shape.push_back(std::stoll(it->str()));
  }
  Tensor t = Tensor::zeros(dt, shape);
  if (t.nbytes() && !f.read(static_cast<char*>(t.data()), static_cast<std::streamsize>(t.nbytes())))
    return DataLoss("'" + path + "' is truncated: shape " + shape.str() + " of " + dtype_name(dt) + " needs " + std::to_string(t.nbytes()) + " data bytes");
  return t;
}

Status write_npy(const std::string& path, const TensorView& t) {
  const std::string descr = descr_of(t.dtype);
  if (descr.empty()) return Unimplemented("cannot write dtype " + dtype_name(t.dtype) + " to .npy ('" + path + "')");
  std::string shape = "(";
  for (int i = 0; i < t.shape.rank(); ++i) shape += std::to_string(t.shape[i]) + (t.shape.rank() == 1 ? "," : (i + 1 < t.shape.rank() ? ", " : ""));
  shape += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) return IoError("cannot write '" + path + "'");
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char lb[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(lb, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  if (t.nbytes()) f.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.nbytes()));
  if (!f) return IoError("failed writing '" + path + "'");
  return Status::Ok();
}

std::string sanitize_file_name(const std::string& name) {
  std::string out = name;
  for (char& c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  return out;
}

}  // namespace kiln
