// What kiln's own FusedConv impls (im2col_conv_kernels.cpp and winograd_conv_kernels.cpp on the
// panel GEMM, nchw_conv_kernels.cpp) share: a pixel's channels copied in and out of any FusedConv
// layout, the 2-D view of a 1-D or 2-D window, the vector form of the fused activation, and their
// registry factory.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>

#include "runtime/kernels/fused_conv_common.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/vec_kernels.h"

namespace kiln {

// Where element (n, c, h, w) of a 2-D tensor [N, C, H, W] stored in a FusedConv layout sits, as
// strides: NCHW spreads a pixel's channels H * W apart, NHWC keeps them adjacent, and nChw8c /
// nChw16c keep them adjacent within a block of 8 / 16 (whose C is a multiple of the block).
struct ConvAddressing {
  int64_t n_stride = 0, h_stride = 0, w_stride = 0;
  int64_t block = 0, block_stride = 0;  // nChw8c / nChw16c
  int64_t spread = 1;                   // between a pixel's channels: H * W in NCHW, else 1

  static ConvAddressing of(ConvLayout layout, int64_t C, int64_t H, int64_t W) {
    ConvAddressing r;
    r.n_stride = C * H * W;
    switch (layout) {
      case ConvLayout::kNhwc: r.h_stride = W * C, r.w_stride = C; break;
      case ConvLayout::kNchw: r.h_stride = W, r.w_stride = 1, r.spread = H * W; break;
      case ConvLayout::kNchw8c:
      case ConvLayout::kNchw16c:
        r.block = conv_channel_block(layout);
        r.h_stride = W * r.block, r.w_stride = r.block, r.block_stride = H * W * r.block;
        break;
    }
    return r;
  }
  int64_t offset(int64_t n, int64_t c, int64_t h, int64_t w) const {
    const int64_t ch = block ? c / block * block_stride + c % block : c * spread;
    return n * n_stride + ch + h * h_stride + w * w_stride;
  }
};

// One pixel's C channels of a 2-D tensor [N, C, H, W] stored in `layout`, copied to or from a
// contiguous run of C floats.
struct PixelIo {
  ConvLayout layout;
  int64_t C, H, W;

  void read(const float* x, int64_t n, int64_t h, int64_t w, float* dst) const { copy<false>(const_cast<float*>(x), n, h, w, dst); }
  void write(const float* src, float* y, int64_t n, int64_t h, int64_t w) const { copy<true>(y, n, h, w, const_cast<float*>(src)); }

 private:
  // One addressing for both directions: kToTensor copies `pixel` into the tensor, else out of it.
  template <bool kToTensor>
  void copy(float* tensor, int64_t n, int64_t h, int64_t w, float* pixel) const {
    auto run = [](float* t, float* p, int64_t count) {
      if constexpr (kToTensor) std::memcpy(t, p, sizeof(float) * static_cast<size_t>(count));
      else std::memcpy(p, t, sizeof(float) * static_cast<size_t>(count));
    };
    const ConvAddressing a = ConvAddressing::of(layout, C, H, W);
    float* t = tensor + a.offset(n, 0, h, w);
    if (a.block) {
      for (int64_t b = 0; b < C / a.block; ++b) run(t + b * a.block_stride, pixel + b * a.block, a.block);
    } else if (a.spread == 1) {
      run(t, pixel, C);
    } else {
      for (int64_t c = 0; c < C; ++c) {
        if constexpr (kToTensor) t[c * a.spread] = pixel[c];
        else pixel[c] = t[c * a.spread];
      }
    }
  }
};

// A 2-D window's geometry; 1-D convolutions are 2-D ones of unit height.
struct Geom2d {
  int64_t in[2], out[2], k[2], stride[2], dil[2], pad_begin[2];
  static Geom2d of(const WindowGeom& g) {
    Geom2d r;
    const int h = g.n == 2 ? 0 : -1, w = g.n - 1;
    auto two = [&](const int64_t* v, int64_t unit, int64_t* dst) {
      dst[0] = h < 0 ? unit : v[h];
      dst[1] = v[w];
    };
    two(g.in, 1, r.in);
    two(g.out, 1, r.out);
    two(g.k, 1, r.k);
    two(g.stride, 1, r.stride);
    two(g.dil, 1, r.dil);
    two(g.pad_begin, 0, r.pad_begin);
    return r;
  }
};

// The vector kernel of a fused activation; false for none.
inline bool vec_activation(ConvAct act, vec::Unary* op) {
  switch (act) {
    case ConvAct::kNone: return false;
    case ConvAct::kRelu: *op = vec::Unary::kRelu; return true;
    case ConvAct::kSilu: *op = vec::Unary::kSilu; return true;
    case ConvAct::kSigmoid: *op = vec::Unary::kSigmoid; return true;
    case ConvAct::kHardSwish: *op = vec::Unary::kHardSwish; return true;
    case ConvAct::kClip: *op = vec::Unary::kClip; return true;
    case ConvAct::kGeluErf: *op = vec::Unary::kGeluErf; return true;
    case ConvAct::kGeluTanh: *op = vec::Unary::kGeluTanh; return true;
  }
  return false;
}

// The registry factory of kiln's own FusedConv impls: K(reference FusedConv, window attributes,
// group, spec). The reference infers shapes and runs what K does not cover.
template <typename K>
StatusOr<std::unique_ptr<Kernel>> make_kiln_fused_conv(const KernelArgs& args, AttrReader& attrs) {
  FusedSpec spec;
  KILN_ASSIGN_OR_RETURN(auto ref, make_reference_fused_conv(args, attrs, &spec));
  WindowAttrs w;
  KILN_RETURN_IF_ERROR(read_window_attrs(attrs, w, true));
  KILN_ASSIGN_OR_RETURN(int64_t group, attrs.get_int("group", 1));
  return std::unique_ptr<Kernel>(std::make_unique<K>(std::move(ref), std::move(w), group, spec));
}

}  // namespace kiln
