// FusedConv impl "winograd_f4x3": a 3x3, stride-1 convolution by Winograd's minimal filtering
// F(4x4, 3x3) (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016), on kiln's
// panel GEMM (runtime/kernels/panel_gemm.h).
//
// The output is cut into 4x4 tiles, each computed from the 6x6 input patch around it:
//   Y = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A
// with the interpolation points 0, ±1, ±2 and ∞. Summed over the input channels, the elementwise
// product of each of the 36 positions of the 6x6 transform is one GEMM: V_e [tiles, C] (the
// transformed input) times U_e [C, OC] (the transformed weights, made and packed once at prepare,
// shared by every context). So the multiplies drop from 9 x 16 to 36 per tile and channel pair:
// 4x fewer, against a transform of the input and output that costs about as much as reading and
// writing them. It exists because oneDNN has Winograd only on AVX-512 and its direct AVX2 kernels
// already run near the FMA peak: past the peak the only way left is fewer multiplies.
//
// Where it loses: few tiles against many weights (ResNet's 7x7 last stage), as U_e is 4x the
// weights and is streamed from memory each run; there the direct kernels win, and tactic selection
// picks per step. The arithmetic differs from a direct convolution: the transforms' constants (up
// to 8 and 1/24) add rounding error, up to about 1e-5 of the output's spread in float32 (the tests
// bound it). Groups, strides, dilation, non-3x3 kernels, 1-D and 3-D windows and non-float32
// data run the reference (which tactic selection reports as unavailable).
#include <algorithm>
#include <vector>

#include "runtime/kernels/conv_pixel_io.h"
#include "runtime/kernels/fused_conv_common.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/nn_common.h"
#include "runtime/kernels/onednn_common.h"
#include "runtime/kernels/packed_weights.h"
#include "runtime/kernels/panel_gemm.h"
#include "runtime/kernels/vec_kernels.h"
#include "runtime/simd/vec_avx2.h"
#include "runtime/thread_pool.h"

