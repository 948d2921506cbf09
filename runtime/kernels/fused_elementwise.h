// kiln::FusedElementwise: a tree of elementwise ops (written by builder/passes/
// elementwise_fusion.cpp) evaluated in one pass over memory by a small register program.
//
// Inputs: float32 or bool tensors (bool reads as 1.0f / 0.0f), broadcast numpy-style to the
// output's shape (float32). Attributes:
//   program     ints, kFieldsPerInstr per instruction: {opcode, dst, a, b, c}
//   immediates  floats: the one-element constants of the tree and the ops' parameters
//   norm        "none" (default) | "layer" | "rms": a normalisation stage first (below)
//   epsilon     float, the normalisation's epsilon
//   softmax     int 0 (default) | 1: the output is the Softmax over its last axis of the program's
//               result (builder/passes/softmax_prologue_fusion.cpp); not with a normalisation stage
//   pool_layout "none" (default) | "nchw" | "nhwc" | "nchw8c": the output is the 2x2, stride-2,
//               unpadded AveragePool (floor mode) of the program's result, which has that layout's
//               shape ([N, C, H, W], [N, H, W, C] or [N, C/8, H, W, 8]): the result is computed two
//               input rows at a time and never written (builder/passes/elementwise_pool_fusion.cpp);
//               not with a normalisation stage or softmax
// Registers: [0, num_inputs) are the inputs, [num_inputs, num_inputs + num_immediates) the
// immediates, then temporaries; the last instruction's dst is the output. With a normalisation
// stage, input 0 is x (of the output's shape, normalised over its last axis) and the first
// temporary holds n = (x - mean) / sqrt(var + eps) ("layer") or x / sqrt(mean(x^2) + eps) ("rms")
// before the program runs; a program may be empty, making n the output.
//
// The program is interpreted per block of up to kBlock elements, never per element: each
// instruction is one call of a vector loop (runtime/kernels/vec_kernels.h) over the block.
#pragma once

#include <cstdint>

namespace kiln::fused {

constexpr int kFieldsPerInstr = 5;
constexpr int kMaxInputs = 8;
constexpr int kMaxRegisters = 40;
constexpr int64_t kBlock = 512;

// Opcodes: [0, 100) a vec::Unary (params: alpha = register b, beta = register c, both immediates,
// or -1); [100, 200) 100 + a vec::Binary over registers a, b; kSelect: c ? a : b as registers
// (cond a, true b, false c).
constexpr int kUnaryBase = 0;
constexpr int kBinaryBase = 100;
constexpr int kSelect = 200;

}  // namespace kiln::fused
