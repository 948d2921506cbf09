// matmul_transpose_folding: an unfused attention's head Transposes and scalar scale folded into
// kiln::StridedMatMul. Asserted on the graph (what folds, what must not) and run with the pass on and
// off at awkward shapes (batch 2, 7 tokens, 3 heads of 5), heads split from [B, S, H, D] and from
// sequence-first [S, B*H, D] as nn.MultiheadAttention exports them.
#include <gtest/gtest.h>

#include <cmath>
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

enum class Scale { kDivQ, kMulScores, kDivByQ, kNone };

struct Variant {
  const char* what;
  Scale scale;
  bool seq_first;        // [S, B*H, D] heads (perms 1,0,2 and 1,2,0) instead of [B, S, H, D]
  bool k_read_twice;     // K's Transpose is also a graph output: it must stay
  bool q_k_last_moved;   // Q's Transpose moves its last axis: off the fast path, it must stay
  int strided;           // StridedMatMuls expected
  int transposes_left;   // Transposes expected after the pipeline
  bool scale_folded;
};

// x [2, 7, 3, 5] -> q = x, k = Sigmoid(x), v = Tanh(x); heads split by Transposes, QK^T (scaled),
// Softmax, PV, heads merged by a Transpose, Reshape to [2, 7, 15] (sequence-first: x viewed as
// [7, 6, 5] = [S, B*H, D], merged back to [7, 6, 5]).
OnnxModelBuilder model(const Variant& v) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{7}, int64_t{3}, int64_t{5}});
  b.initializer_f("c", {2.2360680f}, {});
  b.initializer("shape_out", {2, 7, 15}, {3});
  std::string x = "x";
  if (v.seq_first) {
    b.initializer("shape_sf", {7, 6, 5}, {3});
    b.node("Reshape", {"x", "shape_sf"}, {"xs"});
    x = "xs";
  }
  b.node("Sigmoid", {x}, {"kx"});
  b.node("Tanh", {x}, {"vx"});
  const std::vector<int64_t> split = v.seq_first ? std::vector<int64_t>{1, 0, 2} : std::vector<int64_t>{0, 2, 1, 3};
  const std::vector<int64_t> kt = v.seq_first ? std::vector<int64_t>{1, 2, 0} : std::vector<int64_t>{0, 2, 3, 1};
  // Off the fast path: Q as [.., D, S] against K as [.., S, D] (a product of D x D).
  const std::vector<int64_t> q_moved = v.seq_first ? std::vector<int64_t>{1, 2, 0} : std::vector<int64_t>{0, 2, 3, 1};
  const std::vector<int64_t> k_for_moved = split;
  OnnxModelBuilder::ints_attr(b.node("Transpose", {x}, {"q"}, "q/Transpose"), "perm", v.q_k_last_moved ? q_moved : split);
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"kx"}, {"kt"}, "k/Transpose"), "perm", v.q_k_last_moved ? k_for_moved : kt);
  OnnxModelBuilder::ints_attr(b.node("Transpose", {"vx"}, {"vt"}, "v/Transpose"), "perm", split);
  std::string q = "q";
  if (v.scale == Scale::kDivQ) {
    b.node("Div", {"q", "c"}, {"qs"}, "q/Div");
    q = "qs";
  }
  if (v.scale == Scale::kDivByQ) {
    b.node("Div", {"c", "q"}, {"qs"}, "q/Div");
    q = "qs";
  }
  b.node("MatMul", {q, "kt"}, {"s0"}, "qk/MatMul");
  std::string s = "s0";
  if (v.scale == Scale::kMulScores) {
    b.node("Mul", {"s0", "c"}, {"s1"}, "s/Mul");
    s = "s1";
  }
  b.node("Softmax", {s}, {"p"}, "p/Softmax");
  if (v.q_k_last_moved) {
    // p [.., D, D] x v^T [.., D, S]: keeps the rest of the graph the same shape.
    OnnxModelBuilder::ints_attr(b.node("Transpose", {"vt"}, {"vtt"}, "vt/Transpose"), "perm",
                                v.seq_first ? std::vector<int64_t>{0, 2, 1} : std::vector<int64_t>{0, 1, 3, 2});
    b.node("MatMul", {"p", "vtt"}, {"o0"}, "pv/MatMul");
    OnnxModelBuilder::ints_attr(b.node("Transpose", {"o0"}, {"o1"}, "o/Transpose"), "perm",
                                v.seq_first ? std::vector<int64_t>{2, 0, 1} : std::vector<int64_t>{0, 3, 1, 2});
  } else {
    b.node("MatMul", {"p", "vt"}, {"o0"}, "pv/MatMul");
    OnnxModelBuilder::ints_attr(b.node("Transpose", {"o0"}, {"o1"}, "o/Transpose"), "perm", split);
  }
  b.node("Reshape", {"o1", "shape_out"}, {"y"});
  b.output("y");
  if (v.k_read_twice) b.output("kt");
  return b;
}