namespace kiln {

namespace {

namespace sv = simd::avx2;
using V = sv::V;

constexpr int64_t kOut = 4;     // output tile side
constexpr int64_t kTile = 6;    // input tile side: kOut + 3 - 1
constexpr int64_t kElems = 36;  // positions of the transformed 6x6 tile: one GEMM each
constexpr int64_t kLanes = sv::kLanes;
// The schedule: tiles go through all three steps in blocks of about kBlockTiles, so a block's
// transformed input and output stay in L2 between the steps (each block reads all of U_e from
// L2/L3). Only where the transformed weights (36 x C x OC floats) pass kBlockedMaxWeights and the
// threads would get fewer than kBlockTiles tiles each (ResNet's 7x7 last stage: 4 tiles against
// 38 MB) is U read once per run instead: each step then runs over all tiles, the GEMMs split
// between the threads by position.
constexpr int64_t kBlockTiles = 8;
constexpr int64_t kBlockedMaxWeights = int64_t{1} << 20;

// Bᵀ applied to six values d0..d5, results at o[0], o[s], ..., o[5s].
inline void input_1d(V d0, V d1, V d2, V d3, V d4, V d5, V* o, int s) {
  const V two = sv::set1(2.0f), four = sv::set1(4.0f), five = sv::set1(5.0f);
  const V d3m1 = sv::sub(d3, d1), d4m2 = sv::sub(d4, d2);
  o[0] = sv::fmadd(four, d0, sv::fnmadd(five, d2, d4));                  // 4d0 - 5d2 + d4
  o[s] = sv::fnmadd(four, sv::add(d1, d2), sv::add(d3, d4));             // -4d1 - 4d2 + d3 + d4
  o[2 * s] = sv::fmadd(four, sv::sub(d1, d2), sv::sub(d4, d3));          // 4d1 - 4d2 - d3 + d4
  o[3 * s] = sv::fmadd(two, d3m1, d4m2);                                 // -2d1 - d2 + 2d3 + d4
  o[4 * s] = sv::fnmadd(two, d3m1, d4m2);                                // 2d1 - d2 - 2d3 + d4
  o[5 * s] = sv::fmadd(four, d1, sv::fnmadd(five, d3, d5));              // 4d1 - 5d3 + d5
}

// Aᵀ applied to six values m0..m5, results at o[0], o[s], o[2s], o[3s].
inline void output_1d(V m0, V m1, V m2, V m3, V m4, V m5, V* o, int s) {
  const V two = sv::set1(2.0f), four = sv::set1(4.0f), eight = sv::set1(8.0f);
  const V p = sv::add(m1, m2), q = sv::sub(m1, m2), r = sv::add(m3, m4), t = sv::sub(m3, m4);
  o[0] = sv::add(sv::add(m0, p), r);            // m0 + m1 + m2 + m3 + m4
  o[s] = sv::fmadd(two, t, q);                  // m1 - m2 + 2m3 - 2m4
  o[2 * s] = sv::fmadd(four, r, p);             // m1 + m2 + 4m3 + 4m4
  o[3 * s] = sv::add(sv::fmadd(eight, t, q), m5);  // m1 - m2 + 8m3 - 8m4 + m5
}

// G applied to three weights g0..g2 (in double: made once, so made exactly).
inline void weight_1d(const double g[3], double o[6]) {
  o[0] = g[0] / 4;
  o[1] = -(g[0] + g[1] + g[2]) / 6;
  o[2] = -(g[0] - g[1] + g[2]) / 6;
  o[3] = g[0] / 24 + g[1] / 12 + g[2] / 6;
  o[4] = g[0] / 24 - g[1] / 12 + g[2] / 6;
  o[5] = g[2];
}

// Runs of kLanes channels of a pixel (conv_pixel_io.h's addressing) as vectors. Runs start at a
// multiple of kLanes, so in nChw8c/nChw16c a run never crosses a block; in NCHW its channels are
// `spread` apart, elsewhere adjacent.
struct ChannelRuns : ConvAddressing {
  static ChannelRuns of(ConvLayout layout, int64_t C, int64_t H, int64_t W) { return {ConvAddressing::of(layout, C, H, W)}; }
  V load(const float* p, int64_t lanes) const {
    if (spread == 1) return lanes == kLanes ? sv::loadu(p) : sv::load_partial(p, lanes);
    alignas(32) float g[kLanes] = {};
    for (int64_t l = 0; l < lanes; ++l) g[l] = p[l * spread];
    return sv::loadu(g);
  }
  void store(float* p, int64_t lanes, V v) const {
    if (spread == 1) {
      if (lanes == kLanes) sv::storeu(p, v);
      else sv::store_partial(p, lanes, v);
      return;
    }
    alignas(32) float g[kLanes];
    sv::storeu(g, v);
    for (int64_t l = 0; l < lanes; ++l) p[l * spread] = g[l];
  }
};

class WinogradConvKernel final : public Kernel {
 public:
  WinogradConvKernel(std::unique_ptr<Kernel> ref, WindowAttrs w, int64_t group, FusedSpec spec)
      : ref_(std::move(ref)), w_(std::move(w)), group_(group), spec_(spec) {}
  const char* impl_name() const override { return use_ref_ ? "reference" : "winograd_f4x3"; }
  // Y is written only by the output transform, which adds each value's residual just before it
  // stores it.
  bool writes_over_input(size_t i) const override { return i == 3 && !use_ref_ && has_res_; }
  Status infer(std::span<const TensorView> in, std::span<TensorDesc> out) override { return ref_->infer(in, out); }

