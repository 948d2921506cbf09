// Engine files: a corpus of corrupted files (truncations, flipped bytes, broken headers,
// semantically broken metadata) that must each fail with a one-line error naming the engine and
// never crash. The model they are derived from is in engine_file_fixture.h.
#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "engine_file_fixture.h"
#include "runtime/engine.pb.h"

namespace kiln {
namespace {

using namespace engine_file_fixture;

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
      // Found by the engine_load fuzz target: a kernel wrote out[0] of an empty output list.
      {"step without outputs", [](engine::EngineMeta& m) { m.mutable_profiles(0)->mutable_steps(0)->clear_outputs(); }, "has no outputs"},
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
