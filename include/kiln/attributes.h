// Node attributes as kiln stores them (in the IR, in plans and in engine files), and AttrReader,
// which kernel factories use to read them. AttrReader remembers which attributes were read, so an
// attribute that no kernel understood is reported as unsupported instead of being silently ignored.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

struct Attribute {
  enum class Kind { kInt, kFloat, kString, kInts, kFloats, kStrings, kTensor };
  Kind kind = Kind::kInt;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  Tensor tensor;

  static Attribute Int(int64_t v) { Attribute a; a.kind = Kind::kInt; a.i = v; return a; }
  static Attribute Float(float v) { Attribute a; a.kind = Kind::kFloat; a.f = v; return a; }
  static Attribute String(std::string v) { Attribute a; a.kind = Kind::kString; a.s = std::move(v); return a; }
  static Attribute Ints(std::vector<int64_t> v) { Attribute a; a.kind = Kind::kInts; a.ints = std::move(v); return a; }
  static Attribute Floats(std::vector<float> v) { Attribute a; a.kind = Kind::kFloats; a.floats = std::move(v); return a; }
  static Attribute Strings(std::vector<std::string> v) { Attribute a; a.kind = Kind::kStrings; a.strings = std::move(v); return a; }
  static Attribute TensorValue(Tensor t) { Attribute a; a.kind = Kind::kTensor; a.tensor = std::move(t); return a; }
};

KILN_API const char* attribute_kind_name(Attribute::Kind k);

using AttrMap = std::map<std::string, Attribute>;

class KILN_API AttrReader {
 public:
  explicit AttrReader(const AttrMap& attrs) : attrs_(attrs) {}

  bool has(const std::string& name) const { return attrs_.count(name) != 0; }
  // Each getter returns the default when the attribute is absent, and an error when it is present
  // with the wrong kind.
  StatusOr<int64_t> get_int(const std::string& name, int64_t def);
  StatusOr<float> get_float(const std::string& name, float def);
  StatusOr<std::string> get_string(const std::string& name, const std::string& def);
  StatusOr<std::vector<int64_t>> get_ints(const std::string& name, const std::vector<int64_t>& def = {});
  StatusOr<std::vector<float>> get_floats(const std::string& name, const std::vector<float>& def = {});
  StatusOr<std::vector<std::string>> get_strings(const std::string& name);
  StatusOr<Tensor> get_tensor(const std::string& name);  // error when absent
  StatusOr<int64_t> require_int(const std::string& name);
  StatusOr<std::vector<int64_t>> require_ints(const std::string& name);

  // Marks an attribute as understood without reading it (e.g. a hint kiln may ignore safely).
  void ignore(const std::string& name) { used_.insert(name); }
  // First attribute present but never read, or empty when all were understood.
  std::string first_unread() const;

 private:
  const Attribute* find(const std::string& name, Attribute::Kind kind, Status* err);
  const AttrMap& attrs_;
  std::set<std::string> used_;
};

}  // namespace kiln
