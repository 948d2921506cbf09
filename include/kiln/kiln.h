/* kiln's C API (C11): load an engine, inspect its profiles, run them, queue requests, route the
 * log. For programs in C and for other languages' bindings; the names below are stable.
 *
 *   kiln_engine *engine;
 *   if (kiln_engine_load("model.engine", &engine) != KILN_OK) { fprintf(stderr, "%s\n", kiln_last_error()); ... }
 *   kiln_context *ctx;
 *   kiln_context_create(engine, "incremental", &ctx);
 *   kiln_context_set_input(ctx, "x", KILN_FLOAT32, shape, 3, data);   // data read until kiln_context_run returns
 *   kiln_context_run(ctx);
 *   kiln_context_get_output(ctx, "y", &dtype, &shape, &rank, &data);   // valid until the next run
 *
 * Conventions: functions that can fail return KILN_OK (0) or a kiln_status error code, and the
 * calling thread's kiln_last_error() then holds a one-line message (until its next failing call).
 * No C++ exception ever leaves these functions. Handles are opaque; free them with their _free
 * function (NULL is accepted). An engine may be shared by threads; a context, a session or a result
 * belongs to one thread at a time. kiln_dtype values are ONNX's TensorProto.DataType codes. */
#ifndef KILN_KILN_H_
#define KILN_KILN_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define KILN_C_API __attribute__((visibility("default")))
#else
#define KILN_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1,
  KILN_ERROR_NOT_FOUND = 2,
  KILN_ERROR_UNIMPLEMENTED = 3,
  KILN_ERROR_OUT_OF_RANGE = 4,
  KILN_ERROR_DATA_LOSS = 5, /* a corrupted or truncated engine file */
  KILN_ERROR_INTERNAL = 6,
  KILN_ERROR_IO = 7,
  KILN_ERROR_FAILED_PRECONDITION = 8,
  KILN_ERROR_RESOURCE_EXHAUSTED = 9, /* out of memory, or a full queue that does not block */
  KILN_ERROR_DEADLINE_EXCEEDED = 10, /* a queued request whose deadline passed before it started */
  KILN_ERROR_CANCELLED = 11          /* a queued request dropped by kiln_queue_shutdown(q, 1) */
} kiln_status;

typedef enum kiln_dtype {
  KILN_UNDEFINED = 0,
  KILN_FLOAT32 = 1,
  KILN_UINT8 = 2,
  KILN_INT8 = 3,
  KILN_UINT16 = 4,
  KILN_INT16 = 5,
  KILN_INT32 = 6,
  KILN_INT64 = 7,
  KILN_BOOL = 9,
  KILN_FLOAT16 = 10,
  KILN_FLOAT64 = 11,
  KILN_UINT32 = 12,
  KILN_UINT64 = 13,
  KILN_BFLOAT16 = 16
} kiln_dtype;

typedef enum kiln_shape_kind { KILN_SHAPE_MIN = 0, KILN_SHAPE_OPT = 1, KILN_SHAPE_MAX = 2 } kiln_shape_kind;

typedef enum kiln_log_level {
  KILN_LOG_TRACE = 0,
  KILN_LOG_DEBUG = 1,
  KILN_LOG_INFO = 2,
  KILN_LOG_WARN = 3,
  KILN_LOG_ERROR = 4,
  KILN_LOG_OFF = 6
} kiln_log_level;

typedef struct kiln_engine kiln_engine;
typedef struct kiln_context kiln_context;
typedef struct kiln_queue kiln_queue;
typedef struct kiln_result kiln_result;

/* "0.1.0" */
KILN_C_API const char *kiln_version(void);
/* The calling thread's last error message ("" if none). Valid until its next failing call. */
KILN_C_API const char *kiln_last_error(void);
/* Bytes of one element of `dtype` (0 for KILN_UNDEFINED and unknown codes). */
KILN_C_API size_t kiln_dtype_size(kiln_dtype dtype);

/* --- Logging ------------------------------------------------------------------------------ */
/* Messages at or above the level go to stderr, or to `callback` once one is set (NULL: back to
 * stderr). The callback may be called from any thread kiln runs on, several at once. */
typedef void (*kiln_log_callback)(void *user_data, kiln_log_level level, const char *message);
KILN_C_API void kiln_set_log_callback(kiln_log_callback callback, void *user_data);
KILN_C_API void kiln_set_log_level(kiln_log_level level);

/* --- Engines ------------------------------------------------------------------------------ */
KILN_C_API int kiln_engine_load(const char *path, kiln_engine **out);
/* Copies the image; `name` appears in errors and may be NULL. */
KILN_C_API int kiln_engine_load_memory(const void *data, size_t size, const char *name, kiln_engine **out);
/* Like kiln_engine_load, with folders (':'-separated, may be NULL) searched for the engine's
 * plugin libraries before KILN_PLUGIN_PATH and the engine's own folder. */
