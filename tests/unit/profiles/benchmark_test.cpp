// The alternating benchmark runner: who runs when, what is timed, what a failure does.
#include <gtest/gtest.h>

#include <string>

#include "profiles/benchmark.h"

namespace kiln {
namespace {

TEST(AlternatingBenchmarks, RoundsAlternateAfterOneUntimedRunEach) {
  std::string calls;
  auto a = [&] { calls += 'a'; return Status::Ok(); };
  auto b = [&] { calls += 'b'; return Status::Ok(); };
  // 2 warm-up runs each, then 7 timed runs each in 3 rounds of 2, 2, 3 (plus one untimed run
  // before each share).
  auto r = run_alternating_benchmarks({a, b}, 2, 7, 3, 100.0);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(calls, "aabb" "aaa" "bbb" "aaa" "bbb" "aaaa" "bbbb");
  ASSERT_EQ(r->size(), 2u);
  for (const auto& res : *r) {
    EXPECT_EQ(res.latency.iterations, 7);
    EXPECT_EQ(res.deadline_misses, 0);
    EXPECT_TRUE(res.within_budget);
  }
}

TEST(AlternatingBenchmarks, OneFunctionOrOneRoundRunsBackToBack) {
  std::string calls;
  auto a = [&] { calls += 'a'; return Status::Ok(); };
  auto b = [&] { calls += 'b'; return Status::Ok(); };
  ASSERT_TRUE(run_alternating_benchmarks({a}, 1, 4, 3, 100.0).ok());
  EXPECT_EQ(calls, "aaaaa");
  calls.clear();
  ASSERT_TRUE(run_alternating_benchmarks({a, b}, 0, 3, 1, 100.0).ok());
  EXPECT_EQ(calls, "aaabbb");
}

TEST(AlternatingBenchmarks, OverBudgetRunsAreCountedAndAFailureStopsTheRun) {
  auto slow = [] {
    volatile double x = 0;
    for (int i = 0; i < 2000000; ++i) x = x + 1;
    return Status::Ok();
  };
  auto r = run_alternating_benchmarks({slow}, 0, 3, 1, 0.0);  // a budget of 0 ms: every run is over
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].deadline_misses, 3);
  EXPECT_FALSE((*r)[0].within_budget);
  int n = 0;
  auto failing = [&] { return ++n == 4 ? Internal("run 4 failed") : Status::Ok(); };
  auto f = run_alternating_benchmarks({failing}, 1, 5, 1, 100.0);
  EXPECT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("run 4 failed"), std::string::npos);
}

}  // namespace
}  // namespace kiln
