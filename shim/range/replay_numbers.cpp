#include "range/replay_numbers.hpp"

#include <pthread.h>

#include "errno_kept.hpp"
#include "range/process_files.hpp"

namespace ferrum_replay::shim {

constinit __attribute__((tls_model("initial-exec"))) thread_local ReplayCache *t_replays = nullptr;
constinit __attribute__((tls_model("initial-exec"))) thread_local uint32_t t_launcher = kNoToken;

namespace {

// Zero-initialised static storage: costs a process nothing until its threads launch.
constinit ReplayCache g_caches[kMaxCaches];
// The last launcher token handed out (tokens wrap after 4 billion threads: two threads with
// one token only share a graph's plain counter, which stays exact).
std::atomic<uint32_t> g_last_token{0};
// Caches [0, used) may have been claimed: what replay_count() reads.
std::atomic<unsigned> g_caches_used{0};
// This thread found no cache free (or is exiting): it takes its numbers one at a time.
constinit __attribute__((tls_model("initial-exec"))) thread_local bool t_uncached = false;

pthread_once_t g_setup_once = PTHREAD_ONCE_INIT;
pthread_key_t g_release_key;
bool g_release_key_made = false;  // written once under g_setup_once

// Hands what `block` still holds back to its graph; the block holds nothing afterwards.
void give_back(ReplayBlock &block) {
  GraphRecord *record = block.record.load(std::memory_order_relaxed);
  const uint64_t next = block.next.load(std::memory_order_relaxed);
  const uint64_t end = block.end.load(std::memory_order_relaxed);
  block.end.store(next, std::memory_order_relaxed);
  if (!record || end <= next) return;
  // Only to the same graph. Records are recycled only after 4096 other graphs were destroyed
  // (the registry's quarantine), so one that still shows the block's ordinal is that graph's.
  // (Read from `generation`, an atomic copy of the ordinal: the record may be another graph's
  // by now, written by the registry under its mutex.) A thread stalled between this check and
  // the add below while 4096 graphs are destroyed could still hand a recycled record up to 63
  // numbers: left, as the quarantine makes it a matter of seconds of preemption.
  if (record->generation.load(std::memory_order_relaxed) + 1 !=
      block.key.load(std::memory_order_relaxed))
    return;
  // The graph's latest block (nobody took numbers since): untaken, so that the next numbers
  // follow on without a gap — one thread's stay 1, 2, 3... however often its blocks are evicted.
  uint64_t latest = end;
  if (record->numbers_taken.compare_exchange_strong(latest, next, std::memory_order_relaxed))
    return;
  record->numbers_returned.fetch_add(end - next, std::memory_order_relaxed);
}

// The thread-exit destructor of the claimed cache (pthread key): its numbers go back to their
// graphs and the cache to the pool, so that threads coming and going never exhaust it.
void release_cache(void *value) {
  auto *cache = static_cast<ReplayCache *>(value);
  for (ReplayBlock &block : cache->ways) {
    give_back(block);
    block.key.store(0, std::memory_order_relaxed);
    block.record.store(nullptr, std::memory_order_relaxed);
  }
  // A launch later in this thread's exit (another key's destructor) takes single numbers.
  t_replays = nullptr;
  t_uncached = true;
  cache->claimed.store(false, std::memory_order_release);
}

// fork() child: only the forking thread exists, and the registry restarts every counter at
// zero (GraphRegistry::start_counting_afresh). Every cache is emptied; the other threads' are
// free again.
void empty_caches_in_child() {
  const ReplayCache *mine = t_replays;
  const unsigned used = g_caches_used.load(std::memory_order_relaxed);
  for (unsigned i = 0; i < used; ++i) {
    ReplayCache &cache = g_caches[i];
    for (ReplayBlock &block : cache.ways) {
      block.key.store(0, std::memory_order_relaxed);
      block.record.store(nullptr, std::memory_order_relaxed);
      block.next.store(0, std::memory_order_relaxed);
      block.end.store(0, std::memory_order_relaxed);
      block.size = 0;
    }
    if (&cache != mine) cache.claimed.store(false, std::memory_order_relaxed);
  }
}

void set_up() {
  g_release_key_made = pthread_key_create(&g_release_key, release_cache) == 0;
  pthread_atfork(nullptr, nullptr, empty_caches_in_child);
}

// A free cache for this thread, or null. Without the thread-exit key a claimed cache could
// never be released: then none is claimed.
ReplayCache *claim_cache() {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: the key's set-up may allocate
  pthread_once(&g_setup_once, set_up);
  if (!g_release_key_made) return nullptr;
  for (unsigned i = 0; i < kMaxCaches; ++i) {
    ReplayCache &cache = g_caches[i];
    bool free = false;
    if (cache.claimed.load(std::memory_order_relaxed) ||
        !cache.claimed.compare_exchange_strong(free, true, std::memory_order_acquire))
      continue;
    unsigned used = g_caches_used.load(std::memory_order_relaxed);
    while (used < i + 1 &&
           !g_caches_used.compare_exchange_weak(used, i + 1, std::memory_order_release)) {
    }
    if (pthread_setspecific(g_release_key, &cache) != 0) {
      cache.claimed.store(false, std::memory_order_release);
      return nullptr;
    }
    return &cache;
  }
  return nullptr;
}

}  // namespace

uint64_t take_replay_number_slow(GraphRecord &record) {
  ReplayCache *cache = t_replays;
  if (!cache && !t_uncached) {
    cache = claim_cache();
    t_replays = cache;
    t_uncached = cache == nullptr;
  }
  if (!cache) return record.numbers_taken.fetch_add(1, std::memory_order_relaxed) + 1;
  ReplayBlock &block = cache->ways[replay_way(record)];
  uint32_t size = 1;
  if (block.key.load(std::memory_order_relaxed) == replay_key(record))
    size = block.size == 0 ? 1 : block.size < kMaxBlock ? block.size * 2 : kMaxBlock;  // used up
  else
    give_back(block);  // another graph's: it leaves the cache
  const uint64_t first = record.numbers_taken.fetch_add(size, std::memory_order_relaxed);
  fill_block(block, record, first, size);
  return first + 1;
}

uint64_t take_replay_number_unowned(GraphRecord &record) {
  // Every process's first launch comes this way (a fork() child's too: its records have no
  // launcher), and few others do: where its running marker is made (process_files.hpp).
  {
    const common::ErrnoKept errno_kept;  // errno_kept.hpp
    note_launching_process();
  }
  if (t_launcher == kNoToken) {
    uint32_t token;
    do token = g_last_token.fetch_add(1, std::memory_order_relaxed) + 1;
    while (token == 0 || token >= kNoToken);
    t_launcher = token;
  }
  uint32_t launcher = record.launcher.load(std::memory_order_relaxed);
  if (launcher == 0 &&
      record.launcher.compare_exchange_strong(launcher, t_launcher, std::memory_order_relaxed))
    launcher = t_launcher;  // this thread's graph from now on
  if (launcher == t_launcher)
    return record.numbers_taken.fetch_add(1, std::memory_order_relaxed) + 1;
  // A second thread: the graph is shared from now on, and every thread takes blocks.
  if (launcher != kSharedGraph) record.launcher.store(kSharedGraph, std::memory_order_relaxed);
  return take_cached_replay_number(record);
}

uint64_t replay_count(const GraphRecord &record) {
  uint64_t held = 0;
  // Only a shared graph's numbers are ever held in caches (take_replay_number).
  const unsigned used = record.launcher.load(std::memory_order_relaxed) == kSharedGraph
                            ? g_caches_used.load(std::memory_order_acquire)
                            : 0;
  for (unsigned i = 0; i < used; ++i) {
    for (const ReplayBlock &block : g_caches[i].ways) {
      // The reading side of fill_block's sequence lock. A block being rewritten holds nothing
      // for this graph: what it held was given back first.
      const uint32_t sequence = block.sequence.load(std::memory_order_acquire);
      if (sequence & 1) continue;
      const uint32_t key = block.key.load(std::memory_order_relaxed);
      GraphRecord *owner = block.record.load(std::memory_order_relaxed);
      const uint64_t end = block.end.load(std::memory_order_relaxed);
      const uint64_t next = block.next.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (block.sequence.load(std::memory_order_relaxed) != sequence) continue;
      if (key != replay_key(record) || owner != &record) continue;
      if (end > next) held += end - next;
    }
  }
  const uint64_t taken = record.numbers_taken.load(std::memory_order_relaxed);
  const uint64_t unused = record.numbers_returned.load(std::memory_order_relaxed) + held;
  return taken > unused ? taken - unused : 0;
}

}  // namespace ferrum_replay::shim
