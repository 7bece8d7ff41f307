// Memory for recording threads' next chunks, faulted in ahead of time by one background thread.
//
// A range costs 64 bytes of memory the process has never touched, and handing out a fresh page
// is the largest part of recording one (docs/performance.md, "The recorder: why it still
// misses": about 2 µs per 4 KiB page on a virtual machine, 30 ns a range). A thread that fills a
// chunk now takes the next one from a small stock of mappings whose pages a background thread
// already faulted in, so the recording thread pays for the fault only when the stock is empty;
// the work moves to a core the recording thread is not using, it does not go away.
//
// The thread ("ferrum-rec-mem") starts the first time a chunk is wanted — a process that
// records fewer ranges than one chunk holds never has it — blocks every signal, is detached,
// waits only on its own semaphore, and keeps at most kStockChunks mappings (1 MiB) in stock. If
// it cannot be started, or in a fork() child (where it does not exist), callers map their own
// chunks as before; the child still uses what the stock held at the fork.
#pragma once

#include <cstddef>

namespace ferrum_replay::recorder {

inline constexpr int kStockChunks = 16;

// A private anonymous mapping of `bytes` whose pages are faulted in (zero-filled), to be
// released with munmap; or nullptr, when the stock is empty or holds mappings of another size:
// the caller maps its own. Starts the stock's thread at its first call.
void *take_populated(size_t bytes);

// Tests: whether the stock's thread runs.
bool chunk_stock_running();

}  // namespace ferrum_replay::recorder
