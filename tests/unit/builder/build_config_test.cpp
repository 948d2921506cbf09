// The YAML build config: valid configs land in BuildConfig with their defaults, and every error
// names the dotted key path and its line (or the --set KEY that introduced it).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "builder/build_config.h"

namespace kiln {
namespace {

using Overrides = std::vector<std::pair<std::string, std::string>>;

const char* kMinimal = R"(model: m.onnx
profiles:
  full:
    dims: {timesteps: 6, new_seq: 1644}
)";

const char* kValid = R"(model: ../models/ct.onnx
output: out/ct.engine
precision: bf16
threads: 2
profiles:
  full:
    dims: {timesteps: 6, cached_seq: 0, new_seq: 1644, total_seq: 1644}
  incremental:
    dims:
      timesteps: 1
      cached_seq: {min: 274, opt: 1370, max: 1370}
    shapes:
      cached_kv: {min: [8, 2, 1, 274, 384], opt: [8, 2, 1, 1370, 384], max: [8, 2, 1, 1370, 384]}
      fixed_in: [1, 3]
inputs:
  mask: {generator: block_causal, block: 274}
  turn_signal: {generator: randint, low: 0, high: 3}
  some_float: {generator: uniform, low: -1, high: 1.5, seed: 7}
benchmark: {rate_hz: 20, warmup: 3, iterations: 40, rounds: 4}
plugins: {load: [plugins/libfoo.so, /abs/libbar.so]}
fusions: {attention: required}
passes: {disable: [constant_folding]}
streaming:
  cold_start: full
  step: incremental
  steps: 12
  state:
    - {output: kv_cache, input: cached_kv, axis: 3}
    - {output: proj, input: cached_proj, axis: -1}
  window: {tokens_per_step: 274, max_steps: 5}
)";

// Parses `text` and expects an error whose message contains every one of `parts`.
void expect_error(const std::string& text, const std::vector<std::string>& parts, const Overrides& overrides = {}) {
  auto r = parse_build_config(text, "cfg/test.yaml", overrides);
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << parts.front() << "'";
  for (const auto& p : parts) EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "one line: " << r.status().message();
}

