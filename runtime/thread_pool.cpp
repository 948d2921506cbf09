#include "runtime/thread_pool.h"

#include <immintrin.h>
#include <omp.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "runtime/openmp_team.h"

namespace kiln {

namespace {

// From bench/parallel_overhead on this project's 2-vCPU Xeon (docs/scheduling.md): one thread
// streams ~75 bytes/ns through an elementwise add whose 12 MiB sit in the last-level cache and
// ~10-15 from memory (bench/memory_bandwidth), and retires ~11 FLOP/ns of AVX2 FMA (~2x with
// AVX-512): 20 bytes/ns and 20 FLOP/ns are a step's mix of cached activations and streamed
// weights. A region whose helper is awake costs ~1-2 us; one whose helper sleeps a futex wake and
// its wake-up latency, ~10-25 us, of which the caller loses little (it works meanwhile).
constexpr double kNsPerByte = 1.0 / 20.0;
constexpr double kNsPerFlop = 1.0 / 20.0;
// A loop runs in a region when its one-thread time is at least this: waking a sleeping helper
// then costs under a third of what the helper can take over.
constexpr double kMinRegionNs = 30'000;
// Chunks shorter than this spend a noticeable share in the claim (an atomic on a shared line).
constexpr double kMinChunkNs = 4'000;
// Chunks per thread: enough that a thread slowed by a neighbour hands work to the others, few
// enough that a worker preempted in the middle of one holds back little.
constexpr int64_t kChunksPerThread = 8;
// A worker that has not joined a region lasting this long was not running (its core was busy):
// it is left out of regions for a while (backoff doubling from the first to the last figure).
constexpr int64_t kLateNs = 1'000'000;
// In OpenMP mode: the caller's wait at a region's end beyond which the team is taken to be late
// (runtime/openmp_team.cpp's late join, kLateJoinNs).
constexpr int64_t kLateRegionWaitNs = 200'000;
constexpr int64_t kFirstBenchNs = 1'000'000, kMaxBenchNs = 64'000'000;

thread_local bool t_in_region = false;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

int default_thread_count() {
  if (const char* env = std::getenv("KILN_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// Touches the first kStackPrefaultBytes of the calling thread's stack, as real-time threads do at
// start: a kernel whose frames reach deeper than anything before would otherwise take its first
// page faults in the middle of a steady-state step, on whichever thread ran its chunk.
constexpr size_t kStackPrefaultBytes = 256 * 1024;
[[gnu::noinline]] void prefault_stack() {
  volatile char* p = static_cast<volatile char*>(__builtin_alloca(kStackPrefaultBytes));
  for (size_t i = 0; i < kStackPrefaultBytes; i += 4096) p[i] = 0;
}

// Pins the calling thread and/or makes it SCHED_FIFO; the message names what was refused.
std::string apply_thread_policy(int cpu, bool realtime, int priority) {
  std::string warning;
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (const int rc = ::pthread_setaffinity_np(::pthread_self(), sizeof(set), &set); rc != 0)
      warning = "cannot pin a thread to CPU " + std::to_string(cpu) + ": " + std::strerror(rc);
  }
  if (realtime) {
    sched_param sp{};
    sp.sched_priority = priority;
    if (const int rc = ::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &sp); rc != 0)
      warning += std::string(warning.empty() ? "" : "; ") + "SCHED_FIFO priority " + std::to_string(priority) + " refused (" +
                 std::strerror(rc) + "): threads run at normal priority; run as root, grant CAP_SYS_NICE, or raise RLIMIT_RTPRIO (ulimit -r)";
  }
  return warning;
}

}  // namespace

struct ThreadPool::Worker {
  std::thread thread;
  int slot = 0;
  std::atomic<uint32_t> sleep_word{0};     // 1 while asleep (or about to be); the caller swaps it to 0 to wake
  std::atomic<uint32_t> joined_epoch{0};   // the last region it looked at
  std::atomic<int64_t> benched_until{0};   // not woken before this time (ns, steady clock)
  int64_t bench_ns = kFirstBenchNs;        // caller-only: the next bench length
  std::atomic<bool> started{false};        // set once its stack is faulted in and its policy applied
};

ThreadPool& ThreadPool::global() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::ThreadPool() {
  options_.threads = default_thread_count();
  team_size_ = options_.threads;
  start_workers();
}

ThreadPool::~ThreadPool() { stop_workers(); }

Status ThreadPool::configure(const ThreadPoolOptions& o) {
  stop_workers();
  options_ = o;
  if (options_.threads <= 0) options_.threads = default_thread_count();
  options_.realtime_priority = std::clamp(options_.realtime_priority, 1, 99);
  team_size_ = options_.threads;
  configure_warning_.clear();
  const int ncpu = static_cast<int>(std::thread::hardware_concurrency());
  for (int c : options_.cpus)
    if (c < 0 || c >= std::max(ncpu, 1)) {
      configure_warning_ = "CPU " + std::to_string(c) + " does not exist (this machine has " + std::to_string(ncpu) + "): threads are not pinned";
      options_.cpus.clear();
      break;
    }
  const std::string caller = apply_thread_policy(options_.cpus.empty() ? -1 : options_.cpus[0], options_.realtime, options_.realtime_priority);
  if (configure_warning_.empty()) configure_warning_ = caller;
  prefault_stack();
#pragma omp parallel num_threads(team_size_)
  prefault_stack();
  // oneDNN's primitives run on OpenMP's team (Debian builds it so): its threads get the same
  // pinning and priority, or a bf16 engine's oneDNN matmuls would still wait on an ordinary thread.
  if (!options_.cpus.empty() || options_.realtime) {
    const std::vector<int> cpus = options_.cpus;
    const bool rt = options_.realtime;
    const int prio = options_.realtime_priority;
#pragma omp parallel num_threads(team_size_)
    apply_thread_policy(cpus.empty() ? -1 : cpus[static_cast<size_t>(omp_get_thread_num()) % cpus.size()], rt, prio);
  }
  start_workers();
  if (!configure_warning_.empty()) return FailedPrecondition(configure_warning_);
  return Status::Ok();
}

void ThreadPool::start_workers() {
  stopping_.store(false);
  for (int s = 1; s < team_size_; ++s) {
    auto* w = new Worker;
    w->slot = s;
    w->joined_epoch.store(epoch_.load());
    workers_.push_back(w);
  }
  for (Worker* w : workers_) w->thread = std::thread([this, w] { worker_main(w->slot); });
  // Wait for each worker's start-up (stack faulted in, pinning and priority applied): a thread
  // scheduled late would otherwise take those page faults in the middle of somebody's step.
  for (Worker* w : workers_)
    while (!w->started.load(std::memory_order_acquire)) std::this_thread::yield();
}

void ThreadPool::stop_workers() {
  stopping_.store(true);
  for (Worker* w : workers_) {
    w->sleep_word.store(0);
    futex_wake(&w->sleep_word);
  }
  for (Worker* w : workers_) {
    if (w->thread.joinable()) w->thread.join();
    delete w;
  }
  workers_.clear();
}

int ThreadPool::available_threads() const {
  const int64_t now = now_ns();
  int n = 1;
  for (const Worker* w : workers_) n += w->benched_until.load(std::memory_order_relaxed) <= now;
  return n;
}

double ThreadPool::serial_ns(int64_t n, LoopCost cost) {
  return static_cast<double>(n) * (cost.bytes * kNsPerByte + cost.flops * kNsPerFlop);
}

bool ThreadPool::worth_a_region(int64_t n, LoopCost cost) const {
  return team_size_ > 1 && n > 1 && serial_ns(n, cost) >= kMinRegionNs;
}

int64_t ThreadPool::grain_for(int64_t n, LoopCost cost) const {
  const double per_item = std::max(serial_ns(1, cost), 1e-3);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(kMinChunkNs / per_item)));
}

