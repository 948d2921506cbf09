#include "builder/engine_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "runtime/engine.pb.h"
#include "runtime/engine_format.h"

namespace kiln {

namespace {

void attr_to_proto(const std::string& name, const Attribute& a, engine::Attr* p) {
  p->set_name(name);
  switch (a.kind) {
    case Attribute::Kind::kInt: p->set_kind(engine::Attr::INT); p->set_i(a.i); break;
    case Attribute::Kind::kFloat: p->set_kind(engine::Attr::FLOAT); p->set_f(a.f); break;
    case Attribute::Kind::kString: p->set_kind(engine::Attr::STRING); p->set_s(a.s); break;
    case Attribute::Kind::kInts: p->set_kind(engine::Attr::INTS); for (auto v : a.ints) p->add_ints(v); break;
    case Attribute::Kind::kFloats: p->set_kind(engine::Attr::FLOATS); for (auto v : a.floats) p->add_floats(v); break;
    case Attribute::Kind::kStrings: p->set_kind(engine::Attr::STRINGS); for (const auto& v : a.strings) p->add_strings(v); break;
    case Attribute::Kind::kTensor: {
      p->set_kind(engine::Attr::TENSOR);
      auto* t = p->mutable_tensor();
      t->set_dtype(static_cast<int>(a.tensor.dtype()));
      for (auto d : a.tensor.shape()) t->add_dims(d);
      t->set_data(std::string(static_cast<const char*>(a.tensor.data()), a.tensor.nbytes()));
      break;
    }
  }
}

// Assigns each distinct weight one slot in the blob. Tensors sharing storage (the same initializer
// used by several profiles) map to one slot directly; folded constants are matched by content.
class WeightTable {
 public:
  int add(const Tensor& t) {
    auto key = std::make_tuple(t.data(), t.dtype(), t.shape().vec());
    if (auto it = by_storage_.find(key); it != by_storage_.end()) return it->second;
    const uint64_t h = checksum64(t.data(), t.nbytes());
    for (int idx : by_hash_[h]) {
      const Tensor& o = tensors_[idx];
      if (o.dtype() == t.dtype() && o.shape() == t.shape() && std::memcmp(o.data(), t.data(), t.nbytes()) == 0) {
        by_storage_[key] = idx;
        return idx;
      }
    }
    const int idx = static_cast<int>(tensors_.size());
    tensors_.push_back(t);
    by_hash_[h].push_back(idx);
    by_storage_[key] = idx;
    return idx;
  }
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  std::map<std::tuple<void*, DType, std::vector<int64_t>>, int> by_storage_;
  std::map<uint64_t, std::vector<int>> by_hash_;
};

size_t align_up(size_t n) { return (n + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment; }

}  // namespace

StatusOr<std::string> serialize_engine(const EngineWriteInput& in) {
  engine::EngineMeta meta;
  meta.set_producer(kProducerVersion);
  meta.set_source_model(in.source_model);
  meta.set_precision(in.precision);
  WeightTable weights;
  for (const auto& plan : in.plans) {
    auto* pp = meta.add_profiles();
    pp->set_name(plan->profile);
    pp->set_opset(plan->opset);
    for (const auto& v : plan->values) {
      auto* pv = pp->add_values();
      pv->set_name(v.name);
      pv->set_dtype(static_cast<int>(v.dtype));
      pv->set_weight(v.constant >= 0 ? weights.add(plan->constants[v.constant]) : -1);
      for (auto d : v.dims) pv->add_dims(d);
      for (const auto& n : v.dim_names) pv->add_dim_names(n);
      pv->set_has_declared_shape(v.has_declared_shape);
      for (auto d : v.range_min) pv->add_range_min(d);
      for (auto d : v.range_opt) pv->add_range_opt(d);
      for (auto d : v.range_max) pv->add_range_max(d);
    }
    for (const auto& s : plan->steps) {
      auto* ps = pp->add_steps();
      ps->set_name(s.name);
      ps->set_op_type(s.op_type);
      ps->set_domain(s.domain);
      ps->set_impl(s.impl);
      for (const auto& [name, a] : s.attrs) attr_to_proto(name, a, ps->add_attrs());  // std::map: sorted, deterministic
      for (int v : s.inputs) ps->add_inputs(v);
      for (int v : s.outputs) ps->add_outputs(v);
      for (const auto& r : s.replaced_nodes) ps->add_replaced_nodes(r);
    }
    for (int v : plan->inputs) pp->add_inputs(v);
    for (int v : plan->outputs) pp->add_outputs(v);
  }
  size_t blob_size = 0;
  for (const auto& t : weights.tensors()) {
    auto* w = meta.add_weights();
    w->set_dtype(static_cast<int>(t.dtype()));
    for (auto d : t.shape()) w->add_dims(d);
    w->set_offset(blob_size);
    w->set_nbytes(t.nbytes());
    blob_size = align_up(blob_size + t.nbytes());
  }
  for (const auto& lib : in.plugin_libraries) meta.add_plugin_libraries()->set_path(lib);
  if (in.has_streaming) {
    auto* st = meta.mutable_streaming();
    st->set_cold_start(in.streaming.cold_start);
    st->set_step(in.streaming.step);
    for (const auto& s : in.streaming.state) {
      auto* ps = st->add_state();
      ps->set_output(s.output);
      ps->set_input(s.input);
      ps->set_axis(s.axis);
    }
    st->set_tokens_per_step(in.streaming.tokens_per_step);
    st->set_max_steps(in.streaming.max_steps);
    st->set_mask_input(in.streaming.mask_input);
    st->set_mask_block(in.streaming.mask_block);
  }

  std::string meta_bytes;
  google::protobuf::io::StringOutputStream sos(&meta_bytes);
  {
    google::protobuf::io::CodedOutputStream cos(&sos);
    cos.SetSerializationDeterministic(true);
    if (!meta.SerializeToCodedStream(&cos)) return Internal("cannot serialize engine metadata");
  }
  EngineHeader h{};
  std::memcpy(h.magic, kEngineMagic, 8);
  h.format_version = kEngineFormatVersion;
  h.header_bytes = kEngineHeaderBytes;
  std::strncpy(h.producer, kProducerVersion, sizeof h.producer - 1);
  h.required_cpu_features = in.required_cpu_features;
  h.metadata_offset = kEngineHeaderBytes;
  h.metadata_size = meta_bytes.size();
  h.weights_offset = align_up(h.metadata_offset + h.metadata_size);
  h.weights_size = blob_size;
  h.file_size = h.weights_offset + h.weights_size;
  std::string out(h.file_size, '\0');
  std::memcpy(out.data() + h.metadata_offset, meta_bytes.data(), meta_bytes.size());
  for (int i = 0; i < meta.weights_size(); ++i) {
    const Tensor& t = weights.tensors()[i];
    if (t.nbytes()) std::memcpy(out.data() + h.weights_offset + meta.weights(i).offset(), t.data(), t.nbytes());
  }
  h.metadata_checksum = checksum64(out.data() + h.metadata_offset, h.metadata_size);
  h.weights_checksum = checksum64(out.data() + h.weights_offset, h.weights_size);
  std::memcpy(out.data(), &h, sizeof h);
  h.header_checksum = checksum64(out.data(), offsetof(EngineHeader, header_checksum));
  std::memcpy(out.data(), &h, sizeof h);
  return out;
}

Status write_engine_file(const std::string& path, const EngineWriteInput& in, uint64_t* bytes_written) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, serialize_engine(in));
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return IoError("cannot create folder '" + parent.string() + "': " + ec.message());
  // A unique temporary beside the target (so the rename is atomic and never replaces a file of
  // the user's called ENGINE.tmp), removed on every failure: a failed build leaves no stray file.
  std::string tmp = (parent.empty() ? std::string(".") : parent.string()) + "/." + std::filesystem::path(path).filename().string() + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return IoError("cannot create a temporary file beside '" + path + "': " + std::strerror(errno));
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string why = w < 0 ? std::strerror(errno) : "no progress";
      ::close(fd);
      ::unlink(tmp.c_str());
      return IoError("failed writing the engine for '" + path + "' (" + why + ")");
    }
    off += static_cast<size_t>(w);
  }
  // mkstemp creates the file 0600; an engine is as readable as any file the user writes.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return IoError("failed writing the engine for '" + path + "' (" + std::strerror(errno) + ")");
  }
  if (std::filesystem::is_directory(path, ec)) {
    ::unlink(tmp.c_str());
    return IoError("cannot write the engine to '" + path + "': it is a directory");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    return IoError("cannot write the engine to '" + path + "': " + ec.message());
  }
  if (bytes_written) *bytes_written = bytes.size();
  return Status::Ok();
}

}  // namespace kiln
