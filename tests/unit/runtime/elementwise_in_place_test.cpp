// Elementwise kernels writing over an input (Kernel::writes_over_input): a kernel that says its
// output may share input i's buffer must compute, with the two one buffer, exactly what it computes
// into a buffer of its own; and it must say no where it cannot (a broadcast input, a narrower
// output, a norm row). Each case runs one kernel twice: into a fresh output, then into a copy of
// input i passed as both that input and the output. Awkward sizes: vector tails, rows of 8 (the
// nChw8c gate), several blocks of the fused program, enough elements for both threads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/kernel_runner.h"
#include "unit/runtime/kernel_test_util.h"

namespace kiln {
namespace {

using testing::random_f32;

struct Case {
  const char* op;
  std::vector<Shape> inputs;
  std::vector<int64_t> program;  // FusedElementwise only
  std::vector<float> immediates;
  std::vector<bool> shares;      // per input: whether the kernel may write over it
};

// vec::Binary kAdd = 0, kMul = 2; vec::Unary kSigmoid = 4. Registers: inputs, immediates, temps.
const Case kCases[] = {
    {"Sigmoid", {Shape{3, 1037}}, {}, {}, {true}},
    {"Tanh", {Shape{200003}}, {}, {}, {true}},
    {"Relu", {Shape{5, 7, 9}}, {}, {}, {true}},
    {"IsNaN", {Shape{2, 19}}, {}, {}, {false}},
    {"Add", {Shape{1, 197, 768}, Shape{1, 197, 768}}, {}, {}, {true, true}},
    {"Add", {Shape{1, 197, 77}, Shape{77}}, {}, {}, {true, false}},
    {"Mul", {Shape{1, 1, 1, 96}, Shape{1, 57, 33, 96}}, {}, {}, {false, true}},  // an NHWC SE gate
    {"Mul", {Shape{1, 12, 1, 1, 8}, Shape{1, 12, 29, 31, 8}}, {}, {}, {false, true}},  // nChw8c
    {"Sub", {Shape{4, 1}, Shape{1, 5}}, {}, {}, {false, false}},
    {"Less", {Shape{3, 33}, Shape{3, 33}}, {}, {}, {false, false}},
    // (x + b) * sigmoid(g): x [.., C], bias [C], gate [1, 1, C]; three blocks and a tail.
    {"FusedElementwise", {Shape{3, 9, 61}, Shape{61}, Shape{1, 1, 61}}, {100, 3, 0, 1, -1, 4, 4, 2, -1, -1, 102, 5, 3, 4, -1},
     {}, {true, false, false}},
    // x * x + x, the same input three times.
    {"FusedElementwise", {Shape{1100}}, {102, 1, 0, 0, -1, 100, 2, 1, 0, -1}, {}, {true}},
};

// The builtin registry's highest-priority kernel of `op` (one output); null, with a failure, if none.
std::unique_ptr<Kernel> create(const char* op, int num_inputs, const AttrMap& attrs) {
  KernelArgs args;
  args.op_type = op;
  args.node_name = "in_place_test";
  args.num_inputs = num_inputs;
  args.num_outputs = 1;
  auto k = KernelRegistry::builtin().create(args, attrs);
  EXPECT_TRUE(k.ok()) << k.status().message();
  return k.ok() ? std::move(k.value()) : nullptr;
}

AttrMap program_attrs(const std::vector<int64_t>& program, const std::vector<float>& immediates) {
  AttrMap a;
  a["program"] = Attribute::Ints(program);
  a["immediates"] = Attribute::Floats(immediates);
  return a;
}

TEST(ElementwiseInPlace, AKernelWritingOverAnInputComputesWhatItComputesApart) {
  uint32_t seed = 900;
  int shared = 0;
  for (const Case& c : kCases) {
    std::string what = c.op;
    for (const Shape& s : c.inputs) what += " " + s.str();
    SCOPED_TRACE(what);
    std::vector<Tensor> in;
    for (const Shape& s : c.inputs) in.push_back(random_f32(s, seed++, -3.0f, 3.0f));
    auto k = create(c.op, static_cast<int>(c.inputs.size()), c.program.empty() ? AttrMap{} : program_attrs(c.program, c.immediates));
    ASSERT_TRUE(k);
    std::vector<TensorView> apart;
    for (const Tensor& t : in) apart.push_back(t.view());
    auto want = run_kernel_once(*k, apart, 1);
    ASSERT_TRUE(want.ok()) << want.status().message();
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(k->writes_over_input(i), c.shares[i]) << "input " << i;
      if (!c.shares[i]) continue;
      // Input i and the output one buffer; where the same tensor feeds several inputs (x * x + x),
      // all of them read that buffer, as the context would only allow for a lone reader: the
      // kernel must still read each element before writing it.
      const Tensor one = Tensor::copy_of(in[i].view());
      std::vector<TensorView> views = apart;
      views[i] = one.view();
      const TensorView out[] = {one.view()};
      ASSERT_TRUE(k->run(views, out).ok());
      testing::expect_close(one, (*want)[0], 0, 0, what + ", in place over input " + std::to_string(i));
      ++shared;
    }
  }
  EXPECT_EQ(shared, 10);
}

// A norm row (LayerNorm decomposed and fused) reads its row twice: the kernel says no.
TEST(ElementwiseInPlace, FusedNormRowsDoNotShare) {
  AttrMap attrs = program_attrs({}, {});
  attrs["norm"] = Attribute::String("layer");
  auto k = create("FusedElementwise", 1, attrs);
  ASSERT_TRUE(k);
  const Tensor x = random_f32(Shape{4, 33}, 5);
  const TensorView in[] = {x.view()};
  ASSERT_TRUE(run_kernel_once(*k, in, 1).ok());
  EXPECT_FALSE(k->writes_over_input(0));
}

}  // namespace
}  // namespace kiln
