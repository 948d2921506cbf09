// kiln::Session over multi-entry engines (docs/multi_entry.md):
//  - seed 003's stateful example, exported from PyTorch (models/stateful_cache.py): set_cache writes
//    data into cache[:b, :s] of a shared buffer, get_cache reads it back; read/write/reset of the
//    state, sessions over one engine with separate state, in-place writes, no steady-state allocation;
//  - entries whose models share a weight store it once;
//  - state bindings that disagree fail the build with one line naming the entry, the tensor, the dim.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "builder/build_config.h"
#include "builder/engine_build_job.h"
#include "onnx_model_builder.h"
#include "runtime/session.h"

// Counted by the operator new that tests/unit/runtime/execution_context_test.cpp replaces.
extern std::atomic<bool> g_counting;
extern std::atomic<long> g_allocations;

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxBatch = 10, kMaxSeq = 20;

fs::path fresh_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("kiln_session_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

StatusOr<BuildResult> build_from_yaml(const fs::path& dir, const std::string& yaml) {
  KILN_ASSIGN_OR_RETURN(BuildConfig cfg, parse_build_config(yaml, (dir / "build.yaml").string()));
  return build_engine(cfg, [](const std::string&) {});
}

class StatefulCache : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fresh_dir("seed003");
    const std::string cmd = "/usr/bin/python3 " + std::string(KILN_SOURCE_DIR) + "/models/stateful_cache.py --out-dir " + dir_.string() +
                            " > " + (dir_ / "export.log").string() + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "PyTorch export failed: see " << (dir_ / "export.log");
    const std::string range = "{batch: {min: 1, opt: 9, max: 10}, seq: {min: 1, opt: 19, max: 20}}";
    auto built = build_from_yaml(dir_,
                                 "output: stateful.engine\n"
                                 "entries:\n"
                                 "  set_cache: {model: set_cache.onnx, profiles: {default: {dims: " + range + "}}}\n"
                                 "  get_cache: {model: get_cache.onnx, profiles: {default: {dims: " + range + "}}}\n"
                                 "state:\n"
                                 "  cache:\n"
                                 "    - {entry: set_cache, input: cache, output: cache_out}\n"
                                 "    - {entry: get_cache, input: cache}\n");
    ASSERT_TRUE(built.ok()) << built.status().message();
    auto engine = Engine::load_file((dir_ / "stateful.engine").string());
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    engine_ = *engine;
  }
  static void TearDownTestSuite() {
    engine_.reset();
    fs::remove_all(dir_);
  }

  static Tensor data(int64_t b, int64_t s, float base) {
    Tensor t = Tensor::zeros(DType::kFloat32, Shape{b, s});
    for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = base + static_cast<float>(i);
    return t;
  }
  // get_cache's output for a [b, s] query.
  static Tensor get(Session& s, int64_t b, int64_t sq) {
    Tensor q = Tensor::zeros(DType::kFloat32, Shape{b, sq});
    const NamedView in[] = {{"data", q.view()}};
    auto outs = s.run("get_cache", in);
    EXPECT_TRUE(outs.ok()) << outs.status().message();
    if (!outs.ok()) return {};
    EXPECT_EQ(outs->size(), 1u);
    return Tensor::copy_of((*outs)[0].second);
  }
  static void set(Session& s, const Tensor& d) {
    const NamedView in[] = {{"data", d.view()}};
    auto outs = s.run("set_cache", in);
    ASSERT_TRUE(outs.ok()) << outs.status().message();
  }

  static inline fs::path dir_;
  static inline std::shared_ptr<Engine> engine_;
};

TEST_F(StatefulCache, TheEngineListsEntriesAndTheState) {
  EXPECT_EQ(engine_->entries(), (std::vector<std::string>{"set_cache", "get_cache"}));
  EXPECT_GE(engine_->find_profile("set_cache/default"), 0);
  ASSERT_EQ(engine_->info().state.size(), 1u);
  const StateBufferSpec& st = engine_->info().state[0];
  EXPECT_EQ(st.name, "cache");
  EXPECT_EQ(st.dtype, DType::kFloat32);
  EXPECT_EQ(st.dims, (std::vector<int64_t>{kMaxBatch, kMaxSeq}));
  ASSERT_EQ(st.bindings.size(), 2u);
}

