// embed: a program that links kiln's runtime (find_package(kiln), kiln::runtime) and runs one
// profile of an engine on inputs from .npy files, writing the outputs as .npy files.
//
//   embed ENGINE PROFILE INPUT_DIR OUTPUT_DIR [--queue N]
//
// INPUT_DIR holds <input>.npy for every input of the profile (`engine-run ENGINE --profile P
// --save-inputs DIR` writes a set). With --queue N the same request also goes N times through a
// kiln::InferQueue of two workers, and every result must equal the direct run's.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

#include "npy.h"

namespace {

// kiln's log into this program's own output, as a program with its own logging would do it.
class PrefixLogger final : public kiln::ILogger {
 public:
  void log(kiln::LogLevel level, const char* message) noexcept override {
    std::fprintf(stderr, "embed: kiln %s: %s\n", level >= kiln::LogLevel::kWarn ? "warning" : "info", message);
  }
};

int fail(const kiln::Status& st) {
  std::fprintf(stderr, "embed: %s\n", st.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && !(argc == 7 && std::strcmp(argv[5], "--queue") == 0)) {
    std::fprintf(stderr, "usage: embed ENGINE PROFILE INPUT_DIR OUTPUT_DIR [--queue N]\n");
    return 2;
  }
  const std::string engine_path = argv[1], profile = argv[2], input_dir = argv[3], output_dir = argv[4];
  const int queued = argc == 7 ? std::atoi(argv[6]) : 0;
  kiln::set_logger(std::make_shared<PrefixLogger>());
  std::printf("kiln %s\n", KILN_VERSION_STRING);

  auto engine = kiln::Engine::load_file(engine_path);
  if (!engine.ok()) return fail(engine.status());
  const int p = (*engine)->find_profile(profile);
  if (p < 0) return fail(kiln::NotFound("engine '" + engine_path + "' has no profile '" + profile + "'"));
  const kiln::ProfileInfo& info = (*engine)->profiles()[p];

  kiln::TensorMap inputs;
  for (const kiln::BindingInfo& b : info.inputs) {
    auto t = npy::read((std::filesystem::path(input_dir) / (b.name + ".npy")).string());
    if (!t.ok()) return fail(t.status());
    std::printf("input  %-45s %-8s %s (profile range %s..%s)\n", b.name.c_str(), kiln::dtype_name(t->dtype()).c_str(),
                t->shape().str().c_str(), b.min.str().c_str(), b.max.str().c_str());
    inputs[b.name] = std::move(t).value();
  }

  auto ctx = (*engine)->create_context(profile);
  if (!ctx.ok()) return fail(ctx.status());
  for (const auto& [name, t] : inputs)
    if (kiln::Status st = (*ctx)->set_input(name, t.view()); !st.ok()) return fail(st);
  if (kiln::Status st = (*ctx)->run(); !st.ok()) return fail(st);

  std::filesystem::create_directories(output_dir);
  for (size_t o = 0; o < (*ctx)->num_outputs(); ++o) {
    const kiln::TensorView& y = (*ctx)->output(o);
    std::printf("output %-45s %-8s %s\n", (*ctx)->output_name(o).c_str(), kiln::dtype_name(y.dtype).c_str(), y.shape.str().c_str());
    if (kiln::Status st = npy::write((std::filesystem::path(output_dir) / ((*ctx)->output_name(o) + ".npy")).string(), y); !st.ok())
      return fail(st);
  }

  if (queued > 0) {
    auto queue = kiln::InferQueue::create(*engine, profile, {.workers = 2});
    if (!queue.ok()) return fail(queue.status());
    std::vector<std::future<kiln::InferResult>> results;
    for (int i = 0; i < queued; ++i) results.push_back((*queue)->submit(inputs));
    for (auto& f : results) {
      kiln::InferResult r = f.get();
      if (!r.ok()) return fail(r.status());
      for (size_t o = 0; o < (*ctx)->num_outputs(); ++o) {
        const kiln::TensorView& want = (*ctx)->output(o);
        const kiln::Tensor& got = r->at((*ctx)->output_name(o));
        if (got.shape() != want.shape || std::memcmp(got.data(), want.data, want.nbytes()) != 0)
          return fail(kiln::Internal("queued result '" + (*ctx)->output_name(o) + "' differs from the direct run"));
      }
    }
    std::printf("queue: %d requests through 2 workers, every result equal to the direct run\n", queued);
  }
  return 0;
}
