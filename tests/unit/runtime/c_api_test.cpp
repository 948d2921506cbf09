// The C API (include/kiln/kiln.h) on the MLP engine of engine_file_fixture.h: inspection, runs
// against the reference, errors as codes with a per-thread one-line message, the queue's callback,
// the log callback.
#include "kiln/kiln.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "engine_file_fixture.h"
#include "kiln/logging.h"

namespace kiln {
namespace {

using namespace engine_file_fixture;

struct EngineHandle {
  kiln_engine* e = nullptr;
  EngineHandle() {
    const std::string& bytes = fixture().bytes;
    EXPECT_EQ(kiln_engine_load_memory(bytes.data(), bytes.size(), "mlp", &e), KILN_OK) << kiln_last_error();
  }
  ~EngineHandle() { kiln_engine_free(e); }
};

TEST(CApi, DescribesProfilesAndBindings) {
  EngineHandle h;
  ASSERT_NE(h.e, nullptr);
  EXPECT_STREQ(kiln_version(), "0.1.0");
  ASSERT_EQ(kiln_engine_profile_count(h.e), 2);
  EXPECT_STREQ(kiln_engine_profile_name(h.e, 0), "fixed");
  EXPECT_STREQ(kiln_engine_profile_name(h.e, 1), "ranged");
  EXPECT_EQ(kiln_engine_find_profile(h.e, "ranged"), 1);
  EXPECT_EQ(kiln_engine_find_profile(h.e, "nope"), -1);
  ASSERT_EQ(kiln_engine_input_count(h.e, 1), 1);
  EXPECT_STREQ(kiln_engine_input_name(h.e, 1, 0), "x");
  EXPECT_EQ(kiln_engine_input_dtype(h.e, 1, 0), KILN_FLOAT32);
  const int64_t* dims = nullptr;
  int rank = 0;
  const int64_t want[3][2] = {{1, kIn}, {4, kIn}, {16, kIn}};
  for (kiln_shape_kind k : {KILN_SHAPE_MIN, KILN_SHAPE_OPT, KILN_SHAPE_MAX}) {
    ASSERT_EQ(kiln_engine_input_shape(h.e, 1, 0, k, &dims, &rank), KILN_OK);
    ASSERT_EQ(rank, 2);
    EXPECT_EQ(dims[0], want[k][0]);
    EXPECT_EQ(dims[1], want[k][1]);
  }
  ASSERT_EQ(kiln_engine_output_count(h.e, 1), 1);
  EXPECT_STREQ(kiln_engine_output_name(h.e, 1, 0), "y");
  EXPECT_EQ(kiln_engine_output_dtype(h.e, 1, 0), KILN_FLOAT32);
  // Bad indices: no crash, documented sentinels.
  EXPECT_EQ(kiln_engine_input_count(h.e, 7), -1);
  EXPECT_EQ(kiln_engine_profile_name(h.e, -1), nullptr);
  EXPECT_EQ(kiln_engine_input_name(h.e, 1, 3), nullptr);
  EXPECT_EQ(kiln_engine_output_dtype(h.e, 1, 3), KILN_UNDEFINED);
  EXPECT_EQ(kiln_engine_input_shape(h.e, 1, 5, KILN_SHAPE_MIN, &dims, &rank), KILN_ERROR_OUT_OF_RANGE);
  EXPECT_EQ(kiln_engine_profile_count(nullptr), -1);
  EXPECT_EQ(kiln_dtype_size(KILN_INT64), 8u);
  EXPECT_EQ(kiln_dtype_size(KILN_BOOL), 1u);
}

TEST(CApi, RunsAProfileAndReadsItsOutput) {
  EngineHandle h;
  kiln_context* ctx = nullptr;
  ASSERT_EQ(kiln_context_create(h.e, "ranged", &ctx), KILN_OK) << kiln_last_error();
  kiln_engine_free(h.e);   // the context keeps what it needs
  h.e = nullptr;
  for (int64_t batch : {3, 1, 16}) {
    Tensor x = input_x(batch, 0.5f);
    const int64_t shape[2] = {batch, kIn};
    ASSERT_EQ(kiln_context_set_input(ctx, "x", KILN_FLOAT32, shape, 2, x.data()), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_context_run(ctx), KILN_OK) << kiln_last_error();
    kiln_dtype dt = KILN_UNDEFINED;
    const int64_t* dims = nullptr;
    int rank = 0;
    const void* data = nullptr;
    ASSERT_EQ(kiln_context_get_output(ctx, "y", &dt, &dims, &rank, &data), KILN_OK) << kiln_last_error();
    EXPECT_EQ(dt, KILN_FLOAT32);
    ASSERT_EQ(rank, 3);
    EXPECT_EQ(dims[0], batch);
    const float* y = static_cast<const float*>(data);
    expect_near_reference(std::vector<float>(y, y + batch * 8 * 12), x);
  }
  kiln_context_free(ctx);
}

TEST(CApi, ErrorsAreCodesWithAOneLineMessagePerThread) {
  EngineHandle h;
  kiln_context* ctx = nullptr;
  EXPECT_EQ(kiln_context_create(h.e, "nope", &ctx), KILN_ERROR_NOT_FOUND);
  EXPECT_EQ(ctx, nullptr);
  const std::string msg = kiln_last_error();
  EXPECT_TRUE(contains(msg, "'nope'") && contains(msg, "fixed") && contains(msg, "ranged")) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  std::string other_thread;
  std::thread([&] { other_thread = kiln_last_error(); }).join();
  EXPECT_EQ(other_thread, "");   // errors are per thread

  ASSERT_EQ(kiln_context_create(h.e, "ranged", &ctx), KILN_OK);
  float data[2 * 5] = {};
  const int64_t bad_shape[2] = {2, 5};
  EXPECT_NE(kiln_context_set_input(ctx, "x", KILN_FLOAT32, bad_shape, 2, data), KILN_OK);
  EXPECT_TRUE(contains(kiln_last_error(), "'x'")) << kiln_last_error();
  const int64_t shape[2] = {2, kIn};
  EXPECT_EQ(kiln_context_set_input(ctx, "x", KILN_INT64, shape, 2, data), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_context_set_input(ctx, "zz", KILN_FLOAT32, shape, 2, data), KILN_ERROR_NOT_FOUND);
  EXPECT_EQ(kiln_context_set_input(ctx, "x", KILN_FLOAT32, shape, 9, data), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_context_get_output(ctx, "nope", nullptr, nullptr, nullptr, nullptr), KILN_ERROR_NOT_FOUND);
  EXPECT_EQ(kiln_context_run(nullptr), KILN_ERROR_INVALID_ARGUMENT);
  kiln_context_free(ctx);

  kiln_engine* e = nullptr;
  EXPECT_EQ(kiln_engine_load("/nonexistent/model.engine", &e), KILN_ERROR_IO);
  EXPECT_TRUE(contains(kiln_last_error(), "/nonexistent/model.engine")) << kiln_last_error();
  const char garbage[200] = "KILNENG";
  EXPECT_EQ(kiln_engine_load_memory(garbage, sizeof garbage, "garbage", &e), KILN_ERROR_DATA_LOSS);
  EXPECT_EQ(e, nullptr);
}

struct Collected {
  std::mutex mu;
  int ok = 0, failed = 0;
  std::vector<std::string> messages;
  std::atomic<int> done{0};
};

void on_result(void* user, int status, const char* message, kiln_result* result) {
  auto* c = static_cast<Collected*>(user);
  std::lock_guard<std::mutex> lock(c->mu);
  if (status == KILN_OK) {
    const void* data = nullptr;
    const int64_t* dims = nullptr;
    int rank = 0;
    if (kiln_result_output(result, "y", nullptr, &dims, &rank, &data) == KILN_OK && rank == 3 && dims[0] == 2 && data) ++c->ok;
    kiln_result_free(result);
  } else {
    ++c->failed;
    c->messages.push_back(message);
  }
  ++c->done;
}

TEST(CApi, QueueCompletesEveryRequestThroughItsCallback) {
  EngineHandle h;
  kiln_queue_options o;
  kiln_queue_options_init(&o);
  EXPECT_EQ(o.workers, 1);
  EXPECT_EQ(o.capacity, 64);
  o.workers = 2;
  kiln_queue* q = nullptr;
  ASSERT_EQ(kiln_queue_create(h.e, "ranged", &o, &q), KILN_OK) << kiln_last_error();
  Collected c;
  Tensor x = input_x(2, 0.1f);
  const int64_t shape[2] = {2, kIn};
  kiln_tensor in{"x", KILN_FLOAT32, shape, 2, x.data()};
  for (int i = 0; i < 40; ++i) ASSERT_EQ(kiln_queue_submit(q, &in, 1, 0, on_result, &c), KILN_OK) << kiln_last_error();
  kiln_tensor bad{"x", KILN_FLOAT32, shape, 1, x.data()};   // rank 1: the run fails, the callback says why
  ASSERT_EQ(kiln_queue_submit(q, &bad, 1, 0, on_result, &c), KILN_OK);
  kiln_queue_shutdown(q, 0);
  EXPECT_EQ(c.done.load(), 41);
  EXPECT_EQ(c.ok, 40);
  ASSERT_EQ(c.failed, 1);
  EXPECT_TRUE(contains(c.messages[0], "'x'")) << c.messages[0];
  EXPECT_EQ(kiln_queue_submit(q, &in, 1, 0, on_result, &c), KILN_OK);   // after shutdown: refused through the callback
  EXPECT_EQ(c.failed, 2);
  kiln_queue_free(q);
}

void on_log(void* user, kiln_log_level level, const char* message) {
  auto* lines = static_cast<std::vector<std::pair<int, std::string>>*>(user);
  lines->emplace_back(level, message);
}

TEST(CApi, LogCallbackReceivesMessagesAtTheLevel) {
  std::vector<std::pair<int, std::string>> lines;
  const LogLevel before = log_level();
  kiln_set_log_callback(on_log, &lines);
  kiln_set_log_level(KILN_LOG_DEBUG);
  { EngineHandle h; }
  kiln_set_log_level(KILN_LOG_WARN);
  { EngineHandle h; }
  kiln_set_log_callback(nullptr, nullptr);
  set_log_level(before);
  ASSERT_EQ(lines.size(), 1u);   // the debug load line, not the one at warn level
  EXPECT_EQ(lines[0].first, KILN_LOG_DEBUG);
  EXPECT_TRUE(contains(lines[0].second, "loaded engine 'mlp'")) << lines[0].second;
}

}  // namespace
}  // namespace kiln