const Variant kVariants[] = {
    {"q / sqrt(d), [B, S, H, D]", Scale::kDivQ, false, false, false, 2, 0, true},
    {"q / sqrt(d), sequence-first", Scale::kDivQ, true, false, false, 2, 0, true},
    {"scores * scale", Scale::kMulScores, false, false, false, 2, 0, true},
    {"no scale", Scale::kNone, true, false, false, 2, 0, false},
    // The Div stays, and so does Q's Transpose before it.
    {"c / q is no scale", Scale::kDivByQ, false, false, false, 2, 1, false},
    {"K^T also a graph output", Scale::kDivQ, false, true, false, 2, 1, true},
    // QK^T: A's Transpose stays, B's folds; PV: the two Transposes of V compose into one with K
    // contiguous and fold; the output Transpose moves N off the last axis and stays.
    {"Q's last axis moved", Scale::kDivQ, false, false, true, 2, 2, true},
};

TEST(MatmulTransposeFolding, FoldsOnTheFastPathAndMatchesTheUnfoldedGraph) {
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.what);
    auto g = model(v).import();
    ASSERT_TRUE(g.ok()) << g.status().message();
    const Tensor x = random_f32(Shape{2, 7, 3, 5}, 5);
    const Built off = build_and_run(*g, {"matmul_transpose_folding"}, "", x);
    const Built on = build_and_run(*g, {}, "", x);
    EXPECT_EQ(count_op(off.graph, "StridedMatMul"), 0);
    EXPECT_EQ(count_op(on.graph, "StridedMatMul"), v.strided);
    EXPECT_EQ(count_op(on.graph, "MatMul"), 2 - v.strided);
    EXPECT_EQ(count_op(on.graph, "Transpose"), v.transposes_left);
    bool alpha = false, q_div_replaced = false;
    for (const auto& n : on.graph.nodes) {
      if (n.removed || n.op_type != "StridedMatMul") continue;
      alpha = alpha || n.attrs.count("alpha");
      for (const auto& r : n.replaced_nodes) q_div_replaced = q_div_replaced || r == "q/Div";
    }
    EXPECT_EQ(alpha, v.scale_folded);
    EXPECT_EQ(q_div_replaced, v.scale == Scale::kDivQ);
    bool logged = false;
    for (const auto& line : on.log) logged = logged || line.rfind("matmul_transpose_folding:", 0) == 0;
    EXPECT_EQ(logged, v.strided > 0);
    ASSERT_EQ(on.y.size(), off.y.size());
    ASSERT_EQ(on.y.size(), size_t{2 * 7 * 15});
    for (size_t i = 0; i < off.y.size(); ++i) EXPECT_NEAR(on.y[i], off.y[i], 1e-5 * (1.0 + std::abs(off.y[i]))) << "element " << i;
  }
}

}  // namespace
}  // namespace kiln
