// StreamingSession on a small model with the ControlTransformer's state structure: a cache stacked
// over two "layers" ([2, S, 2], grown along axis 1 by Concat and re-stacked by Unsqueeze + Concat)
// and a [1, S, 2] embedding state. Every step is compared with a plain context fed contiguous
// copies of the same state (the reference semantics), through cold start, growth and sliding.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "builder/build_config.h"
#include "builder/engine_build_job.h"
#include "onnx_model_builder.h"
#include "runtime/streaming_session.h"

// Counted by the operator new that tests/unit/runtime/execution_context_test.cpp replaces.
extern std::atomic<bool> g_counting;
extern std::atomic<long> g_allocations;

namespace kiln {
namespace {

namespace fs = std::filesystem;

// x [T, 4] -> new = Reshape(x, [-1, 2]) ([2T, 2]: 2 rows per timestep)
// k0 = Concat(cache[0], new), k1 = Concat(cache[1], 3 * new); kv = stack(k0, k1)
// pout = Concat(pin, new[None]); y = sum_rows(k0 + k1); z = sum(pout) (+ sum(cache) if whole_reader)
std::string stacked_cache_model(bool whole_reader) {
  testing::OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {std::string("T"), int64_t{4}})
      .input("cache", DType::kFloat32, {int64_t{2}, std::string("S"), int64_t{2}})
      .input("pin", DType::kFloat32, {int64_t{1}, std::string("S"), int64_t{2}})
      .output("kv").output("pout").output("y").output("z");
  b.initializer("shape", {-1, 2}, {2}).initializer("i0", {0}, {}).initializer("i1", {1}, {}).initializer("ax0", {0}, {1});
  b.initializer_f("three", {3.0f}, {});
  b.node("Reshape", {"x", "shape"}, {"new"});
  b.node("Gather", {"cache", "i0"}, {"c0"});
  b.node("Gather", {"cache", "i1"}, {"c1"});
  b.node("Mul", {"new", "three"}, {"new3"});
  testing::OnnxModelBuilder::int_attr(b.node("Concat", {"c0", "new"}, {"k0"}), "axis", 0);
  testing::OnnxModelBuilder::int_attr(b.node("Concat", {"c1", "new3"}, {"k1"}), "axis", 0);
  b.node("Unsqueeze", {"k0", "ax0"}, {"u0"});
  b.node("Unsqueeze", {"k1", "ax0"}, {"u1"});
  testing::OnnxModelBuilder::int_attr(b.node("Concat", {"u0", "u1"}, {"kv"}), "axis", 0);
  b.node("Unsqueeze", {"new", "ax0"}, {"new1"});
  testing::OnnxModelBuilder::int_attr(b.node("Concat", {"pin", "new1"}, {"pout"}), "axis", 1);
  b.node("Add", {"k0", "k1"}, {"ksum"});
  testing::OnnxModelBuilder::int_attr(b.node("ReduceSum", {"ksum", "ax0"}, {"y"}), "keepdims", 0);
  if (whole_reader) {
    testing::OnnxModelBuilder::int_attr(b.node("ReduceSum", {"pout"}, {"zp"}), "keepdims", 0);
    testing::OnnxModelBuilder::int_attr(b.node("ReduceSum", {"cache"}, {"zc"}), "keepdims", 0);
    b.node("Add", {"zp", "zc"}, {"z"});
  } else {
    testing::OnnxModelBuilder::int_attr(b.node("ReduceSum", {"pout"}, {"z"}), "keepdims", 0);
  }
  return b.proto().SerializeAsString();
}

class Streaming : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_streaming_" + std::to_string(::getpid()) + "_" + std::to_string(GetParam()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "model.onnx", std::ios::binary) << stacked_cache_model(GetParam());
    const std::string yaml =
        "model: model.onnx\n"
        "output: model.engine\n"
        "profiles:\n"
        "  cold: {dims: {T: {min: 1, opt: 3, max: 3}, S: 0}}\n"
        "  step: {dims: {T: 1, S: {min: 2, opt: 4, max: 4}}}\n"
        "streaming:\n"
        "  cold_start: cold\n"
        "  step: step\n"
        "  state:\n"
        "    - {output: kv, input: cache, axis: 1}\n"
        "    - {output: pout, input: pin, axis: 1}\n"
        "  window: {tokens_per_step: 2, max_steps: 2}\n";
    auto cfg = parse_build_config(yaml, (dir_ / "build.yaml").string());
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    auto built = build_engine(*cfg, [](const std::string&) {});
    ASSERT_TRUE(built.ok()) << built.status().message();
    auto engine = Engine::load_file((dir_ / "model.engine").string());
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    engine_ = *engine;
  }
  void TearDown() override { fs::remove_all(dir_); }

  StreamingSpec spec() const {
    StreamingSpec s;
    s.cold_start = "cold";
    s.step = "step";
    s.state = {{"kv", "cache", 1}, {"pout", "pin", 1}};
    s.tokens_per_step = 2;
    s.max_steps = 2;
    return s;
  }

  fs::path dir_;
  std::shared_ptr<Engine> engine_;
};

