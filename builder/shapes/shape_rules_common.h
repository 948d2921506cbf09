// Shared by the shape-inference rules (builder/shapes/): the op families they treat alike and the
// helpers they share. Internal to builder/shapes/.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "builder/graph.h"
#include "builder/shapes/dim.h"

namespace kiln::shape_rules {

using Dims = std::vector<Dim>;

inline const std::set<std::string> kSameShape = {
    "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
    "Asinh", "Acosh", "Atanh", "Ceil", "Floor", "Round", "Sign", "Erf", "Relu", "LeakyRelu", "Elu", "Selu", "Celu",
    "Sigmoid", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Tanh", "ThresholdedRelu", "Shrink", "Clip",
    "Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "Dropout", "Identity", "CumSum", "Trilu",
    "BatchNormalization", "InstanceNormalization", "LRN", "MeanVarianceNormalization", "IsNaN", "IsInf", "Not",
    "Gelu", "Mish", "FusedRotary"};
inline const std::set<std::string> kBroadcast = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal",
                                          "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Where", "Max",
                                          "Min", "Sum", "Mean", "PRelu", "BitShift"};
inline const std::set<std::string> kBoolOut = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or",
                                        "Xor", "Not", "IsNaN", "IsInf"};
// Ops whose kernel infer() reads no input data: safe to infer with shapes only.
inline const std::set<std::string> kDataIndependent = {
    "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "MatMul",
    "Gemm", "Flatten", "Transpose", "Concat", "Gather", "GatherElements", "GatherND", "Cast", "CastLike", "ArgMax",
    "ArgMin", "DepthToSpace", "SpaceToDepth", "ScatterElements", "ScatterND", "Einsum", "Size", "Shape",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearMatMul", "ConvInteger",
    "QLinearConv"};
// Ops whose shape-describing inputs are inputs 1.. (input 0 is data): safe when those are constant.
inline const std::set<std::string> kShapeInputsAfterFirst = {
    "Reshape", "Expand", "Slice", "Tile", "Unsqueeze", "Squeeze", "Pad", "Split", "ReduceSum", "ReduceMean",
    "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceSumSquare", "Resize", "TopK", "OneHot", "Upsample"};

// The elements of a small integer constant, or nullopt.
std::optional<std::vector<int64_t>> const_ints(const Graph& g, int v);
// Sets output i's dtype (unless undefined) and shape (when given).
void set_out(Graph& g, const Node& n, size_t i, DType dt, std::optional<Dims> shape);
// sym_value of small integer constants.
void seed_sym_value(Value& v);
bool nonneg(const Dim& d);

// One element of a small integer vector: a number (negative ones too, which Dims cannot hold) or
// a symbolic dim.
struct Elem {
  std::optional<int64_t> num;
  Dim sym;
};
std::optional<Elem> elem_of(const Graph& g, int v, size_t i, int depth = 0);

// Rules for shape-arithmetic ops on sym_values (sym_values.cpp).
void infer_sym_value(Graph& g, Node& n);
// Symbolic shape rules per op (shape_rules.cpp); false when the op has none.
bool symbolic_rule(Graph& g, Node& n, const DimRanges& ranges);
// A plugin node's outputs (plugin_shapes.cpp).
Status plugin_rule(Graph& g, Node& n);
// Generic inference by the kernel itself, for concrete input shapes (shape_rules.cpp).
Status kernel_rule(Graph& g, Node& n);

}  // namespace kiln::shape_rules
