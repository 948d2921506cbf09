// Layout ops of the tensor family. Expected values come from numpy (pasted) or, for large
// transposes, from a naive index loop written here.
#include <gtest/gtest.h>

#include <numeric>

#include "runtime/kernel_runner.h"
#include "runtime/kernels/kernel_util.h"

namespace kiln {
namespace {

template <typename T>
Tensor make(std::vector<T> v, Shape s) {
  return Tensor::from_vector<T>(v, s);
}
Tensor i64(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(v, Shape{static_cast<int64_t>(v.size())}); }
template <typename T>
Tensor iota(Shape s, T start = 0) {
  std::vector<T> v(static_cast<size_t>(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(start + static_cast<T>(i));
  return make<T>(v, s);
}
template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.as<T>(), t.as<T>() + t.numel());
}
std::vector<int64_t> v64(std::initializer_list<int64_t> v) { return v; }

Tensor run1(const std::string& op, const AttrMap& attrs, const std::vector<Tensor>& in, int opset = 17) {
  auto r = run_op_once(op, attrs, in, 1, {}, opset);
  EXPECT_TRUE(r.ok()) << op << ": " << r.status().message();
  return r.ok() ? (*r)[0] : Tensor();
}

// ---- Transpose ----

TEST(TensorTranspose, Perm021Int64) {
  Tensor y = run1("Transpose", {{"perm", Attribute::Ints({0, 2, 1})}}, {iota<int64_t>(Shape{2, 3, 4})});
  EXPECT_EQ(y.shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(values<int64_t>(y), v64({0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, 12, 16, 20, 13, 17, 21, 14, 18, 22, 15,
                                     19, 23}));
}

TEST(TensorTranspose, DefaultReversesDimsInt8) {
  Tensor y = run1("Transpose", {}, {iota<int8_t>(Shape{2, 3, 4})});
  EXPECT_EQ(y.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(values<int8_t>(y), (std::vector<int8_t>{0, 12, 4, 16, 8, 20, 1, 13, 5, 17, 9, 21, 2, 14, 6, 18, 10, 22, 3,
                                                    15, 7, 19, 11, 23}));
}

TEST(TensorTranspose, Rank4Float) {
  Tensor y = run1("Transpose", {{"perm", Attribute::Ints({1, 3, 0, 2})}}, {iota<float>(Shape{2, 3, 4, 5})});
  ASSERT_EQ(y.shape(), (Shape{3, 5, 2, 4}));
  auto v = values<float>(y);
  EXPECT_EQ(std::vector<float>(v.begin(), v.begin() + 20),
            (std::vector<float>{0, 5, 10, 15, 60, 65, 70, 75, 1, 6, 11, 16, 61, 66, 71, 76, 2, 7, 12, 17}));
  EXPECT_EQ(std::vector<float>(v.end() - 5, v.end()), (std::vector<float>{59, 104, 109, 114, 119}));
}

// Big enough for the tiled and the multi-threaded paths; checked against a naive loop.
void check_transpose_naive(Shape s, std::vector<int64_t> perm) {
  Tensor x = iota<float>(s);
  Tensor y = run1("Transpose", {{"perm", Attribute::Ints(perm)}}, {x});
  const int r = s.rank();
  Shape os;
  os.resize(r);
  for (int i = 0; i < r; ++i) os[i] = s[static_cast<int>(perm[i])];
  ASSERT_EQ(y.shape(), os);
  const Shape ist = contiguous_strides(s);
  std::vector<int64_t> idx(r, 0);
  for (int64_t k = 0; k < y.numel(); ++k) {
    int64_t off = 0;
    for (int i = 0; i < r; ++i) off += idx[i] * ist[static_cast<int>(perm[i])];
    ASSERT_EQ(y.as<float>()[k], static_cast<float>(off)) << "element " << k;
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < os[d]) break;
      idx[d] = 0;
    }
  }
}

TEST(TensorTranspose, LargeMatchesNaive) {
  check_transpose_naive(Shape{2, 67, 301}, {0, 2, 1});          // tiled, parallel
  check_transpose_naive(Shape{3, 37, 129}, {2, 0, 1});          // tiled, ragged tiles
  check_transpose_naive(Shape{2, 50, 12, 64}, {0, 2, 1, 3});    // contiguous rows (attention heads)
  check_transpose_naive(Shape{197, 12, 64}, {1, 2, 0});         // K^T of unfused attention: 8 x 8 register blocks
  check_transpose_naive(Shape{1, 29, 3, 21}, {0, 2, 3, 1});     // K^T with no whole 8 x 8 block in a tile's tail
  check_transpose_naive(Shape{1, 7, 1, 5, 3, 2}, {5, 3, 1, 0, 4, 2});  // unit dims, rank 6
  check_transpose_naive(Shape{2, 3, 1, 2, 3, 1, 2, 2}, {7, 6, 5, 4, 3, 2, 1, 0});
}

TEST(TensorTranspose, ZeroSizeAndFloat16AndErrors) {
  Tensor z = run1("Transpose", {{"perm", Attribute::Ints({1, 0})}}, {Tensor::zeros(DType::kFloat32, Shape{0, 3})});
  EXPECT_EQ(z.shape(), (Shape{3, 0}));
  Tensor h = Tensor::zeros(DType::kFloat16, Shape{2, 2});
  for (int i = 0; i < 4; ++i) h.as<uint16_t>()[i] = static_cast<uint16_t>(0x3c00 + i);
  Tensor hy = run1("Transpose", {}, {h});
  EXPECT_EQ(hy.dtype(), DType::kFloat16);
  EXPECT_EQ(values<uint16_t>(hy), (std::vector<uint16_t>{0x3c00, 0x3c02, 0x3c01, 0x3c03}));
  EXPECT_FALSE(run_op_once("Transpose", {{"perm", Attribute::Ints({0, 0})}}, {iota<float>(Shape{2, 2})}, 1).ok());
  EXPECT_FALSE(run_op_once("Transpose", {{"perm", Attribute::Ints({0, 1, 2})}}, {iota<float>(Shape{2, 2})}, 1).ok());
}

// ---- Concat, Split ----

TEST(TensorConcat, NegativeAxisAndEmptyInput) {
  Tensor a = iota<int32_t>(Shape{2, 2}), b = iota<int32_t>(Shape{2, 1}, 10), e = Tensor::zeros(DType::kInt32, Shape{2, 0});
  Tensor y = run1("Concat", {{"axis", Attribute::Int(-1)}}, {a, e, b});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{0, 1, 10, 2, 3, 11}));
  Tensor y0 = run1("Concat", {{"axis", Attribute::Int(0)}}, {a, iota<int32_t>(Shape{1, 2}, 7)});
  EXPECT_EQ(values<int32_t>(y0), (std::vector<int32_t>{0, 1, 2, 3, 7, 8}));
}

