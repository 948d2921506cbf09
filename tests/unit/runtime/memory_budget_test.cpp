// The memory cap: sizes parse, and going past the cap is a one-line ResourceExhausted error naming
// what asked and the bytes (a tensor, an engine, a profile's arena) instead of an allocation.
#include <gtest/gtest.h>

#include "engine_file_fixture.h"
#include "runtime/memory_budget.h"

namespace kiln {
namespace {

using namespace engine_file_fixture;

// Sets the cap for one test and restores "no cap" after it.
struct CapGuard {
  explicit CapGuard(uint64_t bytes) { set_max_memory(bytes); }
  ~CapGuard() { set_max_memory(0); }
};

TEST(MemoryBudget, ParsesSizes) {
  EXPECT_EQ(parse_memory_size("4096").value(), 4096u);
  EXPECT_EQ(parse_memory_size("2K").value(), 2048u);
  EXPECT_EQ(parse_memory_size("512M").value(), 512ull << 20);
  EXPECT_EQ(parse_memory_size("1.5G").value(), 3ull << 29);
  EXPECT_EQ(parse_memory_size("2GiB").value(), 2ull << 30);
  for (const char* bad : {"", "lots", "-1G", "12Q", "1e30T"}) {
    auto r = parse_memory_size(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
}

TEST(MemoryBudget, TensorsOverTheCapAreAnErrorNotAnAllocation) {
  const uint64_t base = memory_in_use();
  CapGuard cap(base + (1u << 20));
  auto small = Tensor::try_zeros(DType::kFloat32, Shape{256}, "small");
  ASSERT_TRUE(small.ok()) << small.status().message();
  auto big = Tensor::try_zeros(DType::kFloat32, Shape{1024, 1024}, "tensor 'big'");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(big.status().message(), "tensor 'big'")) << big.status().message();
  EXPECT_TRUE(contains(big.status().message(), "4194304 bytes")) << big.status().message();
  EXPECT_TRUE(contains(big.status().message(), "memory cap")) << big.status().message();
  // Freed memory is given back to the budget.
  const uint64_t with_small = memory_in_use();
  small = Tensor::try_zeros(DType::kFloat32, Shape{1}, "tiny");
  EXPECT_LT(memory_in_use(), with_small);
}

TEST(MemoryBudget, AnEngineLargerThanTheCapDoesNotLoad) {
  const Fixture& f = fixture();
  LoadOptions o;
  o.max_memory = memory_in_use() + f.bytes.size() / 2;
  auto e = Engine::load_memory(f.bytes.data(), f.bytes.size(), "mlp", o);
  set_max_memory(0);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(e.status().message(), "engine 'mlp'")) << e.status().message();
}

// The engine fits; the ranged profile's arena at its largest batch does not: the run fails naming
// the profile and the bytes, and a run at a small batch (a smaller arena) still works.
TEST(MemoryBudget, AnArenaOverTheCapNamesTheProfile) {
  const Fixture& f = fixture();
  auto e = Engine::load_memory(f.bytes.data(), f.bytes.size(), "mlp");
  ASSERT_TRUE(e.ok()) << e.status().message();
  auto ctx = (*e)->create_context("ranged");
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  std::vector<float> x(16 * kIn, 0.5f);
  ASSERT_TRUE((*ctx)->set_input("x", TensorView{x.data(), DType::kFloat32, Shape{1, kIn}}).ok());
  ASSERT_TRUE((*ctx)->run().ok());
  {
    // Per-value buffers of the unplanned run plus an arena of 16 rows: a few KiB over what is held.
    CapGuard cap(memory_in_use() + 4096);
    ASSERT_TRUE((*ctx)->set_input("x", TensorView{x.data(), DType::kFloat32, Shape{16, kIn}}).ok());
    Status st = (*ctx)->run();
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.message();
    EXPECT_TRUE(contains(st.message(), "bytes")) << st.message();
    EXPECT_EQ(st.message().find('\n'), std::string::npos);
  }
  ASSERT_TRUE((*ctx)->set_input("x", TensorView{x.data(), DType::kFloat32, Shape{2, kIn}}).ok());
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
}

}  // namespace
}  // namespace kiln
