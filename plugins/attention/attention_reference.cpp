#include "plugins/attention/attention_reference.h"

#include <cmath>
#include <limits>
#include <vector>

namespace kiln::attention {

Status reference_attention(const Params& p, std::span<const TensorView> in, std::span<const TensorView> out) {
  std::vector<TensorDesc> descs;
  for (const TensorView& v : in) descs.push_back(v.desc());
  KILN_ASSIGN_OR_RETURN(Geometry g, validate_inputs(p, descs));
  const int64_t Sk = g.Sk_total();
  int64_t live = Sk;
  if (p.live_length) {
    KILN_ASSIGN_OR_RETURN(live, read_live_length(g, in[kLive]));
  }
  const RowStrides qs = row_strides(p.layout, g.B, g.Sq, g.H, g.Dh);
  const RowStrides ks = row_strides(p.layout, g.B, g.Sk_new, g.H, g.Dh);
  const RowStrides cs = row_strides(p.layout, g.B, g.Sc, g.H, g.Dh);
  const float* q = in[kQ].as<const float>();
  auto key_row = [&](int t, int64_t b, int64_t h, int64_t j) -> const float* {
    if (j < g.Sc) return in[kKCache + t].as<const float>() + b * cs.batch + h * cs.head + j * cs.row;
    return in[kK + t].as<const float>() + b * ks.batch + h * ks.head + (j - g.Sc) * ks.row;
  };
  const double neg_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> scores(static_cast<size_t>(Sk)), acc(static_cast<size_t>(g.Dh));
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t h = 0; h < g.H; ++h)
      for (int64_t i = 0; i < g.Sq; ++i) {
        const float* qi = q + b * qs.batch + h * qs.head + i * qs.row;
        const int64_t pos = g.query_offset() + i;
        double mx = neg_inf;
        for (int64_t j = 0; j < Sk; ++j) {
          const int64_t m = b * g.mask_stride[0] + h * g.mask_stride[1] + i * g.mask_stride[2] + j * g.mask_stride[3];
          double s = 0;
          const float* kj = key_row(0, b, h, j);
          for (int64_t d = 0; d < g.Dh; ++d) s += static_cast<double>(qi[d]) * kj[d];
          s *= p.scale;
          if (j >= live) {  // past the live length: hidden, its mask entry unread
            scores[j] = neg_inf;
            continue;
          }
          switch (p.mask) {
            case MaskKind::kNone: break;
            case MaskKind::kBool: if (!in[kMask].as<const bool>()[m]) s = neg_inf; break;
            case MaskKind::kAdditive: s += in[kMask].as<const float>()[m]; break;
            case MaskKind::kCausal:
            case MaskKind::kBlockCausal: if (j >= visible_limit(p, pos)) s = neg_inf; break;
          }
          scores[j] = s;
          mx = std::max(mx, s);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double sum = 0;
        if (mx != neg_inf) {
          for (int64_t j = 0; j < Sk; ++j) {
            const double e = std::exp(scores[j] - mx);
            sum += e;
            const float* vj = key_row(1, b, h, j);
            for (int64_t d = 0; d < g.Dh; ++d) acc[d] += e * vj[d];
          }
        }
        float* o = out[0].as<float>() + b * qs.batch + h * qs.head + i * qs.row;
        for (int64_t d = 0; d < g.Dh; ++d) o[d] = sum > 0 ? static_cast<float>(acc[d] / sum) : 0.0f;
      }
  if (p.kv_cache) {
    const RowStrides as = row_strides(p.layout, g.B, Sk, g.H, g.Dh);
    for (int t = 0; t < 2; ++t)
      for (int64_t b = 0; b < g.B; ++b)
        for (int64_t h = 0; h < g.H; ++h)
          for (int64_t j = 0; j < Sk; ++j) {
            const float* src = key_row(t, b, h, j);
            float* dst = out[1 + t].as<float>() + b * as.batch + h * as.head + j * as.row;
            for (int64_t d = 0; d < g.Dh; ++d) dst[d] = src[d];
          }
  }
  return Status::Ok();
}

}  // namespace kiln::attention