// Long rows are copied in 64 KiB pieces over the threads: one row (a cached sequence joined with
// new tokens, outer = 1) and a few rows, with sizes that are not whole pieces.
TEST(TensorConcat, LongRowsCopiedInPieces) {
  for (int64_t outer : {1, 3}) {
    Tensor a = iota<float>(Shape{outer, 1370, 49}), b = iota<float>(Shape{outer, 274, 49}, 1e6f);
    Tensor y = run1("Concat", {{"axis", Attribute::Int(1)}}, {a, b});
    ASSERT_EQ(y.shape(), (Shape{outer, 1644, 49}));
    bool same = true;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < 1644 * 49; ++i) {
        const float want = i < 1370 * 49 ? a.as<float>()[o * 1370 * 49 + i] : b.as<float>()[o * 274 * 49 + i - 1370 * 49];
        same &= y.as<float>()[o * 1644 * 49 + i] == want;
      }
    EXPECT_TRUE(same) << "outer " << outer;
  }
}

// All inputs are copied in one parallel region: many short rows (Swin's patch merging, four
// [1, 14, 14, 192] along the channels; its roll, [1, 28, 25, 192] + [1, 28, 3, 192]), empty inputs
// first, between and last, and a long input beside short ones (pieces of unequal count per input).
TEST(TensorConcat, ManyInputsOneRegionMatchesNaive) {
  struct Case {
    Shape lead;
    std::vector<int64_t> lens;
    int64_t inner;
  };
  const std::vector<Case> cases = {
      {Shape{1, 14, 14}, {192, 192, 192, 192}, 1},
      {Shape{1, 28}, {25, 3}, 192},
      {Shape{37}, {0, 5, 0, 3, 17000, 1, 0}, 1},
      {Shape{2}, {40000, 3, 0, 20000}, 1},
      {Shape{1}, {0, 3, 0, 1}, 7},
  };
  for (const Case& c : cases) {
    std::vector<Tensor> ins;
    float start = 0;
    const int axis = c.lead.rank();
    for (int64_t len : c.lens) {
      Shape s = c.lead;
      s.push_back(len);
      s.push_back(c.inner);
      ins.push_back(iota<float>(s, start));
      start += 1e6f;
    }
    Tensor y = run1("Concat", {{"axis", Attribute::Int(axis)}}, ins);
    const int64_t outer = c.lead.numel();
    int64_t total_len = 0;
    for (int64_t len : c.lens) total_len += len;
    ASSERT_EQ(y.numel(), outer * total_len * c.inner);
    bool same = true;
    for (int64_t o = 0; o < outer; ++o) {
      int64_t at = 0;
      for (size_t i = 0; i < ins.size(); ++i) {
        const int64_t chunk = c.lens[i] * c.inner;
        for (int64_t k = 0; k < chunk; ++k)
          same &= y.as<float>()[(o * total_len) * c.inner + at + k] == ins[i].as<float>()[o * chunk + k];
        at += chunk;
      }
    }
    EXPECT_TRUE(same) << c.lead.str() << " inputs " << c.lens.size();
  }
}

