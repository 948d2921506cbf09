#include "profiles/history/provenance.h"

#include <openssl/evp.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "kiln_build_info.h"

namespace kiln::history {

namespace fs = std::filesystem;

namespace {

std::string hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

// Runs a command (arguments already quoted) and returns its stdout; empty on failure.
std::string capture(const std::string& cmd, bool* ok) {
  *ok = false;
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *ok = pclose(p) == 0;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

MachineInfo read_machine_info() {
  MachineInfo m;
  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  // The features kiln's kernels dispatch on; a microcode or hypervisor change in others (bug
  // flags, speed) must not split a series.
  static const char* kIsa[] = {"avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
                               "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "sse4_2"};
  while (std::getline(cpu, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && m.cpu_model.empty()) m.cpu_model = value;
    if (key == "flags" && flags.empty()) {
      std::istringstream is(value);
      std::string f;
      while (is >> f) flags.insert(f);
    }
  }
  for (const char* f : kIsa)
    if (flags.count(f)) m.isa.push_back(f);
  std::sort(m.isa.begin(), m.isa.end());
  m.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream mem("/proc/meminfo");
  while (std::getline(mem, line)) {
    long long kb = 0;
    if (std::sscanf(line.c_str(), "MemTotal: %lld kB", &kb) == 1) {
      // Rounded to whole GiB: the kernel's reserved memory moves MemTotal by a few MB between boots.
      const int64_t gib = (static_cast<int64_t>(kb) * 1024 + (int64_t{1} << 29)) >> 30;
      m.memory_bytes = gib << 30;
      break;
    }
  }
  std::string isa;
  for (const auto& f : m.isa) isa += f + " ";
  const std::string key = m.cpu_model + "|" + isa + "|" + std::to_string(m.cores) + "|" + std::to_string(m.memory_bytes);
  m.fingerprint = sha256_hex(key).substr(0, 16);
  return m;
}

LoadAverage read_load_average() {
  LoadAverage l;
  double v[3];
  if (getloadavg(v, 3) == 3) l = {v[0], v[1], v[2], true};
  return l;
}

BuildInfo kiln_build_info() { return {KILN_VERSION, KILN_COMMIT, KILN_COMMIT_DIRTY != 0}; }

RepoState repo_state(const std::string& file) {
  RepoState r;
  std::error_code ec;
  const fs::path dir = fs::absolute(file, ec).parent_path();
  if (ec) return r;
  bool ok = false;
  const std::string git = "git -C " + shell_quote(dir.string());
  r.root = capture(git + " rev-parse --show-toplevel", &ok);
  if (!ok || r.root.empty()) return r;
  r.commit = capture(git + " rev-parse HEAD", &ok);
  if (!ok) return RepoState{};
  r.dirty = !capture(git + " status --porcelain --untracked-files=no", &ok).empty();
  r.present = true;
  return r;
}

StatusOr<std::string> sha256_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot read '" + path + "' to hash it");
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(f.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  return hex(md, len);
}

std::string sha256_hex(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr);
  return hex(md, len);
}

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string iso8601_utc(double unix_time) {
  const std::time_t t = static_cast<std::time_t>(unix_time);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string series_key_of(const std::string& config_path, const RepoState& repo) {
  std::error_code ec;
  const fs::path abs = fs::weakly_canonical(fs::absolute(config_path, ec), ec);
  if (repo.present) {
    const fs::path rel = abs.lexically_relative(fs::weakly_canonical(repo.root, ec));
    if (!rel.empty() && rel.native()[0] != '.') return rel.string();
  }
  return abs.string();
}

}  // namespace kiln::history
