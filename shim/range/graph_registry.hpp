// Identity of every executable graph: an ordinal in instantiation order, its call site,
// content and name, the NVTX message registered for that name, and per-graph counters.
//
// Launch path (every replay): lock-free and allocation-free. An open-addressing table keyed
// by the graph-exec handle holds a pointer to the handle's current record; the record holds
// a pointer to its current, immutable label. Instantiation, destruction and naming replace
// those pointers under a mutex; records and labels are never unmapped (a launch in flight may
// still read an old one), so a replaced label stays valid.
//
// A handle the driver reuses after a destroy gets a new record: a new ordinal and name,
// never the stale one. A graph first seen at launch (instantiated before the shim could
// see it) is registered there.
//
// Bounded under churn: what the registry holds depends on the graphs live now, never on how
// many handles, names or graphs the process went through.
//   - Handle table: a destroyed graph's slot becomes a tombstone, reused by later handles; when
//     live slots plus tombstones pass 3/4 of the table it is rebuilt without tombstones (twice
//     as large when more than half of it is live), into the other of two tables of that size,
//     then published in one store. A launch still probing the old table sees a complete
//     snapshot; one stalled across two rebuilds may see a table being refilled, so a found
//     record counts only when it names the same handle (GraphRecord::handle), and a launch that
//     finds nothing takes the slow path, which looks again under the mutex. A rebuild costs one
//     pass over the table after at least a quarter of it was filled: O(1) amortised.
//   - Records and labels: recycled behind a quarantine of 4096 (ChunkPool); a label that a
//     timed replay still in flight names (GPU timing reads it when the GPU has finished) is
//     held back until none does.
//   - Messages shown by live graphs: counted by hash; an entry leaves when its count reaches 0
//     (backward-shift deletion, no tombstones), and the table shrinks and grows with them.
//   - Graphs the registry cannot know are destroyed — first seen at launch, or named before any
//     instantiation the shim saw (a stale handle, say) — are "unconfirmed": at most
//     kMaxUnconfirmed of them are held. Past that, the oldest that has not been launched since
//     it was last looked at leaves (as if destroyed; launched again, it is registered anew).
//     Graphs the shim saw instantiated leave only when destroyed or their handle is reused.
// So memory is bounded by the largest number of graphs live at once, plus the quarantines, the
// labels held for replays in flight (at most one per event pair) and the unconfirmed graphs;
// instantiation, destruction, naming and launch are O(1) amortised. The table holds at most
// kMaxLiveGraphs live graphs, and the record pool 256 x 4096 records, live and quarantined
// together: while graphs are being replaced, up to 4096 destroyed ones count against that bound
// (the live graphs then reach about kMaxLiveGraphs - 4096). Beyond the bound, or with no memory
// for the next chunk or a larger table, graphs share the overflow record "graph (unregistered)".
// Such a refusal is remembered lock-free until room may have come back (a slot, record or label
// freed, a graph registered or named): meanwhile a launch of a graph the registry does not know
// goes straight to the overflow record — no stack walk, no lock, no mapping tried again — and so
// costs what a registered graph's does (F171: 5.8 us a launch instead of 27 ns). A refusal is
// taken for every unknown graph: another one first seen at launch meanwhile shares the overflow
// record too, until something changes.
#pragma once

#include <nvtx3/nvToolsExt.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "monotonic_clock.hpp"
#include "range/graph_record.hpp"

namespace ferrum_replay::shim {

namespace detail {

// Fixed-size objects in chunks mapped on demand and never unmapped, recycled through a
// quarantine: a retired object (a destroyed graph's record, a replaced label) waits behind
// kQuarantine others before reuse, so a launch still holding it (a thread preempted
// mid-launch) reads a stale but valid object — never freed memory — and a process that
// re-instantiates or renames graphs forever uses bounded memory.
template <typename T>
struct ChunkPool {
  static constexpr size_t kChunkSize = 4096;
  static constexpr size_t kMaxChunks = 256;  // 1M objects in use at once: far beyond need
  static constexpr size_t kQuarantine = 4096;
  T *chunks[kMaxChunks] = {};
  size_t used = 0;
  T **quarantine = nullptr;  // a ring of kQuarantine, mapped on first use
  size_t quarantine_head = 0, quarantine_count = 0;
  T *free_head = nullptr;
  // Under the registry mutex. Null when exhausted or out of memory.
  T *allocate();
  // `object` is unreachable for new launches. Returns the object that leaves the quarantine
  // (now free for reuse, after the caller read what it needs), or null.
  T *retire(T *object);
  void release(T *object);  // back on the free list
  // The index `object` has in the pool (at(index) == object), or SIZE_MAX if none.
  size_t index_of(const T *object) const;
  T *at(size_t index) const {
    const size_t chunk = index / kChunkSize;
    return chunk < kMaxChunks && chunks[chunk] ? &chunks[chunk][index % kChunkSize] : nullptr;
  }
};

// How many live graphs show each message (by hash): the memory of the uniqueness rule.
// Linear probing; an entry leaves when its count reaches 0 (backward-shift deletion), so the
// table holds only the messages live graphs show. Grows past 3/4 full, shrinks below 1/8.
// Used under the registry mutex only (no launch reads it), so a resized table is unmapped.
struct MessageCounts {
  static constexpr size_t kMinCapacity = 256;
  struct Entry {
    uint64_t hash;  // 0: free
    uint64_t count;
  };
  Entry *entries = nullptr;  // mapped on first use
  size_t capacity = 0, used = 0;
  unsigned bits = 0;
  bool in_use(uint64_t hash) const;
  uint64_t count(uint64_t hash) const;  // live graphs that show it (0: none)
  void add(uint64_t hash);
  void remove(uint64_t hash);

