// Each launch's replay number (the range's payload: 1, 2, 3... per graph) without a write to
// memory other threads share.
//
// One counter per graph, incremented by every launch on every thread, was the shim's last
// shared write on the launch path: eight threads launching one graph moved its cache line
// between cores on every launch (2.7x the cost of one thread, docs/performance.md), and even
// one thread paid a locked instruction per launch. Instead each thread takes numbers from the
// graph's counter a block at a time (1, then 2, 4 ... up to kMaxBlock when the same graph comes
// back) into a small cache of its own, and hands them out from there: a launch of a graph the
// thread launched just before touches only the thread's cache. Numbers stay unique per graph;
// one thread's are consecutive (a block left part-used is untaken when nobody took numbers
// since), several threads' interleave by blocks.
//
// The count of launches is then what was taken, less what was given back unused (a block
// evicted from a cache, a thread's cache released at its exit) and less what caches still
// hold: replay_count() adds that up over every cache. Caches live in one static array, so
// that a reader can find them; a thread claims one at its first launch and releases it when
// it exits. Past kMaxCaches threads at once, a thread takes its numbers one at a time, as
// before. In a fork() child the other threads' caches are dropped and the forking thread's
// emptied: the child's counters restart at zero (graph_registry.hpp).
#pragma once

#include <stdint.h>

#include <atomic>

#include "range/graph_record.hpp"

namespace ferrum_replay::shim {

// The numbers a thread holds for one graph: [next, end) of the graph's counter, as replay
// numbers next + 1 ... end. Written by the owning thread only; read by replay_count() on any
// thread (relaxed: a count taken while the owner launches is as fuzzy as the launch itself).
struct ReplayBlock {
  std::atomic<GraphRecord *> record{nullptr};
  std::atomic<uint32_t> ordinal{0};  // the record's ordinal when the block was taken
  uint32_t size = 0;                 // the last block's size (owner only)
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> end{0};
};

struct alignas(64) ReplayCache {
  static constexpr unsigned kWays = 4;  // graphs a thread alternates between without a miss
  ReplayBlock ways[kWays];
  std::atomic<bool> claimed{false};
};

inline constexpr unsigned kMaxCaches = 256;
inline constexpr uint32_t kMaxBlock = 64;

// This thread's cache; null until its first launch, and for ever on a thread that found none
// free. Initial-exec TLS: a plain %fs-relative load.
extern constinit __attribute__((tls_model("initial-exec"))) thread_local ReplayCache *t_replays;

// Takes a block (or, without a cache, one number) from the graph's counter.
uint64_t take_replay_number_slow(GraphRecord &record);

inline unsigned replay_way(const GraphRecord *record) {
  return static_cast<unsigned>((reinterpret_cast<uintptr_t>(record) * 0x9E3779B97F4A7C15ull) >> 62);
}
static_assert(ReplayCache::kWays == 4, "replay_way() picks one of four ways");

// The next replay number of `record` for this thread's launch (1-based).
inline uint64_t take_replay_number(GraphRecord &record) {
  ReplayCache *cache = t_replays;
  if (!cache) [[unlikely]]
    return take_replay_number_slow(record);
  ReplayBlock &block = cache->ways[replay_way(&record)];
  const uint64_t next = block.next.load(std::memory_order_relaxed);
  const bool held = next != block.end.load(std::memory_order_relaxed);
  if (block.record.load(std::memory_order_relaxed) == &record &&
      block.ordinal.load(std::memory_order_relaxed) == record.ordinal) {
    if (held) [[likely]] {
      block.next.store(next + 1, std::memory_order_relaxed);
      return next + 1;
    }
  } else if (!held) {
    // Another graph's block, used up (a thread going round many graphs): nothing to give back,
    // and this graph starts with a single number, here rather than out of line.
    const uint64_t first = record.numbers_taken.fetch_add(1, std::memory_order_relaxed);
    block.record.store(&record, std::memory_order_relaxed);
    block.ordinal.store(record.ordinal, std::memory_order_relaxed);
    block.size = 1;
    block.next.store(first + 1, std::memory_order_relaxed);
    block.end.store(first + 1, std::memory_order_relaxed);
    return first + 1;
  }
  return take_replay_number_slow(record);
}

// How many times `record` was launched (since the process, or a fork() child, started).
uint64_t replay_count(const GraphRecord &record);

}  // namespace ferrum_replay::shim
