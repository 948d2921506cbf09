#include "tools/run_options.h"

#include <omp.h>

#include <cstdio>
#include <cstdlib>

#include "runtime/memory_budget.h"

namespace kiln {

const char* const kRunOptionsHelp =
    "  --plugin LIB: a plugin library the engine may load (repeatable); an engine never makes kiln open a library not named here\n"
    "  --plugin-dir DIR: allow the plugin libraries directly in DIR\n"
    "  --max-memory SIZE: cap on weights, arenas and state (e.g. 2G; also KILN_MAX_MEMORY); past it is a one-line error\n"
    "  --lock-memory: mlock the engine and every later allocation (no page of the model is swapped out)\n"
    "  --threads N: kiln's thread pool size, the calling thread included (default: the CPUs this process may use)\n"
    "  --pin-threads CPU[,CPU...]: pin the calling thread to the first CPU and the pool's workers to the next ones\n"
    "  --realtime[=PRIO]: run kiln's threads SCHED_FIFO at PRIO (default 10; needs root or CAP_SYS_NICE)\n";

namespace {

StatusOr<int> parse_int(const std::string& flag, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || n < lo || n > hi)
    return InvalidArgument(flag + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
  return static_cast<int>(n);
}

}  // namespace

StatusOr<bool> parse_run_option(int argc, char** argv, int* i, RunOptions* o) {
  const std::string s = argv[*i];
  auto value = [&]() -> StatusOr<std::string> {
    if (*i + 1 >= argc) return InvalidArgument(s + " needs a value");
    return std::string(argv[++*i]);
  };
  if (s == "--plugin") {
    KILN_ASSIGN_OR_RETURN(std::string v, value());
    o->load.allowed_plugins.push_back(v);
  } else if (s == "--plugin-dir") {
    KILN_ASSIGN_OR_RETURN(std::string v, value());
    o->load.plugin_dirs.push_back(v);
  } else if (s == "--max-memory") {
    KILN_ASSIGN_OR_RETURN(std::string v, value());
    KILN_ASSIGN_OR_RETURN(o->load.max_memory, parse_memory_size(v));
    if (o->load.max_memory == 0) return InvalidArgument("--max-memory must be more than 0 bytes");
  } else if (s == "--lock-memory") {
    o->load.lock_memory = true;
  } else if (s == "--threads") {
    KILN_ASSIGN_OR_RETURN(std::string v, value());
    KILN_ASSIGN_OR_RETURN(o->pool.threads, parse_int(s, v, 1, 1024));
    o->configure_pool = true;
  } else if (s == "--pin-threads") {
    KILN_ASSIGN_OR_RETURN(std::string v, value());
    o->pool.cpus.clear();
    size_t pos = 0;
    while (pos <= v.size()) {
      const size_t comma = v.find(',', pos);
      const std::string part = v.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      KILN_ASSIGN_OR_RETURN(int cpu, parse_int(s, part, 0, 4095));
      o->pool.cpus.push_back(cpu);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    o->configure_pool = true;
  } else if (s == "--realtime" || s.rfind("--realtime=", 0) == 0) {
    o->pool.realtime = true;
    if (s.size() > 10) {
      KILN_ASSIGN_OR_RETURN(o->pool.realtime_priority, parse_int("--realtime", s.substr(11), 1, 99));
    }
    o->configure_pool = true;
  } else {
    return false;
  }
  return true;
}

Status apply_run_options(RunOptions* o, const char* tool) {
  if (o->load.max_memory) {
    set_max_memory(o->load.max_memory);
  } else if (const char* env = std::getenv("KILN_MAX_MEMORY"); env && *env) {
    auto cap = parse_memory_size(env);
    if (!cap.ok()) return cap.status().with_context("KILN_MAX_MEMORY");
    set_max_memory(*cap);
  }
  if (o->configure_pool) {
    if (o->pool.threads == 0 && !o->pool.cpus.empty()) o->pool.threads = static_cast<int>(o->pool.cpus.size());
    if (o->pool.threads > 0) omp_set_num_threads(o->pool.threads);  // oneDNN's primitives run on OpenMP
    Status st = ThreadPool::global().configure(o->pool);
    if (!st.ok()) std::fprintf(stderr, "%s: warning: %s\n", tool, st.message().c_str());
  }
  return Status::Ok();
}

}  // namespace kiln
