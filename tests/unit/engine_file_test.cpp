// Engine files: the serialize -> load round trip (profiles, bindings, weights, outputs), weights
// stored once across profiles, determinism, the mmap'd file path, and a corpus of corrupted files
// (truncations, flipped bytes, broken headers, semantically broken metadata) that must each fail
// with a one-line error and never crash.
#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>

#include "builder/engine_writer.h"
#include "builder/profile_builder.h"
#include "onnx_model_builder.h"
#include "runtime/engine.h"
#include "runtime/engine.pb.h"
#include "runtime/engine_format.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

constexpr int64_t kIn = 64, kHidden = 96;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

float weight_value(int64_t i) { return 0.01f * static_cast<float>((i * 37) % 101) - 0.5f; }
float bias_value(int64_t i) { return 0.02f * static_cast<float>(i % 13) - 0.1f; }

// y = Reshape(Relu(x @ w + b), [B, 8, 12]) with the target built by a Shape->Gather->Unsqueeze->
// Concat subgraph: it folds in a profile that fixes B and runs at run time in a ranged one.
Graph mlp_graph() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {std::string("B"), kIn});
  std::vector<float> w(kIn * kHidden), bias(kHidden);
  for (int64_t i = 0; i < kIn * kHidden; ++i) w[static_cast<size_t>(i)] = weight_value(i);
  for (int64_t i = 0; i < kHidden; ++i) bias[static_cast<size_t>(i)] = bias_value(i);
  b.initializer_f("w", w, {kIn, kHidden}).initializer_f("b", bias, {kHidden});
  b.initializer("idx0", {0}, {}).initializer("axes0", {0}, {1}).initializer("eight_twelve", {8, 12}, {2});
  b.node("MatMul", {"x", "w"}, {"xw"}, "fc");
  b.node("Add", {"xw", "b"}, {"h"}, "bias_add");
  b.node("Relu", {"h"}, {"r"}, "relu");
  b.node("Shape", {"r"}, {"r_shape"}, "shape");
  b.node("Gather", {"r_shape", "idx0"}, {"batch"}, "gather_batch");
  b.node("Unsqueeze", {"batch", "axes0"}, {"batch1"}, "unsqueeze_batch");
  OnnxModelBuilder::int_attr(b.node("Concat", {"batch1", "eight_twelve"}, {"target"}, "concat_target"), "axis", 0);
  b.node("Reshape", {"r", "target"}, {"y"}, "reshape_out");
  b.output("y");
  auto g = b.import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::move(g).value();
}

// Bytes of the model's initializers: what "stored once" is measured against.
constexpr uint64_t kInitializerBytes = kIn * kHidden * 4 + kHidden * 4 + 8 + 8 + 16;

std::vector<std::shared_ptr<const Plan>> build_plans() {
  Graph g = mlp_graph();
  ProfileConfig fixed{"fixed", {{"B", DimRange{3, 3, 3}}}, {}, 0};
  ProfileConfig ranged{"ranged", {{"B", DimRange{1, 4, 16}}}, {}, 0};
  std::vector<std::shared_ptr<const Plan>> plans;
  for (const ProfileConfig& pc : {fixed, ranged}) {
    auto rp = resolve_profile(g, pc);
    EXPECT_TRUE(rp.ok()) << rp.status().message();
    if (!rp.ok()) return {};
    EXPECT_TRUE(check_profile_against_graph(g, *rp).ok());
    auto plan = build_profile_plan(g, *rp, {});
    EXPECT_TRUE(plan.ok()) << plan.status().message();
    if (!plan.ok()) return {};
    plans.push_back(*plan);
  }
  return plans;
}

EngineWriteInput write_input(const std::vector<std::shared_ptr<const Plan>>& plans) {
  EngineWriteInput in;
  in.plans = plans;
  in.source_model = "mlp.onnx";
  in.required_cpu_features = (kCpuAvx2 | kCpuFma) & host_cpu_features();
  in.plugin_libraries = {};  // plugin libraries are recorded and reloaded in plugin_engine_test.cpp
  return in;
}

// Built once: every test below reads these.
struct Fixture {
  std::vector<std::shared_ptr<const Plan>> plans;
  std::string bytes;
};
const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture f;
    f.plans = build_plans();
    auto bytes = serialize_engine(write_input(f.plans));
    EXPECT_TRUE(bytes.ok()) << bytes.status().message();
    if (bytes.ok()) f.bytes = *bytes;
    return f;
  }();
  return f;
}

Tensor input_x(int64_t batch, float phase) {
  Tensor t = Tensor::zeros(DType::kFloat32, Shape{batch, kIn});
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = std::sin(0.13f * static_cast<float>(i) + phase);
  return t;
}

std::vector<float> reference(const Tensor& x) {
  const int64_t n = x.shape()[0];
  std::vector<float> out(static_cast<size_t>(n * kHidden));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < kHidden; ++c) {
      float acc = bias_value(c);
      for (int64_t k = 0; k < kIn; ++k) acc += x.as<float>()[r * kIn + k] * weight_value(k * kHidden + c);
      out[static_cast<size_t>(r * kHidden + c)] = std::max(acc, 0.0f);
    }
  return out;
}

StatusOr<std::vector<float>> run_ctx(ExecutionContext& ctx, const Tensor& x) {
  KILN_RETURN_IF_ERROR(ctx.set_input("x", x.view()));
  KILN_RETURN_IF_ERROR(ctx.run());
  const TensorView& y = ctx.output(0);
  if (y.shape != Shape{x.shape()[0], 8, 12}) return Internal("unexpected output shape " + y.shape.str());
  return std::vector<float>(y.as<float>(), y.as<float>() + y.numel());
}

std::vector<float> run_plan(const std::shared_ptr<const Plan>& plan, const Tensor& x) {
  auto ctx = ExecutionContext::create(plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  auto y = run_ctx(**ctx, x);
  EXPECT_TRUE(y.ok()) << y.status().message();
  return y.ok() ? *y : std::vector<float>{};
}

std::vector<float> run_engine(const Engine& e, const std::string& profile, const Tensor& x) {
  auto ctx = e.create_context(profile);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  auto y = run_ctx(**ctx, x);
  EXPECT_TRUE(y.ok()) << y.status().message();
  return y.ok() ? *y : std::vector<float>{};
}

void expect_near_reference(const std::vector<float>& got, const Tensor& x) {
  const std::vector<float> want = reference(x);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f) << i;
}

