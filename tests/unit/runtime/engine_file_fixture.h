// The small model and the helpers that engine_file_test.cpp (round trips, files) and
// engine_corrupt_test.cpp (the corrupted-file corpus) share: an MLP whose Reshape target is computed
// by a Shape subgraph, built into a fixed and a ranged profile, serialized once.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "builder/build_profile.h"
#include "builder/engine_writer.h"
#include "builder/optimization_profile.h"
#include "onnx_model_builder.h"
#include "runtime/engine.h"
#include "runtime/engine_format.h"

namespace kiln::engine_file_fixture {
using testing::OnnxModelBuilder;

constexpr int64_t kIn = 64, kHidden = 96;

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

inline float weight_value(int64_t i) { return 0.01f * static_cast<float>((i * 37) % 101) - 0.5f; }
inline float bias_value(int64_t i) { return 0.02f * static_cast<float>(i % 13) - 0.1f; }

// y = Reshape(Relu(x @ w + b), [B, 8, 12]) with the target built by a Shape->Gather->Unsqueeze->
// Concat subgraph: it folds in a profile that fixes B and runs at run time in a ranged one.
inline Graph mlp_graph() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {std::string("B"), kIn});
  std::vector<float> w(kIn * kHidden), bias(kHidden);
  for (int64_t i = 0; i < kIn * kHidden; ++i) w[static_cast<size_t>(i)] = weight_value(i);
  for (int64_t i = 0; i < kHidden; ++i) bias[static_cast<size_t>(i)] = bias_value(i);
  b.initializer_f("w", w, {kIn, kHidden}).initializer_f("b", bias, {kHidden});
  b.initializer("idx0", {0}, {}).initializer("axes0", {0}, {1}).initializer("eight_twelve", {8, 12}, {2});
  b.node("MatMul", {"x", "w"}, {"xw"}, "fc");
  b.node("Add", {"xw", "b"}, {"h"}, "bias_add");
  b.node("Relu", {"h"}, {"r"}, "relu");
  b.node("Shape", {"r"}, {"r_shape"}, "shape");
  b.node("Gather", {"r_shape", "idx0"}, {"batch"}, "gather_batch");
  b.node("Unsqueeze", {"batch", "axes0"}, {"batch1"}, "unsqueeze_batch");
  OnnxModelBuilder::int_attr(b.node("Concat", {"batch1", "eight_twelve"}, {"target"}, "concat_target"), "axis", 0);
  b.node("Reshape", {"r", "target"}, {"y"}, "reshape_out");
  b.output("y");
  auto g = b.import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::move(g).value();
}

// Bytes of the model's initializers: what "stored once" is measured against.
constexpr uint64_t kInitializerBytes = kIn * kHidden * 4 + kHidden * 4 + 8 + 8 + 16;

inline std::vector<std::shared_ptr<const Plan>> build_plans() {
  Graph g = mlp_graph();
  ProfileConfig fixed{"fixed", {{"B", DimRange{3, 3, 3}}}, {}, 0};
  ProfileConfig ranged{"ranged", {{"B", DimRange{1, 4, 16}}}, {}, 0};
  std::vector<std::shared_ptr<const Plan>> plans;
  for (const ProfileConfig& pc : {fixed, ranged}) {
    auto rp = resolve_profile(g, pc);
    EXPECT_TRUE(rp.ok()) << rp.status().message();
    if (!rp.ok()) return {};
    EXPECT_TRUE(check_profile_against_graph(g, *rp).ok());
    auto plan = build_profile_plan(g, *rp, {});
    EXPECT_TRUE(plan.ok()) << plan.status().message();
    if (!plan.ok()) return {};
    plans.push_back(*plan);
  }
  return plans;
}

inline EngineWriteInput write_input(const std::vector<std::shared_ptr<const Plan>>& plans) {
  EngineWriteInput in;
  in.plans = plans;
  in.source_model = "mlp.onnx";
  in.required_cpu_features = (kCpuAvx2 | kCpuFma) & host_cpu_features();
  in.plugin_libraries = {};  // plugin libraries are recorded and reloaded in plugin_engine_test.cpp
  return in;
}

// Built once: every test below reads these.
struct Fixture {
  std::vector<std::shared_ptr<const Plan>> plans;
  std::string bytes;
};
inline const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture f;
    f.plans = build_plans();
    auto bytes = serialize_engine(write_input(f.plans));
    EXPECT_TRUE(bytes.ok()) << bytes.status().message();
    if (bytes.ok()) f.bytes = *bytes;
    return f;
  }();
  return f;
}

inline Tensor input_x(int64_t batch, float phase) {
  Tensor t = Tensor::zeros(DType::kFloat32, Shape{batch, kIn});
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = std::sin(0.13f * static_cast<float>(i) + phase);
  return t;
}

inline std::vector<float> reference(const Tensor& x) {
  const int64_t n = x.shape()[0];
  std::vector<float> out(static_cast<size_t>(n * kHidden));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < kHidden; ++c) {
      float acc = bias_value(c);
      for (int64_t k = 0; k < kIn; ++k) acc += x.as<float>()[r * kIn + k] * weight_value(k * kHidden + c);
      out[static_cast<size_t>(r * kHidden + c)] = std::max(acc, 0.0f);
    }
  return out;
}

inline StatusOr<std::vector<float>> run_ctx(ExecutionContext& ctx, const Tensor& x) {
  KILN_RETURN_IF_ERROR(ctx.set_input("x", x.view()));
  KILN_RETURN_IF_ERROR(ctx.run());
  const TensorView& y = ctx.output(0);
  if (y.shape != Shape{x.shape()[0], 8, 12}) return Internal("unexpected output shape " + y.shape.str());
  return std::vector<float>(y.as<float>(), y.as<float>() + y.numel());
}

inline std::vector<float> run_plan(const std::shared_ptr<const Plan>& plan, const Tensor& x) {
  auto ctx = ExecutionContext::create(plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  auto y = run_ctx(**ctx, x);
  EXPECT_TRUE(y.ok()) << y.status().message();
  return y.ok() ? *y : std::vector<float>{};
}

inline std::vector<float> run_engine(const Engine& e, const std::string& profile, const Tensor& x) {
  auto ctx = e.create_context(profile);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  auto y = run_ctx(**ctx, x);
  EXPECT_TRUE(y.ok()) << y.status().message();
  return y.ok() ? *y : std::vector<float>{};
}

inline void expect_near_reference(const std::vector<float>& got, const Tensor& x) {
  const std::vector<float> want = reference(x);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f) << i;
}

}  // namespace kiln::engine_file_fixture