  Status prepare(std::span<const TensorView> in, std::span<const TensorView> out) override {
    KILN_ASSIGN_OR_RETURN(const Shape xs, conv_nchw_shape(spec_.x, in[0].shape, "input 0"));
    const Shape& ws = in[1].shape;
    use_ref_ = !panel_gemm::supported() || group_ != 1 || xs.rank() != 4 || ws.rank() != 4 || ws[2] != 3 || ws[3] != 3 ||
               in[0].dtype != DType::kFloat32 || in[1].dtype != DType::kFloat32 || xs.numel() == 0 || ws.numel() == 0 ||
               out[0].numel() == 0;
    if (!use_ref_) {
      KILN_ASSIGN_OR_RETURN(const WindowGeom wg, forward_window_geometry(w_, xs.data() + 2, ws.data() + 2, 2, false));
      g_ = Geom2d::of(wg);
      use_ref_ = g_.stride[0] != 1 || g_.stride[1] != 1 || g_.dil[0] != 1 || g_.dil[1] != 1;
    }
    if (use_ref_) return ref_->prepare(in, out);

    batch_ = xs[0];
    channels_ = xs[1];
    out_channels_ = ws[0];
    tiles_h_ = (g_.out[0] + kOut - 1) / kOut;
    tiles_w_ = (g_.out[1] + kOut - 1) / kOut;
    tiles_ = batch_ * tiles_h_ * tiles_w_;
    has_bias_ = in.size() > 2 && in[2].present();
    has_res_ = in.size() > 3 && in[3].present();
    has_act_ = vec_activation(spec_.act, &act_op_);

    if (!packed_ || packed_src_ != in[1].data) {
      const int64_t C = channels_, OC = out_channels_;
      const int64_t per_elem = panel_gemm::packed_floats(C, OC);
      const std::string layout = "winograd_f4x3_panel" + std::to_string(panel_gemm::kPanelCols) + ":" + ws.str();
      const size_t bytes = sizeof(float) * static_cast<size_t>(kElems * per_elem);
      const float* w = in[1].as<const float>();
      KILN_ASSIGN_OR_RETURN(packed_, shared_packed_weights(w, in[1].nbytes(), layout, bytes, [&](void* dst) {
                              // U_e [C, OC] for each of the 36 positions e, then each packed as panels.
                              std::vector<float> u(static_cast<size_t>(kElems * C * OC));
                              for (int64_t oc = 0; oc < OC; ++oc)
                                for (int64_t c = 0; c < C; ++c) {
                                  const float* k = w + (oc * C + c) * 9;
                                  double rows[6][3], full[6][6];
                                  for (int64_t j = 0; j < 3; ++j) {  // G g: the columns of the 3x3 kernel
                                    const double col[3] = {k[j], k[3 + j], k[6 + j]};
                                    double t[6];
                                    weight_1d(col, t);
                                    for (int i = 0; i < 6; ++i) rows[i][j] = t[i];
                                  }
                                  for (int i = 0; i < 6; ++i) weight_1d(rows[i], full[i]);  // (G g) Gᵀ
                                  for (int64_t e = 0; e < kElems; ++e)
                                    u[static_cast<size_t>((e * C + c) * OC + oc)] = static_cast<float>(full[e / 6][e % 6]);
                                }
                              float* p = static_cast<float*>(dst);
                              for (int64_t e = 0; e < kElems; ++e) panel_gemm::pack(u.data() + e * C * OC, C, OC, p + e * per_elem);
                              return Status::Ok();
                            }));
      packed_src_ = in[1].data;
      packed_per_elem_ = per_elem;
    }
    const int64_t C = channels_, OC = out_channels_, threads = ThreadPool::global().max_threads();
    const int64_t u_bytes = 4 * kElems * C * OC;
    slots_ = threads;
    block_tiles_ = tiles_;
    if (u_bytes <= kBlockedMaxWeights || tiles_ >= kBlockTiles * threads) {
      // Whole rounds of blocks, one per thread, of at most kBlockTiles tiles.
      const int64_t blocks = ((tiles_ + kBlockTiles - 1) / kBlockTiles + threads - 1) / threads * threads;
      block_tiles_ = (tiles_ + blocks - 1) / blocks;
    }
    const bool blocked = block_tiles_ < tiles_;
    const size_t v_floats = static_cast<size_t>(blocked ? threads * kElems * block_tiles_ * (C + OC) : kElems * tiles_ * C);
    const size_t m_floats = static_cast<size_t>(blocked ? 0 : kElems * tiles_ * OC);
    KILN_RETURN_IF_ERROR(grow_scratch(v_buf_, v_capacity_, sizeof(float) * v_floats, "winograd_f4x3"));
    KILN_RETURN_IF_ERROR(grow_scratch(m_buf_, m_capacity_, sizeof(float) * m_floats, "winograd_f4x3"));
    return Status::Ok();
  }