// ---- round trip ----------------------------------------------------------------------------------

TEST(EngineFile, RoundTripKeepsProfilesBindingsAndInfo) {
  const Fixture& f = fixture();
  ASSERT_EQ(f.plans.size(), 2u);
  auto e = Engine::load_memory(f.bytes.data(), f.bytes.size(), "mlp");
  ASSERT_TRUE(e.ok()) << e.status().message();
  const Engine& engine = **e;
  const EngineInfo& info = engine.info();
  EXPECT_EQ(info.format_version, kEngineFormatVersion);
  EXPECT_EQ(info.producer, kProducerVersion);
  EXPECT_EQ(info.source_model, "mlp.onnx");
  EXPECT_EQ(info.precision, "fp32");
  EXPECT_EQ(info.required_cpu_features, (kCpuAvx2 | kCpuFma) & host_cpu_features());
  EXPECT_EQ(info.file_bytes, f.bytes.size());
  EXPECT_TRUE(info.plugin_libraries.empty());

  ASSERT_EQ(engine.profiles().size(), 2u);
  EXPECT_EQ(engine.find_profile("fixed"), 0);
  EXPECT_EQ(engine.find_profile("ranged"), 1);
  EXPECT_EQ(engine.find_profile("nope"), -1);
  for (size_t p = 0; p < 2; ++p) {
    const Plan& want = *f.plans[p];
    const ProfileInfo& pi = engine.profiles()[p];
    EXPECT_EQ(pi.name, want.profile);
    ASSERT_EQ(pi.inputs.size(), want.inputs.size());
    for (size_t i = 0; i < want.inputs.size(); ++i) {
      const PlanValue& v = want.values[want.inputs[i]];
      EXPECT_EQ(pi.inputs[i].name, v.name);
      EXPECT_EQ(pi.inputs[i].dtype, v.dtype);
      EXPECT_EQ(pi.inputs[i].min, Shape(v.range_min));
      EXPECT_EQ(pi.inputs[i].opt, Shape(v.range_opt));
      EXPECT_EQ(pi.inputs[i].max, Shape(v.range_max));
      EXPECT_EQ(pi.inputs[i].dim_names, v.dim_names);
    }
    ASSERT_EQ(pi.outputs.size(), 1u);
    EXPECT_EQ(pi.outputs[0].name, "y");
    EXPECT_EQ(pi.outputs[0].dtype, DType::kFloat32);

    // The whole plan survives, step by step.
    const Plan& got = *engine.plan(p);
    EXPECT_EQ(got.opset, want.opset);
    ASSERT_EQ(got.values.size(), want.values.size());
    ASSERT_EQ(got.steps.size(), want.steps.size());
    for (size_t s = 0; s < want.steps.size(); ++s) {
      EXPECT_EQ(got.steps[s].name, want.steps[s].name);
      EXPECT_EQ(got.steps[s].op_type, want.steps[s].op_type);
      EXPECT_EQ(got.steps[s].impl, want.steps[s].impl);
      EXPECT_EQ(got.steps[s].inputs, want.steps[s].inputs);
      EXPECT_EQ(got.steps[s].outputs, want.steps[s].outputs);
      EXPECT_EQ(got.steps[s].attrs.size(), want.steps[s].attrs.size());
    }
    EXPECT_EQ(got.inputs, want.inputs);
    EXPECT_EQ(got.outputs, want.outputs);
  }
  const ProfileInfo& ranged = engine.profiles()[1];
  EXPECT_EQ(ranged.inputs[0].name, "x");
  EXPECT_EQ(ranged.inputs[0].dtype, DType::kFloat32);
  EXPECT_EQ(ranged.inputs[0].min, (Shape{1, kIn}));
  EXPECT_EQ(ranged.inputs[0].opt, (Shape{4, kIn}));
  EXPECT_EQ(ranged.inputs[0].max, (Shape{16, kIn}));
  EXPECT_EQ(engine.profiles()[0].inputs[0].min, (Shape{3, kIn}));
  EXPECT_EQ(engine.profiles()[0].inputs[0].max, (Shape{3, kIn}));
}

TEST(EngineFile, RoundTripKeepsWeightBytes) {
  const Fixture& f = fixture();
  auto e = Engine::load_memory(f.bytes.data(), f.bytes.size());
  ASSERT_TRUE(e.ok()) << e.status().message();
  for (size_t p = 0; p < 2; ++p) {
    const Plan& want = *f.plans[p];
    const Plan& got = *(*e)->plan(p);
    int constants = 0;
    for (size_t v = 0; v < want.values.size(); ++v) {
      if (want.values[v].constant < 0) continue;
      ++constants;
      ASSERT_GE(got.values[v].constant, 0) << want.values[v].name;
      const Tensor& a = want.constants[want.values[v].constant];
      const Tensor& b = got.constants[got.values[v].constant];
      EXPECT_EQ(a.dtype(), b.dtype()) << want.values[v].name;
      EXPECT_EQ(a.shape(), b.shape()) << want.values[v].name;
      ASSERT_EQ(a.nbytes(), b.nbytes());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << want.values[v].name;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kWeightAlignment, 0u) << want.values[v].name;
    }
    EXPECT_GE(constants, 2) << "profile " << p;  // at least w and b
  }
}