TEST_F(StatefulCache, SetThenGetReturnsTheDataAndLeavesTheRestOfTheBuffer) {
  auto session = Session::create(engine_);
  ASSERT_TRUE(session.ok()) << session.status().message();
  Session& s = **session;
  const Tensor d = data(9, 19, 1.0f);
  set(s, d);
  EXPECT_EQ(s.last_stats().state_bytes_copied, 0u);
  // set_cache's ScatterND updates the buffer in place: only the data's 9 x 19 floats are written.
  EXPECT_EQ(s.last_stats().state_bytes_written, uint64_t{9 * 19 * 4});
  Tensor got = get(s, 9, 19);
  ASSERT_EQ(got.shape(), d.shape());
  for (int64_t i = 0; i < d.numel(); ++i) ASSERT_EQ(got.as<float>()[i], d.as<float>()[i]) << "element " << i;
  // The whole buffer: the written block, zeros elsewhere (it started at zero).
  auto whole = s.read_state("cache");
  ASSERT_TRUE(whole.ok());
  for (int64_t r = 0; r < kMaxBatch; ++r)
    for (int64_t c = 0; c < kMaxSeq; ++c) {
      const float want = r < 9 && c < 19 ? d.as<float>()[r * 19 + c] : 0.0f;
      ASSERT_EQ(whole->as<float>()[r * kMaxSeq + c], want) << r << "," << c;
    }
  // A smaller write over it keeps what it does not cover.
  set(s, data(2, 3, 100.0f));
  Tensor corner = get(s, 3, 4);
  EXPECT_EQ(corner.as<float>()[0], 100.0f);
  EXPECT_EQ(corner.as<float>()[1 * 4 + 2], 105.0f);
  EXPECT_EQ(corner.as<float>()[1 * 4 + 3], d.as<float>()[1 * 19 + 3]);
  EXPECT_EQ(corner.as<float>()[2 * 4 + 0], d.as<float>()[2 * 19 + 0]);
}

TEST_F(StatefulCache, DoubleBufferedAndInPlaceUpdatesAgree) {
  auto in_place = Session::create(engine_);
  auto double_buffered = Session::create(engine_, /*prepare=*/true, /*update_in_place=*/false);
  ASSERT_TRUE(in_place.ok() && double_buffered.ok());
  for (int k = 0; k < 3; ++k) {
    const Tensor d = data(3 + 3 * k, 4 + 5 * k, 10.0f * static_cast<float>(k));
    set(**in_place, d);
    set(**double_buffered, d);
  }
  EXPECT_EQ((*double_buffered)->last_stats().state_bytes_written, uint64_t{kMaxBatch * kMaxSeq * 4});
  auto a = (*in_place)->read_state("cache");
  auto b = (*double_buffered)->read_state("cache");
  ASSERT_TRUE(a.ok() && b.ok());
  for (int64_t i = 0; i < a->numel(); ++i) ASSERT_EQ(a->as<float>()[i], b->as<float>()[i]) << "element " << i;
}

