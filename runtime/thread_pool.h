// kiln's thread pool: one per process, shared by every context, kernel and plugin step.
//
// Its regions run on OpenMP's team while that team is on time (runtime/openmp_team.h), so a run
// wakes one set of threads: oneDNN's primitives run on that team too (Debian builds oneDNN on
// OpenMP), and switching between two sets of threads found the other set asleep at each switch.
// Chunks are claimed from a counter there as here. While the team is late, regions go to kiln's
// own workers (KILN_THREAD_POOL=kiln: always).
//
// Why kiln's own workers at all: an OpenMP parallel region ends in a barrier that every thread of
// the team must reach, so a worker the OS has descheduled (another process woke up on its core)
// stalls the whole region until it runs again, a time slice later. A control-loop step makes
// hundreds of regions, and each can pay that wait. Here a region is a set of chunks that threads
// claim one at a time from a shared counter; the calling thread always takes part, and it waits
// only for chunks some thread has already claimed. A worker that is late to wake finds no chunk
// left and goes back to sleep: the caller has done its share. A worker seen late is left out of
// the next regions (the team shrinks) and tried again after a while, so a busy core costs neither
// a stall per region nor a wake-up per region.
//
// Small loops run on the calling thread (see LoopCost): a region costs a wake-up and a join, and a
// loop cheaper than a few of those is faster alone; consecutive small steps therefore stay on one
// thread instead of bouncing between cores.
//
// Regions do not nest: a parallel_for inside a chunk, or while another thread's region is running,
// runs on the calling thread. Chunk bodies get the index of the thread running them (`slot`,
// 0 = the caller, < max_threads()), for per-thread scratch.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/status.h"

namespace kiln {

// How threads are started. Set once, before the first region (or between runs: reconfigure stops
// and restarts the workers).
struct ThreadPoolOptions {
  int threads = 0;               // team size including the caller; 0 = the CPUs this process may use
  std::vector<int> cpus;         // pin the caller (element 0) and worker i to cpus[i % size]; empty = no pinning
  bool realtime = false;         // SCHED_FIFO for the workers and the caller (needs CAP_SYS_NICE or RLIMIT_RTPRIO)
  int realtime_priority = 10;    // 1..99 when realtime
  int spin_us = 50;              // a worker spins this long after a region before sleeping
};

// The work of one loop iteration, for deciding whether a loop pays for a region: bytes read and
// written, and floating-point operations. The constants that turn them into time are measured on
// this machine by bench/parallel_overhead (see docs/scheduling.md).
struct LoopCost {
  double bytes = 0;
  double flops = 0;
};

class ThreadPool {
 public:
  using ChunkFn = void (*)(const void* ctx, int64_t begin, int64_t end, int slot);

  static ThreadPool& global();

  // (Re)starts the workers with `o`. Errors (a CPU out of range, SCHED_FIFO refused) are one line;
  // on error the pool still runs, unpinned / at normal priority, and the message says so.
  Status configure(const ThreadPoolOptions& o);
  const ThreadPoolOptions& options() const { return options_; }
  int max_threads() const { return team_size_; }
  // Threads a region started now would offer (team size minus workers benched as late).
  int available_threads() const;

  // Runs body(begin, end, slot) over [0, n) in chunks of at least `grain` items. Returns when
  // every item has run. See the file comment for who runs what.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, const F& body) {
    run_region(n, grain, &invoke<F>, &body, team_size_);
  }
  // As above, with slots limited to [0, max_slots) (per-thread scratch sized for that many).
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, const F& body, int max_slots) {
    run_region(n, grain, &invoke<F>, &body, max_slots);
  }
  // As above, inline when n items of `cost` each are too cheap for a region.
  template <typename F>
  void parallel_for(int64_t n, LoopCost cost, const F& body) {
    if (!worth_a_region(n, cost)) {
      body(int64_t{0}, n, 0);
      return;
    }
    run_region(n, grain_for(n, cost), &invoke<F>, &body, team_size_);
  }

  // The cost model: true when n items of `cost` take long enough on one thread to pay for a
  // region's wake-up and join.
  bool worth_a_region(int64_t n, LoopCost cost) const;
  // A chunk size of at least the measured minimum chunk time.
  int64_t grain_for(int64_t n, LoopCost cost) const;
  // Estimated single-thread time of n items, in nanoseconds.
  static double serial_ns(int64_t n, LoopCost cost);

  // True inside a chunk body (any thread): nested loops run inline.
  static bool in_region();

  struct Stats {
    uint64_t regions = 0;         // regions run with helpers
    uint64_t inline_loops = 0;    // loops run on the caller (too small, nested or pool busy)
    uint64_t chunks_by_workers = 0;
    uint64_t late_workers = 0;    // times a worker was benched for being late
  };
  Stats stats() const;

  // Sends workers spinning after a region to sleep now. The OpenMP team's probe
  // (runtime/openmp_team.cpp) calls it first: a kiln worker spinning on the other core would make
  // the OpenMP worker look descheduled by a co-tenant, and oneDNN would then run on one thread.
  void stop_spinning() { spin_epoch_.fetch_add(1, std::memory_order_release); }

  ~ThreadPool();

 private:
  ThreadPool();
  template <typename F>
  static void invoke(const void* ctx, int64_t b, int64_t e, int slot) {
    (*static_cast<const F*>(ctx))(b, e, slot);
  }
  void run_region(int64_t n, int64_t grain, ChunkFn fn, const void* ctx, int max_slots);
  void run_openmp_region(int64_t n, int64_t grain, ChunkFn fn, const void* ctx, int team);
  void start_workers();
  void stop_workers();
  void worker_main(int slot);
  void run_chunks(int slot, uint32_t epoch);

  struct Worker;
  ThreadPoolOptions options_;
  int team_size_ = 1;
  std::vector<Worker*> workers_;
  std::string configure_warning_;

  // The current region. `claim_` packs the region's epoch (high 32 bits) and the next chunk index
  // (low 32 bits), so a late worker can never claim a chunk of a region that has ended.
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint32_t> epoch_{0};        // futex word workers sleep on
  std::atomic<ChunkFn> fn_{nullptr};
  std::atomic<const void*> ctx_{nullptr};
  std::atomic<int64_t> n_{0}, chunk_{1};
  std::atomic<uint32_t> chunks_{0};
  std::atomic<int> max_slots_{1};
  std::atomic<uint32_t> done_{0};          // chunks finished in the current region
  std::atomic<uint32_t> caller_sleeping_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> busy_{false};
  std::atomic<uint32_t> spin_epoch_{0};  // stop_spinning() bumps it
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> regions_{0}, inline_loops_{0}, chunks_by_workers_{0}, late_workers_{0};
};

// for (i = 0; i < n; ++i) body(i), on kiln's pool when n items of `cost` pay for a region (the
// drop-in for `#pragma omp parallel for`).
template <typename F>
void parallel_for_each(int64_t n, LoopCost cost, const F& body) {
  ThreadPool::global().parallel_for(n, cost, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) body(i);
  });
}

}  // namespace kiln
