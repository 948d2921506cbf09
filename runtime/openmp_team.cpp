#include "runtime/openmp_team.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <string>

#include "runtime/thread_pool.h"

namespace kiln {

namespace {

// A worker woken from a futex joins a region in 10-50 us on an idle VM; with its core held by
// another process it takes 0.5-2 ms (the scheduler's wake-up granularity). Halfway, in log terms.
constexpr int64_t kLateJoinNs = 200'000;
// Once all have joined, every thread of the probe counts clock reads for this long: one that
// shares its core with another (a co-tenant, or a spinning thread of the same team) is not running
// for part of it and counts far fewer.
constexpr int64_t kWindowNs = 30'000;
// An on-time team is probed again after this long: a co-tenant that starts meanwhile costs at most
// this many milliseconds of slow regions before the team shrinks.
constexpr int64_t kProbeEveryNs = 5'000'000;
// A late team runs solo this long before the next probe: doubling while it stays late, halving
// (not resetting) when it is on time, so a machine that is busy most of the time stays solo.
constexpr int64_t kFirstSoloNs = 2'000'000, kMaxSoloNs = 64'000'000;
constexpr int kMaxProbeThreads = 64;

std::atomic<int64_t> g_next_probe_ns{0};
std::atomic<int64_t> g_solo_until_ns{0};
std::atomic<int64_t> g_solo_ns{kFirstSoloNs};
std::atomic<bool> g_probing{false};
std::atomic<uint64_t> g_probes{0}, g_late_probes{0}, g_solo_regions{0};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* team_mode() {
  const char* env = std::getenv("KILN_OPENMP_TEAM");
  return env ? env : "";
}

bool adaptive() {
  static const bool on = std::string(team_mode()) != "fixed";
  return on;
}

// KILN_OPENMP_TEAM=solo: every region as if the team were late (tests run the one-thread oneDNN
// primitives that way).
bool always_solo() {
  static const bool on = std::string(team_mode()) == "solo";
  return on;
}

// One region of `threads`: true when every thread joined within kLateJoinNs and then all of them
// ran through the same window (none counted less than half of the best).
bool probe_team(int threads) {
  struct alignas(64) Slot {
    std::atomic<int64_t> joined{0};
    int64_t count = 0;
  };
  Slot slots[kMaxProbeThreads];
  const int n = std::min(threads, kMaxProbeThreads);
  const int64_t t0 = now_ns();
#pragma omp parallel num_threads(n)
  {
    const int id = omp_get_thread_num();
    slots[id].joined.store(now_ns(), std::memory_order_release);
    int64_t start = 0;
    for (bool waiting = true; waiting;) {
      waiting = false;
      start = 0;
      for (int i = 0; i < n; ++i) {
        const int64_t j = slots[i].joined.load(std::memory_order_acquire);
        waiting |= j == 0;
        start = std::max(start, j);
      }
      if (waiting && now_ns() - t0 > kLateJoinNs) break;
    }
    int64_t count = 0;
    if (start > 0 && start - t0 <= kLateJoinNs)
      for (const int64_t until = start + kWindowNs; now_ns() < until;) ++count;
    slots[id].count = count;
  }
  int64_t lo = INT64_MAX, hi = 0;
  for (int i = 0; i < n; ++i) lo = std::min(lo, slots[i].count), hi = std::max(hi, slots[i].count);
  return hi > 0 && 2 * lo >= hi;
}

// The team is late: regions run solo for the current solo time, which doubles.
void go_solo(int64_t now) {
  const int64_t solo = g_solo_ns.load(std::memory_order_relaxed);
  g_solo_until_ns.store(now + solo, std::memory_order_relaxed);
  g_next_probe_ns.store(now + solo, std::memory_order_relaxed);
  g_solo_ns.store(std::min(solo * 2, kMaxSoloNs), std::memory_order_relaxed);
}

// True when the team is on time now (probing when the last verdict is due for renewal).
bool team_on_time(int threads) {
  const int64_t now = now_ns();
  if (now < g_solo_until_ns.load(std::memory_order_relaxed)) return false;
  if (now < g_next_probe_ns.load(std::memory_order_relaxed)) return true;
  bool expected = false;
  if (!g_probing.compare_exchange_strong(expected, true, std::memory_order_acquire)) return true;  // another thread probes
  // kiln's own pool worker may still spin after a kiln step, on the core the OpenMP worker needs:
  // that is the same process, not a co-tenant, so it is sent to sleep before the probe judges.
  ThreadPool::global().stop_spinning();
  // A worker asleep since the last OpenMP region (a stretch of kiln-pool steps) may take longer
  // than kLateJoinNs to wake on a VM; the first probe has woken it, so a second one tells a slow
  // wake-up from a core another process holds.
  const bool on_time = probe_team(threads) || probe_team(threads);
  const int64_t end = now_ns();
  g_probes.fetch_add(1, std::memory_order_relaxed);
  if (on_time) {
    g_solo_ns.store(std::max(g_solo_ns.load(std::memory_order_relaxed) / 2, kFirstSoloNs), std::memory_order_relaxed);
    g_next_probe_ns.store(end + kProbeEveryNs, std::memory_order_relaxed);
  } else {
    go_solo(end);
    g_late_probes.fetch_add(1, std::memory_order_relaxed);
  }
  g_probing.store(false, std::memory_order_release);
  return on_time;
}

}  // namespace

void report_late_openmp_team() {
  if (!adaptive()) return;
  go_solo(now_ns());
}

OpenmpRegionScope::OpenmpRegionScope() {
  if (!adaptive() || omp_in_parallel()) return;
  const int threads = omp_get_max_threads();
  if (threads <= 1 || (!always_solo() && team_on_time(threads))) return;
  g_solo_regions.fetch_add(1, std::memory_order_relaxed);
  omp_set_num_threads(1);
  restore_ = threads;
}

OpenmpRegionScope::~OpenmpRegionScope() {
  if (restore_ > 0) omp_set_num_threads(restore_);
}

OpenmpTeamStats openmp_team_stats() {
  return {g_probes.load(), g_late_probes.load(), g_solo_regions.load()};
}

bool impl_runs_on_openmp_team(std::string_view impl) { return impl.starts_with("onednn") && impl != "onednn_split"; }

}  // namespace kiln