 private:
  size_t home(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - bits));
  }
  Entry *find(uint64_t key) const;
  bool resize(unsigned new_bits);
};

}  // namespace detail

class GraphRegistry {
 public:
  // The handle table: 2^kMinTableBits slots at first, doubling up to 2^kMaxTableBits (8 bytes
  // a slot), at most half of them live.
  static constexpr unsigned kMinTableBits = 10;
  static constexpr unsigned kMaxTableBits = 21;
  static constexpr size_t kMaxLiveGraphs = size_t{1} << (kMaxTableBits - 1);
  // Graphs first seen at launch or by naming, held at once (see the header comment).
  static constexpr size_t kMaxUnconfirmed = 4096;

  constexpr GraphRegistry() = default;
  GraphRegistry(const GraphRegistry &) = delete;
  GraphRegistry &operator=(const GraphRegistry &) = delete;

  // The launch path: the current record of `exec`; null when it was never registered (or
  // its table slot is being rebuilt: the slow path looks again under the mutex). Lock-free.
  GraphRecord *find(const void *exec) const {
    const uintptr_t handle = reinterpret_cast<uintptr_t>(exec);
    const SlotTable *table = table_.load(std::memory_order_acquire);
    // Nothing registered yet; or a null handle, never registered (a recycled record's handle
    // reads 0 while the registry fills it in).
    if (__builtin_expect(table == nullptr || handle == 0, 0)) return nullptr;
    size_t index = table->index(handle);
    const uint64_t tag = slot_tag(handle);
    for (size_t probes = 0; probes <= table->mask; ++probes) {
      const uint64_t seen = table->slots[index].word.load(std::memory_order_acquire);
      if (seen == 0) return nullptr;
      if ((seen >> kTagShift) == tag) {
        // The record says whose it is: another handle's with the same tag, or, in a table
        // refilled under a stalled launch, any record at all.
        GraphRecord *record = reinterpret_cast<GraphRecord *>(seen & kAddressMask);
        if (record->handle.load(std::memory_order_acquire) == handle) return record;
      }
      index = (index + 1) & table->mask;
    }
    return nullptr;
  }

  // The slow paths. What they are told (call site, content) was observed by the caller
  // outside the registry's mutex: walking the stack and querying the driver take the
  // loader's lock, which a thread inside dlopen may hold while it calls CUDA.
  //
  // Each takes the registry's mutex, unless this thread already holds a lock of ours
  // (common::inside_our_lock): a signal handler's call that interrupted its thread inside the
  // shim (registering or naming a graph, reading the call-site cache, writing the summary)
  // would wait for itself for ever. Such a call waits for nothing and changes nothing: as said
  // for each below.
  //
  // A new identity for `exec`, instantiated by `api`; `site_pending`: named at first launch;
  // `scope_name`: the program's name for it from a naming scope (scope_names.hpp), or null.
  // (Refused: not registered now; its first launch registers it.)
  void on_instantiate(const void *exec, const char *api, const char *site, const char *content,
                      bool site_pending, const char *scope_name = nullptr);
  // `exec` is about to be destroyed: its handle may be reused for another graph. (Refused:
  // not forgotten; an instantiation the shim sees that reuses the handle replaces its record.)
  void on_destroy(const void *exec);
  // A graph first seen at launch (instantiated before the shim could see it): past the
  // table's bound, the overflow record. Null only when refused (the launch goes without a
  // range).
  GraphRecord *register_at_launch(const void *exec, const char *site);
  // FERRUM_REPLAY_SITE=launch: the record's name from its first launch's call site. (Refused,
  // or no label to be had: the name stays pending, for a later launch — after room came back,
  // refusing_labels.)
  void name_at_first_launch(GraphRecord &record, const char *site);
  // The user's name for `exec` (registering it if unseen, with `site`). 0 once the name is
  // shown; or a negative errno value: -EAGAIN when refused, -ENOSPC when no record or label
  // could be had for it (the record then stays as it was).
  int name_graph(const void *exec, const char *name, const char *site);

