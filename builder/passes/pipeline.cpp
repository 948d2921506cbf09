#include <algorithm>

#include "builder/passes/pass.h"

namespace kiln {

const std::vector<Pass>& pass_pipeline() {
  static const std::vector<Pass> passes = {
      {"identity_elimination", "drop Identity nodes first so later patterns see producer->consumer edges directly",
       identity_elimination},
      {"shape_inference", "propagate dtypes and (symbolic) shapes so folding and fusions can reason about them",
       shape_inference},
      {"qdq_matmul_fusion",
       "give each MatMul/Gemm between QuantizeLinear/DequantizeLinear pairs (an explicitly quantized model) its "
       "input before quantization, its dequantized weights and the scales, so it runs on the int8 kernel with the "
       "model's own scales; before constant_folding, which would fold the weights' DequantizeLinear and lose them",
       qdq_matmul_fusion},
      {"constant_folding",
       "evaluate nodes whose inputs are constant, Size of values whose shape is known, and shape arithmetic "
       "whose elements shape inference knows (Shape of a known shape, or the static dims of one with a ranged "
       "batch), so the Shape->Gather->Unsqueeze->Concat subgraphs exporters write collapse into constants and a scale "
       "computed from a static size (GPT-2's w / v.size(-1) ** 0.5) becomes a number; drops Casts to a value's own "
       "dtype and the Shapes whose readers all folded, so they no longer read the values attention_fusion takes",
       constant_folding},
      {"noop_elimination",
       "drop the Dropouts (inference, or a constant ratio of 0) and the Pads by zeros that copy their input, once "
       "folding has made their ratio, training mode and pads constants (Swin computes its window padding from the "
       "shape); before the fusions, so their patterns see the producer directly",
       noop_elimination},
      {"shape_sources",
       "make each Shape of a value an attention fusion takes inside its node (b, h, s, d = out.shape of the .V "
       "product; k.shape[-2] of a KV-cache Concat) read the graph inputs its symbolic dims come from, so it is no "
       "reader of that value and a mask built from it is not computed from the fused node's output; after folding, "
       "which removes the Shapes that read only static dims, before attention_fusion; skipped when it is off",
       shape_sources},
      {"packed_projection_split",
       "give each Slice of a packed projection's product (nn.MultiheadAttention's x.W[E,3E] -> q, k, v) its own "
       "MatMul on the weight's columns: no Slice copies, and the query projection alone can narrow; after folding, "
       "which makes the Slice bounds constants, before matmul_epilogue_fusion, which fuses each bias slice",
       packed_projection_split},
      {"rotary_fusion",
       "replace each rotary embedding written as x * cos + rotate_half(x) * sin (two Slices, Neg, Concat, two "
       "Muls and an Add) by one FusedRotary node; after folding, which makes the Slice bounds constants",
       rotary_fusion},
      {"attention_fusion",
       "replace each exported attention subgraph (QK^T, scale, mask, Softmax, .V, with its head split/merge and "
       "KV-cache Concats) by one kiln::Attention node, which never materializes the score matrix; after folding so "
       "shape-derived operands (reshape targets, scales, causal slices) are constants where shapes allow",
       attention_fusion},
      {"selected_row_narrowing",
       "where the model reads one row of a value (x[:, -1] for a prediction head, x[:, 0] for a class token), make "
       "the row-wise nodes computing it (MLP, LayerNorm, residual adds, attention queries) compute that row only; "
       "after attention_fusion so the fused attention's query rows can narrow, before matmul_epilogue_fusion so its "
       "matchers see plain MatMul/Add/GELU nodes",
       selected_row_narrowing},
      {"slice_pushdown",
       "move a Slice of an elementwise Add/Sub/Mul/Div's output onto its inputs, so the op computes only the kept "
       "part (the ControlTransformer's step adds positions to its whole window and keeps the new tokens); before "
       "matmul_epilogue_fusion, which could otherwise take the Add as a residual",
       slice_pushdown},
      {"batchnorm_folding",
       "fold each inference BatchNormalization with constant statistics into the Conv before it, or into the "
       "MatMul/Gemm before it when its channels are the matmul's columns (new weight and bias), or else turn it "
       "into a per-channel Mul and Add that elementwise_fusion joins with the activation after it; after folding, "
       "which makes the statistics and weights constants, before matmul_epilogue_fusion and conv_epilogue_fusion, "
       "which then fuse the bias and activation after the folded MatMul/Gemm/Conv",
       batchnorm_folding},
      {"pool_before_pointwise_conv",
       "run an AveragePool without padding before the 1x1 stride-1 Conv whose output it alone reads (they "
       "commute, bias included): DenseNet's transitions convolve a quarter of the pixels; after batchnorm_folding, "
       "which may give the Conv its bias, before conv_epilogue_fusion, which makes it a FusedConv",
       pool_before_pointwise_conv},
      {"matmul_epilogue_fusion",
       "fold the bias Add, GELU and residual Add after each MatMul/Gemm with constant weights into one FusedMatMul "
       "(one oneDNN matmul with post-ops, weights prepacked once); after attention_fusion so its matchers see the "
       "exporter's own nodes, and after folding, which makes weights and GELU's scalars constants",
       matmul_epilogue_fusion},
      {"conv_epilogue_fusion",
       "turn each Conv with a constant weight, with the residual Add and Relu that follow it, into one FusedConv "
       "(one oneDNN convolution with post-ops, weights prepacked once); after folding, which makes the weights "
       "constants, and after shape inference, which proves the residual needs no broadcasting",
       conv_epilogue_fusion},
      {"nhwc_transpose_folding",
       "keep NHWC the values a model moves between NCHW and NHWC with Transposes around its FusedConvs "
       "(ConvNeXt's blocks, stem, downsampling and head: 46 Transposes in convnext_tiny), through the residual "
       "adds, layer scales and GlobalAveragePool between them, so the Transposes vanish; after "
       "conv_epilogue_fusion, which creates the FusedConvs, before matmul_scale_fusion, which then sees the "
       "layer scale right after its matmul, and before conv_channels_last, which leaves these FusedConvs' "
       "layouts alone",
       nhwc_transpose_folding},
      {"patch_embedding_transpose_folding",
       "have a patch convolution write NHWC where the model flattens its output to tokens and transposes them "
       "(ViT's x.reshape(n, c, h * w).permute(0, 2, 1)), so the Reshape is a view and the Transpose goes; after "
       "conv_epilogue_fusion, which creates the FusedConvs, before conv_channels_last, which would give the "
       "convolution the build CPU's blocked layout",
       patch_embedding_transpose_folding},
      {"matmul_scale_fusion",
       "fold a per-column constant Mul after a FusedMatMul without activation into its weights and bias, and "
       "the residual Add after it into its epilogue (ConvNeXt's layer scale and residual: one pass over the "
       "output instead of two); after nhwc_transpose_folding, which removes the Transpose between them, before "
       "elementwise_fusion, which would fuse the Mul and Add",
       matmul_scale_fusion},
      {"matmul_transpose_folding",
       "make each MatMul of two activations (an attention that did not fuse: Q x K^T, P x V) read its operands "
       "through the Transposes that split the heads, write its product through the one that merges them and "
       "apply a scalar scale of Q or of the scores as alpha, as one kiln::StridedMatMul: no pass over memory per "
       "Transpose and scale; after attention_fusion, which takes these nodes when the attention fuses, and "
       "matmul_scale_fusion, which folds a scale into the projection's weights where it can, before "
       "elementwise_fusion, which would take the scale",
       matmul_transpose_folding},
      {"unit_reshape_unwrap",
       "run an Add/Sub/Mul/Div of a constant found between a Reshape adding leading 1-dims and one dropping them "
       "(Swin's shifted-window mask) on the unreshaped value, the constant's leading 1-dims dropped; before "
       "elementwise_fusion, which then joins it with the ops around it",
       unit_reshape_unwrap},
      {"elementwise_fusion",
       "merge each tree of elementwise ops (activations, broadcasting arithmetic, comparisons, Where, Cast, Pow, "
       "and written-out LayerNorm/RMSNorm) whose inner values nothing else reads into one kiln::FusedElementwise "
       "step, a vector register program making one pass over memory; after the matmul and conv epilogue fusions, "
       "which compute the activations they can in their own epilogues",
       elementwise_fusion},
      {"softmax_prologue_fusion",
       "join each Softmax over the last axis to the kiln::FusedElementwise computing its input (an unfused "
       "attention's scale and mask), so every row of the scores is normalised while it is in cache; after "
       "elementwise_fusion, which builds that node",
       softmax_prologue_fusion},
      {"conv_channels_last",
       "keep the values flowing from FusedConv to FusedConv (through MaxPools and channel Concats) in oneDNN's "
       "computing layout on the build CPU (NHWC with AVX-512, nChw8c with AVX2), so no reorder runs between "
       "convolutions; after conv_epilogue_fusion, which creates the FusedConvs",
       conv_channels_last},
      {"elementwise_pool_fusion",
       "join each 2x2 stride-2 AveragePool without padding to the kiln::FusedElementwise computing its input "
       "(DenseNet's BN + ReLU before a transition's pool), so the full-resolution activation is pooled two rows "
       "at a time in cache instead of written and read back; after conv_channels_last, which gives the pool and "
       "the FusedElementwise their layout",
       elementwise_pool_fusion},
      {"dead_node_elimination", "remove nodes whose outputs nobody reads (left over by folding)", dead_node_elimination},
  };
  return passes;
}

std::vector<std::string> pass_names() {
  std::vector<std::string> names;
  for (const auto& p : pass_pipeline()) names.push_back(p.name);
  return names;
}

Status run_pass_pipeline(Graph& g, PassContext& ctx) {
  for (const auto& d : ctx.disabled) {
    auto names = pass_names();
    if (std::find(names.begin(), names.end(), d) == names.end())
      return InvalidArgument("unknown pass '" + d + "' in the disabled list");
  }
  for (const auto& p : pass_pipeline()) {
    if (ctx.disabled.count(p.name)) continue;
    Status st = p.run(g, ctx);
    if (!st.ok()) return st.with_context(std::string("pass ") + p.name);
    g.compact();
  }
  return Status::Ok();
}

}  // namespace kiln