bool ThreadPool::in_region() { return t_in_region; }

ThreadPool::Stats ThreadPool::stats() const {
  Stats s;
  s.regions = regions_.load(std::memory_order_relaxed);
  s.inline_loops = inline_loops_.load(std::memory_order_relaxed);
  s.chunks_by_workers = chunks_by_workers_.load(std::memory_order_relaxed);
  s.late_workers = late_workers_.load(std::memory_order_relaxed);
  return s;
}

// Claims and runs chunks of region `epoch` until none is left or the region has moved on.
// claim_ holds the epoch and the number of chunks not yet claimed; only a successful
// compare-exchange on it hands out a chunk, so the region's fields (read after seeing `epoch`
// published) are used only while the region is live: it cannot end while a chunk is unclaimed.
void ThreadPool::run_chunks(int slot, uint32_t epoch) {
  const ChunkFn fn = fn_.load(std::memory_order_acquire);
  const void* ctx = ctx_.load(std::memory_order_acquire);
  const int64_t n = n_.load(std::memory_order_acquire), chunk = chunk_.load(std::memory_order_acquire);
  const uint32_t chunks = chunks_.load(std::memory_order_acquire);
  uint64_t c = claim_.load(std::memory_order_acquire);
  uint32_t ran = 0;
  for (;;) {
    const auto left = static_cast<uint32_t>(c);
    if (static_cast<uint32_t>(c >> 32) != epoch || left == 0) break;
    if (!claim_.compare_exchange_weak(c, c - 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    const int64_t i = static_cast<int64_t>(chunks - left);
    const int64_t b = i * chunk, e = std::min(n, b + chunk);
    fn(ctx, b, e, slot);
    ++ran;
    if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == chunks && caller_sleeping_.load(std::memory_order_seq_cst))
      futex_wake(&done_);
    c = claim_.load(std::memory_order_acquire);
  }
  if (slot != 0 && ran) chunks_by_workers_.fetch_add(ran, std::memory_order_relaxed);
}

void ThreadPool::worker_main(int slot) {
  Worker* self = workers_[slot - 1];
  prefault_stack();
  apply_thread_policy(options_.cpus.empty() ? -1 : options_.cpus[slot % options_.cpus.size()], options_.realtime, options_.realtime_priority);
  // An OpenMP region opened on this thread (oneDNN code in a chunk) runs on it alone: with the
  // default team size libgomp would give this thread a team of its own, a second set of spinning
  // OpenMP threads beside the caller's team, on cores that are already busy.
  omp_set_num_threads(1);
  self->started.store(true, std::memory_order_release);
  t_in_region = true;  // a kernel's own parallel_for inside a chunk runs inline
  uint32_t seen = self->joined_epoch.load();
  const int64_t spin_ns = int64_t{options_.spin_us} * 1000;
  while (!stopping_.load(std::memory_order_acquire)) {
    uint32_t e = epoch_.load(std::memory_order_acquire);
    if (e == seen) {
      const int64_t until = now_ns() + spin_ns;
      const uint32_t spin_epoch = spin_epoch_.load(std::memory_order_acquire);
      while ((e = epoch_.load(std::memory_order_acquire)) == seen && now_ns() < until && !stopping_.load(std::memory_order_relaxed) &&
             spin_epoch_.load(std::memory_order_relaxed) == spin_epoch)
        _mm_pause();
      if (e == seen) {
        self->sleep_word.store(1, std::memory_order_seq_cst);
        e = epoch_.load(std::memory_order_seq_cst);
        if (e == seen && !stopping_.load())
          while (self->sleep_word.load(std::memory_order_acquire) == 1 && !stopping_.load()) futex_wait(&self->sleep_word, 1);
        self->sleep_word.store(0, std::memory_order_relaxed);
        continue;
      }
    }
    seen = e;
    self->joined_epoch.store(e, std::memory_order_release);
    if (slot < max_slots_.load(std::memory_order_acquire)) run_chunks(slot, e);
  }
}

// Regions run on OpenMP's team while it is on time (the default), or always on kiln's workers with
// KILN_THREAD_POOL=kiln (for A/B measurements in one binary, and for TSan, which cannot see into
// libgomp).
static bool openmp_mode() {
  static const bool on = [] {
    const char* env = std::getenv("KILN_THREAD_POOL");
    return !env || std::string(env) != "kiln";
  }();
  return on;
}

// One region on OpenMP's team of `team` threads: the work of a run then wakes one set of threads,
// not two in turn (each switch between a step on kiln's workers and a oneDNN step, which runs on
// OpenMP's team, found the other set asleep: a futex wake-up, tens of microseconds on a VM).
void ThreadPool::run_openmp_region(int64_t n, int64_t grain, ChunkFn fn, const void* ctx, int team) {
  const int64_t wanted = std::min<int64_t>({(n + grain - 1) / grain, int64_t{team} * kChunksPerThread, int64_t{UINT32_MAX}});
  const int64_t chunk = (n + wanted - 1) / wanted;
  // Each thread first runs its own contiguous share of the chunks (slot s: the s-th share), then
  // takes what is left of the others' from their fronts. Consecutive steps split their rows alike,
  // so a step reads mostly what the same core wrote in the step before: with chunks claimed in one
  // shared order the split changed from step to step, and the memory-bound steps of the
  // convolutional nets (Concat, pools, elementwise) read half their input from the other core.
  struct alignas(64) Share {
    std::atomic<int64_t> next;
    int64_t end;
  };
  constexpr int kMaxShares = 16;
  Share shares[kMaxShares];
  const int64_t chunks = (n + chunk - 1) / chunk, per = (chunks + team - 1) / team;
  const bool by_share = team <= kMaxShares;
  for (int s = 0; by_share && s < team; ++s) {
    shares[s].next.store(std::min(chunks, s * per), std::memory_order_relaxed);
    shares[s].end = std::min(chunks, (s + 1) * per);
  }
  std::atomic<int64_t> next{0};
  const int64_t start = now_ns();
  int64_t own_end = start, own_chunks = 0;
  regions_.fetch_add(1, std::memory_order_relaxed);
#pragma omp parallel num_threads(team)
  {
    t_in_region = true;
    const int slot = omp_get_thread_num();
    // Chunks claimed one at a time: a thread that joins late finds its share taken.
    int64_t mine = 0;
    if (by_share) {
      for (int k = 0; k < team; ++k) {
        Share& share = shares[(slot + k) % team];
        for (int64_t i; (i = share.next.fetch_add(1, std::memory_order_relaxed)) < share.end; ++mine)
          fn(ctx, i * chunk, std::min(n, (i + 1) * chunk), slot);
      }
    } else {
      for (int64_t b; (b = next.fetch_add(chunk, std::memory_order_relaxed)) < n; ++mine) fn(ctx, b, std::min(n, b + chunk), slot);
    }
    if (slot == 0) {
      own_end = now_ns();
      own_chunks = mine;
    }
    t_in_region = false;
  }
  // The region's end barrier waits for every thread to arrive, even one with nothing left to do:
  // a wait far longer than a chunk takes means a worker was not running (a co-tenant holds its
  // core), and the next regions go to kiln's workers for a while, as after a late probe.
  const int64_t chunk_ns = (own_end - start) / std::max<int64_t>(own_chunks, 1);
  if (now_ns() - own_end >= std::max<int64_t>(kLateRegionWaitNs, 3 * chunk_ns)) {
    late_workers_.fetch_add(1, std::memory_order_relaxed);
    report_late_openmp_team();
  }
}

void ThreadPool::run_region(int64_t n, int64_t grain, ChunkFn fn, const void* ctx, int max_slots) {
  if (n <= 0) return;
  // OpenMP's team while it is on time (runtime/openmp_team.h), kiln's workers while it is late.
  std::optional<OpenmpRegionScope> team_scope;
  if (openmp_mode() && !t_in_region && team_size_ > 1 && max_slots > 1 && n > grain) {
    team_scope.emplace();
    const int team = team_scope->solo() ? 1 : std::min({team_size_, max_slots, omp_get_max_threads()});
    bool expected = false;
    if (team > 1 && busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
      run_openmp_region(n, grain, fn, ctx, team);
      busy_.store(false, std::memory_order_release);
      return;
    }
  }
  bool expected = false;
  if (team_size_ <= 1 || max_slots <= 1 || t_in_region || n <= grain || !busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
    inline_loops_.fetch_add(1, std::memory_order_relaxed);
    const bool outer = t_in_region;
    t_in_region = true;
    fn(ctx, 0, n, 0);
    t_in_region = outer;
    return;
  }
  const int64_t now = now_ns();
  auto wanted_worker = [&](const Worker* w) { return w->slot < max_slots && w->benched_until.load(std::memory_order_relaxed) <= now; };
  int helpers = 0;
  for (Worker* w : workers_) helpers += wanted_worker(w);
  const int64_t team = 1 + std::max(helpers, 0);
  const int64_t wanted = std::min<int64_t>({(n + grain - 1) / grain, team * kChunksPerThread, int64_t{UINT32_MAX}});
  const int64_t chunk = (n + wanted - 1) / wanted;
  const auto chunks = static_cast<uint32_t>((n + chunk - 1) / chunk);

  fn_.store(fn, std::memory_order_relaxed);
  ctx_.store(ctx, std::memory_order_relaxed);
  max_slots_.store(max_slots, std::memory_order_relaxed);
  n_.store(n, std::memory_order_relaxed);
  chunk_.store(chunk, std::memory_order_relaxed);
  chunks_.store(chunks, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  const uint32_t epoch = epoch_.load(std::memory_order_relaxed) + 1;
  claim_.store(static_cast<uint64_t>(epoch) << 32 | chunks, std::memory_order_release);
  epoch_.store(epoch, std::memory_order_seq_cst);
  for (Worker* w : workers_)
    if (wanted_worker(w) && w->sleep_word.exchange(0, std::memory_order_seq_cst) == 1)
      futex_wake(&w->sleep_word);

  t_in_region = true;
  run_chunks(0, epoch);
  t_in_region = false;
  const int64_t own_end = now_ns();
  // Every chunk is claimed; wait for the ones still running on workers. Spin briefly (they are
  // usually about to finish), then sleep so a worker sharing this core can run.
  const int64_t spin_until = now_ns() + 20'000;
  uint32_t d;
  while ((d = done_.load(std::memory_order_acquire)) != chunks) {
    if (now_ns() < spin_until) {
      _mm_pause();
      continue;
    }
    caller_sleeping_.store(1, std::memory_order_seq_cst);
    if ((d = done_.load(std::memory_order_seq_cst)) != chunks) futex_wait(&done_, d);
    caller_sleeping_.store(0, std::memory_order_relaxed);
  }
  // A worker that did not even look at a region that ran this long was not running; one the
  // caller waited on far longer than a chunk takes was preempted inside its chunk. Either way its
  // core is busy: leave it out for a while.
  const int64_t end = now_ns();
  const int64_t chunk_ns = (own_end - now) / std::max<int64_t>(1, chunks / team);
  const bool stalled = end - own_end >= std::max<int64_t>(kLateNs, 3 * chunk_ns);
  for (Worker* w : workers_) {
    if (!wanted_worker(w)) continue;
    const bool joined = w->joined_epoch.load(std::memory_order_acquire) == epoch;
    if (joined && !stalled) {
      w->bench_ns = kFirstBenchNs;
    } else if (stalled || end - now >= kLateNs) {
      w->benched_until.store(end + w->bench_ns, std::memory_order_relaxed);
      w->bench_ns = std::min(w->bench_ns * 2, kMaxBenchNs);
      late_workers_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  regions_.fetch_add(1, std::memory_order_relaxed);
  busy_.store(false, std::memory_order_release);
}

}  // namespace kiln
