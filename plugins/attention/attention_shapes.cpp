#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "plugins/attention/attention_common.h"
#include "runtime/thread_pool.h"

namespace kiln::attention {
namespace {

const char* input_name(int i) {
  static const char* const names[] = {"q", "k", "v", "mask", "k_cache", "v_cache", "live"};
  return names[i];
}

std::string input_label(int i) { return "input " + std::to_string(i) + " (" + input_name(i) + ")"; }

Status check_float(std::span<const TensorDesc> in, int i) {
  if (in[i].dtype != DType::kFloat32)
    return InvalidArgument("kiln::Attention: " + input_label(i) + " must be float32, got " + dtype_name(in[i].dtype));
  return Status::Ok();
}

// Checks a q/k/v/cache tensor against the layout's shape (seq_shape) where every dim but the
// sequence one is known; returns its sequence length. `seq` >= 0 also fixes that dim.
StatusOr<int64_t> check_seq_tensor(const Params& p, const Geometry& g, std::span<const TensorDesc> in, int i,
                                   int64_t seq) {
  KILN_RETURN_IF_ERROR(check_float(in, i));
  const Shape& s = in[i].shape;
  const int rank = layout_rank(p.layout);
  if (s.rank() != rank)
    return InvalidArgument("kiln::Attention: " + input_label(i) + " must have rank " + std::to_string(rank) + " (" +
                           layout_name(p.layout) + " layout), got shape " + s.str());
  const int64_t S = seq >= 0 ? seq : s[seq_axis(p.layout)];
  const Shape expect = seq_shape(p.layout, g.B, S, g.H, g.Dh);
  for (int d = 0; d < rank; ++d)
    if (s[d] != expect[d])
      return InvalidArgument("kiln::Attention: " + input_label(i) + " dim " + std::to_string(d) + " = " +
                             std::to_string(s[d]) + ", expected " + std::to_string(expect[d]) + " (shape " + s.str() +
                             ", expected " + expect.str() + ")");
  return S;
}

}  // namespace

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kBSD: return "bsd";
    case Layout::kBHSD: return "bhsd";
    case Layout::kSBD: return "sbd";
  }
  return "?";
}

Shape seq_shape(Layout layout, int64_t B, int64_t S, int64_t H, int64_t Dh) {
  switch (layout) {
    case Layout::kBSD: return Shape{B, S, H * Dh};
    case Layout::kBHSD: return Shape{B, H, S, Dh};
    case Layout::kSBD: return Shape{S, B, H * Dh};
  }
  return Shape{};
}

RowStrides row_strides(Layout layout, int64_t B, int64_t S, int64_t H, int64_t Dh) {
  switch (layout) {
    case Layout::kBSD: return RowStrides{S * H * Dh, Dh, H * Dh};
    case Layout::kBHSD: return RowStrides{H * S * Dh, S * Dh, Dh};
    case Layout::kSBD: return RowStrides{H * Dh, Dh, B * H * Dh};
  }
  return RowStrides{};
}

int num_outputs(const Params& p) { return p.kv_cache ? 3 : 1; }

StatusOr<int64_t> read_live_length(const Geometry& g, const TensorView& live) {
  const int64_t L = *live.as<const int64_t>();
  // Past the keys would attend rows that hold no key; 0 or below would attend none.
  if (L < 1 || L > g.Sk_total())
    return InvalidArgument("kiln::Attention: input 6 (live length) = " + std::to_string(L) + " is outside [1, " +
                           std::to_string(g.Sk_total()) + "], the keys it may attend");
  return L;
}

