// Engine files: the serialize -> load round trip (profiles, bindings, weights, outputs), weights
// stored once across profiles, determinism, and the mmap'd file path. The corpus of corrupted
// files is in engine_corrupt_test.cpp; the model both use is in engine_file_fixture.h.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "engine_file_fixture.h"
#include "runtime/engine.pb.h"

namespace kiln {
namespace {

using namespace engine_file_fixture;

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

}  // namespace
}  // namespace kiln
