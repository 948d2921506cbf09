#include "runtime/engine.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "runtime/plugin_host/plugin_kernel.h"
#include "runtime/plugin_host/plugin_registry.h"
#include "runtime/engine.pb.h"
#include "runtime/engine_format.h"
#include "runtime/memory_budget.h"
#include "runtime/log.h"

namespace kiln {

namespace {

Status fail(const std::string& name, const std::string& what) { return DataLoss("engine '" + name + "': " + what); }

StatusOr<Attribute> attr_from_proto(const engine::Attr& a, const std::string& where) {
  switch (a.kind()) {
    case engine::Attr::INT: return Attribute::Int(a.i());
    case engine::Attr::FLOAT: return Attribute::Float(a.f());
    case engine::Attr::STRING: return Attribute::String(a.s());
    case engine::Attr::INTS: return Attribute::Ints({a.ints().begin(), a.ints().end()});
    case engine::Attr::FLOATS: return Attribute::Floats({a.floats().begin(), a.floats().end()});
    case engine::Attr::STRINGS: return Attribute::Strings({a.strings().begin(), a.strings().end()});
    case engine::Attr::TENSOR: {
      const auto& t = a.tensor();
      const DType dt = static_cast<DType>(t.dtype());
      if (!dtype_is_known(dt) || !Shape::fits_rank(t.dims_size())) return InvalidArgument(where + ": attribute '" + a.name() + "' has an invalid tensor");
      Shape s;
      for (auto d : t.dims()) {
        if (d < 0 || d > (int64_t{1} << 32)) return InvalidArgument(where + ": attribute '" + a.name() + "' has an invalid dim");
        s.push_back(d);
      }
      auto bytes = checked_nbytes(dt, s, where + ": attribute '" + a.name() + "'");
      if (!bytes.ok() || *bytes != t.data().size()) return InvalidArgument(where + ": attribute '" + a.name() + "' tensor size mismatch");
      Tensor tensor = Tensor::zeros(dt, s);
      if (tensor.nbytes() != t.data().size()) return InvalidArgument(where + ": attribute '" + a.name() + "' tensor size mismatch");
      if (tensor.nbytes()) std::memcpy(tensor.data(), t.data().data(), tensor.nbytes());
      return Attribute::TensorValue(tensor);
    }
    default: return InvalidArgument(where + ": attribute '" + a.name() + "' has unknown kind " + std::to_string(a.kind()));
  }
}

StatusOr<Shape> checked_shape(const google::protobuf::RepeatedField<int64_t>& dims, const std::string& what) {
  if (!Shape::fits_rank(dims.size())) return InvalidArgument(what + " has rank " + std::to_string(dims.size()) + " above 8");
  Shape s;
  for (auto d : dims) {
    if (d < 0) return InvalidArgument(what + " has a negative dim");
    s.push_back(d);
  }
  return s;
}

// The `state:` buffers: known dtype, sane dims, and bindings naming an entry's existing input or
// output of the buffer's dtype.
Status load_state_specs(const engine::EngineMeta& meta, const std::string& name, const std::vector<ProfileInfo>& profiles,
                        std::vector<StateBufferSpec>& out) {
  for (const auto& sb : meta.state()) {
    StateBufferSpec spec;
    spec.name = sb.name();
    spec.dtype = static_cast<DType>(sb.dtype());
    const std::string where = "state '" + sb.name() + "'";
    if (!dtype_is_known(spec.dtype)) return fail(name, where + " has unknown dtype " + std::to_string(sb.dtype()));
    auto shape = checked_shape(sb.dims(), where);
    if (!shape.ok()) return fail(name, shape.status().message());
    if (!checked_nbytes(spec.dtype, *shape, where).ok()) return fail(name, where + " is too large");
    spec.dims = shape->vec();
    for (const auto& b : sb.bindings()) {
      bool found_entry = false;
      for (const auto& p : profiles) {
        if (p.entry != b.entry()) continue;
        found_entry = true;
        // Plan outputs carry no dtype (kernels infer it); the builder checked it.
        auto has = [&](const std::vector<BindingInfo>& list, const std::string& n) {
          for (const auto& bi : list)
            if (bi.name == n) return bi.dtype == spec.dtype || bi.dtype == DType::kUndefined;
          return false;
        };
        if ((!b.input().empty() && !has(p.inputs, b.input())) || (!b.output().empty() && !has(p.outputs, b.output())))
          return fail(name, where + ": profile '" + p.name + "' has no " + dtype_name(spec.dtype) + " input '" + b.input() +
                                "' / output '" + b.output() + "' to bind");
      }
      if (!found_entry) return fail(name, where + " is bound to entry '" + b.entry() + "', which the engine does not have");
      spec.bindings.push_back(StateBinding{b.entry(), b.input(), b.output()});
    }
    out.push_back(std::move(spec));
  }
  return Status::Ok();
}

}  // namespace

// Validates and decodes a whole engine image (file mmap or memory copy) into `out`.
Status load_engine_image(std::shared_ptr<const void> image, size_t size, const std::string& name,
                         const std::vector<std::string>& plugin_dirs, Engine& out) {
  const char* base = static_cast<const char*>(image.get());
  if (size < kEngineHeaderBytes) return fail(name, "file is " + std::to_string(size) + " bytes, smaller than the 128-byte header (truncated or not an engine)");
  EngineHeader h;
  std::memcpy(&h, base, sizeof h);
  if (std::memcmp(h.magic, kEngineMagic, 8) != 0) return fail(name, "bad magic: not a kiln engine file");
  if (h.format_version > kEngineFormatVersion)
    return Status(StatusCode::kUnimplemented, "engine '" + name + "': format version " + std::to_string(h.format_version) +
                  " is newer than this runtime supports (" + std::to_string(kEngineFormatVersion) + "); rebuild the engine or upgrade kiln");
  if (h.format_version == 0) return fail(name, "format version 0 is invalid");
  if (h.header_bytes != kEngineHeaderBytes) return fail(name, "header size " + std::to_string(h.header_bytes) + " is not 128");
  if (checksum64(base, offsetof(EngineHeader, header_checksum)) != h.header_checksum) return fail(name, "header checksum mismatch (corrupted header)");
  if (h.file_size != size) return fail(name, "file is " + std::to_string(size) + " bytes but its header says " + std::to_string(h.file_size) + " (truncated or padded)");
  auto in_bounds = [&](uint64_t off, uint64_t len) { return off >= kEngineHeaderBytes && off <= size && len <= size - off; };
  if (!in_bounds(h.metadata_offset, h.metadata_size)) return fail(name, "metadata section is out of bounds");
  if (!in_bounds(h.weights_offset, h.weights_size)) return fail(name, "weights section is out of bounds");
  if (h.weights_offset % kWeightAlignment) return fail(name, "weights section is not 64-byte aligned");
  if (checksum64(base + h.metadata_offset, h.metadata_size) != h.metadata_checksum) return fail(name, "metadata checksum mismatch (corrupted metadata)");
  if (checksum64(base + h.weights_offset, h.weights_size) != h.weights_checksum) return fail(name, "weights checksum mismatch (corrupted weights)");
  const uint64_t missing = h.required_cpu_features & ~host_cpu_features();
  if (missing)
    return Status(StatusCode::kUnimplemented, "engine '" + name + "' requires CPU features this CPU lacks: " + cpu_feature_names(missing));

  engine::EngineMeta meta;
  if (!meta.ParseFromArray(base + h.metadata_offset, static_cast<int>(h.metadata_size))) return fail(name, "metadata is not a valid EngineMeta protobuf");

  // Plugin libraries first: the plans' plugin steps must find their creators.
  for (const auto& lib : meta.plugin_libraries()) {
    PluginLibraryInfo info{lib.name(), lib.version(), lib.file_name(), lib.path(), {lib.plugins().begin(), lib.plugins().end()}};
    if (info.name.empty())
      return Status(StatusCode::kUnimplemented, "engine '" + name + "' (format " + std::to_string(h.format_version) +
                    ") records its plugin library '" + lib.path() + "' by path only; rebuild the engine with this kiln");
    Status st = PluginRegistry::global().require_library(info, plugin_dirs);
    if (!st.ok()) return Status(st.code(), "engine '" + name + "': " + st.message());
    out.info_.plugin_libraries.push_back(std::move(info));
  }

  // Weights: bounds, alignment and sizes, then borrowed views into the image (no copy).
  const char* blob = base + h.weights_offset;
  std::vector<Tensor> weights;
  uint64_t weight_bytes = 0;
  for (int i = 0; i < meta.weights_size(); ++i) {
    const auto& w = meta.weights(i);
    const std::string what = "weight " + std::to_string(i);
    const DType dt = static_cast<DType>(w.dtype());
    if (!dtype_is_known(dt)) return fail(name, what + " has unknown dtype " + std::to_string(w.dtype()));
    auto shape = checked_shape(w.dims(), what);
    if (!shape.ok()) return fail(name, shape.status().message());
    auto bytes = checked_nbytes(dt, *shape, what);
    if (!bytes.ok() || *bytes != w.nbytes()) return fail(name, what + " size does not match its shape " + shape->str());
    if (w.offset() % kWeightAlignment || w.offset() > h.weights_size || w.nbytes() > h.weights_size - w.offset())
      return fail(name, what + " lies outside the weights section or is misaligned");
    weights.push_back(Tensor::borrow(const_cast<char*>(blob + w.offset()), dt, *shape, image));
    weight_bytes += w.nbytes();
  }

  for (int p = 0; p < meta.profiles_size(); ++p) {
    const auto& pp = meta.profiles(p);
    const std::string where = "profile '" + pp.name() + "'";
    auto plan = std::make_shared<Plan>();
    plan->profile = pp.name();
    plan->opset = pp.opset();
    const int nv = pp.values_size();
    auto valid_value = [&](int v, bool allow_absent) { return (allow_absent && v == -1) || (v >= 0 && v < nv); };
    for (const auto& v : pp.values()) {
      PlanValue pv;
      pv.name = v.name();
      pv.dtype = static_cast<DType>(v.dtype());
      if (pv.dtype != DType::kUndefined && !dtype_is_known(pv.dtype))
        return fail(name, where + ": value '" + v.name() + "' has unknown dtype " + std::to_string(v.dtype()));
      if (v.weight() >= 0) {
        if (v.weight() >= static_cast<int>(weights.size())) return fail(name, where + ": value '" + v.name() + "' refers to missing weight " + std::to_string(v.weight()));
        pv.constant = static_cast<int>(plan->constants.size());
        plan->constants.push_back(weights[v.weight()]);
      }
      pv.dims.assign(v.dims().begin(), v.dims().end());
      pv.dim_names.assign(v.dim_names().begin(), v.dim_names().end());
      pv.has_declared_shape = v.has_declared_shape();
      pv.range_min.assign(v.range_min().begin(), v.range_min().end());
      pv.range_opt.assign(v.range_opt().begin(), v.range_opt().end());
      pv.range_max.assign(v.range_max().begin(), v.range_max().end());
      if (pv.dims.size() > kMaxRank || pv.range_min.size() != pv.range_max.size() || pv.range_min.size() > kMaxRank)
        return fail(name, where + ": value '" + v.name() + "' has an invalid declared shape or range");
      plan->values.push_back(std::move(pv));
    }
    for (const auto& s : pp.steps()) {
      PlanStep step;
      step.name = s.name();
      step.op_type = s.op_type();
      step.domain = s.domain();
      step.impl = s.impl();
      for (const auto& a : s.attrs()) {
        auto attr = attr_from_proto(a, where + ": step '" + s.name() + "'");
        if (!attr.ok()) return fail(name, attr.status().message());
        step.attrs[a.name()] = std::move(attr).value();
      }
      for (int v : s.inputs()) {
        if (!valid_value(v, true)) return fail(name, where + ": step '" + s.name() + "' reads value " + std::to_string(v) + " of " + std::to_string(nv));
        step.inputs.push_back(v);
      }
      for (int v : s.outputs()) {
        if (!valid_value(v, false)) return fail(name, where + ": step '" + s.name() + "' writes value " + std::to_string(v) + " of " + std::to_string(nv));
        step.outputs.push_back(v);
      }
      // Every op writes at least one output, and kernels (built-in and plugin) write out[0] unasked.
      if (step.outputs.empty()) return fail(name, where + ": step '" + s.name() + "' has no outputs");
      step.replaced_nodes.assign(s.replaced_nodes().begin(), s.replaced_nodes().end());
      if (!is_kernel_domain(step.domain)) {
        auto version = plugin_version_from_impl(step);
        if (!version.ok()) return fail(name, where + ": " + version.status().message());
        if (!PluginRegistry::global().find(step.domain, step.op_type, *version))
          return Status(StatusCode::kNotFound, "engine '" + name + "': " + where + ": step '" + step.name + "' uses plugin " + step.domain + "::" +
                        step.op_type + "@" + (version->empty() ? "<any>" : *version) + ", which none of the engine's plugin libraries (" +
                        std::to_string(meta.plugin_libraries_size()) + ") nor kiln's built-ins provide");
      }
      plan->steps.push_back(std::move(step));
    }
    for (int v : pp.inputs()) {
      if (!valid_value(v, false)) return fail(name, where + ": input index " + std::to_string(v) + " is out of range");
      if (!dtype_is_known(plan->values[v].dtype))
        return fail(name, where + ": input value dtype " + std::to_string(static_cast<int>(plan->values[v].dtype)) + " is not a known dtype");
      plan->inputs.push_back(v);
    }
    for (int v : pp.outputs()) {
      if (!valid_value(v, false)) return fail(name, where + ": output index " + std::to_string(v) + " is out of range");
      plan->outputs.push_back(v);
    }
    // Dataflow: every step reads only constants, graph inputs or outputs of earlier steps, and each
    // value is written once, so a corrupted plan can never hand a kernel an unset tensor.
    std::vector<char> defined(static_cast<size_t>(nv), 0);
    for (int v = 0; v < nv; ++v) defined[v] = plan->values[v].constant >= 0;
    for (int v : plan->inputs) defined[v] = 1;
    for (const auto& step : plan->steps) {
      for (int v : step.inputs)
        if (v >= 0 && !defined[v]) return fail(name, where + ": step '" + step.name + "' reads a value no earlier step produces");
      for (int v : step.outputs) {
        if (defined[v]) return fail(name, where + ": step '" + step.name + "' overwrites an already defined value");
        defined[v] = 1;
      }
    }
    for (int v : plan->outputs)
      if (!defined[v]) return fail(name, where + ": an output is never produced");
    ProfileInfo info;
    info.name = pp.name();
    info.entry = pp.entry();
    for (int v : plan->inputs) {
      const PlanValue& pv = plan->values[v];
      BindingInfo b{pv.name, pv.dtype, Shape(pv.range_min), Shape(pv.range_opt), Shape(pv.range_max), pv.dim_names};
      info.inputs.push_back(std::move(b));
    }
    for (int v : plan->outputs) info.outputs.push_back(BindingInfo{plan->values[v].name, plan->values[v].dtype, {}, {}, {}, {}});
    out.profiles_.push_back(std::move(info));
    out.plans_.push_back(std::move(plan));
  }
  out.info_.format_version = h.format_version;
  out.info_.producer = std::string(h.producer, strnlen(h.producer, sizeof h.producer));
  out.info_.source_model = meta.source_model();
  out.info_.precision = meta.precision();
  out.info_.required_cpu_features = h.required_cpu_features;
  out.info_.file_bytes = size;
  out.info_.weight_bytes = weight_bytes;
  out.info_.weight_count = weights.size();
  out.info_.tactic_threads = meta.tactic_threads();
  for (const auto& g : meta.input_generators())
    out.info_.input_generators[g.input()] = InputGenerator{g.kind(), g.low(), g.high(), g.block(), g.seed()};
  if (meta.has_streaming()) {
    const auto& st = meta.streaming();
    StreamingSpec& spec = out.info_.streaming;
    out.info_.has_streaming = true;
    spec.cold_start = st.cold_start();
    spec.step = st.step();
    for (const auto& s : st.state()) spec.state.push_back({s.output(), s.input(), s.axis()});
    spec.tokens_per_step = st.tokens_per_step();
    spec.max_steps = st.max_steps();
    spec.mask_input = st.mask_input();
    spec.mask_block = st.mask_block();
  }
  KILN_RETURN_IF_ERROR(load_state_specs(meta, name, out.profiles_, out.info_.state));
  if (log_enabled(LogLevel::kDebug))
    log_debug("loaded engine '" + name + "': format " + std::to_string(h.format_version) + ", " + std::to_string(out.profiles_.size()) +
              " profiles, " + std::to_string(weights.size()) + " weights (" + std::to_string(weight_bytes) + " bytes), " +
              std::to_string(meta.plugin_libraries_size()) + " plugin libraries");
  return Status::Ok();
}

namespace {

// Memory-cap, pre-faulting and locking common to both loaders; `image` is the whole engine.
Status settle_image(const void* image, size_t size, const std::string& name, const LoadOptions& options) {
  if (options.prefault) {
    // One read per page: the mapping's page faults happen here, not in the first runs.
    const long page = ::sysconf(_SC_PAGESIZE);
    ::madvise(const_cast<void*>(image), size, MADV_WILLNEED);
    volatile char sink = 0;
    for (size_t off = 0; off < size; off += static_cast<size_t>(page)) sink = sink + static_cast<const volatile char*>(image)[off];
  }
  if (options.lock_memory) {
    if (::mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
      return Status(StatusCode::kFailedPrecondition, "engine '" + name + "': cannot lock memory (" + std::strerror(errno) +
                                                         "): raise the locked-memory limit (ulimit -l, RLIMIT_MEMLOCK) or grant CAP_IPC_LOCK");
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::string> plugin_search_dirs(const LoadOptions& options, const std::string& engine_dir) {
  // Explicitly allowed library files: their folders are searched first.
  std::vector<std::string> dirs;
  for (const std::string& lib : options.allowed_plugins) {
    std::error_code ec;
    const auto folder = std::filesystem::absolute(lib, ec).parent_path().string();
    if (!ec) dirs.push_back(folder);
  }
  dirs.insert(dirs.end(), options.plugin_dirs.begin(), options.plugin_dirs.end());
  if (const char* env = std::getenv("KILN_PLUGIN_PATH")) {
    std::string item;
    for (const char* c = env;; ++c) {
      if (*c == ':' || *c == '\0') {
        if (!item.empty()) dirs.push_back(item);
        item.clear();
        if (!*c) break;
      } else {
        item += *c;
      }
    }
  }
  if (!engine_dir.empty()) dirs.push_back(engine_dir);
  return dirs;
}

StatusOr<std::shared_ptr<Engine>> Engine::load_file(const std::string& path, const LoadOptions& options) {
  if (options.max_memory) set_max_memory(options.max_memory);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open engine '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return IoError("engine '" + path + "' is not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return DataLoss("engine '" + path + "': file is empty");
  }
  // The mapped weights count against the memory cap like copied ones.
  if (Status charged = charge_memory(size, "engine '" + path + "' (weights and plans, mapped)"); !charged.ok()) {
    ::close(fd);
    return charged;
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    release_memory(size);
    return IoError("cannot mmap engine '" + path + "': " + std::strerror(errno));
  }
  std::shared_ptr<const void> image(p, [size](const void* q) {
    ::munmap(const_cast<void*>(q), size);
    release_memory(size);
  });
  auto engine = std::shared_ptr<Engine>(new Engine());
  std::error_code ec;
  std::string dir = std::filesystem::absolute(path, ec).parent_path().string();
  KILN_RETURN_IF_ERROR(load_engine_image(image, size, path, plugin_search_dirs(options, ec ? std::string() : dir), *engine));
  KILN_RETURN_IF_ERROR(settle_image(p, size, path, options));
  engine->image_ = std::move(image);
  return engine;
}

StatusOr<std::shared_ptr<Engine>> Engine::load_memory(const void* data, size_t size, const std::string& name, const LoadOptions& options) {
  if (options.max_memory) set_max_memory(options.max_memory);
  KILN_RETURN_IF_ERROR(check_memory(size, "engine '" + name + "' (copied from memory)"));
  // Copied once into 64-byte aligned storage: the weights blob's alignment is relative to the image start.
  auto copy = aligned_alloc_shared(size);
  if (!copy) return ResourceExhausted("out of memory loading engine '" + name + "' (" + std::to_string(size) + " bytes)");
  if (size) std::memcpy(copy.get(), data, size);
  auto engine = std::shared_ptr<Engine>(new Engine());
  KILN_RETURN_IF_ERROR(load_engine_image(std::shared_ptr<const void>(copy), size, name, plugin_search_dirs(options, {}), *engine));
  KILN_RETURN_IF_ERROR(settle_image(copy.get(), size, name, options));
  engine->image_ = std::move(copy);
  return engine;
}

std::vector<std::string> Engine::entries() const {
  std::vector<std::string> out;
  for (const auto& p : profiles_)
    if (std::find(out.begin(), out.end(), p.entry) == out.end()) out.push_back(p.entry);
  return out;
}

int Engine::find_profile(const std::string& name) const {
  for (size_t i = 0; i < profiles_.size(); ++i)
    if (profiles_[i].name == name) return static_cast<int>(i);
  return -1;
}

StatusOr<std::unique_ptr<ExecutionContext>> Engine::create_context(const std::string& profile, bool prepare) const {
  const int p = find_profile(profile);
  if (p < 0) {
    std::string known;
    for (const auto& pi : profiles_) known += (known.empty() ? "" : ", ") + pi.name;
    return NotFound("engine has no profile '" + profile + "' (profiles: " + known + ")");
  }
  KILN_ASSIGN_OR_RETURN(auto ctx, ExecutionContext::create(plans_[p]));
  if (prepare) KILN_RETURN_IF_ERROR(ctx->prepare_for_profile().with_context("preparing profile '" + profile + "'"));
  return ctx;
}

}  // namespace kiln