  Status run(std::span<const TensorView> in, std::span<const TensorView> out) override {
    if (use_ref_) return ref_->run(in, out);
    const Io io{in[0].as<const float>(), has_bias_ ? in[2].as<const float>() : nullptr, has_res_ ? in[3].as<const float>() : nullptr,
                out[0].as<float>()};
    float* v = static_cast<float*>(v_buf_.get());
    float* m = static_cast<float*>(m_buf_.get());
    const int64_t T = tiles_, C = channels_, OC = out_channels_;
    ThreadPool& pool = ThreadPool::global();
    if (block_tiles_ >= T) {
      // Three passes over all tiles, each split across the threads (the GEMMs by position).
      const double per_tile = kElems * static_cast<double>(C + OC);
      pool.parallel_for(T, LoopCost{8.0 * per_tile, 12.0 * per_tile}, [&](int64_t t0, int64_t t1, int) {
        transform_input(io.x, t0, t1, v + t0 * C, T * C);
      });
      const LoopCost gemm{4.0 * static_cast<double>(C * OC + T * (C + OC)), 2.0 * static_cast<double>(T * C * OC)};
      pool.parallel_for(kElems, gemm, [&](int64_t e0, int64_t e1, int) { multiply(v, m, T, e0, e1); });
      pool.parallel_for(T, LoopCost{8.0 * per_tile, 12.0 * per_tile}, [&](int64_t t0, int64_t t1, int) {
        transform_output(io, m + t0 * OC, T * OC, t0, t1);
      });
      return Status::Ok();
    }
    // Blocks of tiles, each through all three steps on one thread with its scratch in cache.
    const int64_t blocks = (T + block_tiles_ - 1) / block_tiles_;
    const size_t slot_floats = static_cast<size_t>(kElems * block_tiles_ * (C + OC));
    auto run_blocks = [&](int64_t b0, int64_t b1, int slot) {
      float* vb = v + static_cast<size_t>(slot) * slot_floats;
      float* mb = vb + kElems * block_tiles_ * C;
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t t0 = b * block_tiles_, t1 = std::min(T, t0 + block_tiles_), rows = t1 - t0;
        transform_input(io.x, t0, t1, vb, rows * C);
        multiply(vb, mb, rows, 0, kElems);
        transform_output(io, mb, rows * OC, t0, t1);
      }
    };
    const LoopCost cost{4.0 * static_cast<double>(C * OC + 2 * kElems * block_tiles_ * (C + OC)),
                        2.0 * static_cast<double>(kElems * block_tiles_ * C * OC)};
    // The slots stay within the scratch prepare() sized, even if the pool has grown since.
    if (pool.worth_a_region(blocks, cost)) pool.parallel_for(blocks, 1, run_blocks, static_cast<int>(slots_));
    else run_blocks(0, blocks, 0);
    return Status::Ok();
  }

 private:
  struct Io {
    const float* x;
    const float* bias;
    const float* res;
    float* y;
  };

  // Tile t's origin: its batch index and the input row/column of its 6x6 patch's corner.
  void tile_origin(int64_t t, int64_t* n, int64_t* h0, int64_t* w0) const {
    *n = t / (tiles_h_ * tiles_w_);
    *h0 = t / tiles_w_ % tiles_h_ * kOut - g_.pad_begin[0];
    *w0 = t % tiles_w_ * kOut - g_.pad_begin[1];
  }

