// Registration functions of the kernel families; the table that calls them is registry.cpp.
#pragma once

namespace kiln {
class KernelRegistry;

void register_elementwise_kernels(KernelRegistry& r);  // unary/binary math, activations, Cast, Where, compare, logic
void register_reduction_kernels(KernelRegistry& r);    // Reduce*, ArgMax/ArgMin, Softmax family, CumSum, TopK
void register_tensor_kernels(KernelRegistry& r);       // shape & data movement: Reshape, Transpose, Concat, Slice, Gather, ...
void register_nn_kernels(KernelRegistry& r);           // MatMul, Gemm, Conv, pooling, normalization (reference)
void register_onednn_kernels(KernelRegistry& r);       // optimized MatMul, Gemm, Conv on oneDNN
void register_quantize_kernels(KernelRegistry& r);     // QuantizeLinear, DequantizeLinear, QLinear*, *Integer (reference)
}  // namespace kiln