TEST(EngineFile, RoundTripGivesTheSameOutputsAsTheInMemoryPlans) {
  const Fixture& f = fixture();
  auto e = Engine::load_memory(f.bytes.data(), f.bytes.size());
  ASSERT_TRUE(e.ok()) << e.status().message();
  Tensor x3 = input_x(3, 0.0f);
  const std::vector<float> fixed = run_engine(**e, "fixed", x3);
  EXPECT_EQ(fixed, run_plan(f.plans[0], x3));
  expect_near_reference(fixed, x3);
  for (int64_t batch : {1, 4, 16, 7}) {
    Tensor x = input_x(batch, 0.3f * static_cast<float>(batch));
    const std::vector<float> got = run_engine(**e, "ranged", x);
    EXPECT_EQ(got, run_plan(f.plans[1], x)) << "batch " << batch;
    expect_near_reference(got, x);
  }
  auto missing = (*e)->create_context("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(contains(missing.status().message(), "fixed, ranged")) << missing.status().message();
}

TEST(EngineFile, WeightsAreStoredOnceAcrossProfiles) {
  const Fixture& f = fixture();
  auto e = Engine::load_memory(f.bytes.data(), f.bytes.size());
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_LT((*e)->info().weight_bytes, kInitializerBytes * 11 / 10);
  EXPECT_GE((*e)->info().weight_bytes, uint64_t{kIn * kHidden * 4});
  EXPECT_LT(f.bytes.size(), kInitializerBytes * 3 / 2);  // one copy of the weights plus metadata
  // Both profiles read w from the same place in the image.
  const Plan& a = *(*e)->plan(0);
  const Plan& b = *(*e)->plan(1);
  const int wa = a.find_value("w"), wb = b.find_value("w");
  ASSERT_GE(wa, 0);
  ASSERT_GE(wb, 0);
  ASSERT_GE(a.values[wa].constant, 0);
  ASSERT_GE(b.values[wb].constant, 0);
  EXPECT_EQ(a.constants[a.values[wa].constant].data(), b.constants[b.values[wb].constant].data());
}

TEST(EngineFile, SerializationIsDeterministic) {
  const Fixture& f = fixture();
  auto again = serialize_engine(write_input(f.plans));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*again == f.bytes);
  // Plans built again from scratch (new allocations, new pointers) give the same bytes too.
  auto rebuilt = serialize_engine(write_input(build_plans()));
  ASSERT_TRUE(rebuilt.ok());
  EXPECT_TRUE(*rebuilt == f.bytes);
}

TEST(EngineFile, HeaderFieldsFollowTheDocumentedLayout) {
  const std::string& bytes = fixture().bytes;
  ASSERT_GE(bytes.size(), kEngineHeaderBytes);
  EngineHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  EXPECT_EQ(std::memcmp(h.magic, "KILNENG\0", 8), 0);
  EXPECT_EQ(h.format_version, kEngineFormatVersion);
  EXPECT_EQ(h.header_bytes, kEngineHeaderBytes);
  EXPECT_STREQ(h.producer, kProducerVersion);
  EXPECT_EQ(h.metadata_offset, kEngineHeaderBytes);
  EXPECT_EQ(h.weights_offset % kWeightAlignment, 0u);
  EXPECT_GE(h.weights_offset, h.metadata_offset + h.metadata_size);
  EXPECT_EQ(h.file_size, bytes.size());
  EXPECT_EQ(h.weights_offset + h.weights_size, bytes.size());
  EXPECT_EQ(h.reserved, 0u);
  EXPECT_EQ(h.header_checksum, checksum64(bytes.data(), offsetof(EngineHeader, header_checksum)));
  EXPECT_EQ(h.metadata_checksum, checksum64(bytes.data() + h.metadata_offset, h.metadata_size));
  EXPECT_EQ(h.weights_checksum, checksum64(bytes.data() + h.weights_offset, h.weights_size));
}

// ---- files ---------------------------------------------------------------------------------------

std::string temp_dir() {
  static const std::string dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("kiln_engine_file_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d.string();
  }();
  return dir;
}

struct TempDirCleanup : ::testing::Environment {
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::temp_directory_path() / ("kiln_engine_file_test_" + std::to_string(::getpid())), ec);
  }
};
[[maybe_unused]] ::testing::Environment* const g_cleanup = ::testing::AddGlobalTestEnvironment(new TempDirCleanup);

// True when [p, p + n) lies inside a mapping of `path` in this process.
bool mapped_from_file(const void* p, size_t n, const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  const std::string canonical = std::filesystem::canonical(path).string();
  std::string line;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    if (!line.ends_with(canonical)) continue;
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
    if (addr >= lo && addr + n <= hi) return true;
  }
  return false;
}

TEST(EngineFile, WriteThenLoadFileMapsTheWeights) {
  const Fixture& f = fixture();
  const std::string path = temp_dir() + "/sub/dir/mlp.engine";
  uint64_t written = 0;
  Status st = write_engine_file(path, write_input(f.plans), &written);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(written, f.bytes.size());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  {
    std::ifstream in(path, std::ios::binary);
    std::string on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(on_disk == f.bytes);
  }
  auto e = Engine::load_file(path);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ((*e)->info().file_bytes, f.bytes.size());
  const Plan& plan = *(*e)->plan(1);
  const Tensor& w = plan.constants[plan.values[plan.find_value("w")].constant];
  EXPECT_TRUE(mapped_from_file(w.data(), w.nbytes(), path)) << "the weight is not read from the mmap'd file";

  Tensor x = input_x(5, 1.0f);
  EXPECT_EQ(run_engine(**e, "ranged", x), run_plan(f.plans[1], x));
  Tensor x3 = input_x(3, 2.0f);
  EXPECT_EQ(run_engine(**e, "fixed", x3), run_plan(f.plans[0], x3));

  // The mapping outlives the Engine while a context still uses its weights.
  auto ctx = (*e)->create_context("ranged");
  ASSERT_TRUE(ctx.ok());
  e = Status(StatusCode::kInternal, "engine released");
  auto y = run_ctx(**ctx, x);
  ASSERT_TRUE(y.ok()) << y.status().message();
  expect_near_reference(*y, x);
}

TEST(EngineFile, LoadFileErrors) {
  auto missing = Engine::load_file(temp_dir() + "/does_not_exist.engine");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(contains(missing.status().message(), "does_not_exist.engine")) << missing.status().message();

  auto dir = Engine::load_file(temp_dir());
  ASSERT_FALSE(dir.ok());
  EXPECT_TRUE(contains(dir.status().message(), "not a regular file")) << dir.status().message();

  const std::string empty = temp_dir() + "/empty.engine";
  std::ofstream(empty).close();
  auto e = Engine::load_file(empty);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(contains(e.status().message(), "empty")) << e.status().message();

  const std::string shortf = temp_dir() + "/short.engine";
  {
    std::ofstream out(shortf, std::ios::binary);
    out.write(fixture().bytes.data(), 1000);
  }
  auto s = Engine::load_file(shortf);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.status().message(), shortf)) << s.status().message();
  EXPECT_TRUE(contains(s.status().message(), "truncated")) << s.status().message();
}

