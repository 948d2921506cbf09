// elementwise_fusion and batchnorm_folding: each pattern (written-out GELUs, LayerNorm, RMSNorm,
// SiLU/SwiGLU, residual + bias, Where/compare/Cast, BN + ReLU, BN after a Conv) is built as ONNX,
// run with the pass on and off, compared within 1e-5 relative, and the rewritten graph is checked
// for the number of steps left. Shapes are awkward on purpose (rows of 37 and 53, tails that fill
// no vector, broadcasts from [D], [C,1,1] and scalars).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "builder/plan/build_plan.h"
#include "builder/passes/pass.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"

namespace kiln {
namespace {

using testing::OnnxModelBuilder;

std::vector<float> values(int64_t n, uint32_t seed, float lo = -3.0f, float hi = 3.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

struct Input {
  std::string name;
  Shape shape;
  std::vector<float> data;
};

// Runs the model's plan with `disabled` passes off; returns output 0 and the number of steps.
std::pair<std::vector<float>, size_t> run(const OnnxModelBuilder& b, const std::vector<Input>& inputs, std::set<std::string> disabled) {
  auto g = b.import();
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return {};
  BuildOptions opts;
  opts.disabled_passes = std::move(disabled);
  auto plan = build_plan(*g, opts);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return {};
  std::vector<Tensor> keep;
  for (const Input& in : inputs) {
    keep.push_back(Tensor::from_vector<float>(in.data, in.shape));
    EXPECT_TRUE((*ctx)->set_input(in.name, keep.back().view()).ok());
  }
  const Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  const TensorView& t = (*ctx)->output(0);
  return {std::vector<float>(t.as<float>(), t.as<float>() + t.numel()), (*plan)->steps.size()};
}

// Fused and unfused agree within 1e-5 relative to the output's largest magnitude (an output near 0
// after gamma * n + beta cancels, so its own magnitude says nothing about the error); returns
// {steps fused, steps unfused}.
std::pair<size_t, size_t> check_on_off(const OnnxModelBuilder& b, const std::vector<Input>& inputs,
                                       std::set<std::string> off = {"elementwise_fusion"}) {
  const auto [on, steps_on] = run(b, inputs, {});
  const auto [ref, steps_off] = run(b, inputs, off);
  EXPECT_EQ(on.size(), ref.size());
  float scale = 0;
  for (float v : ref) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < on.size() && i < ref.size(); ++i) EXPECT_NEAR(on[i], ref[i], 1e-5 * scale) << "element " << i;
  return {steps_on, steps_off};
}

OnnxModelBuilder& scalar(OnnxModelBuilder& b, const std::string& name, float v) { return b.initializer_f(name, {v}, {}); }

TEST(ElementwiseFusion, GeluTanhWithPowAndWithCubeIsOneStep) {
  for (bool pow : {true, false}) {
    OnnxModelBuilder b;
    b.input("x", DType::kFloat32, {int64_t{3}, int64_t{37}});
    scalar(b, "three", 3.0f);
    scalar(b, "c", 0.044715f);
    scalar(b, "k", 0.7978845608f);
    scalar(b, "one", 1.0f);
    scalar(b, "half", 0.5f);
    if (pow) {
      b.node("Pow", {"x", "three"}, {"x3"});
    } else {
      b.node("Mul", {"x", "x"}, {"x2"});
      b.node("Mul", {"x2", "x"}, {"x3"});
    }
    b.node("Mul", {"x3", "c"}, {"cx3"});
    b.node("Add", {"x", "cx3"}, {"inner"});
    b.node("Mul", {"inner", "k"}, {"u"});
    b.node("Tanh", {"u"}, {"t"});
    b.node("Add", {"t", "one"}, {"t1"});
    b.node("Mul", {"x", "half"}, {"hx"});
    b.node("Mul", {"hx", "t1"}, {"y"});
    b.output("y");
    const auto [on, off] = check_on_off(b, {{"x", Shape{3, 37}, values(3 * 37, 1, -6, 6)}});
    EXPECT_EQ(on, 1u) << "pow " << pow;
    EXPECT_GE(off, 8u);
  }
}

TEST(ElementwiseFusion, GeluErfIsOneStep) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{5}, int64_t{53}});
  scalar(b, "sqrt2", 1.4142135f);
  scalar(b, "one", 1.0f);
  scalar(b, "half", 0.5f);
  b.node("Div", {"x", "sqrt2"}, {"z"});
  b.node("Erf", {"z"}, {"e"});
  b.node("Add", {"e", "one"}, {"e1"});
  b.node("Mul", {"x", "e1"}, {"xe"});
  b.node("Mul", {"xe", "half"}, {"y"});
  b.output("y");
  const auto [on, off] = check_on_off(b, {{"x", Shape{2, 5, 53}, values(2 * 5 * 53, 2, -6, 6)}});
  EXPECT_EQ(on, 1u);
  EXPECT_EQ(off, 5u);
}