TEST(TensorConcat, BoolAndErrors) {
  Tensor a = make<bool>({true, false}, Shape{2}), b = make<bool>({false}, Shape{1});
  Tensor y = run1("Concat", {{"axis", Attribute::Int(0)}}, {a, b});
  EXPECT_EQ(values<bool>(y), (std::vector<bool>{true, false, false}));
  EXPECT_FALSE(run_op_once("Concat", {{"axis", Attribute::Int(0)}}, {iota<float>(Shape{2, 2}), iota<float>(Shape{2, 3})}, 1).ok());
  EXPECT_FALSE(run_op_once("Concat", {{"axis", Attribute::Int(2)}}, {iota<float>(Shape{2, 2})}, 1).ok());
  EXPECT_FALSE(run_op_once("Concat", {{"axis", Attribute::Int(0)}}, {iota<float>(Shape{2}), iota<int32_t>(Shape{2})}, 1).ok());
  EXPECT_FALSE(run_op_once("Concat", {}, {iota<float>(Shape{2})}, 1).ok());  // axis is required
}

TEST(TensorSplit, InputSplitsAndEqualSplit) {
  auto r = run_op_once("Split", {{"axis", Attribute::Int(1)}}, {iota<float>(Shape{2, 5}), i64({2, 0, 3})}, 3);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].shape(), (Shape{2, 2}));
  EXPECT_EQ((*r)[1].shape(), (Shape{2, 0}));
  EXPECT_EQ(values<float>((*r)[0]), (std::vector<float>{0, 1, 5, 6}));
  EXPECT_EQ(values<float>((*r)[2]), (std::vector<float>{2, 3, 4, 7, 8, 9}));
  auto e = run_op_once("Split", {}, {iota<int64_t>(Shape{6})}, 3);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(values<int64_t>((*e)[2]), v64({4, 5}));
  // Opset 11 form: split as an attribute.
  auto a = run_op_once("Split", {{"split", Attribute::Ints({1, 2})}, {"axis", Attribute::Int(-1)}},
                       {iota<int64_t>(Shape{3})}, 2, {}, 11);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(values<int64_t>((*a)[1]), v64({1, 2}));
}