TEST(BuildConfig, ValidConfigFillsEveryField) {
  auto r = parse_build_config(kValid, "cfg/test.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const BuildConfig& c = *r;
  EXPECT_EQ(c.config_path, "cfg/test.yaml");
  EXPECT_EQ(c.model, "models/ct.onnx");
  EXPECT_EQ(c.output, "cfg/out/ct.engine");
  EXPECT_EQ(c.precision, "bf16");
  EXPECT_EQ(c.threads, 2);

  ASSERT_EQ(c.profiles.size(), 2u);
  EXPECT_EQ(c.profiles[0].name, "full");
  EXPECT_EQ(c.profiles[0].line, 6);
  EXPECT_EQ(c.profiles[1].name, "incremental");
  EXPECT_EQ(c.profiles[1].line, 8);
  const auto& full = c.profiles[0].dims;
  ASSERT_EQ(full.size(), 4u);
  EXPECT_EQ(full.at("timesteps").min, 6);
  EXPECT_EQ(full.at("timesteps").max, 6);
  EXPECT_TRUE(full.at("cached_seq").fixed());
  EXPECT_EQ(full.at("new_seq").opt, 1644);
  const auto& inc = c.profiles[1];
  EXPECT_EQ(inc.dims.at("cached_seq").min, 274);
  EXPECT_EQ(inc.dims.at("cached_seq").opt, 1370);
  EXPECT_EQ(inc.dims.at("cached_seq").max, 1370);
  EXPECT_FALSE(inc.dims.at("cached_seq").fixed());
  EXPECT_EQ(inc.shapes.at("cached_kv").min, (std::vector<int64_t>{8, 2, 1, 274, 384}));
  EXPECT_EQ(inc.shapes.at("cached_kv").opt, (std::vector<int64_t>{8, 2, 1, 1370, 384}));
  EXPECT_EQ(inc.shapes.at("cached_kv").max, (std::vector<int64_t>{8, 2, 1, 1370, 384}));
  EXPECT_EQ(inc.shapes.at("fixed_in").min, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(inc.shapes.at("fixed_in").max, (std::vector<int64_t>{1, 3}));

  ASSERT_EQ(c.inputs.size(), 3u);
  EXPECT_EQ(c.inputs.at("mask").kind, "block_causal");
  EXPECT_EQ(c.inputs.at("mask").block, 274);
  EXPECT_EQ(c.inputs.at("turn_signal").kind, "randint");
  EXPECT_EQ(c.inputs.at("turn_signal").low, 0);
  EXPECT_EQ(c.inputs.at("turn_signal").high, 3);
  EXPECT_EQ(c.inputs.at("turn_signal").seed, 0u);
  EXPECT_EQ(c.inputs.at("some_float").low, -1);
  EXPECT_EQ(c.inputs.at("some_float").high, 1.5);
  EXPECT_EQ(c.inputs.at("some_float").seed, 7u);

  EXPECT_EQ(c.benchmark.rate_hz, 20);
  EXPECT_DOUBLE_EQ(c.benchmark.budget_ms, 50);  // 1000 / rate_hz when not given
  EXPECT_EQ(c.benchmark.warmup, 3);
  EXPECT_EQ(c.benchmark.iterations, 40);
  EXPECT_EQ(c.benchmark.rounds, 4);
  EXPECT_EQ(c.plugin_libraries, (std::vector<std::string>{"cfg/plugins/libfoo.so", "/abs/libbar.so"}));
  EXPECT_EQ(c.fusions.at("attention"), "required");
  EXPECT_EQ(c.disabled_passes, (std::vector<std::string>{"constant_folding"}));

  const StreamingConfig& s = c.streaming;
  EXPECT_TRUE(s.present);
  EXPECT_EQ(s.cold_start, "full");
  EXPECT_EQ(s.step, "incremental");
  EXPECT_EQ(s.steps, 12);
  ASSERT_EQ(s.state.size(), 2u);
  EXPECT_EQ(s.state[0].output, "kv_cache");
  EXPECT_EQ(s.state[0].input, "cached_kv");
  EXPECT_EQ(s.state[0].axis, 3);
  EXPECT_EQ(s.state[1].axis, -1);
  EXPECT_EQ(s.tokens_per_step, 274);
  EXPECT_EQ(s.max_steps, 5);
}

TEST(BuildConfig, DefaultsWhenKeysAreAbsent) {
  auto r = parse_build_config(kMinimal, "/etc/kiln/x.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model, "/etc/kiln/m.onnx");
  EXPECT_EQ(r->output, "/etc/kiln/m.engine");  // <model stem>.engine next to the config
  EXPECT_EQ(r->precision, "fp32");
  EXPECT_EQ(r->threads, 0);
  EXPECT_EQ(r->benchmark.rate_hz, 10);
  EXPECT_DOUBLE_EQ(r->benchmark.budget_ms, 100);
  EXPECT_EQ(r->benchmark.warmup, 5);
  EXPECT_EQ(r->benchmark.iterations, 100);
  EXPECT_TRUE(r->inputs.empty());
  EXPECT_TRUE(r->plugin_libraries.empty());
  EXPECT_TRUE(r->fusions.empty());
  EXPECT_FALSE(r->streaming.present);

  // An explicit budget wins over 1000 / rate_hz; keys with no value fall back to defaults.
  auto b = parse_build_config(std::string(kMinimal) + "benchmark: {rate_hz: 4, budget_ms: 120}\nstreaming:\n",
                              "x.yaml");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_DOUBLE_EQ(b->benchmark.budget_ms, 120);
  EXPECT_FALSE(b->streaming.present);
  EXPECT_EQ(b->model, "m.onnx");
}

TEST(BuildConfig, UnknownKeysAtEveryLevel) {
  expect_error(std::string(kMinimal) + "modle: x\n",
               {"cfg/test.yaml:5: unknown key 'modle' (expected one of: model, output, precision"});
  expect_error("model: m.onnx\nprofiles:\n  full:\n    dimz: {t: 1}\n",
               {"cfg/test.yaml:4: unknown key 'profiles.full.dimz' (expected one of: dims, shapes)"});
  expect_error("model: m.onnx\nprofiles:\n  full:\n    dims:\n      t: {min: 1, opt: 2, maks: 3}\n",
               {"cfg/test.yaml:5:", "unknown key 'profiles.full.dims.t.maks' (expected one of: min, opt, max)"});
  expect_error(std::string(kMinimal) + "benchmark:\n  rate_hz: 10\n  iteration: 5\n",
               {"cfg/test.yaml:7: unknown key 'benchmark.iteration'"});
  expect_error(std::string(kMinimal) + "benchmark: {rounds: 0}\n", {"cfg/test.yaml:", "benchmark.rounds"});
  expect_error(std::string(kMinimal) + "inputs:\n  mask: {generator: block_causal, block: 4, low: 0}\n",
               {"cfg/test.yaml:6:", "unknown key 'inputs.mask.low' (expected one of: generator, block)"});
  expect_error(std::string(kMinimal) + "streaming:\n  cold_start: full\n  step: full\n  state:\n"
                                       "    - {output: a, input: b, axis: 0, dim: 1}\n",
               {"cfg/test.yaml:9:", "unknown key 'streaming.state[0].dim'"});
  expect_error(std::string(kMinimal) + "fusions: {atention: auto}\n",
               {"cfg/test.yaml:5:", "unknown key 'fusions.atention' (expected one of: attention)"});
  expect_error(std::string(kMinimal) + "benchmark: {warmup: 1}\nbenchmark: {warmup: 2}\n",
               {"cfg/test.yaml:6:", "duplicate key 'benchmark'"});
}

TEST(BuildConfig, WrongTypes) {
  expect_error("model: m.onnx\nprofiles:\n  full:\n    dims: {timesteps: six}\n",
               {"cfg/test.yaml:4: 'profiles.full.dims.timesteps': expected an integer or {min, opt, max}, got 'six'"});
  expect_error(std::string(kMinimal) + "threads: 1.5\n",
               {"cfg/test.yaml:5: 'threads': expected an integer >= 0", "got '1.5'"});
  expect_error(std::string(kMinimal) + "precision: fp16\n",
               {"cfg/test.yaml:5: 'precision': expected one of fp32, bf16, int8, got 'fp16'"});
  expect_error(std::string(kMinimal) + "benchmark: [1, 2]\n",
               {"cfg/test.yaml:5: 'benchmark': expected a map, got '[1, 2]'"});
  expect_error(std::string(kMinimal) + "plugins: {load: lib.so}\n",
               {"cfg/test.yaml:5: 'plugins.load': expected a list of plugin library paths, got 'lib.so'"});
  expect_error("model: [a, b]\nprofiles: {full: {}}\n", {"cfg/test.yaml:1: 'model': expected a path"});
  expect_error(std::string(kMinimal) + "passes: {disable: [constant_foldin]}\n",
               {"cfg/test.yaml:5: 'passes.disable[0]': expected a pass name", "constant_folding", "'constant_foldin'"});
  expect_error(std::string(kMinimal) + "fusions: {attention: maybe}\n",
               {"cfg/test.yaml:5: 'fusions.attention': expected one of required, auto, off, got 'maybe'"});
  // Octal and hex look-alikes are not integers here.
  expect_error(std::string(kMinimal) + "threads: 0x10\n", {"cfg/test.yaml:5: 'threads'", "got '0x10'"});
  expect_error(std::string(kMinimal) + "threads: 3000000000\n",
               {"cfg/test.yaml:5: 'threads': expected an integer from 0 to 2147483647, got '3000000000'"});
  expect_error("- model\n", {"cfg/test.yaml:1:", "expected a map of settings"});
}

TEST(BuildConfig, BadValuesAndRanges) {
  expect_error("model: m.onnx\nprofiles:\n  full:\n    dims:\n      t: {min: 4, opt: 2, max: 8}\n",
               {"cfg/test.yaml:5: 'profiles.full.dims.t': expected min <= opt <= max, got '{min: 4, opt: 2, max: 8}'"});
  expect_error("model: m.onnx\nprofiles:\n  full:\n    dims:\n      t: {min: 1, max: 8}\n",
               {"cfg/test.yaml:5:", "missing required key 'profiles.full.dims.t.opt'"});
  expect_error("model: m.onnx\nprofiles:\n  full:\n    dims:\n      t: -1\n",
               {"cfg/test.yaml:5: 'profiles.full.dims.t': expected an integer >= 0, got '-1'"});
  expect_error("model: m.onnx\nprofiles:\n  p:\n    shapes:\n      x: {min: [1, 2], opt: [1, 2, 3], max: [1, 2, 3]}\n",
               {"cfg/test.yaml:5: 'profiles.p.shapes.x': expected min, opt and max of the same rank"});
  expect_error("model: m.onnx\nprofiles:\n  p:\n    shapes:\n      x: {min: [1, 5], opt: [1, 4], max: [1, 6]}\n",
               {"cfg/test.yaml:5: 'profiles.p.shapes.x': expected min <= opt <= max in every dim (dim 1"});
  expect_error(std::string(kMinimal) + "benchmark:\n  rate_hz: 0\n",
               {"cfg/test.yaml:6: 'benchmark.rate_hz': expected a number > 0, got '0'"});
  expect_error(std::string(kMinimal) + "benchmark:\n  warmup: -1\n",
               {"cfg/test.yaml:6: 'benchmark.warmup': expected an integer >= 0, got '-1'"});
  expect_error(std::string(kMinimal) + "benchmark:\n  iterations: 0\n",
               {"cfg/test.yaml:6: 'benchmark.iterations': expected an integer >= 1, got '0'"});
  expect_error(std::string(kMinimal) + "inputs:\n  ts: {generator: randint, low: 3, high: 3}\n",
               {"cfg/test.yaml:6: 'inputs.ts': expected low < high"});
  expect_error(std::string(kMinimal) + "inputs:\n  mask: {generator: block_causal}\n",
               {"cfg/test.yaml:6:", "missing required key 'inputs.mask.block'"});
  expect_error("profiles: {full: {}}\n", {"cfg/test.yaml:1:", "missing required key 'model'"});
  expect_error("model: m.onnx\nprofiles: {}\n", {"cfg/test.yaml:2: 'profiles': expected at least one profile"});
}

TEST(BuildConfig, UnknownGenerator) {
  expect_error(std::string(kMinimal) + "inputs:\n  x:\n    generator: gaussian\n",
               {"cfg/test.yaml:7: 'inputs.x.generator': expected one of uniform, randint, zeros, ones, block_causal, "
                "causal, got 'gaussian'"});
}

TEST(BuildConfig, StreamingMustNameExistingProfiles) {
  expect_error(std::string(kMinimal) + "streaming:\n  cold_start: full\n  step: incremental\n",
               {"cfg/test.yaml:7: 'streaming.step': expected the name of a profile (one of: full), got 'incremental'"});
  expect_error(std::string(kMinimal) + "streaming:\n  cold_start: ful\n  step: full\n",
               {"cfg/test.yaml:6: 'streaming.cold_start'", "got 'ful'"});
  expect_error(std::string(kMinimal) + "streaming:\n  cold_start: full\n",
               {"cfg/test.yaml:5:", "missing required key 'streaming.step'"});
}

TEST(BuildConfig, SetOverrides) {
  auto r = parse_build_config(kValid, "cfg/test.yaml",
                              {{"benchmark.iterations", "7"},
                               {"profiles.full.dims.timesteps", "{min: 1, opt: 6, max: 6}"},
                               {"profiles.full.dims.extra", "3"},
                               {"inputs.new_in", "{generator: zeros}"},
                               {"plugins.load", "[a.so]"},
                               {"streaming.state.1.axis", "1"},
                               {"output", "x.engine"}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->benchmark.iterations, 7);
  EXPECT_EQ(r->benchmark.warmup, 3);
  const DimRange& t = r->profiles[0].dims.at("timesteps");
  EXPECT_EQ(t.min, 1);
  EXPECT_EQ(t.opt, 6);
  EXPECT_EQ(t.max, 6);
  EXPECT_EQ(r->profiles[0].dims.at("extra").opt, 3);
  EXPECT_EQ(r->inputs.at("new_in").kind, "zeros");
  EXPECT_EQ(r->plugin_libraries, (std::vector<std::string>{"cfg/a.so"}));
  EXPECT_EQ(r->streaming.state[1].axis, 1);
  EXPECT_EQ(r->output, "cfg/x.engine");

  // New key paths create the maps on the way.
  auto n = parse_build_config(kMinimal, "x.yaml",
                              {{"benchmark.rate_hz", "50"}, {"profiles.small.dims.timesteps", "2"}});
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_DOUBLE_EQ(n->benchmark.budget_ms, 20);
  ASSERT_EQ(n->profiles.size(), 2u);
  EXPECT_EQ(n->profiles[1].name, "small");
  EXPECT_EQ(n->profiles[1].line, 0);
  EXPECT_EQ(n->profiles[1].dims.at("timesteps").max, 2);

  // Input names may contain dots: the longest existing key wins.
  auto d = parse_build_config(std::string(kMinimal) + "inputs:\n  a.b: {generator: uniform}\n", "x.yaml",
                              {{"inputs.a.b.high", "4"}});
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->inputs.at("a.b").high, 4);

  // An empty value resets a key to its default.
  auto e = parse_build_config(kValid, "x.yaml", {{"precision", ""}});
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->precision, "fp32");
}

TEST(BuildConfig, InvalidSetOverridesNameTheKey) {
  expect_error(kMinimal, {"cfg/test.yaml: --set profiles.full.dimz.t: unknown key 'profiles.full.dimz'"},
               {{"profiles.full.dimz.t", "1"}});
  expect_error(kMinimal, {"cfg/test.yaml: --set benchmark.iterationz: unknown key 'benchmark.iterationz'"},
               {{"benchmark.iterationz", "5"}});
  expect_error(kMinimal, {"--set benchmark.iterations: 'benchmark.iterations': expected an integer >= 1, got 'many'"},
               {{"benchmark.iterations", "many"}});
  expect_error(kMinimal,
               {"--set profiles.full.dims.timesteps: 'profiles.full.dims.timesteps': expected min <= opt <= max"},
               {{"profiles.full.dims.timesteps", "{min: 7, opt: 6, max: 6}"}});
  expect_error(kMinimal, {"--set profiles.full.dims.timesteps: unknown key 'profiles.full.dims.timesteps.mni'"},
               {{"profiles.full.dims.timesteps", "{mni: 1, opt: 6, max: 6}"}});
  // A scalar in the way is replaced by a map, which is then reported like the same map in the file.
  expect_error(kMinimal, {"--set threads.x: 'threads': expected an integer >= 0, got '{x: 1}'"}, {{"threads.x", "1"}});
  expect_error(kMinimal, {"--set a..b: expected a dotted key path"}, {{"a..b", "1"}});
  expect_error(kMinimal, {"--set benchmark: invalid YAML value"}, {{"benchmark", "{a: [}"}});
  expect_error(kValid, {"--set streaming.state.5.axis: 'streaming.state' is a list of 2 entries"},
               {{"streaming.state.5.axis", "1"}});
  // Values the overrides do not touch still report their line.
  expect_error(std::string(kMinimal) + "threads: -2\n", {"cfg/test.yaml:5: 'threads'"}, {{"benchmark.warmup", "1"}});
}

TEST(BuildConfig, MissingEmptyAndMalformedFiles) {
  auto missing = load_build_config("/nonexistent/dir/cfg.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/cfg.yaml"), std::string::npos);
  EXPECT_NE(missing.status().message().find("No such file"), std::string::npos) << missing.status().message();

  expect_error("", {"cfg/test.yaml: the config is empty"});
  expect_error("# only a comment\n\n", {"cfg/test.yaml: the config is empty"});
  expect_error("model: m.onnx\nprofiles:\n  full: {dims: {t: 1}\nthreads: 2\n", {"cfg/test.yaml:", "invalid YAML"});
  expect_error("model: m.onnx\n  threads: 2\n bad: [\n", {"cfg/test.yaml:2: invalid YAML"});
  // The second document is named by the line of its "---" marker.
  expect_error(std::string(kMinimal) + "---\nmodel: n.onnx\n", {"cfg/test.yaml:5:", "a single YAML document"});
  // yaml-cpp reads this text as endless empty documents (a fuzz finding): one error, at once.
  expect_error("- ju[st\n,\xa4\xa4passes^:\xa4\xa4ost", {"cfg/test.yaml:", "a single YAML document"});

  const auto dir = std::filesystem::temp_directory_path() / "kiln_build_config_test";
  std::filesystem::create_directories(dir);
  const auto path = (dir / "bad.yaml").string();
  std::ofstream(path) << "model: m.onnx\nprofiles: {full: {dims: {t: 1}}}\nthreads: [\n";
  auto bad = load_build_config(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ":"), std::string::npos) << bad.status().message();
  auto dir_as_file = load_build_config(dir.string());
  ASSERT_FALSE(dir_as_file.ok());
  EXPECT_NE(dir_as_file.status().message().find("directory"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(BuildConfig, ShippedConfigsLoad) {
  const std::string root = KILN_SOURCE_DIR;
  auto full = load_build_config(root + "/configs/full.yaml");
  ASSERT_TRUE(full.ok()) << full.status().message();
  EXPECT_EQ(full->model, root + "/models/out/control_transformer.onnx");
  EXPECT_EQ(full->output, root + "/build/engines/control_transformer_full.engine");
  ASSERT_EQ(full->profiles.size(), 1u);
  EXPECT_EQ(full->profiles[0].name, "full");
  EXPECT_EQ(full->profiles[0].dims.at("timesteps").opt, 6);
  EXPECT_EQ(full->profiles[0].dims.at("cached_seq").max, 0);
  EXPECT_EQ(full->profiles[0].dims.at("new_seq").min, 1644);
  EXPECT_EQ(full->profiles[0].dims.at("total_seq").max, 1644);
  EXPECT_FALSE(full->streaming.present);

  auto inc = load_build_config(root + "/configs/incremental.yaml", {{"streaming.steps", "20"}});
  ASSERT_TRUE(inc.ok()) << inc.status().message();
  EXPECT_EQ(inc->output, root + "/build/engines/control_transformer.engine");
  ASSERT_EQ(inc->profiles.size(), 2u);
  EXPECT_EQ(inc->profiles[1].name, "incremental");
  EXPECT_EQ(inc->profiles[1].dims.at("new_seq").opt, 274);
  EXPECT_EQ(inc->profiles[1].dims.at("cached_seq").min, 274);
  EXPECT_EQ(inc->profiles[1].dims.at("total_seq").opt, 1644);
  EXPECT_EQ(inc->inputs.at("mask").kind, "block_causal");
  EXPECT_EQ(inc->inputs.at("mask").block, 274);
  EXPECT_EQ(inc->inputs.at("batch_data_meta_vehiclestate_turn_signal").kind, "randint");
  EXPECT_EQ(inc->inputs.at("batch_data_meta_vehiclestate_turn_signal").high, 3);
  EXPECT_EQ(inc->benchmark.rate_hz, 10);
  EXPECT_DOUBLE_EQ(inc->benchmark.budget_ms, 100);
  EXPECT_EQ(inc->benchmark.iterations, 50);
  EXPECT_EQ(inc->streaming.cold_start, "full");
  EXPECT_EQ(inc->streaming.step, "incremental");
  EXPECT_EQ(inc->streaming.steps, 20);
  ASSERT_EQ(inc->streaming.state.size(), 2u);
  EXPECT_EQ(inc->streaming.state[1].input, "cached_projected_embeddings");
  EXPECT_EQ(inc->streaming.max_steps, 5);
}

// history: {db, label} (engine-perf's history file, relative to the config) and
// benchmark.enforce_budget; wrong values name the key.
TEST(BuildConfig, HistoryAndBudgetGate) {
  auto r = parse_build_config(std::string(kMinimal) + "history: {db: ../build/perf.db, label: nightly}\nbenchmark: {enforce_budget: true}\n",
                              "cfg/test.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->history.db, "build/perf.db");
  EXPECT_EQ(r->history.label, "nightly");
  EXPECT_TRUE(r->benchmark.enforce_budget);
  auto d = parse_build_config(kMinimal, "cfg/test.yaml");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->history.db.empty());
  EXPECT_FALSE(d->benchmark.enforce_budget);
  auto bad = parse_build_config(std::string(kMinimal) + "benchmark: {enforce_budget: maybe}\n", "cfg/test.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'benchmark.enforce_budget'"), std::string::npos) << bad.status().message();
  auto typo = parse_build_config(std::string(kMinimal) + "history: {database: x.db}\n", "cfg/test.yaml");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("'history.database'"), std::string::npos) << typo.status().message();
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(BuildConfig, Int8CalibrationAndOverrides) {
  const std::string text = std::string(kMinimal) + R"(precision: int8
calibration: {method: percentile, percentile: 99.9, batches: 4, holdout: 3, cache: c/ct.calib, profile: full, tolerance: 0.1, inputs: generators}
precision_overrides: {"/blocks.7/*": fp32, "*out_proj*": bf16}
)";
  auto r = parse_build_config(text, "cfg/test.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->precision, "int8");
  const CalibrationConfig& c = r->calibration;
  EXPECT_EQ(c.method, "percentile");
  EXPECT_DOUBLE_EQ(c.percentile, 99.9);
  EXPECT_EQ(c.batches, 4);
  EXPECT_EQ(c.holdout, 3);
  EXPECT_EQ(c.cache, "cfg/c/ct.calib");  // relative to the config's folder
  EXPECT_EQ(c.profile, "full");
  EXPECT_DOUBLE_EQ(c.tolerance, 0.1);
  ASSERT_EQ(r->precision_overrides.size(), 2u);
  EXPECT_EQ(r->precision_overrides[0].pattern, "/blocks.7/*");
  EXPECT_EQ(r->precision_overrides[0].precision, "fp32");
  EXPECT_EQ(r->precision_overrides[1].precision, "bf16");
  // Defaults.
  auto d = parse_build_config(std::string(kMinimal) + "precision: int8\n", "cfg/test.yaml");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->calibration.method, "entropy");
  EXPECT_EQ(d->calibration.batches, 8);
  EXPECT_TRUE(d->calibration.cache.empty());
}

TEST(BuildConfig, Int8BadValuesNameTheKey) {
  const std::string base = std::string(kMinimal) + "precision: int8\n";
  expect_error(base + "calibration: {method: kl}\n", {"cfg/test.yaml:6", "'calibration.method'", "minmax, percentile, entropy", "'kl'"});
  expect_error(base + "calibration: {batches: 0}\n", {"'calibration.batches'"});
  expect_error(base + "calibration: {percentile: 101}\n", {"'calibration.percentile'"});
  expect_error(base + "calibration: {tolerance: -1}\n", {"'calibration.tolerance'"});
  expect_error(base + "calibration: {inputs: folder/}\n", {"'calibration.inputs'", "generators"});
  expect_error(base + "calibration: {batchez: 3}\n", {"unknown key 'calibration.batchez'"});
  expect_error(base + "precision_overrides: {\"x*\": int8}\n", {"'precision_overrides.x*'", "fp32, bf16"});
}

}  // namespace
}  // namespace kiln