TEST_F(StatefulCache, ResetWriteStateAndSeparateSessions) {
  auto a = Session::create(engine_);
  auto b = Session::create(engine_);
  ASSERT_TRUE(a.ok() && b.ok());
  set(**a, data(4, 5, 7.0f));
  // b shares a's engine (and its weights) but not its state.
  Tensor from_b = get(**b, 4, 5);
  for (int64_t i = 0; i < from_b.numel(); ++i) ASSERT_EQ(from_b.as<float>()[i], 0.0f);
  EXPECT_EQ((*a)->engine().get(), (*b)->engine().get());
  EXPECT_EQ(get(**a, 4, 5).as<float>()[19], 26.0f);
  (*a)->reset();
  EXPECT_EQ(get(**a, 4, 5).as<float>()[19], 0.0f);
  Tensor full = data(kMaxBatch, kMaxSeq, -3.0f);
  ASSERT_TRUE((*a)->write_state("cache", full.view()).ok());
  EXPECT_EQ(get(**a, 10, 20).as<float>()[199], 196.0f);
  Tensor wrong = Tensor::zeros(DType::kFloat32, Shape{kMaxBatch, kMaxSeq + 1});
  Status st = (*a)->write_state("cache", wrong.view());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("[10, 20]"), std::string::npos) << st.message();
}

TEST_F(StatefulCache, BadCallsAreOneLineErrors) {
  auto s = Session::create(engine_);
  ASSERT_TRUE(s.ok());
  Tensor d = data(2, 2, 0.0f);
  Tensor too_big = data(11, 2, 0.0f);
  const NamedView state_in[] = {{"cache", d.view()}, {"data", d.view()}};
  auto r = (*s)->run("set_cache", state_in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("read from state 'cache'"), std::string::npos) << r.status().message();
  const NamedView big[] = {{"data", too_big.view()}};
  r = (*s)->run("set_cache", big);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no profile's ranges hold"), std::string::npos) << r.status().message();
  const NamedView ok_in[] = {{"data", d.view()}};
  r = (*s)->run("decoder", ok_in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("entries: 'set_cache', 'get_cache'"), std::string::npos) << r.status().message();
  r = (*s)->run("set_cache", {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("needs input 'data'"), std::string::npos) << r.status().message();
}

TEST_F(StatefulCache, SteadyStateRunsAllocateNothing) {
  auto s = Session::create(engine_);
  ASSERT_TRUE(s.ok());
  Tensor d = data(9, 19, 1.0f), q = data(9, 19, 0.0f);
  const NamedView set_in[] = {{"data", d.view()}};
  const NamedView get_in[] = {{"data", q.view()}};
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE((*s)->run("set_cache", set_in).ok());
    ASSERT_TRUE((*s)->run("get_cache", get_in).ok());
  }
  g_allocations = 0;
  g_counting = true;
  bool ok = true;
  for (int i = 0; i < 3; ++i) {
    ok = ok && (*s)->run("set_cache", set_in).ok();
    ok = ok && (*s)->run("get_cache", get_in).ok();
  }
  g_counting = false;
  EXPECT_TRUE(ok);
  EXPECT_EQ(g_allocations.load(), 0);
}

// x [2, 3] -> name = x @ W (+ b): W is the same initializer bytes in both models.
std::string linear_model(const std::string& out, int64_t n, bool add_bias) {
  testing::OnnxModelBuilder m;
  m.input("x", DType::kFloat32, {int64_t{2}, int64_t{3}});
  m.input("s_in", DType::kFloat32, {int64_t{2}, n});
  m.output(out);
  std::vector<float> w(3 * n);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f * static_cast<float>(i) - 1.0f;
  m.initializer_f("W", w, {3, n});
  m.node("MatMul", {"x", "W"}, {"xw"});
  if (add_bias) {
    m.initializer_f("bias", std::vector<float>(n, 0.25f), {n});
    m.node("Add", {"xw", "bias"}, {"xb"});
    m.node("Add", {"xb", "s_in"}, {out});
  } else {
    m.node("Add", {"xw", "s_in"}, {out});
  }
  return m.proto().SerializeAsString();
}