StatusOr<Geometry> validate_inputs(const Params& p, std::span<const TensorDesc> in) {
  const size_t n = in.size();
  if (p.live_length) {
    // q, k, v, mask, k_cache, v_cache, live: the mask and (without kv_cache) the caches absent.
    if (n != kMaxInputs)
      return InvalidArgument("kiln::Attention with live_length = 1 expects 7 inputs (q, k, v, mask, k_cache, v_cache, live), got " +
                             std::to_string(n));
    if (in[kLive].dtype != DType::kInt64 || in[kLive].shape.numel() != 1)
      return InvalidArgument("kiln::Attention: input 6 (live) must be one int64, got " + dtype_name(in[kLive].dtype) + " " +
                             in[kLive].shape.str());
    if (!p.kv_cache)
      for (int i : {kKCache, kVCache})
        if (in[i].dtype != DType::kUndefined)
          return InvalidArgument("kiln::Attention: " + input_label(i) + " is given but kv_cache = 0");
  } else if (p.kv_cache) {
    if (n != 6)
      return InvalidArgument("kiln::Attention with kv_cache = 1 expects 6 inputs (q, k, v, mask, k_cache, v_cache), got " +
                             std::to_string(n));
  } else if (n != 3 && n != 4) {
    return InvalidArgument("kiln::Attention expects 3 or 4 inputs (q, k, v[, mask]), got " + std::to_string(n));
  }
  const bool wants_mask = p.mask == MaskKind::kBool || p.mask == MaskKind::kAdditive;
  const bool has_mask = n > 3 && in[kMask].dtype != DType::kUndefined;
  if (wants_mask && !has_mask)
    return InvalidArgument(std::string("kiln::Attention: input 3 (mask) is required with mask = ") +
                           (p.mask == MaskKind::kBool ? "bool" : "additive"));
  if (!wants_mask && has_mask)
    return InvalidArgument("kiln::Attention: input 3 (mask) is given but the mask field is not bool or additive");

  Geometry g;
  g.H = p.num_heads;
  KILN_RETURN_IF_ERROR(check_float(in, kQ));
  const Shape& q = in[kQ].shape;
  if (p.kv_cache && p.layout == Layout::kSBD)
    return InvalidArgument("kiln::Attention: kv_cache = 1 is not supported with the sbd layout");
  if (p.layout != Layout::kBHSD) {
    const char* name = layout_name(p.layout);
    if (q.rank() != 3)
      return InvalidArgument(std::string("kiln::Attention: input 0 (q) must have rank 3 (") + name +
                             " layout), got shape " + q.str());
    if (q[2] % p.num_heads != 0)
      return InvalidArgument("kiln::Attention: input 0 (q) dim 2 = " + std::to_string(q[2]) +
                             " is not divisible by num_heads = " + std::to_string(p.num_heads));
    g.B = q[batch_axis(p.layout)];
    g.Sq = q[seq_axis(p.layout)];
    g.Dh = q[2] / p.num_heads;
  } else {
    if (q.rank() != 4)
      return InvalidArgument("kiln::Attention: input 0 (q) must have rank 4 (bhsd layout), got shape " + q.str());
    if (q[1] != p.num_heads)
      return InvalidArgument("kiln::Attention: input 0 (q) dim 1 = " + std::to_string(q[1]) +
                             " must equal num_heads = " + std::to_string(p.num_heads));
    g.B = q[0];
    g.Sq = q[2];
    g.Dh = q[3];
  }
  KILN_ASSIGN_OR_RETURN(g.Sk_new, check_seq_tensor(p, g, in, kK, -1));
  KILN_RETURN_IF_ERROR(check_seq_tensor(p, g, in, kV, g.Sk_new).status());
  if (p.kv_cache) {
    KILN_ASSIGN_OR_RETURN(g.Sc, check_seq_tensor(p, g, in, kKCache, -1));
    KILN_RETURN_IF_ERROR(check_seq_tensor(p, g, in, kVCache, g.Sc).status());
  }

  if (has_mask) {
    const TensorDesc& m = in[kMask];
    const DType want = p.mask == MaskKind::kBool ? DType::kBool : DType::kFloat32;
    if (m.dtype != want)
      return InvalidArgument("kiln::Attention: input 3 (mask) must be " + dtype_name(want) + " for mask = " +
                             (p.mask == MaskKind::kBool ? "bool" : "additive") + ", got " + dtype_name(m.dtype));
    const Shape target{g.B, g.H, g.Sq, g.Sk_total()};
    if (m.shape.rank() > 4)
      return InvalidArgument("kiln::Attention: input 3 (mask) shape " + m.shape.str() +
                             " has rank above 4, not broadcastable to " + target.str());
    const int r = m.shape.rank();
    int64_t stride = 1;
    for (int d = 3; d >= 0; --d) {
      const int md = d - (4 - r);
      if (md < 0) break;
      const int64_t dim = m.shape[md];
      if (dim != 1 && dim != target[d])
        return InvalidArgument("kiln::Attention: input 3 (mask) dim " + std::to_string(md) + " = " +
                               std::to_string(dim) + " is not broadcastable to " + std::to_string(target[d]) +
                               " (mask shape " + m.shape.str() + ", target " + target.str() + ")");
      g.mask_stride[d] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
  }
  return g;
}

void output_descs(const Params& p, const Geometry& g, std::span<TensorDesc> out) {
  out[0] = TensorDesc{DType::kFloat32, seq_shape(p.layout, g.B, g.Sq, g.H, g.Dh)};
  if (p.kv_cache) {
    out[1] = TensorDesc{DType::kFloat32, seq_shape(p.layout, g.B, g.Sk_total(), g.H, g.Dh)};
    out[2] = out[1];
  }
}

namespace {

// memcpy for the cache copied into the K/V outputs of a profile run: the destination (MBs per
// layer) is not read again by this run, so non-temporal stores skip reading its lines first.
void stream_copy(float* dst, const float* src, size_t n) {
  size_t head = (32 - reinterpret_cast<uintptr_t>(dst) % 32) % 32 / sizeof(float);
  if (reinterpret_cast<uintptr_t>(dst) % sizeof(float) || n < 4096) head = n;  // small or odd: plain copy
  head = std::min(head, n);
  std::memcpy(dst, src, head * sizeof(float));
  size_t i = head;
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
  std::memcpy(dst + i, src + i, (n - i) * sizeof(float));
  _mm_sfence();
}

}  // namespace

void append_kv(const Params& p, const Geometry& g, std::span<const TensorView> in, std::span<const TensorView> out) {
  // validate_inputs rejects kv_cache with sbd, so the layout is bsd or bhsd here.
  const bool bsd = p.layout == Layout::kBSD;
  // Both layouts are a sequence of `outer` independent [S, unit] blocks.
  const int64_t outer = bsd ? g.B : g.B * g.H;
  const int64_t unit = bsd ? g.H * g.Dh : g.Dh;
  const size_t cache_seg = static_cast<size_t>(g.Sc * unit), new_seg = static_cast<size_t>(g.Sk_new * unit);
  const size_t out_seg = cache_seg + new_seg;
  const bool any_in_place = in[kKCache].data == out[1].data || in[kKCache + 1].data == out[2].data;
  if (!any_in_place && 2 * outer * out_seg * sizeof(float) >= (size_t{1} << 20)) {
    // Separate buffers (a profile run: the caller's cache is copied into the K/V outputs): one
    // core's memcpy does not reach the memory bandwidth, so split the copy into chunks over the
    // thread pool. Task = (K or V, block, chunk of the output segment: cached rows, then new).
    constexpr size_t kChunk = size_t{1} << 15;  // floats
    const int64_t per_block = static_cast<int64_t>((out_seg + kChunk - 1) / kChunk);
    const int64_t tasks = 2 * outer * per_block;
    parallel_for_each(tasks, LoopCost{8.0 * kChunk, 0}, [&](int64_t task) {
      const int t = static_cast<int>(task / (outer * per_block));
      const int64_t o = task / per_block % outer, c = task % per_block;
      float* d = out[1 + t].as<float>() + o * out_seg;
      const size_t begin = static_cast<size_t>(c) * kChunk, end = std::min(begin + kChunk, out_seg);
      if (begin < cache_seg) {
        const size_t e = std::min(end, cache_seg);
        stream_copy(d + begin, in[kKCache + t].as<const float>() + o * cache_seg + begin, e - begin);
      }
      if (end > cache_seg) {
        const size_t b = std::max(begin, cache_seg);
        stream_copy(d + b, in[kK + t].as<const float>() + o * new_seg + (b - cache_seg), end - b);
      }
    });
    return;
  }
  for (int t = 0; t < 2; ++t) {
    const float* cache = in[kKCache + t].as<const float>();
    const float* fresh = in[kK + t].as<const float>();
    float* dst = out[1 + t].as<float>();
    const bool in_place = static_cast<const void*>(dst) == static_cast<const void*>(cache);
    // Descending order: with an in-place spread, block o's destination lies above every source
    // block below it, so no unread cache row is overwritten.
    for (int64_t o = outer - 1; o >= 0; --o) {
      float* d = dst + o * out_seg;
      const float* c = cache + o * cache_seg;
      if (cache_seg && d != c) {
        if (in_place)
          std::memmove(d, c, cache_seg * sizeof(float));
        else
          std::memcpy(d, c, cache_seg * sizeof(float));
      }
      if (new_seg) std::memmove(d + cache_seg, fresh + o * new_seg, new_seg * sizeof(float));
    }
  }
}

}  // namespace kiln::attention