  // For tiles [t0, t1): V_e[t - t0, c] = (Bᵀ d B)[e] at v + e * elem_stride, for every channel c;
  // d is the tile's 6x6 patch, zeros off the input.
  void transform_input(const float* x, int64_t t0, int64_t t1, float* v, int64_t elem_stride) const {
    const ChannelRuns runs = ChannelRuns::of(spec_.x, channels_, g_.in[0], g_.in[1]);
    const int64_t C = channels_, H = g_.in[0], W = g_.in[1];
    V rows[kElems];  // d B: row i of the patch, transformed, at rows[6i, 6i + 6)
    for (int64_t t = t0; t < t1; ++t) {
      int64_t n, h0, w0;
      tile_origin(t, &n, &h0, &w0);
      const bool inside = h0 >= 0 && h0 + kTile <= H && w0 >= 0 && w0 + kTile <= W;
      for (int64_t c = 0; c < C; c += kLanes) {
        const int64_t lanes = std::min<int64_t>(kLanes, C - c);
        const float* p = x + runs.offset(n, c, 0, 0);
        for (int64_t i = 0; i < kTile; ++i) {  // d B: along each row of the patch, as it is read
          const int64_t h = h0 + i;
          const float* row = p + h * runs.h_stride;
          V d[kTile];
          for (int64_t j = 0; j < kTile; ++j) {
            const int64_t w = w0 + j;
            d[j] = inside || (h >= 0 && h < H && w >= 0 && w < W) ? runs.load(row + w * runs.w_stride, lanes) : sv::zero();
          }
          input_1d(d[0], d[1], d[2], d[3], d[4], d[5], rows + i * kTile, 1);
        }
        float* dst = v + (t - t0) * C + c;
        for (int j = 0; j < kTile; ++j) {  // Bᵀ (d B): down each column, stored as it is made
          V o[kTile];
          input_1d(rows[j], rows[6 + j], rows[12 + j], rows[18 + j], rows[24 + j], rows[30 + j], o, 1);
          for (int i = 0; i < kTile; ++i) {
            float* e = dst + (i * kTile + j) * elem_stride;
            if (lanes == kLanes) sv::storeu(e, o[i]);
            else sv::store_partial(e, lanes, o[i]);
          }
        }
      }
    }
  }

  // M_e = V_e x U_e for the positions [e0, e1), on this thread: V_e [rows, C] at v + e * rows * C,
  // M_e [rows, OC] at m + e * rows * OC.
  void multiply(const float* v, float* m, int64_t rows, int64_t e0, int64_t e1) const {
    const int64_t C = channels_, OC = out_channels_;
    const float* packed = static_cast<const float*>(packed_.get());
    for (int64_t e = e0; e < e1; ++e) {
      panel_gemm::Args g;
      g.a = v + e * rows * C;
      g.M = rows;
      g.K = C;
      g.N = OC;
      g.packed = packed + e * packed_per_elem_;
      g.y = m + e * rows * OC;
      panel_gemm::run(g, 1);
    }
  }