TEST(MultiEntryBuild, SharedWeightsAreStoredOnceAndTopLevelModelStaysValid) {
  const fs::path dir = fresh_dir("dedup");
  std::ofstream(dir / "a.onnx", std::ios::binary) << linear_model("y", 4, false);
  std::ofstream(dir / "b.onnx", std::ios::binary) << linear_model("z", 4, true);
  auto two = build_from_yaml(dir,
                             "output: two.engine\n"
                             "entries:\n"
                             "  a: {model: a.onnx, profiles: {p: {}}}\n"
                             "  b: {model: b.onnx, profiles: {p: {}}}\n"
                             "state:\n"
                             "  s:\n"
                             "    - {entry: a, input: s_in, output: y}\n"
                             "    - {entry: b, input: s_in}\n");
  ASSERT_TRUE(two.ok()) << two.status().message();
  auto one = build_from_yaml(dir, "model: b.onnx\noutput: one.engine\nprofiles: {p: {}}\n");
  ASSERT_TRUE(one.ok()) << one.status().message();
  auto e2 = Engine::load_file((dir / "two.engine").string());
  auto e1 = Engine::load_file((dir / "one.engine").string());
  ASSERT_TRUE(e2.ok() && e1.ok());
  // b alone has W and bias; a adds nothing new (W has the same bytes).
  EXPECT_EQ((*e2)->info().weight_count, (*e1)->info().weight_count);
  EXPECT_EQ((*e2)->info().weight_bytes, (*e1)->info().weight_bytes);
  EXPECT_EQ((*e1)->entries(), (std::vector<std::string>{""}));
  EXPECT_TRUE((*e1)->info().state.empty());
  // a accumulates into s in place; b reads it.
  auto s = Session::create(*e2);
  ASSERT_TRUE(s.ok()) << s.status().message();
  Tensor x = Tensor::zeros(DType::kFloat32, Shape{2, 3});
  x.as<float>()[0] = 1.0f;  // x @ W row 0 = W row 0 = {-1, -0.5, 0, 0.5}
  const NamedView in[] = {{"x", x.view()}};
  ASSERT_TRUE((*s)->run("a", in).ok());
  ASSERT_TRUE((*s)->run("a", in).ok());
  auto st = (*s)->read_state("s");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->as<float>()[0], -2.0f);
  EXPECT_EQ(st->as<float>()[3], 1.0f);
  auto outs = (*s)->run("b", in);
  ASSERT_TRUE(outs.ok());
  EXPECT_EQ((*outs)[0].second.as<float>()[0], -1.0f + 0.25f - 2.0f);
  fs::remove_all(dir);
}

TEST(MultiEntryBuild, MismatchedBindingIsAOneLineErrorNamingEntryTensorAndDim) {
  const fs::path dir = fresh_dir("mismatch");
  std::ofstream(dir / "a.onnx", std::ios::binary) << linear_model("y", 4, false);
  std::ofstream(dir / "b.onnx", std::ios::binary) << linear_model("z", 5, false);
  auto r = build_from_yaml(dir,
                           "output: bad.engine\n"
                           "entries:\n"
                           "  a: {model: a.onnx, profiles: {p: {}}}\n"
                           "  b: {model: b.onnx, profiles: {p: {}}}\n"
                           "state:\n"
                           "  s:\n"
                           "    - {entry: a, output: y}\n"
                           "    - {entry: b, input: s_in}\n");
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_NE(m.find("build.yaml:8: state 's': entry 'b' input 's_in' dim 1 is 5, but entry 'a' output 'y' has 4"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(dir / "bad.engine"));
  // An entry the state names but the config lacks, and a tensor the entry lacks.
  r = build_from_yaml(dir, "entries:\n  a: {model: a.onnx, profiles: {p: {}}}\nstate:\n  s: [{entry: c, input: s_in}]\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'state.s[0].entry': expected the name of an entry"), std::string::npos) << r.status().message();
  r = build_from_yaml(dir, "entries:\n  a: {model: a.onnx, profiles: {p: {}}}\nstate:\n  s: [{entry: a, input: nope}]\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("entry 'a' input 'nope': the entry's model has no input named 'nope'"), std::string::npos)
      << r.status().message();
  r = build_from_yaml(dir, "model: a.onnx\nentries:\n  a: {model: a.onnx, profiles: {p: {}}}\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'model' cannot be used with 'entries'"), std::string::npos) << r.status().message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
