// The pass interface and the single ordered pipeline (pipeline.cpp lists the passes in order, with
// why). Every pass can be disabled by name.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "builder/graph.h"
#include "builder/shapes/dim.h"
#include "runtime/kernel.h"

namespace kiln {

// One attention-like site (a Softmax fed by a MatMul) seen by attention_fusion.
struct AttentionSite {
  std::string softmax;     // the Softmax node's name
  std::string fused_node;  // the kiln::Attention node that replaced it; empty when not fused
  std::string reason;      // why it was not fused; empty when fused
};

struct PassContext {
  std::set<std::string> disabled;     // pass names to skip
  std::vector<std::string> log;       // one line per rewrite worth reporting
  int64_t max_folded_bytes = 64 << 20;  // constant folding never materializes a bigger tensor
  std::vector<AttentionSite> attention_sites;  // filled by attention_fusion, for build reports
  bool attention_required = false;   // an attention site left unfused is an error
  DimRanges dim_ranges;              // a profile's ranged symbols: what passes may prove for all of them
  // conv_channels_last's layout, "nhwc" or "nchw8c"; empty: the build machine's
  // (conv_activation_layout_for_host()). Tests set it to build what another CPU would.
  std::string conv_layout;
};

struct Pass {
  const char* name;
  const char* why;
  std::function<Status(Graph&, PassContext&)> run;
};

const std::vector<Pass>& pass_pipeline();
// Runs every enabled pass in order; errors name the pass.
Status run_pass_pipeline(Graph& g, PassContext& ctx);
// Names of all passes, for --disable-pass validation and help texts.
std::vector<std::string> pass_names();

// The passes (one file each).
Status identity_elimination(Graph& g, PassContext& ctx);
Status shape_inference(Graph& g, PassContext& ctx);
Status qdq_matmul_fusion(Graph& g, PassContext& ctx);
Status constant_folding(Graph& g, PassContext& ctx);
Status noop_elimination(Graph& g, PassContext& ctx);
Status shape_sources(Graph& g, PassContext& ctx);
Status packed_projection_split(Graph& g, PassContext& ctx);
Status rotary_fusion(Graph& g, PassContext& ctx);
Status attention_fusion(Graph& g, PassContext& ctx);
Status selected_row_narrowing(Graph& g, PassContext& ctx);
Status slice_pushdown(Graph& g, PassContext& ctx);
Status matmul_epilogue_fusion(Graph& g, PassContext& ctx);
Status conv_epilogue_fusion(Graph& g, PassContext& ctx);
Status batchnorm_folding(Graph& g, PassContext& ctx);
Status pool_before_pointwise_conv(Graph& g, PassContext& ctx);
Status unit_reshape_unwrap(Graph& g, PassContext& ctx);
Status elementwise_fusion(Graph& g, PassContext& ctx);
Status softmax_prologue_fusion(Graph& g, PassContext& ctx);
// A float32 Softmax over the last axis of an input of known rank: what softmax_prologue_fusion joins
// to the FusedElementwise before it (elementwise_fusion builds one even of a lone op there).
bool softmax_over_last_axis(const Graph& g, const Node& n);
Status nhwc_transpose_folding(Graph& g, PassContext& ctx);
Status patch_embedding_transpose_folding(Graph& g, PassContext& ctx);
Status matmul_scale_fusion(Graph& g, PassContext& ctx);
Status matmul_transpose_folding(Graph& g, PassContext& ctx);
Status conv_channels_last(Graph& g, PassContext& ctx);
// The layout conv_channels_last keeps between convolutions on this machine (cpu_info(), capped by
// KILN_MAX_CPU_ISA): "nhwc" with AVX-512, "nchw8c" without.
const char* conv_activation_layout_for_host();
Status elementwise_pool_fusion(Graph& g, PassContext& ctx);
Status dead_node_elimination(Graph& g, PassContext& ctx);

// Shared by shape_inference and constant_folding: infers dtype and shape of one node's outputs from
// what is known of its inputs. Never fails: what cannot be inferred stays unknown.
// `ranges` (a profile's ranged symbols) lets Slice with symbolic bounds get a symbolic size.
void infer_node(Graph& g, Node& n, const DimRanges& ranges = DimRanges{});
// Columns [begin, end) of the last axis (of `n` columns, input rank `rank`) that Slice node `s`
// keeps, when it slices only that axis with step 1 and constant bounds (packed_projection_split,
// rotary_fusion).
std::optional<std::pair<int64_t, int64_t>> last_axis_columns(const Graph& g, const Node& s, int rank, int64_t n);
// Like infer_node, but returns the kernel's error when the node's (concrete) input shapes are
// incompatible: used to check optimization profiles against the graph.
Status check_node_shapes(Graph& g, Node& n);

}  // namespace kiln