// A data-dependent output too big to allocate must be an error from run(), not a crash.
TEST(EngineFile, RunNeedingAnImpossibleAllocationFailsCleanly) {
  OnnxModelBuilder b;
  b.input("shape", DType::kInt64, {int64_t{2}});
  b.node("ConstantOfShape", {"shape"}, {"y"}, "fill");
  b.output("y");
  auto g = b.import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto rp = resolve_profile(*g, ProfileConfig{"only", {}, {}, 0});
  ASSERT_TRUE(rp.ok()) << rp.status().message();
  auto plan = build_profile_plan(*g, *rp, {});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EngineWriteInput in;
  in.plans = {*plan};
  auto bytes = serialize_engine(in);
  ASSERT_TRUE(bytes.ok());
  auto e = Engine::load_memory(bytes->data(), bytes->size());
  ASSERT_TRUE(e.ok()) << e.status().message();
  auto ctx = (*e)->create_context("only");
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  Tensor shape = Tensor::from_vector<int64_t>({int64_t{1} << 30, int64_t{1} << 30}, Shape{2});
  ASSERT_TRUE((*ctx)->set_input("shape", shape.view()).ok());
  Status st = (*ctx)->run();
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "fill")) << st.message();
}

// ---- corrupted files -----------------------------------------------------------------------------