TEST(TensorSplit, NumOutputsUnevenAndErrors) {
  auto r = run_op_once("Split", {{"num_outputs", Attribute::Int(3)}}, {iota<int64_t>(Shape{7})}, 3, {}, 18);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(values<int64_t>((*r)[2]), v64({6}));
  EXPECT_FALSE(run_op_once("Split", {}, {iota<int64_t>(Shape{7})}, 3).ok());        // uneven without num_outputs
  EXPECT_FALSE(run_op_once("Split", {}, {iota<int64_t>(Shape{6}), i64({2, 2})}, 2).ok());  // sums to 4
  EXPECT_FALSE(run_op_once("Split", {}, {iota<int64_t>(Shape{6}), i64({3, 3})}, 3).ok());  // count mismatch
}

// ---- Slice ----

TEST(TensorSlice, NegativeStepsAndClamping) {
  Tensor x = iota<int64_t>(Shape{10});
  auto s = [&](int64_t b, int64_t e, int64_t st) {
    return values<int64_t>(run1("Slice", {}, {x, i64({b}), i64({e}), i64({0}), i64({st})}));
  };
  EXPECT_EQ(s(8, 1, -3), v64({8, 5, 2}));
  EXPECT_EQ(s(-3, 100, 1), v64({7, 8, 9}));
  EXPECT_EQ(s(INT64_MAX, INT64_MIN, -1), v64({9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(s(-1000, INT64_MAX, 4), v64({0, 4, 8}));
  EXPECT_EQ(s(5, 5, 1), v64({}));
  EXPECT_EQ(s(20, 30, 1), v64({}));
}

TEST(TensorSlice, TwoAxesNegativeAxisUint8) {
  Tensor m = iota<uint8_t>(Shape{4, 5});
  // numpy: m[3:0:-2, 1:5:2]
  Tensor y = run1("Slice", {}, {m, i64({1, 3}), i64({5, 0}), i64({-1, 0}), i64({2, -2})});
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<uint8_t>(y), (std::vector<uint8_t>{16, 18, 6, 8}));
  // Default axes and steps; int32 starts.
  Tensor y2 = run1("Slice", {}, {m, make<int32_t>({1}, Shape{1}), make<int32_t>({2}, Shape{1})});
  EXPECT_EQ(values<uint8_t>(y2), (std::vector<uint8_t>{5, 6, 7, 8, 9}));
}

TEST(TensorSlice, AttributeFormAndErrors) {
  Tensor y = run1("Slice", {{"starts", Attribute::Ints({1})}, {"ends", Attribute::Ints({3})}, {"axes", Attribute::Ints({1})}},
                  {iota<float>(Shape{2, 4})}, 9);
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 2, 5, 6}));
  Tensor x = iota<float>(Shape{4});
  EXPECT_FALSE(run_op_once("Slice", {}, {x, i64({0}), i64({2}), i64({0}), i64({0})}, 1).ok());  // step 0
  EXPECT_FALSE(run_op_once("Slice", {}, {x, i64({0}), i64({2}), i64({1})}, 1).ok());            // axis 1 of rank 1
  EXPECT_FALSE(run_op_once("Slice", {}, {x, i64({0, 0}), i64({2})}, 1).ok());                   // length mismatch
  EXPECT_FALSE(run_op_once("Slice", {}, {iota<float>(Shape{2, 2}), i64({0, 0}), i64({1, 1}), i64({0, -2})}, 1).ok());
}

