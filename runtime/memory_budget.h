// The memory cap: a process-wide bound on what kiln holds for weights (mapped or copied), packed
// weights, activation arenas, plugin workspaces and streaming state. Going past it is a one-line
// error naming what asked and the bytes, before anything is allocated, not an out-of-memory kill.
//
// Set with set_max_memory(), LoadOptions::max_memory, engine-build/engine-run `--max-memory`, or the
// KILN_MAX_MEMORY environment variable (read once: bytes, or with a K/M/G/T suffix, powers of 1024).
// 0 means no cap. The count covers the buffers kiln allocates through aligned_alloc_shared and the
// engine files it maps; small bookkeeping (names, plan tables) is not counted.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/status.h"

namespace kiln {

void set_max_memory(uint64_t bytes);
uint64_t max_memory();
uint64_t memory_in_use();

// Ok if `bytes` more fit under the cap; otherwise ResourceExhausted naming `what`, the bytes asked,
// the bytes in use and the cap.
Status check_memory(uint64_t bytes, const std::string& what);

// Accounting for buffers not allocated through aligned_alloc_shared (a mapped engine file).
// charge_memory fails like check_memory and counts nothing then.
Status charge_memory(uint64_t bytes, const std::string& what);
void release_memory(uint64_t bytes);
// aligned_alloc_shared's side: counts `bytes` if they fit (false otherwise).
bool try_charge_memory(uint64_t bytes);

// "512M", "2G", "1073741824", "1.5G": bytes. Errors name the text.
StatusOr<uint64_t> parse_memory_size(const std::string& text);

}  // namespace kiln
