// The C API (include/kiln/kiln.h) over the public C++ API. Every entry point catches everything:
// no exception leaves it, and a failure sets the calling thread's last error.
#include "kiln/kiln.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "kiln/engine.h"
#include "kiln/infer_queue.h"
#include "kiln/logging.h"
#include "kiln/version.h"

struct kiln_engine {
  std::shared_ptr<kiln::api::Engine> engine;
};

struct kiln_context {
  std::unique_ptr<kiln::api::ExecutionContext> context;
  std::vector<int64_t> shape;   // the last output's dims as int64_t, for kiln_context_get_output
};

struct kiln_queue {
  std::unique_ptr<kiln::InferQueue> queue;
};

struct kiln_result {
  kiln::TensorMap outputs;
  mutable std::vector<int64_t> shape;   // the last output's dims, for kiln_result_output
};

namespace {

thread_local std::string g_last_error;

int fail(const kiln::Status& st) {
  g_last_error = st.message();
  return static_cast<int>(st.code());
}

int fail(kiln_status code, const std::string& message) {
  g_last_error = message;
  return code;
}

// Runs `body` (returning a kiln_status code), turning any exception into KILN_ERROR_INTERNAL.
template <typename F>
int guarded(const char* fn, F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(KILN_ERROR_RESOURCE_EXHAUSTED, std::string(fn) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(KILN_ERROR_INTERNAL, std::string(fn) + ": internal error: " + e.what());
  } catch (...) {
    return fail(KILN_ERROR_INTERNAL, std::string(fn) + ": internal error");
  }
}

const kiln::ProfileInfo* profile_at(const kiln_engine* e, int profile) {
  if (!e || profile < 0 || profile >= static_cast<int>(e->engine->profiles().size())) return nullptr;
  return &e->engine->profiles()[profile];
}

const kiln::BindingInfo* binding_at(const kiln_engine* e, int profile, int index, bool input) {
  const kiln::ProfileInfo* p = profile_at(e, profile);
  if (!p) return nullptr;
  const auto& list = input ? p->inputs : p->outputs;
  return index >= 0 && index < static_cast<int>(list.size()) ? &list[index] : nullptr;
}

kiln::StatusOr<kiln::Shape> to_shape(const int64_t* dims, int rank, const char* what) {
  if (rank < 0 || !kiln::Shape::fits_rank(static_cast<size_t>(rank)))
    return kiln::InvalidArgument(std::string(what) + ": rank " + std::to_string(rank) + " is outside 0..8");
  if (rank > 0 && !dims) return kiln::InvalidArgument(std::string(what) + ": shape is null");
  kiln::Shape s;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] < 0) return kiln::InvalidArgument(std::string(what) + ": dim " + std::to_string(i) + " is negative (" + std::to_string(dims[i]) + ")");
    s.push_back(dims[i]);
  }
  return s;
}

void describe(const kiln::TensorView& v, std::vector<int64_t>& shape, kiln_dtype* dtype, const int64_t** dims, int* rank,
              const void** data) {
  shape.assign(v.shape.begin(), v.shape.end());
  if (dtype) *dtype = static_cast<kiln_dtype>(v.dtype);
  if (dims) *dims = shape.data();
  if (rank) *rank = v.shape.rank();
  if (data) *data = v.data;
}

// A log sink calling the C callback.
class CallbackLogger final : public kiln::ILogger {
 public:
  CallbackLogger(kiln_log_callback cb, void* user) : cb_(cb), user_(user) {}
  void log(kiln::LogLevel level, const char* message) noexcept override { cb_(user_, static_cast<kiln_log_level>(level), message); }

 private:
  kiln_log_callback cb_;
  void* user_;
};

}  // namespace