TEST(ElementwiseFusion, LayerNormDecompositionIsOneStep) {
  for (bool mul_square : {false, true}) {
    OnnxModelBuilder b;
    b.input("x", DType::kFloat32, {int64_t{4}, int64_t{3}, int64_t{37}});
    b.initializer_f("gamma", values(37, 3), {37});
    b.initializer_f("beta", values(37, 4), {37});
    scalar(b, "two", 2.0f);
    scalar(b, "eps", 1e-5f);
    OnnxModelBuilder::ints_attr(b.node("ReduceMean", {"x"}, {"m"}), "axes", {-1});
    b.node("Sub", {"x", "m"}, {"d"});
    if (mul_square) b.node("Mul", {"d", "d"}, {"d2"});
    else b.node("Pow", {"d", "two"}, {"d2"});
    OnnxModelBuilder::ints_attr(b.node("ReduceMean", {"d2"}, {"v"}), "axes", {-1});
    b.node("Add", {"v", "eps"}, {"ve"});
    b.node("Sqrt", {"ve"}, {"s"});
    b.node("Div", {"d", "s"}, {"n"});
    b.node("Mul", {"n", "gamma"}, {"ng"});
    b.node("Add", {"ng", "beta"}, {"y"});
    b.output("y");
    // A mean of 10 against a spread of 0.6: E[x^2] - mean^2 would lose ~2e-5 of the variance, so
    // the two-pass variance is what keeps the 1e-5.
    std::vector<float> x = values(4 * 3 * 37, 5, 9.0f, 11.0f);
    const auto [on, off] = check_on_off(b, {{"x", Shape{4, 3, 37}, x}});
    EXPECT_EQ(on, 1u) << "mul_square " << mul_square;
    EXPECT_EQ(off, 9u);
  }
}

TEST(ElementwiseFusion, RmsNormDecompositionsAreOneStep) {
  for (int form : {0, 1, 2}) {  // Div(x, s); x * Reciprocal(s); x * (1 / s)
    OnnxModelBuilder b;
    b.input("x", DType::kFloat32, {int64_t{5}, int64_t{70}});
    b.initializer_f("w", values(70, 6), {70});
    scalar(b, "two", 2.0f);
    scalar(b, "eps", 1e-6f);
    scalar(b, "one", 1.0f);
    b.node("Pow", {"x", "two"}, {"x2"});
    OnnxModelBuilder::ints_attr(b.node("ReduceMean", {"x2"}, {"v"}), "axes", {1});
    b.node("Add", {"v", "eps"}, {"ve"});
    b.node("Sqrt", {"ve"}, {"s"});
    if (form == 0) {
      b.node("Div", {"x", "s"}, {"n"});
    } else {
      if (form == 1) b.node("Reciprocal", {"s"}, {"r"});
      else b.node("Div", {"one", "s"}, {"r"});
      b.node("Mul", {"x", "r"}, {"n"});
    }
    b.node("Mul", {"w", "n"}, {"y"});
    b.output("y");
    const auto [on, off] = check_on_off(b, {{"x", Shape{5, 70}, values(5 * 70, 7)}});
    EXPECT_EQ(on, 1u) << "form " << form;
  }
}