// Loads `bytes`, and if that works, runs every profile at its opt shape (the result may be an error;
// it must not crash).
Status load_and_run(const std::string& bytes) {
  auto e = Engine::load_memory(bytes.data(), bytes.size(), "corrupt");
  if (!e.ok()) return e.status();
  for (const ProfileInfo& pi : (*e)->profiles()) {
    auto ctx = (*e)->create_context(pi.name);
    if (!ctx.ok()) return ctx.status();
    std::vector<Tensor> inputs;
    for (const BindingInfo& b : pi.inputs) {
      if (!dtype_is_known(b.dtype) || b.opt.numel() > (1 << 20) || b.opt.numel() < 0) continue;
      Tensor t = Tensor::zeros(b.dtype, b.opt);
      if (b.dtype == DType::kFloat32)
        for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = std::cos(static_cast<float>(i));
      inputs.push_back(t);
      (void)(*ctx)->set_input(b.name, t.view());
    }
    Status st = (*ctx)->run();
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

// The load must fail with a one-line message naming the engine (and containing `part`).
void expect_load_fails(const std::string& bytes, const std::string& part = "", const std::string& what = "") {
  SCOPED_TRACE(what);
  auto e = Engine::load_memory(bytes.data(), bytes.size(), "corrupt");
  ASSERT_FALSE(e.ok()) << "a corrupted engine loaded: " << what;
  const std::string& m = e.status().message();
  EXPECT_FALSE(m.empty());
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_TRUE(contains(m, "engine 'corrupt'")) << m;
  if (!part.empty()) {
    EXPECT_TRUE(contains(m, part)) << m;
  }
}

EngineHeader header_of(const std::string& bytes) {
  EngineHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  return h;
}

// Writes `h` into `bytes` with a recomputed header checksum, so the checks after it are reached.
void put_header(std::string& bytes, EngineHeader h) {
  std::memcpy(bytes.data(), &h, sizeof h);
  h.header_checksum = checksum64(bytes.data(), offsetof(EngineHeader, header_checksum));
  std::memcpy(bytes.data(), &h, sizeof h);
}

// Rebuilds a file from its parts following runtime/engine_format.h, all checksums correct;
// `tweak` edits the header fields before the header checksum is computed.
std::string assemble(const std::string& meta, const std::string& weights, const std::function<void(EngineHeader&)>& tweak = {}) {
  EngineHeader h{};
  std::memcpy(h.magic, kEngineMagic, 8);
  h.format_version = kEngineFormatVersion;
  h.header_bytes = kEngineHeaderBytes;
  std::strncpy(h.producer, kProducerVersion, sizeof h.producer - 1);
  h.required_cpu_features = 0;
  h.metadata_offset = kEngineHeaderBytes;
  h.metadata_size = meta.size();
  h.weights_offset = (kEngineHeaderBytes + meta.size() + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment;
  h.weights_size = weights.size();
  h.file_size = h.weights_offset + h.weights_size;
  std::string out(h.file_size, '\0');
  std::memcpy(out.data() + h.metadata_offset, meta.data(), meta.size());
  std::memcpy(out.data() + h.weights_offset, weights.data(), weights.size());
  h.metadata_checksum = checksum64(meta.data(), meta.size());
  h.weights_checksum = checksum64(weights.data(), weights.size());
  if (tweak) tweak(h);
  put_header(out, h);
  return out;
}

std::string meta_bytes_of(const std::string& file) {
  const EngineHeader h = header_of(file);
  return file.substr(h.metadata_offset, h.metadata_size);
}
std::string weights_bytes_of(const std::string& file) {
  const EngineHeader h = header_of(file);
  return file.substr(h.weights_offset, h.weights_size);
}

engine::EngineMeta parsed_meta() {
  engine::EngineMeta meta;
  EXPECT_TRUE(meta.ParseFromString(meta_bytes_of(fixture().bytes)));
  return meta;
}

std::string with_meta(const engine::EngineMeta& meta) {
  std::string m;
  EXPECT_TRUE(meta.SerializeToString(&m));
  return assemble(m, weights_bytes_of(fixture().bytes));
}

TEST(EngineCorrupt, AssembleReproducesTheWriterByteForByte) {
  const std::string& bytes = fixture().bytes;
  const EngineHeader h = header_of(bytes);
  EXPECT_TRUE(assemble(meta_bytes_of(bytes), weights_bytes_of(bytes), [&](EngineHeader& x) {
                x.required_cpu_features = h.required_cpu_features;
              }) == bytes);
  EXPECT_TRUE(load_and_run(with_meta(parsed_meta())).ok());
}

TEST(EngineCorrupt, EmptyAndTinyInputs) {
  expect_load_fails(std::string(), "smaller than the 128-byte header", "empty");
  auto null_input = Engine::load_memory(nullptr, 0, "corrupt");
  EXPECT_FALSE(null_input.ok());
  expect_load_fails(std::string(1, 'K'), "", "one byte");
  expect_load_fails(std::string("KILNENG\0", 8), "", "magic only");
  expect_load_fails(std::string(4096, '\0'), "bad magic", "zeros");
  expect_load_fails(std::string(300, 'x'), "bad magic", "text");
}

TEST(EngineCorrupt, TruncationAtAnyOffsetFails) {
  const std::string& bytes = fixture().bytes;
  ASSERT_GT(bytes.size(), 1000u);
  std::vector<size_t> cuts;
  for (size_t n = 0; n < 256; ++n) cuts.push_back(n);
  for (int i = 0; i < 200; ++i) cuts.push_back(256 + (bytes.size() - 257) * static_cast<size_t>(i) / 199);
  cuts.push_back(bytes.size() - 1);
  for (size_t n : cuts) {
    ASSERT_LT(n, bytes.size());
    expect_load_fails(bytes.substr(0, n), "", "truncated to " + std::to_string(n) + " bytes");
  }
}

TEST(EngineCorrupt, PaddedFileFails) {
  expect_load_fails(fixture().bytes + std::string(64, '\0'), "truncated or padded", "64 bytes appended");
}

TEST(EngineCorrupt, OneFlippedByteInAnyCheckedRegionFails) {
  const std::string& bytes = fixture().bytes;
  const EngineHeader h = header_of(bytes);
  std::vector<size_t> positions;
  for (size_t i = 0; i < offsetof(EngineHeader, reserved); ++i) positions.push_back(i);
  for (int i = 0; i < 150; ++i) positions.push_back(h.metadata_offset + h.metadata_size * static_cast<size_t>(i) / 150);
  for (int i = 0; i < 150; ++i) positions.push_back(h.weights_offset + h.weights_size * static_cast<size_t>(i) / 150);
  positions.push_back(h.metadata_offset + h.metadata_size - 1);
  positions.push_back(bytes.size() - 1);
  for (size_t pos : positions) {
    for (unsigned char mask : {0x01, 0x80, 0xff}) {
      std::string bad = bytes;
      bad[pos] = static_cast<char>(bad[pos] ^ mask);
      expect_load_fails(bad, "", "byte " + std::to_string(pos) + " ^ " + std::to_string(mask));
    }
  }
}

// Bytes no checksum covers (the reserved header field and the padding before the weights) may load;
// what matters is that nothing crashes.
TEST(EngineCorrupt, FlippedUncheckedBytesNeverCrash) {
  const std::string& bytes = fixture().bytes;
  const EngineHeader h = header_of(bytes);
  std::vector<size_t> positions;
  for (size_t i = offsetof(EngineHeader, reserved); i < kEngineHeaderBytes; ++i) positions.push_back(i);
  for (size_t i = h.metadata_offset + h.metadata_size; i < h.weights_offset; ++i) positions.push_back(i);
  for (size_t pos : positions) {
    std::string bad = bytes;
    bad[pos] = static_cast<char>(bad[pos] ^ 0xff);
    Status st = load_and_run(bad);
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  }
}

TEST(EngineCorrupt, WrongMagic) {
  std::string bad = fixture().bytes;
  std::memcpy(bad.data(), "ONNXENG\0", 8);
  expect_load_fails(bad, "bad magic");
}

TEST(EngineCorrupt, FutureFormatVersionSaysNewer) {
  std::string bad = fixture().bytes;
  EngineHeader h = header_of(bad);
  h.format_version = kEngineFormatVersion + 1;
  put_header(bad, h);
  auto e = Engine::load_memory(bad.data(), bad.size(), "corrupt");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(contains(e.status().message(), "newer")) << e.status().message();
  EXPECT_TRUE(contains(e.status().message(), "version " + std::to_string(kEngineFormatVersion + 1))) << e.status().message();
  EXPECT_EQ(e.status().message().find('\n'), std::string::npos);

  h.format_version = 0;
  put_header(bad, h);
  expect_load_fails(bad, "version 0");
}

TEST(EngineCorrupt, WrongHeaderSize) {
  std::string bad = fixture().bytes;
  EngineHeader h = header_of(bad);
  h.header_bytes = 64;
  put_header(bad, h);
  expect_load_fails(bad, "header size");
}

TEST(EngineCorrupt, MissingCpuFeaturesAreNamed) {
  std::string bad = fixture().bytes;
  EngineHeader h = header_of(bad);
  h.required_cpu_features |= uint64_t{1} << 40;
  put_header(bad, h);
  auto e = Engine::load_memory(bad.data(), bad.size(), "corrupt");
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(contains(e.status().message(), "CPU features")) << e.status().message();
  EXPECT_TRUE(contains(e.status().message(), "unknown feature bits")) << e.status().message();
  EXPECT_EQ(e.status().message().find('\n'), std::string::npos);

  if (!(host_cpu_features() & kCpuAvx512Bf16)) {
    std::string bf16 = fixture().bytes;
    EngineHeader hb = header_of(bf16);
    hb.required_cpu_features |= kCpuAvx512Bf16;
    put_header(bf16, hb);
    auto eb = Engine::load_memory(bf16.data(), bf16.size(), "corrupt");
    ASSERT_FALSE(eb.ok());
    EXPECT_TRUE(contains(eb.status().message(), "CPU features")) << eb.status().message();
    EXPECT_TRUE(contains(eb.status().message(), "avx512_bf16")) << eb.status().message();
  }
}

TEST(EngineCorrupt, SectionBoundsAndAlignment) {
  const std::string& bytes = fixture().bytes;
  const EngineHeader orig = header_of(bytes);
  struct Case {
    const char* what;
    std::function<void(EngineHeader&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {"metadata past the end", [](EngineHeader& h) { h.metadata_size = h.file_size; }, "metadata section is out of bounds"},
      {"metadata inside the header", [](EngineHeader& h) { h.metadata_offset = 64; }, "metadata section is out of bounds"},
      {"metadata offset overflows", [](EngineHeader& h) { h.metadata_offset = std::numeric_limits<uint64_t>::max() - 8; h.metadata_size = 16; }, "out of bounds"},
      {"metadata size overflows", [](EngineHeader& h) { h.metadata_size = std::numeric_limits<uint64_t>::max(); }, "out of bounds"},
      {"weights past the end", [](EngineHeader& h) { h.weights_size += 64; }, "weights section is out of bounds"},
      {"weights offset past the end", [](EngineHeader& h) { h.weights_offset = h.file_size + 64; h.weights_size = 0; }, "weights section is out of bounds"},
      {"weights misaligned", [](EngineHeader& h) { h.weights_offset += 8; h.weights_size -= 8; }, "64-byte aligned"},
      {"file size too small", [](EngineHeader& h) { h.file_size -= 1; }, "truncated or padded"},
      {"metadata checksum", [](EngineHeader& h) { h.metadata_checksum ^= 1; }, "metadata checksum"},
      {"weights checksum", [](EngineHeader& h) { h.weights_checksum ^= 1; }, "weights checksum"},
  };
  for (const Case& c : cases) {
    std::string bad = bytes;
    EngineHeader h = orig;
    c.edit(h);
    put_header(bad, h);
    expect_load_fails(bad, c.message, c.what);
  }
}

TEST(EngineCorrupt, MetadataThatIsNotProtobuf) {
  expect_load_fails(assemble(std::string(32, '\xff'), weights_bytes_of(fixture().bytes)), "not a valid EngineMeta", "0xff bytes");
}

// Valid protobuf, valid checksums, broken meaning: the loader's semantic validation.
TEST(EngineCorrupt, SemanticallyBrokenMetadataFails) {
  const engine::EngineMeta base = parsed_meta();
  ASSERT_GE(base.weights_size(), 2);
  ASSERT_EQ(base.profiles_size(), 2);
  const engine::Profile& ranged = base.profiles(1);
  ASSERT_GE(ranged.steps_size(), 3);
  const uint64_t blob = weights_bytes_of(fixture().bytes).size();
  int big_weight = 0;  // w: the first weight of the size of w
  for (int i = 0; i < base.weights_size(); ++i)
    if (base.weights(i).nbytes() == uint64_t{kIn * kHidden * 4}) big_weight = i;

  struct Case {
    const char* what;
    std::function<void(engine::EngineMeta&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {"step input out of range", [](engine::EngineMeta& m) { m.mutable_profiles(1)->mutable_steps(0)->set_inputs(0, 9999); }, "reads value 9999"},
      {"step input below -1", [](engine::EngineMeta& m) { m.mutable_profiles(1)->mutable_steps(0)->set_inputs(0, -2); }, "reads value -2"},
      {"step output out of range", [](engine::EngineMeta& m) { m.mutable_profiles(0)->mutable_steps(0)->set_outputs(0, 123456); }, "writes value 123456"},
      {"step output absent", [](engine::EngineMeta& m) { m.mutable_profiles(0)->mutable_steps(0)->set_outputs(0, -1); }, "writes value -1"},
      {"profile input out of range", [](engine::EngineMeta& m) { m.mutable_profiles(1)->set_inputs(0, 777); }, "input index 777"},
      {"profile output out of range", [](engine::EngineMeta& m) { m.mutable_profiles(1)->set_outputs(0, -5); }, "output index -5"},
      {"output never produced",
       [](engine::EngineMeta& m) {
         auto* p = m.mutable_profiles(1);
         p->add_values()->set_name("orphan");
         p->mutable_values(p->values_size() - 1)->set_weight(-1);
         p->set_outputs(0, p->values_size() - 1);
       },
       "never produced"},
      {"steps out of order",
       [](engine::EngineMeta& m) {
         auto* steps = m.mutable_profiles(1)->mutable_steps();
         steps->SwapElements(0, steps->size() - 1);
       },
       "reads a value no earlier step produces"},
      {"value written twice",
       [](engine::EngineMeta& m) {
         auto* p = m.mutable_profiles(1);
         p->mutable_steps(1)->set_outputs(0, p->steps(0).outputs(0));
       },
       "overwrites"},
      {"value refers to a missing weight",
       [](engine::EngineMeta& m) {
         for (auto& v : *m.mutable_profiles(0)->mutable_values())
           if (v.weight() >= 0) { v.set_weight(m.weights_size()); break; }
       },
       "missing weight"},
      {"weight offset beyond the blob", [&](engine::EngineMeta& m) { m.mutable_weights(0)->set_offset((blob + 64) / 64 * 64); }, "outside the weights section"},
      {"weight offset huge", [&](engine::EngineMeta& m) { m.mutable_weights(0)->set_offset(uint64_t{1} << 62); }, "outside the weights section"},
      {"weight overhangs the blob end", [&](engine::EngineMeta& m) { m.mutable_weights(big_weight)->set_offset(blob / 64 * 64); }, "outside the weights section"},
      {"weight misaligned", [](engine::EngineMeta& m) { m.mutable_weights(0)->set_offset(m.weights(0).offset() + 4); }, "misaligned"},
      {"weight nbytes too small", [](engine::EngineMeta& m) { m.mutable_weights(0)->set_nbytes(m.weights(0).nbytes() - 4); }, "does not match its shape"},
      {"weight nbytes too large", [](engine::EngineMeta& m) { m.mutable_weights(0)->set_nbytes(m.weights(0).nbytes() + 4); }, "does not match its shape"},
      {"weight dims do not match nbytes", [](engine::EngineMeta& m) { m.mutable_weights(0)->set_dims(0, m.weights(0).dims(0) + 1); }, "does not match its shape"},
      {"weight unknown dtype", [](engine::EngineMeta& m) { m.mutable_weights(0)->set_dtype(999); }, "unknown dtype 999"},
      {"weight string dtype", [](engine::EngineMeta& m) { m.mutable_weights(0)->set_dtype(static_cast<int>(DType::kString)); }, "unknown dtype"},
      {"weight negative dim", [](engine::EngineMeta& m) { m.mutable_weights(0)->set_dims(0, -3); }, "negative dim"},
      {"weight rank 9",
       [](engine::EngineMeta& m) {
         auto* w = m.mutable_weights(0);
         w->clear_dims();
         for (int i = 0; i < 9; ++i) w->add_dims(1);
       },
       "above 8"},
      {"value rank 9",
       [](engine::EngineMeta& m) {
         auto* v = m.mutable_profiles(1)->mutable_values(m.profiles(1).inputs(0));
         for (int i = 0; i < 9; ++i) v->add_dims(1);
       },
       "invalid declared shape or range"},
      {"range min/max ranks differ",
       [](engine::EngineMeta& m) { m.mutable_profiles(1)->mutable_values(m.profiles(1).inputs(0))->add_range_min(1); },
       "invalid declared shape or range"},
      {"attribute of unknown kind",
       [](engine::EngineMeta& m) {
         auto* a = m.mutable_profiles(1)->mutable_steps(0)->add_attrs();
         a->set_name("bogus");
         a->set_kind(static_cast<engine::Attr::Kind>(42));
       },
       "unknown kind 42"},
      {"attribute tensor size mismatch",
       [](engine::EngineMeta& m) {
         auto* a = m.mutable_profiles(1)->mutable_steps(0)->add_attrs();
         a->set_name("value");
         a->set_kind(engine::Attr::TENSOR);
         a->mutable_tensor()->set_dtype(static_cast<int>(DType::kFloat32));
         a->mutable_tensor()->add_dims(4);
         a->mutable_tensor()->set_data(std::string(3, '\0'));
       },
       "tensor size mismatch"},
      {"attribute tensor unknown dtype",
       [](engine::EngineMeta& m) {
         auto* a = m.mutable_profiles(1)->mutable_steps(0)->add_attrs();
         a->set_name("value");
         a->set_kind(engine::Attr::TENSOR);
         a->mutable_tensor()->set_dtype(555);
       },
       "invalid tensor"},
      {"attribute tensor negative dim",
       [](engine::EngineMeta& m) {
         auto* a = m.mutable_profiles(1)->mutable_steps(0)->add_attrs();
         a->set_name("value");
         a->set_kind(engine::Attr::TENSOR);
         a->mutable_tensor()->set_dtype(static_cast<int>(DType::kFloat32));
         a->mutable_tensor()->add_dims(-1);
       },
       "invalid dim"},
  };
  for (const Case& c : cases) {
    engine::EngineMeta m = base;
    c.edit(m);
    expect_load_fails(with_meta(m), c.message, c.what);
  }
}

// The element count of a weight must not overflow: dims [2^32, 2^32] multiply to 2^64, which wraps
// to 0 in int64 arithmetic and so "matches" nbytes = 0.
TEST(EngineCorrupt, WeightWhoseElementCountOverflowsFails) {
  engine::EngineMeta m = parsed_meta();
  auto* w = m.mutable_weights(0);
  w->clear_dims();
  w->add_dims(int64_t{1} << 32);
  w->add_dims(int64_t{1} << 32);
  w->set_nbytes(0);
  expect_load_fails(with_meta(m), "", "weight dims [2^32, 2^32], nbytes 0");

  engine::EngineMeta m2 = parsed_meta();
  auto* w2 = m2.mutable_weights(0);
  w2->clear_dims();
  w2->add_dims(int64_t{1} << 62);
  w2->add_dims(4);
  w2->set_nbytes(0);
  expect_load_fails(with_meta(m2), "", "weight dims [2^62, 4], nbytes 0");
}

// The same overflow on the weight a MatMul reads: [64, 2^58] "matches" nbytes 0, so the kernel
// is handed a 0-byte weight and an output whose allocation cannot succeed.
TEST(EngineCorrupt, OverflowingWeightDimsDoNotCrashAtRun) {
  engine::EngineMeta m = parsed_meta();
  for (auto& w : *m.mutable_weights())
    if (w.nbytes() == uint64_t{kIn * kHidden * 4}) {
      w.clear_dims();
      w.add_dims(kIn);
      w.add_dims(int64_t{1} << 58);
      w.set_nbytes(0);
    }
  for (auto& p : *m.mutable_profiles())
    for (auto& s : *p.mutable_steps()) s.set_impl("reference");
  EXPECT_FALSE(load_and_run(with_meta(m)).ok());
}

// Found by the mutation fuzz under UBSan: the fixed profile's folded Reshape target [3, 8, 12] with
// its first element turned into 2^62 + 3. The product (2^62 + 3) * 96 wraps to 288 in int64, the
// input's element count, so the reshape must be rejected rather than produce a [2^62 + 3, 8, 12] view.
TEST(EngineCorrupt, ReshapeTargetWhoseProductOverflowsFails) {
  const engine::EngineMeta meta = parsed_meta();
  const engine::Profile& fixed = meta.profiles(0);
  int weight = -1;
  for (const auto& v : fixed.values())
    if (v.name() == "target") weight = v.weight();
  ASSERT_GE(weight, 0) << "the reshape target did not fold in the fixed profile";
  ASSERT_EQ(meta.weights(weight).nbytes(), 24u);
  std::string weights = weights_bytes_of(fixture().bytes);
  int64_t target[3];
  std::memcpy(target, weights.data() + meta.weights(weight).offset(), sizeof target);
  ASSERT_EQ(target[0], 3);
  target[0] = (int64_t{1} << 62) + 3;
  std::memcpy(weights.data() + meta.weights(weight).offset(), target, sizeof target);
  const std::string file = assemble(meta_bytes_of(fixture().bytes), weights);
  auto e = Engine::load_memory(file.data(), file.size(), "corrupt");
  ASSERT_TRUE(e.ok()) << e.status().message();  // weights are data: the file itself is fine
  auto ctx = (*e)->create_context("fixed");
  ASSERT_TRUE(ctx.ok());
  Tensor x = input_x(3, 0.5f);
  ASSERT_TRUE((*ctx)->set_input("x", x.view()).ok());
  Status st = (*ctx)->run();
  EXPECT_FALSE(st.ok()) << "Reshape accepted target [2^62 + 3, 8, 12] for 288 elements; output shape "
                        << (*ctx)->output(0).shape.str();
}

// A graph input's dtype is part of the binding the caller sees: an unknown code must be rejected like
// a weight's.
TEST(EngineCorrupt, InputWithUnknownDtypeFails) {
  engine::EngineMeta m = parsed_meta();
  m.mutable_profiles(1)->mutable_values(m.profiles(1).inputs(0))->set_dtype(999);
  expect_load_fails(with_meta(m), "", "input value dtype 999");
}

// An attribute tensor's size must be checked before its storage is allocated: dims [2^32] of
// float32 with 4 bytes of data must fail at once, not allocate (and zero) 16 GiB first.
TEST(EngineCorrupt, HugeAttributeTensorIsRejectedBeforeAllocating) {
  engine::EngineMeta m = parsed_meta();
  auto* a = m.mutable_profiles(1)->mutable_steps(0)->add_attrs();
  a->set_name("value");
  a->set_kind(engine::Attr::TENSOR);
  a->mutable_tensor()->set_dtype(static_cast<int>(DType::kFloat32));
  a->mutable_tensor()->add_dims(int64_t{1} << 32);
  a->mutable_tensor()->set_data(std::string(4, '\0'));
  expect_load_fails(with_meta(m), "tensor size mismatch");
}

// Broken but loadable plans: the problem surfaces at create_context() or run() as an error.
TEST(EngineCorrupt, LoadableButBrokenPlansFailCleanly) {
  const engine::EngineMeta base = parsed_meta();
  struct Case {
    const char* what;
    std::function<void(engine::EngineMeta&)> edit;
  };
  const Case cases[] = {
      {"unknown op", [](engine::EngineMeta& m) { m.mutable_profiles(1)->mutable_steps(0)->set_op_type("NoSuchOp"); }},
      {"unknown impl", [](engine::EngineMeta& m) { m.mutable_profiles(1)->mutable_steps(0)->set_impl("no_such_impl"); }},
      {"op swapped for another", [](engine::EngineMeta& m) {
         for (auto& s : *m.mutable_profiles(1)->mutable_steps())
           if (s.op_type() == "Relu") s.set_op_type("Concat");
       }},
      {"input dropped", [](engine::EngineMeta& m) {
         for (auto& s : *m.mutable_profiles(1)->mutable_steps())
           if (s.op_type() == "FusedMatMul") s.mutable_inputs()->Truncate(1);  // MatMul + bias Add, fused
       }},
      {"absent input", [](engine::EngineMeta& m) {
         for (auto& s : *m.mutable_profiles(1)->mutable_steps())
           if (s.op_type() == "FusedMatMul") s.set_inputs(0, -1);
       }},
      {"weights swapped", [](engine::EngineMeta& m) {
         std::vector<engine::Value*> constants;
         for (auto& v : *m.mutable_profiles(1)->mutable_values())
           if (v.weight() >= 0) constants.push_back(&v);
         const int w0 = constants.at(0)->weight();
         constants.at(0)->set_weight(constants.at(1)->weight());
         constants.at(1)->set_weight(w0);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    engine::EngineMeta m = base;
    c.edit(m);
    Status st = load_and_run(with_meta(m));
    EXPECT_FALSE(st.ok()) << c.what;
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  }
}

// Strings come from the file: a name holding a newline must not turn an error into two lines.
TEST(EngineCorrupt, NewlinesInNamesDoNotBreakTheOneLineError) {
  engine::EngineMeta m = parsed_meta();
  for (auto& s : *m.mutable_profiles(1)->mutable_steps())
    if (s.op_type() == "Relu") s.set_op_type("Re\nlu");
  Status st = load_and_run(with_meta(m));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
}

// Metadata mutated byte by byte with the checksums recomputed, and weights mutated the same way: the
// loader's validation and the kernels' checks are all that stand between such a file and a crash.
// Whatever happens must be an error or a successful run.
TEST(EngineCorrupt, ResealedMutationsNeverCrash) {
  google::protobuf::LogSilencer quiet;  // mutated strings are often invalid UTF-8, which protobuf logs
  // Thousands of tiny runs: one thread avoids paying for OpenMP team wake-ups on a busy machine.
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  struct Restore {
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } restore{saved_threads};
  const std::string& bytes = fixture().bytes;
  const std::string meta = meta_bytes_of(bytes), weights = weights_bytes_of(bytes);
  std::mt19937 rng(1234);
  int loaded = 0, total = 0;
  auto attempt = [&](const std::string& m, const std::string& w) {
    Status st = load_and_run(assemble(m, w));
    ++total;
    if (st.ok()) ++loaded;
    else EXPECT_FALSE(st.message().empty());
  };
  for (size_t pos = 0; pos < meta.size(); ++pos) {
    std::string m = meta;
    m[pos] = static_cast<char>(m[pos] ^ (pos % 2 ? 0x01 : 0x7f));
    attempt(m, weights);
  }
  // Weights: every byte of the small int64 constants (shape arithmetic) and random bytes of w.
  engine::EngineMeta parsed;
  ASSERT_TRUE(parsed.ParseFromString(meta));
  std::vector<size_t> positions;
  for (const auto& w : parsed.weights())
    if (w.nbytes() <= 64)
      for (uint64_t i = 0; i < w.nbytes(); ++i) positions.push_back(w.offset() + i);
  ASSERT_GE(positions.size(), 32u);
  for (int i = 0; i < 64; ++i) positions.push_back(rng() % weights.size());
  for (size_t pos : positions) {
    for (unsigned char mask : {0x01, 0x40, 0x80, 0xff}) {
      std::string w = weights;
      w[pos] = static_cast<char>(w[pos] ^ mask);
      attempt(meta, w);
    }
  }
  // Random multi-byte damage to the metadata.
  for (int i = 0; i < 300; ++i) {
    std::string m = meta;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) m[rng() % m.size()] = static_cast<char>(rng());
    attempt(m, weights);
  }
  EXPECT_GT(loaded, 0);      // some mutations (names, unused fields) are harmless
  EXPECT_LT(loaded, total);  // and many are caught
  std::printf("[          ] %d of %d mutated engines loaded and ran\n", loaded, total);
}

}  // namespace
}  // namespace kiln