  // The record launches of a null handle share, once made (by register_at_launch); null
  // before. Lock-free: such a launch needs no stack walk and no lock.
  GraphRecord *shared_overflow() const { return overflow_.load(std::memory_order_acquire); }

  // Whether a graph not registered yet would be refused now: the registry found no room for the
  // last one it tried (at its bound, or without memory) and none may have come back since.
  // Lock-free: the launch path asks before it walks the stack or takes the mutex.
  // A refusal holds at most kRefusalHoldNs too: memory can come back from outside the registry
  // (the program freeing its own after a start-up peak), and a graph refused then must not
  // stay unregistered for the rest of the run. One retry a hold costs what a refused launch cost
  // before (a stack walk, the mutex).
  static constexpr uint64_t kRefusalHoldNs = 1000u * 1000u * 1000u;
  bool refusing_graphs() const {
    const uint64_t now = room_changes_.load(std::memory_order_relaxed) + 1;
    return (graphs_refused_at_.load(std::memory_order_relaxed) == now ||
            labels_refused_at_.load(std::memory_order_relaxed) == now) &&
           common::monotonic_ns() < refused_until_ns_.load(std::memory_order_relaxed);
  }
  // Likewise for a new label (a name at first launch, FERRUM_REPLAY_SITE=launch).
  bool refusing_labels() const {
    return labels_refused_at_.load(std::memory_order_relaxed) ==
               room_changes_.load(std::memory_order_relaxed) + 1 &&
           common::monotonic_ns() < refused_until_ns_.load(std::memory_order_relaxed);
  }

  // Graphs whose records were recycled (destroyed long ago): their totals, for the summary.
  struct Recycled {
    uint64_t graphs = 0, launches = 0, failed_launches = 0, rejected_pushes = 0,
             after_tool_report = 0;
  };
  const Recycled &recycled() const { return recycled_; }

  // In a forked child (the registry's fork handler): the counters restart at zero, so that the
  // child's summary counts its own launches, never its parent's, and no graph has a launching
  // thread yet (replay_numbers.hpp). Identities and names stay.
  // Single-threaded by then: plain stores.
  void start_counting_afresh();

  // What the registry holds now (for tests and the debug log).
  struct Occupancy {
    size_t live_graphs = 0, tombstones = 0, table_slots = 0, unconfirmed = 0, messages = 0,
           message_capacity = 0;
  };
  Occupancy occupancy() const;

  // Calls visit(record) for every record still held — live graphs and recently destroyed
  // ones — in allocation order (ordinal order until records are recycled), overflow last.
  template <typename Visit>
  void for_each(Visit &&visit) const {
    for (size_t i = 0; i < records_.used; ++i)
      if (const GraphRecord *record = records_.at(i); record && record->in_use) visit(*record);
    const GraphRecord *shared = overflow_.load(std::memory_order_acquire);
    if (shared && shared->numbers_taken.load(std::memory_order_relaxed)) visit(*shared);
  }

 private:
  // A slot of the handle table is one word: 0 when free, kTombstoneWord once its graph was
  // destroyed, or else the record's address (below 2^48: mapped memory, registries never ask
  // for more) under a tag of the handle's hash (slot_tag: 15 bits and a bit that is always set),
  // so that a probe rarely reads a record that is not the one it looks for. The handle itself is
  // the record's (GraphRecord::handle). One word, not the handle and the record side by side: the
  // table takes half the memory (at 10,000 graphs 128 KiB instead of 256), and with 10,000 graphs
  // launched in turn a launch took 1.2 ns less (docs/performance.md).
  struct Slot {
    std::atomic<uint64_t> word{0};
  };
  static constexpr unsigned kTagShift = 48;
  static constexpr uint64_t kAddressMask = (uint64_t{1} << kTagShift) - 1;
  static constexpr uint64_t kTombstoneWord = 1;  // tag 0: no handle's (slot_tag sets the top bit)
  // Bits 16..30 of the Fibonacci hash (the table's index takes the top bits), and the top bit.
  static uint64_t slot_tag(uintptr_t handle) {
    return 0x8000 | (((handle * 0x9E3779B97F4A7C15ull) >> 16) & 0x7FFF);
  }
  static uint64_t slot_word(uintptr_t handle, const GraphRecord *record) {
    return (slot_tag(handle) << kTagShift) | reinterpret_cast<uintptr_t>(record);
  }
  // The record a slot holds; null when it is free or a tombstone.
  static GraphRecord *slot_record(const Slot &slot) {
    const uint64_t word = slot.word.load(std::memory_order_relaxed);
    return word == 0 || word == kTombstoneWord
               ? nullptr
               : reinterpret_cast<GraphRecord *>(word & kAddressMask);
  }
  static bool fits_in_slot(const GraphRecord *record) {
    return (reinterpret_cast<uintptr_t>(record) & ~kAddressMask) == 0;
  }

