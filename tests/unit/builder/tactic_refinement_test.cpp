// refine_in_context: contested keys are decided by per-step times inside whole runs. The cases use
// the reference convolution (tens of times slower than oneDNN's) as one side, so the right answer
// does not depend on timing noise: whichever side it was listed on, oneDNN wins; steps sharing a
// key take one choice; a per-step mix that is neither variant is run as a whole and kept; and the
// plans judged by whole runs include each thread system alone.
#include <gtest/gtest.h>
#include <omp.h>

#include <random>

#include "builder/plan/build_plan.h"
#include "onnx_model_builder.h"
#include "builder/tactics/tactic_refinement.h"
#include "runtime/openmp_team.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.2f, 0.2f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// x [1, 32, 16, 16] -> a (3x3, 32->32) -> Relu -> b (3x3, 32->32) -> Relu -> c (3x3, 32->16) -> y.
// a and b share a timing-cache key (same shapes and attributes).
std::shared_ptr<Plan> three_convs(std::map<std::string, size_t>* step_of) {
  OnnxModelBuilder m;
  m.input("x", DType::kFloat32, {int64_t{1}, int64_t{32}, int64_t{16}, int64_t{16}}).output("y");
  uint32_t seed = 5;
  auto conv = [&](const std::string& x, const std::string& y, const std::string& name, int64_t cout) {
    m.initializer_f(name + ".w", random_values(cout * 32 * 9, seed++), {cout, 32, 3, 3});
    auto& n = m.node("Conv", {x, name + ".w"}, {y}, name);
    OnnxModelBuilder::ints_attr(n, "pads", {1, 1, 1, 1});
  };
  conv("x", "ca", "a", 32);
  m.node("Relu", {"ca"}, {"ra"});
  conv("ra", "cb", "b", 32);
  m.node("Relu", {"cb"}, {"rb"});
  conv("rb", "y", "c", 16);
  auto g = m.import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  auto plan = build_plan(*g, BuildOptions{});
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  for (size_t s = 0; s < (*plan)->steps.size(); ++s) (*step_of)[(*plan)->steps[s].name] = s;
  return *plan;
}

// One OpenMP thread while timing: with ctest running tests side by side on two cores, oneDNN's
// threads would wait for each other behind the other test's and lose to the single-threaded
// reference; alone, oneDNN is still tens of times faster.
class SingleThread {
 public:
  SingleThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~SingleThread() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

std::vector<Tensor> inputs() { return {Tensor::from_vector<float>(random_values(32 * 16 * 16, 99), Shape{1, 32, 16, 16})}; }

TEST(TacticRefinement, TheFasterSideWinsWhicheverSideItIsOn) {
  SingleThread one;
  std::map<std::string, size_t> at;
  auto plan = three_convs(&at);
  ASSERT_TRUE(plan);
  for (const auto& [first, second] : {std::pair<std::string, std::string>{"reference", "onednn"}, {"onednn", "reference"}}) {
    std::vector<ContestedKey> contested{{{at.at("a"), at.at("b")}, first, second, 0, 0, ""}};
    Plan p = *plan;
    ASSERT_TRUE(refine_in_context(p, contested, inputs(), KernelRegistry::builtin(), 3).ok());
    EXPECT_EQ(contested[0].chosen, "onednn") << first;
    const double ref_ms = first == "reference" ? contested[0].first_ms : contested[0].second_ms;
    const double dnn_ms = first == "reference" ? contested[0].second_ms : contested[0].first_ms;
    EXPECT_GT(ref_ms, dnn_ms);
    EXPECT_GT(dnn_ms, 0);
    EXPECT_EQ(p.steps[at.at("a")].impl, "onednn");  // both steps of the key
    EXPECT_EQ(p.steps[at.at("b")].impl, "onednn");
  }
}

TEST(TacticRefinement, AMixOfTheVariantsIsKeptWhenItWinsAsAWhole) {
  SingleThread one;
  std::map<std::string, size_t> at;
  auto plan = three_convs(&at);
  ASSERT_TRUE(plan);
  // Variant A puts a/b on the reference, variant B puts c on it: the per-step winners are oneDNN
  // everywhere, a plan neither variant ran.
  std::vector<ContestedKey> contested{{{at.at("a"), at.at("b")}, "reference", "onednn", 0, 0, ""},
                                      {{at.at("c")}, "onednn", "reference", 0, 0, ""}};
  Plan p = *plan;
  ASSERT_TRUE(refine_in_context(p, contested, inputs(), KernelRegistry::builtin(), 3).ok());
  EXPECT_EQ(contested[0].chosen, "onednn");
  EXPECT_EQ(contested[1].chosen, "onednn");
  for (const char* s : {"a", "b", "c"}) EXPECT_EQ(p.steps[at.at(s)].impl, "onednn") << s;
}

TEST(TacticRefinement, WholeRunsAlsoTryEachThreadSystemAlone) {
  // Key 0: oneDNN (OpenMP's team) against onednn_split (kiln's pool); key 1: depthwise_direct
  // (pool) against onednn; key 2: two pool kernels. The per-step mix put keys 0 and 1 on the pool.
  const std::vector<ContestedKey> contested{{{0}, "onednn", "onednn_split", 0, 0, ""},
                                            {{1}, "depthwise_direct", "onednn", 0, 0, ""},
                                            {{2}, "im2col_panel", "winograd_f4x3", 0, 0, ""}};
  const std::vector<std::string> mix{"onednn_split", "depthwise_direct", "winograd_f4x3"};
  const auto picks = whole_run_picks(contested, mix);
  using Pick = std::vector<std::string>;
  const std::vector<Pick> want{Pick{"onednn", "depthwise_direct", "im2col_panel"}, Pick{"onednn_split", "onednn", "winograd_f4x3"}, mix,
                               Pick{"onednn", "onednn", "winograd_f4x3"}};  // all on the pool is the mix itself
  EXPECT_EQ(picks, want);
  // A mix equal to A adds only the one-system plans.
  const auto from_a = whole_run_picks(contested, want[0]);
  ASSERT_EQ(from_a.size(), 4u);
  EXPECT_EQ(from_a[2], (Pick{"onednn", "onednn", "im2col_panel"}));
  EXPECT_EQ(from_a[3], (Pick{"onednn_split", "depthwise_direct", "im2col_panel"}));
}

TEST(TacticRefinement, OnlyOnednnTeamKernelsCountAsOpenmp) {
  for (const char* impl : {"onednn", "onednn_winograd", "onednn_bf16", "onednn_int8"}) EXPECT_TRUE(impl_runs_on_openmp_team(impl)) << impl;
  for (const char* impl : {"onednn_split", "depthwise_direct", "im2col_panel", "panel", "reference", "winograd_f4x3"})
    EXPECT_FALSE(impl_runs_on_openmp_team(impl)) << impl;
}

TEST(TacticRefinement, NothingContestedChangesNothing) {
  std::map<std::string, size_t> at;
  auto plan = three_convs(&at);
  ASSERT_TRUE(plan);
  std::vector<ContestedKey> none;
  Plan p = *plan;
  ASSERT_TRUE(refine_in_context(p, none, inputs()).ok());
  for (size_t s = 0; s < p.steps.size(); ++s) EXPECT_EQ(p.steps[s].impl, plan->steps[s].impl);
}

}  // namespace
}  // namespace kiln