TEST(ElementwiseFusion, SwiGluResidualBiasAndWhereChains) {
  OnnxModelBuilder b;
  b.input("a", DType::kFloat32, {int64_t{2}, int64_t{3}, int64_t{29}});
  b.input("g", DType::kFloat32, {int64_t{2}, int64_t{3}, int64_t{29}});
  b.input("res", DType::kFloat32, {int64_t{2}, int64_t{1}, int64_t{29}});
  b.initializer_f("bias", values(29, 8), {29});
  scalar(b, "zero", 0.0f);
  b.node("Sigmoid", {"g"}, {"sg"});
  b.node("Mul", {"g", "sg"}, {"silu"});
  b.node("Mul", {"silu", "a"}, {"glu"});
  b.node("Add", {"glu", "bias"}, {"biased"});
  b.node("Add", {"biased", "res"}, {"sum"});
  b.node("Greater", {"sum", "zero"}, {"pos"});
  b.node("Cast", {"pos"}, {"posf"}).add_attribute()->CopyFrom([] {
    onnx::AttributeProto a;
    a.set_name("to");
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(1);
    return a;
  }());
  b.node("Where", {"pos", "sum", "posf"}, {"y"});
  b.output("y");
  const auto [on, off] = check_on_off(b, {{"a", Shape{2, 3, 29}, values(174, 9)},
                                          {"g", Shape{2, 3, 29}, values(174, 10)},
                                          {"res", Shape{2, 1, 29}, values(58, 11)}});
  EXPECT_EQ(on, 1u);
  EXPECT_EQ(off, 8u);
}

TEST(ElementwiseFusion, AValueReadOutsideTheTreeEndsIt) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{40}});
  b.node("Exp", {"x"}, {"e"});
  b.node("Tanh", {"e"}, {"t"});
  b.node("Neg", {"t"}, {"y"});
  b.output("y");
  b.output("e");  // e leaves the graph: Exp stays its own step
  const auto [on, off] = check_on_off(b, {{"x", Shape{40}, values(40, 12)}});
  EXPECT_EQ(on, 2u);
  EXPECT_EQ(off, 3u);
}

TEST(BatchNormFolding, BnAfterConcatBecomesOneScaleShiftReluStep) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{9}});
  b.input("z", DType::kFloat32, {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{9}});
  b.initializer_f("gamma", values(5, 13, 0.5f, 2.0f), {5});
  b.initializer_f("beta", values(5, 14), {5});
  b.initializer_f("mean", values(5, 15), {5});
  b.initializer_f("var", values(5, 16, 0.1f, 3.0f), {5});
  OnnxModelBuilder::int_attr(b.node("Concat", {"x", "z"}, {"c"}), "axis", 1);
  b.node("BatchNormalization", {"c", "gamma", "beta", "mean", "var"}, {"bn"});
  b.node("Relu", {"bn"}, {"y"});
  b.output("y");
  const std::vector<Input> in = {{"x", Shape{1, 3, 7, 9}, values(189, 17)}, {"z", Shape{1, 2, 7, 9}, values(126, 18)}};
  const auto [on, off] = check_on_off(b, in, {"batchnorm_folding", "elementwise_fusion"});
  EXPECT_EQ(on, 2u);  // Concat, then one fused scale + shift + ReLU
  EXPECT_EQ(off, 3u);
}

