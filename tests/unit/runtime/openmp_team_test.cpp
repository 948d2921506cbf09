// The OpenMP team size around oneDNN primitives (runtime/openmp_team.h): restored after every
// region, and shrunk to one thread while every core is held by another thread.
#include "runtime/openmp_team.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace kiln {
namespace {

int cpus_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(std::thread::hardware_concurrency());
}

// Restores the calling thread's OpenMP team size when a test ends.
struct TeamSize {
  int saved = omp_get_max_threads();
  explicit TeamSize(int n) { omp_set_num_threads(n); }
  ~TeamSize() { omp_set_num_threads(saved); }
};

TEST(OpenmpTeam, TheTeamSizeIsRestoredAfterEveryRegion) {
  TeamSize team(2);
  std::atomic<int> work{0};
  for (int i = 0; i < 200; ++i) {
    const OpenmpRegionScope scope;
    const int inside = omp_get_max_threads();
    EXPECT_TRUE(inside == 1 || inside == 2) << inside;
#pragma omp parallel
    work.fetch_add(1, std::memory_order_relaxed);
    EXPECT_LE(work.load(), 2 * (i + 1));
  }
  EXPECT_EQ(omp_get_max_threads(), 2);
}

// With a spinning thread on every CPU, the team's second thread cannot join on time: the regions
// run on the calling thread alone.
TEST(OpenmpTeam, ShrinksToOneThreadWhileEveryCoreIsBusy) {
  TeamSize team(2);
  const OpenmpTeamStats before = openmp_team_stats();
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  for (int i = 0; i < cpus_available(); ++i)
    hogs.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  bool solo = false;  // a region sized to one thread after a late probe of this test
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!solo && std::chrono::steady_clock::now() < give_up) {
    const OpenmpRegionScope scope;
    solo = omp_get_max_threads() == 1 && openmp_team_stats().late_probes > before.late_probes;
#pragma omp parallel
    {
      volatile int x = 0;
      for (int k = 0; k < 1000; ++k) x = x + k;
    }
  }
  stop = true;
  for (auto& t : hogs) t.join();
  EXPECT_TRUE(solo) << "no region ran solo in 5 s with every CPU busy";
  EXPECT_GT(openmp_team_stats().late_probes, before.late_probes);
  EXPECT_EQ(omp_get_max_threads(), 2);
}

}  // namespace
}  // namespace kiln