// ---- Expand, Tile ----

TEST(TensorExpand, BroadcastsAndAddsDims) {
  Tensor y = run1("Expand", {}, {make<int32_t>({1, 2, 3}, Shape{3, 1}), i64({2, 1, 4})});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 3,
                                                      3, 3, 3}));
  // Shape smaller than the input keeps the input dims.
  Tensor y2 = run1("Expand", {}, {iota<double>(Shape{2, 3}), i64({3})});
  EXPECT_EQ(y2.shape(), (Shape{2, 3}));
  Tensor z = run1("Expand", {}, {iota<double>(Shape{1, 3}), i64({0, 1})});
  EXPECT_EQ(z.shape(), (Shape{0, 3}));
  EXPECT_FALSE(run_op_once("Expand", {}, {iota<float>(Shape{2, 3}), i64({4, 3, 2})}, 1).ok());
}

TEST(TensorTile, RepeatsAndZero) {
  Tensor y = run1("Tile", {}, {make<int16_t>({1, 2, 3, 4}, Shape{2, 2}), i64({2, 3})});
  EXPECT_EQ(y.shape(), (Shape{4, 6}));
  EXPECT_EQ(values<int16_t>(y), (std::vector<int16_t>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4, 1, 2, 1, 2, 1, 2, 3, 4, 3,
                                                      4, 3, 4}));
  Tensor z = run1("Tile", {}, {iota<float>(Shape{2, 2}), i64({0, 2})});
  EXPECT_EQ(z.shape(), (Shape{0, 4}));
  EXPECT_FALSE(run_op_once("Tile", {}, {iota<float>(Shape{2, 2}), i64({2})}, 1).ok());
  EXPECT_FALSE(run_op_once("Tile", {}, {iota<float>(Shape{2}), i64({-1})}, 1).ok());
}

// ---- Pad ----

TEST(TensorPad, Modes) {
  Tensor p = iota<float>(Shape{2, 3});
  Tensor r = run1("Pad", {{"mode", Attribute::String("reflect")}}, {p, i64({1, 2, 1, 1})});
  EXPECT_EQ(r.shape(), (Shape{4, 6}));
  EXPECT_EQ(values<float>(r), (std::vector<float>{5, 4, 3, 4, 5, 4, 2, 1, 0, 1, 2, 1, 5, 4, 3, 4, 5, 4, 2, 1, 0, 1,
                                                  2, 1}));
  Tensor e = run1("Pad", {{"mode", Attribute::String("edge")}}, {p, i64({0, 1, 1, 2})});
  EXPECT_EQ(values<float>(e), (std::vector<float>{0, 0, 1, 2, 2, 2, 3, 3, 4, 5, 5, 5, 3, 3, 4, 5, 5, 5}));
  Tensor w = run1("Pad", {{"mode", Attribute::String("wrap")}}, {p, i64({0, 2, 0, 1})});
  EXPECT_EQ(values<float>(w), (std::vector<float>{1, 2, 0, 1, 2, 0, 4, 5, 3, 4, 5, 3}));
}

TEST(TensorPad, ConstantValueCroppingAndAxes) {
  Tensor p = iota<int32_t>(Shape{2, 3});
  // Pad 1 on the left and crop 1 on the right of dim 1.
  Tensor c = run1("Pad", {}, {p, i64({0, 1, 0, -1}), make<int32_t>({9}, Shape{})});
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int32_t>(c), (std::vector<int32_t>{9, 0, 1, 9, 3, 4}));
  // Opset 18 axes input: pad only the last axis.
  Tensor a = run1("Pad", {}, {p, i64({1, 0}), Tensor(), i64({-1})}, 18);
  EXPECT_EQ(values<int32_t>(a), (std::vector<int32_t>{0, 0, 1, 2, 0, 3, 4, 5}));
  // Opset 2 attribute form with a float value converted to the input dtype.
  Tensor o = run1("Pad", {{"pads", Attribute::Ints({1, 0, 0, 0})}, {"value", Attribute::Float(7)}}, {p}, 2);
  EXPECT_EQ(values<int32_t>(o), (std::vector<int32_t>{7, 7, 7, 0, 1, 2, 3, 4, 5}));
  // Zero-size input padded with a constant.
  Tensor z = run1("Pad", {}, {Tensor::zeros(DType::kFloat32, Shape{0, 2}), i64({1, 0, 0, 0})});
  EXPECT_EQ(z.shape(), (Shape{1, 2}));
  EXPECT_EQ(values<float>(z), (std::vector<float>{0, 0}));
}