KILN_C_API int kiln_engine_load_with_plugin_path(const char *path, const char *plugin_path, kiln_engine **out);
KILN_C_API void kiln_engine_free(kiln_engine *engine);

/* Profiles and their bindings. On a bad index the counts return -1, names NULL, dtypes
 * KILN_UNDEFINED and kiln_engine_input_shape an error code. Strings and arrays live as long as the
 * engine. */
KILN_C_API int kiln_engine_profile_count(const kiln_engine *engine);
KILN_C_API const char *kiln_engine_profile_name(const kiln_engine *engine, int index);
KILN_C_API int kiln_engine_find_profile(const kiln_engine *engine, const char *name); /* -1 if absent */
KILN_C_API int kiln_engine_input_count(const kiln_engine *engine, int profile);
KILN_C_API const char *kiln_engine_input_name(const kiln_engine *engine, int profile, int index);
KILN_C_API kiln_dtype kiln_engine_input_dtype(const kiln_engine *engine, int profile, int index);
KILN_C_API int kiln_engine_input_shape(const kiln_engine *engine, int profile, int index, kiln_shape_kind which,
                                       const int64_t **dims, int *rank);
KILN_C_API int kiln_engine_output_count(const kiln_engine *engine, int profile);
KILN_C_API const char *kiln_engine_output_name(const kiln_engine *engine, int profile, int index);
KILN_C_API kiln_dtype kiln_engine_output_dtype(const kiln_engine *engine, int profile, int index);

/* --- Execution contexts (one per thread) -------------------------------------------------- */
/* The context keeps the engine's data alive: the engine may be freed first. */
KILN_C_API int kiln_context_create(kiln_engine *engine, const char *profile, kiln_context **out);
KILN_C_API void kiln_context_free(kiln_context *context);
/* Zero copy: `data` must stay valid until kiln_context_run returns. */
KILN_C_API int kiln_context_set_input(kiln_context *context, const char *name, kiln_dtype dtype, const int64_t *shape, int rank,
                                      const void *data);
KILN_C_API int kiln_context_run(kiln_context *context);
/* After a run; valid until the context's next run. Any of the out pointers may be NULL. */
KILN_C_API int kiln_context_get_output(kiln_context *context, const char *name, kiln_dtype *dtype, const int64_t **shape, int *rank,
                                       const void **data);

/* --- Asynchronous queue (kiln::InferQueue) -------------------------------------------------- */
typedef struct kiln_queue_options {
  int workers;            /* threads, each with its own context (default 1) */
  int capacity;           /* requests waiting to start (default 64) */
  int fail_when_full;     /* 0: submit blocks while full; 1: it fails with KILN_ERROR_RESOURCE_EXHAUSTED */
  int max_batch;          /* > 1: dynamic batching along dim 0, up to this many rows (default 1) */
  int64_t max_delay_us;   /* how long a batch waits for more requests after its first */
  int threads_per_worker; /* OpenMP threads per worker (0: OpenMP's default) */
} kiln_queue_options;

/* One input of a request. Submitting copies the data. */
typedef struct kiln_tensor {
  const char *name;
  kiln_dtype dtype;
  const int64_t *shape;
  int rank;
  const void *data;
} kiln_tensor;

/* Called once per request on a worker thread (or on the submitting thread when the request fails
 * at once). `status` is KILN_OK with `result` set (free it with kiln_result_free), or an error
 * code with `message` (valid during the call) and `result` NULL. */
typedef void (*kiln_queue_callback)(void *user_data, int status, const char *message, kiln_result *result);

KILN_C_API void kiln_queue_options_init(kiln_queue_options *options);
/* `options` may be NULL (defaults). */
KILN_C_API int kiln_queue_create(kiln_engine *engine, const char *profile, const kiln_queue_options *options, kiln_queue **out);
/* `deadline_us`: microseconds from now after which the request is not started (0: none). Returns
 * KILN_OK once the request is queued or completed through the callback; the callback always runs. */
KILN_C_API int kiln_queue_submit(kiln_queue *queue, const kiln_tensor *inputs, int num_inputs, int64_t deadline_us,
                                 kiln_queue_callback callback, void *user_data);
/* Stops accepting requests and waits for the workers: cancel = 0 runs the queued requests, 1
 * completes them with KILN_ERROR_CANCELLED. Not from a callback. */
KILN_C_API void kiln_queue_shutdown(kiln_queue *queue, int cancel);
/* Drains, then frees. */
KILN_C_API void kiln_queue_free(kiln_queue *queue);

KILN_C_API int kiln_result_output(const kiln_result *result, const char *name, kiln_dtype *dtype, const int64_t **shape, int *rank,
                                  const void **data);
KILN_C_API void kiln_result_free(kiln_result *result);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KILN_H_ */
