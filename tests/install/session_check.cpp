// Built by tests/install/test_install.py against the installed headers and libkiln_runtime.so
// only: kiln::Session (include/kiln/session.h) over seed 003's set_cache / get_cache engine.
//   session_check ENGINE   prints "session ok" and exits 0, or the first failure and exits 1.
#include <cstdio>
#include <cstring>

#include "kiln/kiln.hpp"

namespace {

int fail(const char* what, const kiln::Status& st = kiln::Status()) {
  std::fprintf(stderr, "session_check: %s %s\n", what, st.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return fail("usage: session_check ENGINE");
  auto engine = kiln::Engine::load_file(argv[1]);
  if (!engine.ok()) return fail("load:", engine.status());
  auto created = kiln::Session::create(*engine);
  if (!created.ok()) return fail("create:", created.status());
  kiln::Session& session = **created;

  kiln::Tensor data = kiln::Tensor::zeros(kiln::DType::kFloat32, kiln::Shape{2, 3});
  for (int i = 0; i < 6; ++i) data.as<float>()[i] = 1.0f + static_cast<float>(i);
  const std::pair<std::string, kiln::TensorView> set_in[] = {{"data", data.view()}};
  auto set = session.run("set_cache", set_in);
  if (!set.ok()) return fail("run set_cache:", set.status());
  if (session.last_stats().state_bytes_copied != 0) return fail("set_cache copied state bytes");

  auto cache = session.read_state("cache");
  if (!cache.ok()) return fail("read_state:", cache.status());
  const int64_t cols = cache->shape()[1];
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c)
      if (cache->as<float>()[r * cols + c] != data.as<float>()[r * 3 + c]) return fail("read_state: the written block differs");

  kiln::Tensor query = kiln::Tensor::zeros(kiln::DType::kFloat32, kiln::Shape{2, 3});
  const std::pair<std::string, kiln::TensorView> get_in[] = {{"data", query.view()}};
  auto got = session.run("get_cache", get_in);
  if (!got.ok()) return fail("run get_cache:", got.status());
  if (got->size() != 1 || std::memcmp((*got)[0].second.data, data.data(), data.nbytes()) != 0)
    return fail("get_cache does not return what set_cache wrote");

  kiln::Tensor sevens = kiln::Tensor::zeros(kiln::DType::kFloat32, cache->shape());
  for (int64_t i = 0; i < sevens.numel(); ++i) sevens.as<float>()[i] = 7.0f;
  if (auto st = session.write_state("cache", sevens.view()); !st.ok()) return fail("write_state:", st);
  got = session.run("get_cache", get_in);
  if (!got.ok() || (*got)[0].second.as<float>()[4] != 7.0f) return fail("get_cache after write_state");

  session.reset();
  cache = session.read_state("cache");
  for (int64_t i = 0; cache.ok() && i < cache->numel(); ++i)
    if (cache->as<float>()[i] != 0.0f) return fail("reset left a non-zero element");
  if (session.write_state("cache", data.view()).ok()) return fail("write_state accepted a [2, 3] tensor for the cache");
  std::printf("session ok\n");
  return 0;
}