  // Y's 4x4 tiles [t0, t1) = act(Aᵀ M A + bias + residual), written into Y's layout where inside Y;
  // M_e [t1 - t0, OC] is at m + e * elem_stride.
  void transform_output(const Io& io, const float* m, int64_t elem_stride, int64_t t0, int64_t t1) const {
    const int64_t OC = out_channels_, OH = g_.out[0], OW = g_.out[1];
    const float *bias = io.bias, *res = io.res;
    float* y = io.y;
    const ChannelRuns res_runs = ChannelRuns::of(spec_.res, OC, OH, OW), y_runs = ChannelRuns::of(spec_.y, OC, OH, OW);
    const vec::Params params{spec_.alpha, spec_.beta};
    const vec::UnaryFn act = has_act_ ? vec::unary(act_op_) : nullptr;
    const ConvAct kind = spec_.act;
    const V lo = sv::set1(spec_.alpha), hi = sv::set1(spec_.beta);
    V cols[kTile * kOut];  // M A: row i of the transformed tile at cols[4i, 4i + 4)
    alignas(32) float lanes_buf[kLanes];
    for (int64_t t = t0; t < t1; ++t) {
      int64_t n, h0, w0;
      tile_origin(t, &n, &h0, &w0);
      const int64_t oh0 = h0 + g_.pad_begin[0], ow0 = w0 + g_.pad_begin[1];
      const int64_t rows = std::min(kOut, OH - oh0), cols_in = std::min(kOut, OW - ow0);
      for (int64_t oc = 0; oc < OC; oc += kLanes) {
        const int64_t lanes = std::min<int64_t>(kLanes, OC - oc);
        const float* src = m + (t - t0) * OC + oc;
        for (int i = 0; i < kTile; ++i) {  // M A: along each row, as it is loaded
          V mv[kTile];
          for (int j = 0; j < kTile; ++j) {
            const float* e = src + (i * kTile + j) * elem_stride;
            mv[j] = lanes == kLanes ? sv::loadu(e) : sv::load_partial(e, lanes);
          }
          output_1d(mv[0], mv[1], mv[2], mv[3], mv[4], mv[5], cols + i * kOut, 1);
        }
        const V b = bias ? (lanes == kLanes ? sv::loadu(bias + oc) : sv::load_partial(bias + oc, lanes)) : sv::zero();
        float* yp = y + y_runs.offset(n, oc, oh0, ow0);
        const float* rp = res ? res + res_runs.offset(n, oc, oh0, ow0) : nullptr;
        for (int64_t j = 0; j < cols_in; ++j) {  // Aᵀ (M A): down each column, then out
          V o[kOut];
          output_1d(cols[j], cols[4 + j], cols[8 + j], cols[12 + j], cols[16 + j], cols[20 + j], o, 1);
          for (int64_t i = 0; i < rows; ++i) {
            V val = sv::add(o[i], b);
            if (rp) val = sv::add(val, res_runs.load(rp + i * res_runs.h_stride + j * res_runs.w_stride, lanes));
            if (kind == ConvAct::kRelu) {
              val = sv::max(val, sv::zero());
            } else if (kind == ConvAct::kClip) {
              val = sv::min(sv::max(val, lo), hi);
            } else if (act) {  // the others through their vector kernel, a run at a time
              sv::storeu(lanes_buf, val);
              act(lanes_buf, lanes_buf, lanes, params);
              val = sv::loadu(lanes_buf);
            }
            y_runs.store(yp + i * y_runs.h_stride + j * y_runs.w_stride, lanes, val);
          }
        }
      }
    }
  }

  std::unique_ptr<Kernel> ref_;
  WindowAttrs w_;
  int64_t group_;
  FusedSpec spec_;
  bool use_ref_ = false, has_bias_ = false, has_res_ = false, has_act_ = false;
  vec::Unary act_op_ = vec::Unary::kRelu;
  Geom2d g_{};
  int64_t slots_ = 1, block_tiles_ = 0, batch_ = 0, channels_ = 0, out_channels_ = 0, tiles_h_ = 0, tiles_w_ = 0, tiles_ = 0, packed_per_elem_ = 0;
  std::shared_ptr<void> packed_, v_buf_, m_buf_;
  const void* packed_src_ = nullptr;
  size_t v_capacity_ = 0, m_capacity_ = 0;
};

}  // namespace

void register_winograd_conv_kernels(KernelRegistry& r) {
  // Below "onednn" (10), oneDNN's Winograd (8) and "im2col_panel" (7): tactic selection picks it
  // where it times faster.
  r.add_kiln_op({"FusedConv", "winograd_f4x3", 6,
                 make_kiln_fused_conv<WinogradConvKernel>,
                 // AVX2 + FMA, the engine baseline (the transforms are AVX2; the GEMM uses AVX-512 where present).
                 0});
}

}  // namespace kiln
