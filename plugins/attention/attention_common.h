// What the kiln::Attention kernel, its reference and its plugin share: the parsed fields, and the
// geometry that shape validation derives from the inputs (see CONTRACT.md for the semantics).
#pragma once

#include <cstdint>
#include <span>

#include "runtime/status.h"
#include "runtime/tensor.h"

namespace kiln::attention {

// kBSD: [B, S, H·Dh]; kBHSD: [B, H, S, Dh]; kSBD: [S, B, H·Dh] (sequence first, as
// nn.MultiheadAttention computes q/k/v; no KV cache in this layout).
enum class Layout { kBSD, kBHSD, kSBD };
const char* layout_name(Layout layout);
inline int layout_rank(Layout layout) { return layout == Layout::kBHSD ? 4 : 3; }
inline int seq_axis(Layout layout) { return layout == Layout::kBHSD ? 2 : layout == Layout::kSBD ? 0 : 1; }
inline int batch_axis(Layout layout) { return layout == Layout::kSBD ? 1 : 0; }
// The shape of a q/k/v/cache/output tensor of S rows.
Shape seq_shape(Layout layout, int64_t B, int64_t S, int64_t H, int64_t Dh);
enum class MaskKind { kNone, kBool, kAdditive, kCausal, kBlockCausal };
enum class Precision { kFp32, kBf16 };

struct Params {
  int64_t num_heads = 0;
  float scale = 1.0f;
  Layout layout = Layout::kBSD;
  MaskKind mask = MaskKind::kNone;
  int64_t block = 0;  // block_causal only
  bool kv_cache = false;
  Precision precision = Precision::kFp32;  // kBf16: Q·Kᵀ and P·V with bf16 inputs, f32 accumulation
  // Input 6 is a live length L (int64, one element): only keys [0, L) are attended, as if a mask hid
  // the rest; a fixed-size cache's step then costs O(L), not O(cache length).
  bool live_length = false;
};

// Input/output positions (CONTRACT.md).
constexpr int kQ = 0, kK = 1, kV = 2, kMask = 3, kKCache = 4, kVCache = 5, kLive = 6;
constexpr int kMaxInputs = 7;

// Element strides of one [B, S, H, Dh]-addressable tensor: row s of head h of batch b starts at
// b * batch + h * head + s * row, and its Dh elements are contiguous.
struct RowStrides {
  int64_t batch = 0, head = 0, row = 0;
};
RowStrides row_strides(Layout layout, int64_t B, int64_t S, int64_t H, int64_t Dh);

struct Geometry {
  int64_t B = 0, H = 0, Dh = 0, Sq = 0, Sk_new = 0, Sc = 0;
  int64_t Sk_total() const { return Sc + Sk_new; }
  // Keys [0, live) are attended (live_length; set per run from input 6), else -1: all Sk_total.
  int64_t live = -1;
  int64_t key_limit() const { return live >= 0 && live < Sk_total() ? live : Sk_total(); }
  // Mask strides for [B, H, Sq, Sk_total] (0 on broadcast dims); meaningful for bool/additive.
  int64_t mask_stride[4] = {0, 0, 0, 0};
  // Absolute position of query 0 (CONTRACT.md: the queries are the last Sq positions).
  int64_t query_offset() const { return Sk_total() - Sq; }
};

// Validates input count, dtypes and shapes; errors name the input index, dim and values.
StatusOr<Geometry> validate_inputs(const Params& p, std::span<const TensorDesc> inputs);
// Output descriptors for a validated geometry (1 or 3 outputs).
void output_descs(const Params& p, const Geometry& g, std::span<TensorDesc> outputs);
int num_outputs(const Params& p);
// With live_length: input 6's value, checked against [1, Sk_total] (the error names both).
StatusOr<int64_t> read_live_length(const Geometry& g, const TensorView& live);

// First key index that query row at absolute position `pos` may NOT see under a causal or
// block-causal mask (keys [0, limit) are visible).
inline int64_t visible_limit(const Params& p, int64_t pos) {
  if (p.mask == MaskKind::kCausal) return pos + 1;
  return (pos / p.block + 1) * p.block;
}

// Appends new K/V rows after the cached ones into outputs 1 and 2. When an output starts at the
// cache's buffer and the cached rows already sit where the concat puts them, only the new rows
// are written; when it starts there but the rows must spread out (several batches/heads), the
// cached rows are moved in place from the last one down. Call after attention has read the cache.
void append_kv(const Params& p, const Geometry& g, std::span<const TensorView> inputs,
               std::span<const TensorView> outputs);

}  // namespace kiln::attention
