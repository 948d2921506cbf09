#include "runtime/npy_io.h"

#include <cstring>
#include <fstream>
#include <algorithm>

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

namespace {

// The .npy header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
// Parsed by hand, bounded by the header's length: no regex (std::regex recurses per character and
// overflows the stack on a long header), every number checked before it is used.
struct NpyHeader {
  std::string descr;
  bool fortran = false;
  Shape shape;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& h, const std::string& path) : h_(h), path_(path) {}

  StatusOr<NpyHeader> parse() {
    NpyHeader out;
    bool have_descr = false, have_order = false, have_shape = false;
    skip_space();
    if (!eat('{')) return bad("the header is not a dict");
    for (;;) {
      skip_space();
      if (eat('}')) break;
      std::string key;
      KILN_RETURN_IF_ERROR(quoted(&key));
      skip_space();
      if (!eat(':')) return bad("expected ':' after '" + key + "'");
      skip_space();
      if (key == "descr") {
        KILN_RETURN_IF_ERROR(quoted(&out.descr));
        have_descr = true;
      } else if (key == "fortran_order") {
        if (word("True")) out.fortran = true;
        else if (word("False")) out.fortran = false;
        else return bad("fortran_order is neither True nor False");
        have_order = true;
      } else if (key == "shape") {
        KILN_RETURN_IF_ERROR(shape(&out.shape));
        have_shape = true;
      } else {
        return bad("unknown header key '" + key + "'");
      }
      skip_space();
      if (eat(',')) continue;
      skip_space();
      if (eat('}')) break;
      return bad("expected ',' or '}' after '" + key + "'");
    }
    if (!have_descr) return bad("no 'descr'");
    if (!have_order) return bad("no 'fortran_order'");
    if (!have_shape) return bad("no 'shape'");
    return out;
  }

 private:
  Status bad(const std::string& what) const {
    return DataLoss("'" + path_ + "': malformed .npy header at byte " + std::to_string(i_) + ": " + what);
  }
  void skip_space() {
    while (i_ < h_.size() && (h_[i_] == ' ' || h_[i_] == '\t' || h_[i_] == '\n')) ++i_;
  }
  bool eat(char c) {
    if (i_ < h_.size() && h_[i_] == c) return ++i_, true;
    return false;
  }
  bool word(const char* w) {
    const size_t n = std::strlen(w);
    if (h_.compare(i_, n, w) == 0) return i_ += n, true;
    return false;
  }
  Status quoted(std::string* out) {
    if (i_ >= h_.size() || (h_[i_] != '\'' && h_[i_] != '"')) return bad("expected a quoted string");
    const char q = h_[i_++];
    const size_t end = h_.find(q, i_);
    if (end == std::string::npos || end - i_ > 64) return bad("unterminated or overlong string");
    *out = h_.substr(i_, end - i_);
    i_ = end + 1;
    return Status::Ok();
  }
  Status shape(Shape* out) {
    if (!eat('(')) return bad("shape is not a tuple");
    for (;;) {
      skip_space();
      if (eat(')')) return Status::Ok();
      if (i_ >= h_.size() || h_[i_] < '0' || h_[i_] > '9') return bad("shape holds something other than a non-negative integer");
      uint64_t v = 0;
      while (i_ < h_.size() && h_[i_] >= '0' && h_[i_] <= '9') {
        if (v > (uint64_t{1} << 62) / 10) return bad("a shape dim does not fit 64 bits");
        v = v * 10 + static_cast<uint64_t>(h_[i_++] - '0');
      }
      if (out->rank() >= kMaxRank) return bad("rank above " + std::to_string(kMaxRank) + " is not supported");
      out->push_back(static_cast<int64_t>(v));
      skip_space();
      if (eat(')')) return Status::Ok();
      if (!eat(',')) return bad("expected ',' or ')' in the shape");
    }
  }

  const std::string& h_;
  const std::string& path_;
  size_t i_ = 0;
};

}  // namespace

StatusOr<Tensor> read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot open '" + path + "'");
  f.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(std::max<std::streamoff>(0, f.tellg()));
  f.seekg(0, std::ios::beg);
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) return DataLoss("'" + path + "' is not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t header_len = 0;
  uint64_t prefix = 10;
  if (major == 1) {
    unsigned char b[2];
    if (!f.read(reinterpret_cast<char*>(b), 2)) return DataLoss("'" + path + "' is truncated in its header");
    header_len = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!f.read(reinterpret_cast<char*>(b), 4)) return DataLoss("'" + path + "' is truncated in its header");
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
    prefix = 12;
  } else {
    return Unimplemented("'" + path + "': .npy format version " + std::to_string(major) + " is not supported");
  }
  if (header_len > (1u << 16) || prefix + header_len > file_size)
    return DataLoss("'" + path + "' claims a header of " + std::to_string(header_len) + " bytes in a file of " + std::to_string(file_size));
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) return DataLoss("'" + path + "' is truncated in its header");
  KILN_ASSIGN_OR_RETURN(NpyHeader h, HeaderParser(header, path).parse());
  KILN_ASSIGN_OR_RETURN(DType dt, dtype_from_descr(h.descr, path));
  if (h.fortran) return Unimplemented("'" + path + "': Fortran-order arrays are not supported; save with C order");
  // The data size is checked against the file before anything is allocated: a header may claim
  // any shape.
  KILN_ASSIGN_OR_RETURN(uint64_t bytes, checked_nbytes(dt, h.shape, "'" + path + "'"));
  const uint64_t have = file_size - prefix - header_len;
  if (bytes > have)
    return DataLoss("'" + path + "' is truncated: shape " + h.shape.str() + " of " + dtype_name(dt) + " needs " + std::to_string(bytes) +
                    " data bytes, the file has " + std::to_string(have));
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::try_zeros(dt, h.shape, "'" + path + "'"));
  if (bytes && !f.read(static_cast<char*>(t.data()), static_cast<std::streamsize>(bytes)))
    return DataLoss("'" + path + "' is truncated: shape " + h.shape.str() + " of " + dtype_name(dt) + " needs " + std::to_string(bytes) + " data bytes");
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
