// Each launch's replay number (the range's payload: 1, 2, 3... per graph), without a write
// per launch to memory that other threads write too.
//
// A graph launched by one thread only (the common case: a serving loop, one thread per device)
// counts in its record with one uncontended atomic add. Eight threads launching one graph made
// that counter's cache line move between cores on every launch (2.7x the cost of one thread,
// docs/performance.md). So a record remembers its launching thread (GraphRecord::launcher, a
// token per thread), and once a second thread launches it, it is shared: from then on every
// thread takes its numbers from the graph's counter a block at a time (1, then 2, 4 ... up to
// kMaxBlock as the same graph comes back) into a small cache of its own, and hands them out
// from there, touching only its own cache. (Blocks for every graph cost a single thread about
// 1.3 ns more per launch than the add, measured: hence only for shared graphs.) Numbers stay
// unique per graph; one thread's are consecutive (a block left part-used is untaken when
// nobody took numbers since), several threads' interleave by blocks.
//
// The count of launches is what was taken, less what was given back unused (a block evicted
// from a cache, a thread's cache released at its exit) and less what caches still hold:
// replay_count() adds that up over every cache. Caches live in one static array, so that a
// reader can find them; a thread claims one at its first launch of a shared graph and releases
// it when it exits. That first claim is one of the times the launch path may take a lock or
// allocate (pthread_once, pthread_key_create, pthread_setspecific), once per thread — as the
// thread's first range arms its thread-end hook the same way (launch_range.hpp:
// set_up_thread_calls), and the thread's first launch of any graph registers it under the
// registry's mutex. Past kMaxCaches
// threads at once, a thread takes its numbers one at a time. In a fork() child the other threads'
// caches are dropped and the forking thread's emptied: the child's counters restart at zero
// (graph_registry.hpp).
#pragma once

#include <stdint.h>

#include <atomic>

#include "range/graph_record.hpp"

namespace ferrum_replay::shim {

// The numbers a thread holds for one graph: [next, end) of the graph's counter, as replay
// numbers next + 1 ... end. Written by the owning thread only; read by replay_count() on any
// thread (relaxed: a count taken while the owner launches is as fuzzy as the launch itself).
struct ReplayBlock {
  // The graph's ordinal + 1 (0: empty). Ordinals are not reused (a recycled record gets a new
  // one; 2^32 registrations would wrap), so the key alone says whose numbers these are.
  std::atomic<uint32_t> key{0};
  uint32_t size = 0;  // the last block's size (owner only)
  // Odd while fill_block() rewrites the block: replay_count()'s sequence lock.
  std::atomic<uint32_t> sequence{0};
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> end{0};
  std::atomic<GraphRecord *> record{nullptr};  // where unused numbers go back to
};

struct alignas(64) ReplayCache {
  static constexpr unsigned kWays = 4;  // graphs a thread alternates between without a miss
  ReplayBlock ways[kWays];
  std::atomic<bool> claimed{false};
};

inline constexpr unsigned kMaxCaches = 256;

// GraphRecord::launcher of a graph more than one thread launched.
inline constexpr uint32_t kSharedGraph = ~0u;
// This thread's token for GraphRecord::launcher: kNoToken until its first launch (never equal
// to a record's 0 or kSharedGraph), then 1, 2, 3... Initial-exec TLS.
inline constexpr uint32_t kNoToken = ~0u - 1;
extern constinit __attribute__((tls_model("initial-exec"))) thread_local uint32_t t_launcher;
inline constexpr uint32_t kMaxBlock = 64;

// This thread's cache; null until its first launch, and for ever on a thread that found none
// free. Initial-exec TLS: a plain %fs-relative load.
extern constinit __attribute__((tls_model("initial-exec"))) thread_local ReplayCache *t_replays;

// Takes a block (or, without a cache, one number) from the graph's counter.
uint64_t take_replay_number_slow(GraphRecord &record);
// A launch of a graph this thread is not known to own: gives the thread its token, claims the
// graph for it or marks the graph shared, and takes the number.
uint64_t take_replay_number_unowned(GraphRecord &record);

// Consecutive ordinals take different ways: a thread going round up to four graphs never misses.
inline unsigned replay_way(const GraphRecord &record) {
  return record.ordinal & (ReplayCache::kWays - 1);
}
inline uint32_t replay_key(const GraphRecord &record) {
  return record.ordinal + 1;
}

// Puts numbers first + 1 ... first + size of `record` in `block`, under the block's sequence
// lock, so that a concurrent replay_count() never counts numbers the block does not hold (a
// reader compares the sequence before and after; the key alone would not do: a block may go
// to another graph and back while a reader looks). Fences only order the compiler on x86-64.
inline void fill_block(ReplayBlock &block, GraphRecord &record, uint64_t first, uint32_t size) {
  const uint32_t sequence = block.sequence.load(std::memory_order_relaxed);
  block.sequence.store(sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  block.record.store(&record, std::memory_order_relaxed);
  block.key.store(replay_key(record), std::memory_order_relaxed);
  block.size = size;
  block.next.store(first + 1, std::memory_order_relaxed);
  block.end.store(first + size, std::memory_order_relaxed);
  block.sequence.store(sequence + 2, std::memory_order_release);
}

// A shared graph's next replay number for this thread, from its cache.
inline uint64_t take_cached_replay_number(GraphRecord &record) {
  ReplayCache *cache = t_replays;
  if (!cache) [[unlikely]]
    return take_replay_number_slow(record);
  ReplayBlock &block = cache->ways[replay_way(record)];
  const uint64_t next = block.next.load(std::memory_order_relaxed);
  const bool held = next != block.end.load(std::memory_order_relaxed);
  if (block.key.load(std::memory_order_relaxed) == replay_key(record)) {
    if (held) [[likely]] {
      block.next.store(next + 1, std::memory_order_relaxed);
      return next + 1;
    }
  } else if (!held) {
    // Another graph's block, used up (a thread going round many graphs): nothing to give back,
    // and this graph starts with a single number, here rather than out of line.
    const uint64_t first = record.numbers_taken.fetch_add(1, std::memory_order_relaxed);
    fill_block(block, record, first, 1);
    return first + 1;
  }
  return take_replay_number_slow(record);
}

// The next replay number of `record` for this thread's launch (1-based).
inline uint64_t take_replay_number(GraphRecord &record) {
  const uint32_t launcher = record.launcher.load(std::memory_order_relaxed);
  if (launcher == t_launcher) [[likely]]
    return record.numbers_taken.fetch_add(1, std::memory_order_relaxed) + 1;
  if (launcher == kSharedGraph) return take_cached_replay_number(record);
  return take_replay_number_unowned(record);
}

// How many times `record` was launched (since the process, or a fork() child, started).
uint64_t replay_count(const GraphRecord &record);

}  // namespace ferrum_replay::shim