Tensor timestep_input(int64_t t, int seed) {
  Tensor x = Tensor::zeros(DType::kFloat32, Shape{t, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.as<float>()[i] = 0.25f * static_cast<float>((seed * 7 + i * 3) % 11) - 1.0f;
  return x;
}

// Rows [from, rows) of a [slabs, rows, w] tensor, contiguous.
Tensor keep_rows(const TensorView& t, int64_t from) {
  const int64_t slabs = t.shape[0], rows = t.shape[1], w = t.shape[2];
  Tensor out = Tensor::zeros(t.dtype, Shape{slabs, rows - from, w});
  for (int64_t k = 0; k < slabs; ++k)
    for (int64_t r = from; r < rows; ++r)
      for (int64_t c = 0; c < w; ++c) out.as<float>()[(k * (rows - from) + r - from) * w + c] = t.as<float>()[(k * rows + r) * w + c];
  return out;
}

void expect_equal(const TensorView& a, const TensorView& b, const std::string& what) {
  ASSERT_EQ(a.shape, b.shape) << what;
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_NEAR(a.as<float>()[i], b.as<float>()[i], 1e-5f) << what << " element " << i;
}

TEST_P(Streaming, MatchesContiguousStateThroughColdStartGrowthAndSliding) {
  auto session = StreamingSession::create(engine_, spec());
  ASSERT_TRUE(session.ok()) << session.status().message();
  auto ref_cold = engine_->create_context("cold");
  auto ref_step = engine_->create_context("step");
  ASSERT_TRUE(ref_cold.ok() && ref_step.ok());
  Tensor ref_kv = Tensor::zeros(DType::kFloat32, Shape{2, 0, 2}), ref_p = Tensor::zeros(DType::kFloat32, Shape{1, 0, 2});
  uint64_t copied = 0, appended = 0;
  int in_place_steps = 0;
  // Cold start with 1 timestep (the window grows to 2 steps first), then steps that slide it; the
  // last few steps run past a compaction of the state buffers.
  // 300 steps: the ring (512 rows per slab here) wraps around several times.
  for (int k = 0; k < 300; ++k) {
    const int64_t t = 1;
    Tensor x = timestep_input(t, k);
    std::vector<std::pair<std::string, TensorView>> in = {{"x", x.view()}};
    Status st = (*session)->step(in);
    ASSERT_TRUE(st.ok()) << "step " << k << ": " << st.message();

    ExecutionContext& ref = k == 0 ? **ref_cold : **ref_step;
    if (ref_kv.shape()[1] > 4) {
      ref_kv = keep_rows(ref_kv.view(), ref_kv.shape()[1] - 4);
      ref_p = keep_rows(ref_p.view(), ref_p.shape()[1] - 4);
    }
    ASSERT_EQ((*session)->last_stats().cached_rows, ref_kv.shape()[1]) << k;
    ASSERT_TRUE(ref.set_input("x", x.view()).ok());
    ASSERT_TRUE(ref.set_input("cache", ref_kv.view()).ok());
    ASSERT_TRUE(ref.set_input("pin", ref_p.view()).ok());
    ASSERT_TRUE(ref.run().ok());
    for (const char* name : {"y", "z"}) {
      auto got = (*session)->output(name);
      ASSERT_TRUE(got.ok()) << got.status().message();
      size_t o = 0;
      while (ref.output_name(o) != name) ++o;
      expect_equal(*got, ref.output(o), std::string(name) + " at step " + std::to_string(k));
    }
    ref_kv = Tensor::copy_of(ref.output(0));
    ref_p = Tensor::copy_of(ref.output(1));
    auto kv = (*session)->state("kv");
    auto p = (*session)->state("pout");
    ASSERT_TRUE(kv.ok() && p.ok());
    expect_equal(kv->view(), ref_kv.view(), "kv at step " + std::to_string(k));
    expect_equal(p->view(), ref_p.view(), "pout at step " + std::to_string(k));

    const StreamingStepStats& s = (*session)->last_stats();
    EXPECT_EQ(s.cold_start, k == 0);
    EXPECT_EQ(s.new_rows, 2 * t);
    // Steps 1 and 2 run at cache lengths the contexts were not prepared for (2, then 4 for the
    // first time), so their state is copied; from step 3 the shapes repeat.
    if (k >= 3) {
      copied += s.state_bytes_copied;
      appended += s.state_bytes_appended;
      in_place_steps += s.in_place ? 1 : 0;
    }
  }
  EXPECT_FALSE((*session)->output("kv").ok());  // state is read with state()
  if (!GetParam()) {
    // A steady-state step, compaction included, allocates nothing and takes no page fault: its
    // arena, state and workspaces were faulted in when they were allocated (zero-filled), the
    // weights at load (getrusage counts every thread of the process, the pool's included).
    Tensor x = timestep_input(1, 99);
    std::vector<std::pair<std::string, TensorView>> in = {{"x", x.view()}};
    for (int k = 0; k < 8; ++k) {
      g_allocations = 0;
      rusage before{}, after{};
      ::getrusage(RUSAGE_SELF, &before);
      g_counting = true;
      Status st = (*session)->step(in);
      g_counting = false;
      ::getrusage(RUSAGE_SELF, &after);
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_EQ(g_allocations.load(), 0) << "operator new called in steady-state streaming step " << k;
#ifndef KILN_SANITIZED  // the sanitizers' shadow memory is faulted in lazily
      EXPECT_EQ(after.ru_minflt - before.ru_minflt + after.ru_majflt - before.ru_majflt, 0) << "page faults in steady-state streaming step " << k;
#endif
    }
  }
  if (!GetParam()) {
    // In place: the only copies are the compactions, one window per max_steps steps, which
    // averages to one step's new rows per step.
    EXPECT_EQ(in_place_steps, 297);
    EXPECT_LE(copied, 2 * appended);
    // With double-mapped ring slabs (Linux memfd, which this project targets), sliding never moves a row.
    EXPECT_TRUE((*session)->ring_buffers());
    EXPECT_EQ(copied, 0u);
  } else {
    // The model reads the whole cache: the session falls back to contiguous copies and says so.
    EXPECT_EQ(in_place_steps, 0);
    EXPECT_GT(copied, appended);
  }
}

TEST_P(Streaming, TheEngineRecordsTheConfigsStreamingSpec) {
  ASSERT_TRUE(engine_->info().has_streaming);
  const StreamingSpec& got = engine_->info().streaming;
  const StreamingSpec want = spec();
  EXPECT_EQ(got.cold_start, want.cold_start);
  EXPECT_EQ(got.step, want.step);
  ASSERT_EQ(got.state.size(), 2u);
  EXPECT_EQ(got.state[1].output, "pout");
  EXPECT_EQ(got.state[1].input, "pin");
  EXPECT_EQ(got.state[1].axis, 1);
  EXPECT_EQ(got.tokens_per_step, 2);
  EXPECT_EQ(got.max_steps, 2);
  EXPECT_TRUE(got.mask_input.empty());
  auto session = StreamingSession::create(engine_);
  ASSERT_TRUE(session.ok()) << session.status().message();
  Tensor x = timestep_input(2, 1);
  std::vector<std::pair<std::string, TensorView>> in = {{"x", x.view()}};
  ASSERT_TRUE((*session)->step(in).ok());
  EXPECT_EQ((*session)->cached_rows(), 4);
}

TEST_P(Streaming, RejectsStateAndMaskInputsAndBadSpecs) {
  auto session = StreamingSession::create(engine_, spec());
  ASSERT_TRUE(session.ok()) << session.status().message();
  Tensor x = timestep_input(1, 0);
  Tensor cache = Tensor::zeros(DType::kFloat32, Shape{2, 0, 2});
  std::vector<std::pair<std::string, TensorView>> in = {{"x", x.view()}, {"cache", cache.view()}};
  Status st = (*session)->step(in);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'cache' is state"), std::string::npos) << st.message();

  StreamingSpec bad = spec();
  bad.step = "nope";
  auto s2 = StreamingSession::create(engine_, bad);
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.status().message().find("no profile 'nope'"), std::string::npos) << s2.status().message();
  bad = spec();
  bad.max_steps = 3;  // 6 rows, but the step profile accepts at most 4
  s2 = StreamingSession::create(engine_, bad);
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.status().message().find("at most 4"), std::string::npos) << s2.status().message();
  bad = spec();
  bad.state[0].axis = 3;
  s2 = StreamingSession::create(engine_, bad);
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.status().message().find("axis 3 is out of range"), std::string::npos) << s2.status().message();
}

INSTANTIATE_TEST_SUITE_P(InPlaceAndFallback, Streaming, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? std::string("WholeCacheReader") : std::string("SlabReaders"); });

}  // namespace
}  // namespace kiln
