#include "runtime/attributes.h"

namespace kiln {

const char* attribute_kind_name(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::kInt: return "int";
    case Attribute::Kind::kFloat: return "float";
    case Attribute::Kind::kString: return "string";
    case Attribute::Kind::kInts: return "ints";
    case Attribute::Kind::kFloats: return "floats";
    case Attribute::Kind::kStrings: return "strings";
    case Attribute::Kind::kTensor: return "tensor";
  }
  return "?";
}

const Attribute* AttrReader::find(const std::string& name, Attribute::Kind kind, Status* err) {
  auto it = attrs_.find(name);
  if (it == attrs_.end()) return nullptr;
  used_.insert(name);
  if (it->second.kind != kind) {
    *err = InvalidArgument("attribute '" + name + "' must be of type " + attribute_kind_name(kind) + ", got " +
                           attribute_kind_name(it->second.kind));
    return nullptr;
  }
  return &it->second;
}

#define KILN_ATTR_GETTER(Ret, Name, K, Field)                       \
  StatusOr<Ret> AttrReader::Name(const std::string& name, const Ret& def) { \
    Status err;                                                        \
    const Attribute* a = find(name, Attribute::Kind::K, &err);         \
    if (!err.ok()) return err;                                         \
    return a ? a->Field : def;                                         \
  }

StatusOr<int64_t> AttrReader::get_int(const std::string& name, int64_t def) {
  Status err;
  const Attribute* a = find(name, Attribute::Kind::kInt, &err);
  if (!err.ok()) return err;
  return a ? a->i : def;
}
StatusOr<float> AttrReader::get_float(const std::string& name, float def) {
  Status err;
  const Attribute* a = find(name, Attribute::Kind::kFloat, &err);
  if (!err.ok()) return err;
  return a ? a->f : def;
}
KILN_ATTR_GETTER(std::string, get_string, kString, s)
KILN_ATTR_GETTER(std::vector<int64_t>, get_ints, kInts, ints)
KILN_ATTR_GETTER(std::vector<float>, get_floats, kFloats, floats)
#undef KILN_ATTR_GETTER

StatusOr<std::vector<std::string>> AttrReader::get_strings(const std::string& name) {
  Status err;
  const Attribute* a = find(name, Attribute::Kind::kStrings, &err);
  if (!err.ok()) return err;
  return a ? a->strings : std::vector<std::string>{};
}

StatusOr<Tensor> AttrReader::get_tensor(const std::string& name) {
  Status err;
  const Attribute* a = find(name, Attribute::Kind::kTensor, &err);
  if (!err.ok()) return err;
  if (!a) return InvalidArgument("required attribute '" + name + "' is missing");
  return a->tensor;
}

StatusOr<int64_t> AttrReader::require_int(const std::string& name) {
  if (!has(name)) return InvalidArgument("required attribute '" + name + "' is missing");
  return get_int(name, 0);
}

StatusOr<std::vector<int64_t>> AttrReader::require_ints(const std::string& name) {
  if (!has(name)) return InvalidArgument("required attribute '" + name + "' is missing");
  return get_ints(name);
}

std::string AttrReader::first_unread() const {
  for (const auto& [name, attr] : attrs_)
    if (!used_.count(name)) return name;
  return {};
}

}  // namespace kiln
