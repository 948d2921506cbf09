// matmul_scale_fusion: a per-column or scalar Mul (and the residual Add after it) folded into the
// FusedMatMul before it. Asserted on the graph (what folds, what must not) and run with the pass on, off and
// with the matmul fusion off, at awkward shapes (batch 2, 7x5 rows, 12 -> 19 columns).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "builder/passes/pass.h"
#include "onnx_model_builder.h"
#include "unit/builder/graph_test_util.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::Built;
using testing::build_and_run;
using testing::count_op;
using testing::OnnxModelBuilder;
using testing::random_f32;

constexpr int64_t kK = 12, kN = 19;

void init(OnnxModelBuilder& b, const std::string& name, std::vector<int64_t> dims, uint32_t seed) {
  Shape s;
  for (auto d : dims) s.push_back(d);
  const Tensor t = random_f32(s, seed);
  b.initializer_f(name, std::vector<float>(t.as<float>(), t.as<float>() + t.numel()), dims);
}

// gamma's shape: [N]; [5, N] (varies along rows too); one value as [] or [1, 1, 1, 1]; or one value
// as [1, 1, 1, 1, 1], which would make the rank-4 output rank 5.
enum class Gamma { kColumns, kFull, kScalar, kScalarRank4, kScalarRank5 };

struct Variant {
  const char* what;
  bool bias, gelu, residual;
  Gamma gamma;
  bool shared_weight;
  bool folds;
};

// x [2, 7, 5, 12] -> MatMul W [12, 19] (+ b) [-> GELU] -> Mul gamma [-> Add r] -> y, where r =
// Relu(x W2) (not a constant); with shared_weight a second MatMul on W is a second output.
OnnxModelBuilder model(const Variant& v) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{7}, int64_t{5}, kK});
  init(b, "w", {kK, kN}, 1);
  init(b, "b", {kN}, 2);
  init(b, "w2", {kK, kN}, 3);
  switch (v.gamma) {
    case Gamma::kColumns: init(b, "gamma", {kN}, 4); break;
    case Gamma::kFull: init(b, "gamma", {5, kN}, 4); break;
    case Gamma::kScalar: b.initializer_f("gamma", {0.125f}, {}); break;
    case Gamma::kScalarRank4: b.initializer_f("gamma", {-0.3f}, {1, 1, 1, 1}); break;
    case Gamma::kScalarRank5: b.initializer_f("gamma", {0.7f}, {1, 1, 1, 1, 1}); break;
  }
  b.node("MatMul", {"x", "w"}, {"m"}, "m/MatMul");
  std::string cur = "m";
  if (v.bias) {
    b.node("Add", {cur, "b"}, {"mb"}, "mb/Add");
    cur = "mb";
  }
  if (v.gelu) {
    // GELU as torch.onnx writes it at opset 17, which matmul_epilogue_fusion takes as activation.
    b.initializer_f("sqrt2", {1.4142135f}, {});
    b.initializer_f("one", {1.0f}, {});
    b.initializer_f("half", {0.5f}, {});
    b.node("Div", {cur, "sqrt2"}, {"gd"});
    b.node("Erf", {"gd"}, {"ge"});
    b.node("Add", {"ge", "one"}, {"g1"});
    b.node("Mul", {cur, "g1"}, {"gm"});
    b.node("Mul", {"gm", "half"}, {"ma"});
    cur = "ma";
  }
  b.node("Mul", {"gamma", cur}, {"s"}, "s/Mul");
  cur = "s";
  if (v.residual) {
    b.node("MatMul", {"x", "w2"}, {"r0"}, "r0/MatMul");
    b.node("Relu", {"r0"}, {"r"}, "r/Relu");
    b.node("Add", {cur, "r"}, {"y"}, "y/Add");
  } else {
    b.node("Neg", {cur}, {"y"}, "y/Neg");
  }
  b.output("y");
  if (v.shared_weight) {
    b.node("MatMul", {"x", "w"}, {"y2"}, "y2/MatMul");
    b.output("y2");
  }
  return b;
}

const Variant kVariants[] = {
    {"bias and residual", true, false, true, Gamma::kColumns, false, true},
    {"no bias", false, false, true, Gamma::kColumns, false, true},
    {"no residual", true, false, false, Gamma::kColumns, false, true},
    {"weights shared with another MatMul", true, false, true, Gamma::kColumns, true, true},
    {"an activation before the scale", true, true, true, Gamma::kColumns, false, false},
    {"gamma varies along rows too", true, false, true, Gamma::kFull, false, false},
    {"a scalar gamma", true, false, false, Gamma::kScalar, false, true},
    {"a scalar gamma of rank 4, then a residual", true, false, true, Gamma::kScalarRank4, false, true},
    {"a scalar gamma that raises the rank", true, false, false, Gamma::kScalarRank5, false, false},
};

TEST(MatmulScaleFusion, FoldsWhereExactAndMatchesTheUnfusedGraph) {
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.what);
    auto g = model(v).import();
    ASSERT_TRUE(g.ok()) << g.status().message();
    const Tensor x = random_f32(Shape{2, 7, 5, kK}, 5);
    const Built unfused = build_and_run(*g, {"matmul_epilogue_fusion", "elementwise_fusion"}, "", x);
    const Built off = build_and_run(*g, {"matmul_scale_fusion"}, "", x);
    const Built on = build_and_run(*g, {}, "", x);
    // Folded: the Mul (and the Add) are gone into the FusedMatMul.
    bool mul_in_matmul = false, add_in_matmul = false;
    for (const auto& n : on.graph.nodes)
      if (!n.removed && n.op_type == "FusedMatMul")
        for (const auto& r : n.replaced_nodes) {
          mul_in_matmul = mul_in_matmul || r == "s/Mul";
          add_in_matmul = add_in_matmul || r == "y/Add";
        }
    EXPECT_EQ(mul_in_matmul, v.folds);
    EXPECT_EQ(add_in_matmul, v.folds && v.residual);
    bool logged = false;
    for (const auto& line : on.log) logged = logged || line.rfind("matmul_scale_fusion:", 0) == 0;
    EXPECT_EQ(logged, v.folds);
    ASSERT_EQ(on.y.size(), unfused.y.size());
    ASSERT_EQ(off.y.size(), unfused.y.size());
    for (size_t i = 0; i < unfused.y.size(); ++i) {
      EXPECT_NEAR(on.y[i], unfused.y[i], 1e-4 * (1.0 + std::abs(unfused.y[i]))) << "pass on, element " << i;
      EXPECT_NEAR(off.y[i], unfused.y[i], 1e-4 * (1.0 + std::abs(unfused.y[i]))) << "pass off, element " << i;
    }
  }
}

}  // namespace
}  // namespace kiln