TEST(TensorPad, Errors) {
  Tensor p = iota<float>(Shape{2, 3});
  EXPECT_FALSE(run_op_once("Pad", {{"mode", Attribute::String("mirror")}}, {p, i64({0, 0, 0, 0})}, 1).ok());
  EXPECT_FALSE(run_op_once("Pad", {}, {p, i64({0, 0, 0})}, 1).ok());
  EXPECT_FALSE(run_op_once("Pad", {}, {p, i64({0, -4, 0, 0})}, 1).ok());
  EXPECT_FALSE(run_op_once("Pad", {}, {p, i64({0, 0, 0, 0}), make<double>({1}, Shape{})}, 1).ok());
  EXPECT_FALSE(run_op_once("Pad", {{"mode", Attribute::String("edge")}},
                           {Tensor::zeros(DType::kFloat32, Shape{0, 2}), i64({1, 0, 0, 0})}, 1).ok());
}

// ---- DepthToSpace, SpaceToDepth ----

TEST(TensorDepthToSpace, DcrAndCrd) {
  // numpy, x = arange(16).reshape(1, 8, 1, 2), b = 2
  Tensor x = iota<float>(Shape{1, 8, 1, 2});
  Tensor d = run1("DepthToSpace", {{"blocksize", Attribute::Int(2)}}, {x});
  EXPECT_EQ(d.shape(), (Shape{1, 2, 2, 4}));
  EXPECT_EQ(values<float>(d), (std::vector<float>{0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15}));
  Tensor c = run1("DepthToSpace", {{"blocksize", Attribute::Int(2)}, {"mode", Attribute::String("CRD")}}, {x});
  EXPECT_EQ(values<float>(c), (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15}));
  EXPECT_FALSE(run_op_once("DepthToSpace", {{"blocksize", Attribute::Int(3)}}, {x}, 1).ok());
  EXPECT_FALSE(run_op_once("DepthToSpace", {{"blocksize", Attribute::Int(2)}, {"mode", Attribute::String("XYZ")}}, {x}, 1).ok());
}

TEST(TensorSpaceToDepth, InvertsDcr) {
  Tensor x = iota<int64_t>(Shape{2, 3, 4, 6});
  Tensor s = run1("SpaceToDepth", {{"blocksize", Attribute::Int(2)}}, {x});
  EXPECT_EQ(s.shape(), (Shape{2, 12, 2, 3}));
  // numpy: x.reshape(2,3,2,2,3,2).transpose(0,3,5,1,2,4).reshape(2,12,2,3)[0, :, 0, 0]
  auto v = values<int64_t>(s);
  std::vector<int64_t> col;
  for (int c = 0; c < 12; ++c) col.push_back(v[c * 6]);
  EXPECT_EQ(col, v64({0, 24, 48, 1, 25, 49, 6, 30, 54, 7, 31, 55}));
  Tensor back = run1("DepthToSpace", {{"blocksize", Attribute::Int(2)}}, {s});
  EXPECT_EQ(values<int64_t>(back), values<int64_t>(x));
  EXPECT_FALSE(run_op_once("SpaceToDepth", {{"blocksize", Attribute::Int(4)}}, {x}, 1).ok());
}

}  // namespace
}  // namespace kiln