TEST(BatchNormFolding, BnAfterConvFoldsIntoItAndSiluJoinsTheEpilogue) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{1}, int64_t{3}, int64_t{11}, int64_t{13}});
  b.initializer_f("W", values(6 * 3 * 3 * 3, 19, -0.5f, 0.5f), {6, 3, 3, 3});
  b.initializer_f("gamma", values(6, 20, 0.5f, 2.0f), {6});
  b.initializer_f("beta", values(6, 21), {6});
  b.initializer_f("mean", values(6, 22), {6});
  b.initializer_f("var", values(6, 23, 0.1f, 3.0f), {6});
  OnnxModelBuilder::ints_attr(b.node("Conv", {"x", "W"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("BatchNormalization", {"c", "gamma", "beta", "mean", "var"}, {"bn"});
  b.node("Sigmoid", {"bn"}, {"s"});
  b.node("Mul", {"bn", "s"}, {"y"});
  b.output("y");
  const auto [on, off] = check_on_off(b, {{"x", Shape{1, 3, 11, 13}, values(429, 24)}},
                                      {"batchnorm_folding", "elementwise_fusion", "conv_epilogue_fusion"});
  EXPECT_EQ(on, 1u);  // one FusedConv with activation silu
  EXPECT_EQ(off, 4u);
}

// BatchNorm1d after nn.Linear: the BN's channels are the matmul's columns, so it folds into the
// weight and bias. Checked on/off (the BN kernel itself runs when the pass is off) at feature counts
// that fill no vector, for every form the exporter writes: Gemm with transB and a bias, Gemm with
// alpha/beta and a scalar C, Gemm without C and transB = 0, MatMul + bias Add, and a MatMul alone.
void add_bn_params(OnnxModelBuilder& b, int64_t C, uint32_t seed) {
  b.initializer_f("gamma", values(C, seed, -2.0f, 2.0f), {C});
  b.initializer_f("beta", values(C, seed + 1), {C});
  b.initializer_f("mean", values(C, seed + 2), {C});
  b.initializer_f("var", values(C, seed + 3, 0.1f, 3.0f), {C});
}

TEST(BatchNormFolding, BnAfterGemmFoldsIntoItsWeightAndBias) {
  const int64_t M = 5, K = 19, C = 13;
  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE(form);
    OnnxModelBuilder b;
    b.input("x", DType::kFloat32, {M, K});
    add_bn_params(b, C, 40);
    if (form == 0) {  // nn.Linear: transB, bias [C]
      b.initializer_f("W", values(C * K, 30, -0.5f, 0.5f), {C, K});
      b.initializer_f("B", values(C, 31), {C});
      OnnxModelBuilder::int_attr(b.node("Gemm", {"x", "W", "B"}, {"g"}), "transB", 1);
    } else if (form == 1) {  // alpha, beta and a scalar C
      b.initializer_f("W", values(K * C, 32, -0.5f, 0.5f), {K, C});
      b.initializer_f("B", {0.75f}, {1});
      auto& n = b.node("Gemm", {"x", "W", "B"}, {"g"});
      OnnxModelBuilder::float_attr(n, "alpha", 0.5f);
      OnnxModelBuilder::float_attr(n, "beta", 2.0f);
    } else {  // no C, transB = 0
      b.initializer_f("W", values(K * C, 33, -0.5f, 0.5f), {K, C});
      b.node("Gemm", {"x", "W"}, {"g"});
    }
    b.node("BatchNormalization", {"g", "gamma", "beta", "mean", "var"}, {"bn"});
    b.node("Relu", {"bn"}, {"y"});
    b.output("y");
    const auto [on, off] = check_on_off(b, {{"x", Shape{M, K}, values(M * K, 34)}}, {"batchnorm_folding"});
    EXPECT_LT(on, off);  // the BN step is gone
  }
}

TEST(BatchNormFolding, BnAfterMatMulFoldsIntoItsBiasAddOrBecomesOne) {
  const int64_t M = 3, K = 17, C = 21;
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias);
    OnnxModelBuilder b;
    b.input("x", DType::kFloat32, {M, K});
    add_bn_params(b, C, 50);
    b.initializer_f("W", values(K * C, 51, -0.5f, 0.5f), {K, C});
    if (bias) {
      b.initializer_f("B", values(C, 52), {C});
      b.node("MatMul", {"x", "W"}, {"m"});
      b.node("Add", {"B", "m"}, {"g"});
    } else {
      b.node("MatMul", {"x", "W"}, {"g"});
    }
    b.node("BatchNormalization", {"g", "gamma", "beta", "mean", "var"}, {"y"});
    b.output("y");
    const auto [on, off] = check_on_off(b, {{"x", Shape{M, K}, values(M * K, 53)}}, {"batchnorm_folding"});
    EXPECT_EQ(on, 1u);  // one FusedMatMul with the folded bias
    EXPECT_EQ(off, 2u);
  }
}

// A rank-3 BN after a MatMul normalises axis 1, not the matmul's columns: no folding into the weight
// (it becomes the per-channel scale and shift), and the result is unchanged.
TEST(BatchNormFolding, BnOverAnotherAxisDoesNotFoldIntoTheMatMul) {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{7}, int64_t{5}});
  b.initializer_f("W", values(5 * 6, 60, -0.5f, 0.5f), {5, 6});
  add_bn_params(b, 7, 61);
  b.node("MatMul", {"x", "W"}, {"m"});
  b.node("BatchNormalization", {"m", "gamma", "beta", "mean", "var"}, {"y"});
  b.output("y");
  const auto [on, off] = check_on_off(b, {{"x", Shape{2, 7, 5}, values(70, 62)}}, {"batchnorm_folding"});
  EXPECT_EQ(on, 2u);  // FusedMatMul, then the scale + shift step
  EXPECT_EQ(off, 2u);
}

}  // namespace
}  // namespace kiln