extern "C" {

const char* kiln_version(void) { return KILN_VERSION_STRING; }
const char* kiln_last_error(void) { return g_last_error.c_str(); }
size_t kiln_dtype_size(kiln_dtype dtype) { return kiln::dtype_size(static_cast<kiln::DType>(dtype)); }

void kiln_set_log_callback(kiln_log_callback callback, void* user_data) {
  guarded("kiln_set_log_callback", [&] {
    kiln::set_logger(callback ? std::make_shared<CallbackLogger>(callback, user_data) : nullptr);
    return KILN_OK;
  });
}

void kiln_set_log_level(kiln_log_level level) { kiln::set_log_level(static_cast<kiln::LogLevel>(level)); }

int kiln_engine_load_with_plugin_path(const char* path, const char* plugin_path, kiln_engine** out) {
  return guarded("kiln_engine_load", [&] {
    if (!out) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_engine_load: out is null");
    *out = nullptr;
    if (!path) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_engine_load: path is null");
    kiln::LoadOptions options;
    if (plugin_path) {
      std::string dir;
      for (const char* c = plugin_path;; ++c) {
        if (*c == ':' || *c == '\0') {
          if (!dir.empty()) options.plugin_dirs.push_back(dir);
          dir.clear();
          if (!*c) break;
        } else {
          dir += *c;
        }
      }
    }
    auto engine = kiln::api::Engine::load_file(path, options);
    if (!engine.ok()) return fail(engine.status());
    *out = new kiln_engine{std::move(engine).value()};
    return static_cast<int>(KILN_OK);
  });
}

int kiln_engine_load(const char* path, kiln_engine** out) { return kiln_engine_load_with_plugin_path(path, nullptr, out); }

int kiln_engine_load_memory(const void* data, size_t size, const char* name, kiln_engine** out) {
  return guarded("kiln_engine_load_memory", [&] {
    if (!out) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_engine_load_memory: out is null");
    *out = nullptr;
    if (!data && size) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_engine_load_memory: data is null");
    auto engine = kiln::api::Engine::load_memory(data, size, name ? name : "<memory>");
    if (!engine.ok()) return fail(engine.status());
    *out = new kiln_engine{std::move(engine).value()};
    return static_cast<int>(KILN_OK);
  });
}

void kiln_engine_free(kiln_engine* engine) { delete engine; }

int kiln_engine_profile_count(const kiln_engine* engine) { return engine ? static_cast<int>(engine->engine->profiles().size()) : -1; }

const char* kiln_engine_profile_name(const kiln_engine* engine, int index) {
  const kiln::ProfileInfo* p = profile_at(engine, index);
  return p ? p->name.c_str() : nullptr;
}

int kiln_engine_find_profile(const kiln_engine* engine, const char* name) {
  return engine && name ? engine->engine->find_profile(name) : -1;
}

int kiln_engine_input_count(const kiln_engine* engine, int profile) {
  const kiln::ProfileInfo* p = profile_at(engine, profile);
  return p ? static_cast<int>(p->inputs.size()) : -1;
}

const char* kiln_engine_input_name(const kiln_engine* engine, int profile, int index) {
  const kiln::BindingInfo* b = binding_at(engine, profile, index, true);
  return b ? b->name.c_str() : nullptr;
}

kiln_dtype kiln_engine_input_dtype(const kiln_engine* engine, int profile, int index) {
  const kiln::BindingInfo* b = binding_at(engine, profile, index, true);
  return b ? static_cast<kiln_dtype>(b->dtype) : KILN_UNDEFINED;
}

int kiln_engine_input_shape(const kiln_engine* engine, int profile, int index, kiln_shape_kind which, const int64_t** dims, int* rank) {
  const kiln::BindingInfo* b = binding_at(engine, profile, index, true);
  if (!b) return fail(KILN_ERROR_OUT_OF_RANGE, "kiln_engine_input_shape: no input " + std::to_string(index) + " in profile " + std::to_string(profile));
  const kiln::Shape* s = which == KILN_SHAPE_MIN ? &b->min : which == KILN_SHAPE_OPT ? &b->opt : which == KILN_SHAPE_MAX ? &b->max : nullptr;
  if (!s) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_engine_input_shape: `which` must be KILN_SHAPE_MIN, _OPT or _MAX");
  if (dims) *dims = s->data();
  if (rank) *rank = s->rank();
  return KILN_OK;
}

int kiln_engine_output_count(const kiln_engine* engine, int profile) {
  const kiln::ProfileInfo* p = profile_at(engine, profile);
  return p ? static_cast<int>(p->outputs.size()) : -1;
}

const char* kiln_engine_output_name(const kiln_engine* engine, int profile, int index) {
  const kiln::BindingInfo* b = binding_at(engine, profile, index, false);
  return b ? b->name.c_str() : nullptr;
}

kiln_dtype kiln_engine_output_dtype(const kiln_engine* engine, int profile, int index) {
  const kiln::BindingInfo* b = binding_at(engine, profile, index, false);
  return b ? static_cast<kiln_dtype>(b->dtype) : KILN_UNDEFINED;
}

int kiln_context_create(kiln_engine* engine, const char* profile, kiln_context** out) {
  return guarded("kiln_context_create", [&] {
    if (!out) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_context_create: out is null");
    *out = nullptr;
    if (!engine || !profile) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_context_create: engine or profile is null");
    auto ctx = engine->engine->create_context(profile);
    if (!ctx.ok()) return fail(ctx.status());
    *out = new kiln_context{std::move(ctx).value(), {}};
    return static_cast<int>(KILN_OK);
  });
}

void kiln_context_free(kiln_context* context) { delete context; }

int kiln_context_set_input(kiln_context* context, const char* name, kiln_dtype dtype, const int64_t* shape, int rank, const void* data) {
  return guarded("kiln_context_set_input", [&] {
    if (!context || !name) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_context_set_input: context or name is null");
    auto s = to_shape(shape, rank, ("input '" + std::string(name) + "'").c_str());
    if (!s.ok()) return fail(s.status());
    if (!data && s->numel() > 0) return fail(KILN_ERROR_INVALID_ARGUMENT, "input '" + std::string(name) + "': data is null");
    kiln::TensorView view{const_cast<void*>(data), static_cast<kiln::DType>(dtype), *s};
    kiln::Status st = context->context->set_input(name, view);
    return st.ok() ? static_cast<int>(KILN_OK) : fail(st);
  });
}

int kiln_context_run(kiln_context* context) {
  return guarded("kiln_context_run", [&] {
    if (!context) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_context_run: context is null");
    kiln::Status st = context->context->run();
    return st.ok() ? static_cast<int>(KILN_OK) : fail(st);
  });
}

int kiln_context_get_output(kiln_context* context, const char* name, kiln_dtype* dtype, const int64_t** shape, int* rank, const void** data) {
  return guarded("kiln_context_get_output", [&] {
    if (!context || !name) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_context_get_output: context or name is null");
    auto view = context->context->output(name);
    if (!view.ok()) return fail(view.status());
    describe(*view, context->shape, dtype, shape, rank, data);
    return static_cast<int>(KILN_OK);
  });
}

void kiln_queue_options_init(kiln_queue_options* options) {
  if (!options) return;
  const kiln::InferQueueOptions d;
  options->workers = d.workers;
  options->capacity = static_cast<int>(d.capacity);
  options->fail_when_full = d.block_when_full ? 0 : 1;
  options->max_batch = d.max_batch;
  options->max_delay_us = d.max_delay_us;
  options->threads_per_worker = d.threads_per_worker;
}

int kiln_queue_create(kiln_engine* engine, const char* profile, const kiln_queue_options* options, kiln_queue** out) {
  return guarded("kiln_queue_create", [&] {
    if (!out) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_queue_create: out is null");
    *out = nullptr;
    if (!engine || !profile) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_queue_create: engine or profile is null");
    kiln::InferQueueOptions o;
    if (options) {
      if (options->capacity < 1) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_queue_create: capacity must be at least 1");
      o.workers = options->workers;
      o.capacity = static_cast<size_t>(options->capacity);
      o.block_when_full = options->fail_when_full == 0;
      o.max_batch = options->max_batch;
      o.max_delay_us = options->max_delay_us;
      o.threads_per_worker = options->threads_per_worker;
    }
    auto q = kiln::InferQueue::create(engine->engine, profile, o);
    if (!q.ok()) return fail(q.status());
    *out = new kiln_queue{std::move(q).value()};
    return static_cast<int>(KILN_OK);
  });
}

int kiln_queue_submit(kiln_queue* queue, const kiln_tensor* inputs, int num_inputs, int64_t deadline_us, kiln_queue_callback callback,
                      void* user_data) {
  return guarded("kiln_queue_submit", [&] {
    if (!queue || !callback || (num_inputs > 0 && !inputs) || num_inputs < 0)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_queue_submit: queue, callback or inputs is null");
    kiln::TensorMap map;
    for (int i = 0; i < num_inputs; ++i) {
      const kiln_tensor& t = inputs[i];
      if (!t.name) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_queue_submit: input " + std::to_string(i) + " has no name");
      auto s = to_shape(t.shape, t.rank, ("input '" + std::string(t.name) + "'").c_str());
      if (!s.ok()) return fail(s.status());
      const auto dt = static_cast<kiln::DType>(t.dtype);
      if (!kiln::dtype_is_known(dt)) return fail(KILN_ERROR_INVALID_ARGUMENT, "input '" + std::string(t.name) + "': unknown dtype " + std::to_string(t.dtype));
      auto copy = kiln::Tensor::try_zeros(dt, *s, "input '" + std::string(t.name) + "'");
      if (!copy.ok()) return fail(copy.status());
      if (copy->nbytes()) {
        if (!t.data) return fail(KILN_ERROR_INVALID_ARGUMENT, "input '" + std::string(t.name) + "': data is null");
        std::memcpy(copy->data(), t.data, copy->nbytes());
      }
      map[t.name] = std::move(copy).value();
    }
    const auto deadline = deadline_us > 0 ? kiln::InferQueue::Clock::now() + std::chrono::microseconds(deadline_us) : kiln::InferQueue::kNoDeadline;
    queue->queue->submit(std::move(map), [callback, user_data](kiln::InferResult&& r) {
      if (!r.ok()) {
        callback(user_data, static_cast<int>(r.status().code()), r.status().message().c_str(), nullptr);
        return;
      }
      callback(user_data, KILN_OK, "", new kiln_result{std::move(r).value(), {}});
    }, deadline);
    return static_cast<int>(KILN_OK);
  });
}

void kiln_queue_shutdown(kiln_queue* queue, int cancel) {
  if (!queue) return;
  guarded("kiln_queue_shutdown", [&] {
    queue->queue->shutdown(cancel ? kiln::ShutdownMode::kCancel : kiln::ShutdownMode::kDrain);
    return KILN_OK;
  });
}

void kiln_queue_free(kiln_queue* queue) {
  guarded("kiln_queue_free", [&] {
    delete queue;
    return KILN_OK;
  });
}

int kiln_result_output(const kiln_result* result, const char* name, kiln_dtype* dtype, const int64_t** shape, int* rank, const void** data) {
  return guarded("kiln_result_output", [&] {
    if (!result || !name) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_result_output: result or name is null");
    auto it = result->outputs.find(name);
    if (it == result->outputs.end()) return fail(KILN_ERROR_NOT_FOUND, "the result has no output named '" + std::string(name) + "'");
    describe(it->second.view(), result->shape, dtype, shape, rank, data);
    return static_cast<int>(KILN_OK);
  });
}

void kiln_result_free(kiln_result* result) { delete result; }

}  // extern "C"
