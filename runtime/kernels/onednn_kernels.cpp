// oneDNN-backed MatMul, Gemm (onednn_matmul_kernels.cpp) and Conv (onednn_conv_kernels.cpp), plus
// the shared primitive runner.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>

#include "runtime/kernels/families.h"
#include "runtime/cpu_features.h"
#include "runtime/engine_format.h"
#include "runtime/openmp_team.h"
#include "runtime/kernels/onednn_common.h"
#include "runtime/kernels/packed_weights.h"
#include "runtime/thread_scratch.h"

namespace kiln {

namespace {
// KILN_MAX_CPU_ISA caps oneDNN too unless DNNL_MAX_CPU_ISA says otherwise (runtime/cpu_features.h);
// oneDNN takes a cap only before its first primitive, which the engine below precedes.
void cap_onednn_isa() {
  const char* kiln_cap = std::getenv("KILN_MAX_CPU_ISA");
  const char* dnnl_cap = std::getenv("DNNL_MAX_CPU_ISA");
  if (!kiln_cap || !*kiln_cap || (dnnl_cap && *dnnl_cap)) return;
  static const dnnl::cpu_isa kIsa[] = {dnnl::cpu_isa::avx2, dnnl::cpu_isa::avx512_core, dnnl::cpu_isa::avx512_core_vnni,
                                       dnnl::cpu_isa::avx512_core_bf16, dnnl::cpu_isa::avx512_core_amx};
  const int cap = static_cast<int>(cpu_info().cap);
  if (cap < static_cast<int>(CpuIsa::kAll)) (void)dnnl_set_max_cpu_isa(static_cast<dnnl_cpu_isa_t>(kIsa[cap]));
}
}  // namespace

const dnnl::engine& onednn_engine() {
  static const dnnl::engine engine = [] {
    cap_onednn_isa();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return engine;
}

void* onednn_thread_scratchpad(size_t bytes) { return thread_scratch(ScratchSlot::kOnednnScratchpad, bytes); }

namespace {

// The primitive of `pd` made for a team of one thread, or an empty one where oneDNN picks another
// implementation or other memory formats for one thread (its buffers are bound for `pd`'s).
// Reorders are left alone: they split their work at run time.
//
// Why: oneDNN fixes a primitive's thread count when it is made and then opens regions of that
// many threads whatever the caller's OpenMP team is (gdb on GOMP_parallel: num_threads 2 inside
// an omp_set_num_threads(1) scope). So runtime/openmp_team.h's shrunken team never reached
// oneDNN, and beside a busy loop on the other core every region waited for the spinning OpenMP
// worker: mobilenet_v3_small p50 16-19 ms, against 2.4 ms on one thread.
dnnl::primitive solo_primitive(const dnnl::primitive_desc_base& pd, size_t* scratch_bytes) {
  const int threads = omp_get_max_threads();
  const_dnnl_op_desc_t op = nullptr;
  const_dnnl_primitive_attr_t attr = nullptr;
  if (threads <= 1 || pd.get_kind() == dnnl::primitive::kind::reorder ||
      dnnl_primitive_desc_query(pd.get(), dnnl_query_op_d, 0, &op) != dnnl_success || !op ||
      dnnl_primitive_desc_get_attr(pd.get(), &attr) != dnnl_success)
    return {};
  dnnl_primitive_desc_t solo = nullptr;
  omp_set_num_threads(1);
  const dnnl_status_t st = dnnl_primitive_desc_create(&solo, op, attr, onednn_engine().get(), nullptr);
  omp_set_num_threads(threads);
  if (st != dnnl_success) return {};
  const dnnl::primitive_desc_base solo_pd(solo);  // owns it
  if (std::string(solo_pd.impl_info_str()) != pd.impl_info_str()) return {};
  for (int arg : {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST})
    if (solo_pd.query_md(dnnl::query::exec_arg_md, arg) != pd.query_md(dnnl::query::exec_arg_md, arg)) return {};
  *scratch_bytes = solo_pd.scratchpad_desc().get_size();
  return one_thread_primitive(solo_pd);
}

}  // namespace

dnnl::primitive one_thread_primitive(const dnnl::primitive_desc_base& pd) {
  // oneDNN's primitive cache keys a primitive by descriptor and attributes, not by the thread count
  // it was made for, and would hand back the team's primitive: this one is made with the cache
  // off (which empties it; the kernels hold their primitives, so only later lookups miss).
  static std::mutex cache_mutex;
  const std::lock_guard<std::mutex> lock(cache_mutex);
  const int capacity = dnnl::get_primitive_cache_capacity();
  dnnl::set_primitive_cache_capacity(0);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  dnnl::primitive prim;
  try {
    prim = dnnl::primitive(pd.get());
  } catch (const dnnl::error&) {
    prim = dnnl::primitive();
  }
  omp_set_num_threads(threads);
  dnnl::set_primitive_cache_capacity(capacity);
  return prim;
}

Status OnednnExec::init_one_thread(const dnnl::primitive_desc_base& pd) {
  prim_ = one_thread_primitive(pd);
  if (!prim_) return Unimplemented("oneDNN made no one-thread primitive for " + std::string(pd.impl_info_str()));
  solo_prim_ = dnnl::primitive();
  one_thread_ = true;
  scratch_slot_ = -1;
  scratch_bytes_ = pd.scratchpad_desc().get_size();
  if (scratch_bytes_ > 0) {
    scratch_slot_ = add_arg(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc());
    onednn_thread_scratchpad(scratch_bytes_);
  }
  return Status::Ok();
}

void OnednnExec::init(const dnnl::primitive_desc_base& pd, dnnl::primitive prim) {
  prim_ = std::move(prim);
  one_thread_ = false;
  size_t solo_scratch = 0;
  solo_prim_ = solo_primitive(pd, &solo_scratch);
  const dnnl::memory::desc scratch_md = pd.scratchpad_desc();
  scratch_slot_ = -1;
  scratch_bytes_ = std::max(scratch_md.get_size(), solo_scratch);
  if (scratch_bytes_ > 0) {
    // Bytes enough for either primitive (their scratchpads are plain byte buffers).
    const dnnl::memory::desc bytes_md({static_cast<dnnl::memory::dim>(scratch_bytes_)}, dnnl::memory::data_type::u8,
                                      dnnl::memory::format_tag::x);
    scratch_slot_ = add_arg(DNNL_ARG_SCRATCHPAD, scratch_bytes_ > scratch_md.get_size() ? bytes_md : scratch_md);
    onednn_thread_scratchpad(scratch_bytes_);
  }
}

int OnednnExec::add_arg(int arg, const dnnl::memory::desc& md) {
  mems_.emplace_back(md, onednn_engine(), static_cast<void*>(nullptr));
  // The C handle is stable when the vector of C++ wrappers reallocates.
  args_.push_back({arg, mems_.back().get()});
  return static_cast<int>(mems_.size()) - 1;
}

Status OnednnExec::execute(const dnnl::stream& s) const {
  if (scratch_slot_ >= 0) {
    void* scratch = onednn_thread_scratchpad(scratch_bytes_);
    if (!scratch) return ResourceExhausted("cannot allocate a " + std::to_string(scratch_bytes_) + "-byte oneDNN scratchpad");
    mems_[scratch_slot_].set_data_handle(scratch);
  }
  dnnl_status_t st;
  if (one_thread_) {
    // No OpenMP region at all (this may run on a kiln pool worker, which must not probe a team).
    st = dnnl_primitive_execute(prim_.get(), s.get(), static_cast<int>(args_.size()), args_.data());
  } else {
    const OpenmpRegionScope team;  // one thread while another process holds the second core
    const dnnl::primitive& p = team.solo() && solo_prim_ ? solo_prim_ : prim_;
    st = dnnl_primitive_execute(p.get(), s.get(), static_cast<int>(args_.size()), args_.data());
  }
  if (st == dnnl_success) st = dnnl_stream_wait(s.get());
  if (st != dnnl_success) return Internal("oneDNN primitive execution failed with status " + std::to_string(st));
  return Status::Ok();
}

Status OnednnKernel::prepare(std::span<const TensorView> in, std::span<const TensorView> out) {
  bool built = false;
  try {
    KILN_ASSIGN_OR_RETURN(built, build(in, out));
  } catch (const dnnl::error&) {
    built = false;  // no oneDNN implementation for this case
  }
  use_ref_ = !built;
  return use_ref_ ? ref_->prepare(in, out) : Status::Ok();
}

Status OnednnConvert::build(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  reorder_.reset();
  buffer_.reset();
  if (from == to) return Status::Ok();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::reorder::primitive_desc rpd(onednn_engine(), from, onednn_engine(), to, attr);
  reorder_.init(rpd, dnnl::reorder(rpd));
  src_slot_ = reorder_.add_arg(DNNL_ARG_FROM, from);
  buffer_ = aligned_alloc_shared(to.get_size());
  reorder_.bind(reorder_.add_arg(DNNL_ARG_TO, to), buffer_.get());
  return Status::Ok();
}

StatusOr<const void*> OnednnConvert::run(const void* src, const dnnl::stream& s) {
  if (!reorder_.ready()) return src;
  reorder_.bind(src_slot_, src);
  KILN_RETURN_IF_ERROR(reorder_.execute(s));
  return static_cast<const void*>(buffer_.get());
}

StatusOr<std::shared_ptr<void>> onednn_packed_weights(const void* src, const dnnl::memory::desc& src_md,
                                                      const dnnl::memory::desc& packed_md) {
  return onednn_packed_weights(src, src_md.get_size(), "", src_md, packed_md, nullptr);
}

StatusOr<std::shared_ptr<void>> onednn_packed_weights(const void* src, size_t src_bytes, const std::string& rewrite,
                                                      const dnnl::memory::desc& plain_md, const dnnl::memory::desc& packed_md,
                                                      const std::function<void(void* plain)>& to_plain) {
  // The descriptors' bytes name the layouts (oneDNN zero-fills them): equal bytes, equal layouts.
  std::string layout("onednn:" + rewrite + ":");
  layout.append(reinterpret_cast<const char*>(&plain_md.data), sizeof(plain_md.data));
  layout.append(reinterpret_cast<const char*>(&packed_md.data), sizeof(packed_md.data));
  return shared_packed_weights(src, src_bytes, layout, packed_md.get_size(), [&](void* dst) -> Status {
    std::vector<char> rewritten(to_plain ? plain_md.get_size() : 0);
    if (to_plain) to_plain(rewritten.data());
    try {
      dnnl::stream s(onednn_engine());
      dnnl::memory from(plain_md, onednn_engine(), to_plain ? rewritten.data() : const_cast<void*>(src));
      dnnl::memory to(packed_md, onednn_engine(), dst);
      dnnl::reorder(from, to).execute(s, from, to);
      s.wait();
    } catch (const dnnl::error& e) {
      return Internal(std::string("oneDNN weight reorder failed: ") + e.what());
    }
    return Status::Ok();
  });
}

dnnl::memory::dims onednn_plain_strides(const dnnl::memory::dims& dims) {
  dnnl::memory::dims st(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * std::max<dnnl::memory::dim>(dims[i + 1], 1);
  return st;
}

void register_onednn_kernels(KernelRegistry& r) {
  register_onednn_matmul_kernels(r);
  register_onednn_strided_matmul_kernels(r);
  register_onednn_conv_kernels(r);
  register_fused_matmul_kernels(r);
  register_fused_matmul_int8_kernels(r);
  register_fused_conv_int8_kernels(r);
  register_im2col_conv_kernels(r);
  register_winograd_conv_kernels(r);
  register_stem_conv_kernels(r);
  register_onednn_split_conv_kernels(r);
}

}  // namespace kiln
