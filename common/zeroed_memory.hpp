// Memory for the shim's and the recorder's own tables, taken straight from the kernel: a private
// anonymous mapping, zero-filled, not from the program's allocator (malloc may be the program's
// own, and under an address-space cap a failed allocation must be a null we check, not a throw
// or a construction at address 0: F11 in tests/reliability/FINDINGS.md). One rule, one home:
// each table of ours mapped from the kernel comes from map_zeroed and goes back with
// unmap_zeroed.
#pragma once

#include <stddef.h>
#include <sys/mman.h>

namespace ferrum_replay::common {

// `bytes` of zeroed memory, or null when the kernel refused (ENOMEM, a RLIMIT_AS cap): every
// caller degrades (no table, no timing, no names) rather than fail the program's call. With
// `populate`, the pages are faulted in by this one call (a table about to be filled at once).
inline void *map_zeroed(size_t bytes, bool populate = false) {
  void *memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
  return memory == MAP_FAILED ? nullptr : memory;
}

// Gives back what map_zeroed returned, with the size it was asked for.
inline void unmap_zeroed(void *memory, size_t bytes) {
  munmap(memory, bytes);
}

}  // namespace ferrum_replay::common