  // One handle table. Mapped on first use and never unmapped nor moved: a launch may still
  // probe a table that was replaced.
  struct SlotTable {
    Slot *slots = nullptr;
    size_t mask = 0;
    unsigned bits = 0;
    size_t index(uintptr_t handle) const {
      // Fibonacci hashing: handles are aligned heap addresses, so the low bits carry little.
      return static_cast<size_t>((handle * 0x9E3779B97F4A7C15ull) >> (64 - bits));
    }
  };

  // Below: under the registry mutex.
  GraphRecord *create_record(const void *exec, const char *api, const char *site,
                             const char *content, bool site_pending, bool confirmed,
                             const char *program_name = nullptr);
  Slot *slot_of(uintptr_t handle) const;
  Slot *claim_slot(uintptr_t handle);
  bool rebuild(size_t live_needed);
  void publish(Slot &slot, uintptr_t handle, GraphRecord *record);
  void vacate(Slot &slot);
  [[nodiscard]] bool relabel(GraphRecord &record);
  GraphRecord *refuse(Slot *slot);
  void note_room();
  void note_refused(std::atomic<uint64_t> &refused_at);
  void retire(GraphRecord &record);
  void retire_label(const GraphLabel *label);
  void release_label(GraphLabel *label);
  void count_message(const GraphLabel &label);   // a live graph shows it from now
  void forget_message(const GraphLabel &label);  // ... no longer
  void hold_unconfirmed(GraphRecord &record);
  void unlink_unconfirmed(GraphRecord &record);
  GraphRecord &overflow();

  std::atomic<const SlotTable *> table_{nullptr};
  // [bits][0 or 1]: two tables of each size, so a rebuild never refills the one in use.
  SlotTable tables_[kMaxTableBits + 1][2] = {};
  size_t live_slots_ = 0, dead_slots_ = 0;
  std::atomic<size_t> records_issued_{0};
  detail::ChunkPool<GraphRecord> records_;
  // GraphRecord::live_ordinal's words, one per record index, a chunk at a time beside the
  // records' chunks; made once (constructed when mapped) and never unmapped nor made anew.
  std::atomic<uint32_t> *live_words_[detail::ChunkPool<GraphRecord>::kMaxChunks] = {};
  std::atomic<uint32_t> *live_word_of(const GraphRecord *record);
  detail::ChunkPool<GraphLabel> labels_;
  // Labels out of their quarantine that a timed replay still in flight names (GPU timing reads
  // the name when the GPU has finished): released once none does. A list through next_free; at
  // most one label per pair in flight.
  GraphLabel *held_oldest_ = nullptr, *held_newest_ = nullptr;
  detail::MessageCounts messages_;
  // Of those, the graphs that show a person's whole name, by (message, name): graph_naming.hpp.
  detail::MessageCounts shared_messages_;
  GraphRecord *unconfirmed_oldest_ = nullptr, *unconfirmed_newest_ = nullptr;
  size_t unconfirmed_ = 0;
  std::atomic<GraphRecord *> overflow_{nullptr};  // published complete (shared_overflow)
  // Counted up (under the mutex) whenever room may have come back: a slot vacated, a record or
  // label freed, a graph registered, a label had. A refusal stores the count it failed at, plus
  // one (0: none): it holds while the two agree (refusing_graphs, refusing_labels).
  std::atomic<uint64_t> room_changes_{0};
  std::atomic<uint64_t> graphs_refused_at_{0}, labels_refused_at_{0};
  std::atomic<uint64_t> refused_until_ns_{0};  // CLOCK_MONOTONIC: the last refusal's hold ends
  Recycled recycled_;
};

namespace detail {
extern GraphRegistry g_registry;
}  // namespace detail

// The process-wide registry (zero-initialised static storage: costs nothing until used).
// Inline: read on every launch.
inline GraphRegistry &graph_registry() {
  return detail::g_registry;
}

// A colour derived from the name alone, so a graph keeps its colour across runs.
uint32_t color_for_name(const char *name);

}  // namespace ferrum_replay::shim
