// Per-thread scratch buffers shared by every step a thread runs: steps run one after another and
// a scratch buffer holds nothing between runs, so one buffer per thread and use serves them all
// (a buffer per step would give the ControlTransformer's 8 attention steps 8 separate workspaces,
// each cold in cache when its step comes round). Each use has its own slot, so a kernel that
// needs two kinds of scratch at once never gets the same memory twice.
#pragma once

#include <cstddef>

namespace kiln {

// kKernelRow: a built-in kernel's row buffer inside one pool chunk (max pooling's running row).
enum class ScratchSlot { kOnednnScratchpad = 0, kPluginWorkspace, kKernelRow, kCount };

// This thread's buffer for `slot`, at least `bytes` long and 64-byte aligned, or nullptr when it
// cannot grow. It never shrinks, so alternating shapes settle on one buffer and a steady state
// allocates nothing. Valid until the next call on this thread for the same slot asking for more.
void* thread_scratch(ScratchSlot slot, size_t bytes);

}  // namespace kiln
