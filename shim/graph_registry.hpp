// Identity of every executable graph: an ordinal in instantiation order, its call site,
// content and name, the NVTX message registered for that name, and per-graph counters.
//
// Launch path (every replay): lock-free and allocation-free. An open-addressing table keyed
// by the graph-exec handle holds a pointer to the handle's current record; the record holds
// a pointer to its current, immutable label. Instantiation, destruction and naming replace
// those pointers under a mutex; records and labels are never freed (a launch in flight may
// still read an old one), so a replaced label stays valid.
//
// A handle the driver reuses after a destroy gets a new record: a new ordinal and name,
// never the stale one. A graph first seen at launch (instantiated before the shim could
// see it) is registered there.
#pragma once

#include <nvtx3/nvToolsExt.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>

namespace ferrum {

inline constexpr size_t kMaxMessageLength = 159;
inline constexpr size_t kMaxNameLength = 127;
inline constexpr size_t kMaxSiteLength = 127;
inline constexpr size_t kMaxContentLength = 127;

// What a launch pushes: immutable once published.
struct GraphLabel {
  nvtxStringHandle_t message = nullptr;  // registered; null when no NVTX tool answers
  GraphLabel *next_free = nullptr;       // the pool's free list (registry mutex)
  uint32_t color = 0;                    // ARGB, stable per name
  char text[kMaxMessageLength + 1] = {};
};

// The first cache line holds all a launch touches — the label's message and colour are
// copied here, so a launch reads the slot and this line and not the label (with 10,000 live
// graphs each line is a cache miss). The label is read only when no message was registered.
struct alignas(64) GraphRecord {
  uint32_t ordinal = 0;            // 1, 2, 3... in registration order; 0 for the overflow record
  std::atomic<uint32_t> color{0};  // of the current label
  std::atomic<nvtxStringHandle_t> message{nullptr};  // of the current label
  std::atomic<const GraphLabel *> label{nullptr};
  std::atomic<bool> site_pending{false};  // FERRUM_REPLAY_SITE=launch: named at first launch
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> failed_launches{0};
  std::atomic<uint64_t> rejected_pushes{0};
  // Below: written under the registry mutex only; never read on the launch path.
  const char *api = "";              // the function that instantiated it, or "launch"
  GraphRecord *next_free = nullptr;  // the pool's free list
  bool in_use = false;               // allocated (live or retired-in-quarantine), not free
  bool user_named = false;
  bool live = true;                    // false once destroyed
  char name[kMaxNameLength + 1] = {};  // the {name} field
  char site[kMaxSiteLength + 1] = {};
  char content[kMaxContentLength + 1] = {};
};

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
  T *at(size_t index) const {
    const size_t chunk = index / kChunkSize;
    return chunk < kMaxChunks && chunks[chunk] ? &chunks[chunk][index % kChunkSize] : nullptr;
  }
};

// How many live graphs show each message (by hash): the memory of the uniqueness rule.
struct MessageCounts {
  static constexpr size_t kSize = size_t{1} << 17;
  uint64_t *hashes = nullptr;  // mapped on first use
  uint32_t *counts = nullptr;
  bool in_use(uint64_t hash);
  void add(uint64_t hash);
  void remove(uint64_t hash);

 private:
  uint32_t *find(uint64_t hash, bool insert);
};

}  // namespace detail

class GraphRegistry {
 public:
  static constexpr size_t kSlotBits = 17;
  static constexpr size_t kSlotCount = size_t{1} << kSlotBits;
  // Distinct handle values beyond this share the overflow record instead of lengthening
  // every probe sequence.
  static constexpr size_t kMaxHandles = kSlotCount / 4 * 3;

  constexpr GraphRegistry() = default;
  GraphRegistry(const GraphRegistry &) = delete;
  GraphRegistry &operator=(const GraphRegistry &) = delete;

  // The launch path: the current record of `exec`, registered on first sight. Never null.
  GraphRecord &record_for_launch(const void *exec) {
    GraphRecord *record = find(exec);
    if (__builtin_expect(record == nullptr, 0)) return register_at_launch(exec);
    if (__builtin_expect(record->site_pending.load(std::memory_order_relaxed), 0))
      name_at_first_launch(*record);
    return *record;
  }

  // A new identity for `exec` (instantiated from `graph`, a CUgraph, by `api`).
  void on_instantiate(const void *exec, const void *graph, const char *api);
  // `exec` is about to be destroyed: its handle may be reused for another graph.
  void on_destroy(const void *exec);
  // The user's name for `exec` (registering it if unseen). 0, or a negative errno value.
  int name_graph(const void *exec, const char *name);

  // Distinct graphs registered so far (overflow excluded).
  size_t size() const { return records_issued_.load(std::memory_order_acquire); }

  // Graphs whose records were recycled (destroyed long ago): their totals, for the summary.
  struct Recycled {
    uint64_t graphs = 0, launches = 0, failed_launches = 0, rejected_pushes = 0;
  };
  const Recycled &recycled() const { return recycled_; }

  // Calls visit(record) for every record still held — live graphs and recently destroyed
  // ones — in allocation order (ordinal order until records are recycled), overflow last.
  template <typename Visit>
  void for_each(Visit &&visit) const {
    for (size_t i = 0; i < records_.used; ++i)
      if (const GraphRecord *record = records_.at(i); record && record->in_use) visit(*record);
    if (overflow_ && overflow_->launches.load(std::memory_order_relaxed)) visit(*overflow_);
  }

 private:
  struct Slot {
    std::atomic<uintptr_t> handle{0};
    std::atomic<GraphRecord *> record{nullptr};
  };

  GraphRecord *find(const void *exec) const {
    const uintptr_t handle = reinterpret_cast<uintptr_t>(exec);
    const Slot *slots = slots_.load(std::memory_order_acquire);
    if (__builtin_expect(slots == nullptr, 0)) return nullptr;  // nothing registered yet
    size_t index = slot_index(handle);
    for (size_t probes = 0; probes < kSlotCount; ++probes) {
      const uintptr_t seen = slots[index].handle.load(std::memory_order_acquire);
      if (seen == handle && handle != 0) return slots[index].record.load(std::memory_order_acquire);
      if (seen == 0) return nullptr;
      index = (index + 1) & (kSlotCount - 1);
    }
    return nullptr;
  }

  static size_t slot_index(uintptr_t handle) {
    // Fibonacci hashing: handles are aligned heap addresses, so the low bits carry little.
    return static_cast<size_t>((handle * 0x9E3779B97F4A7C15ull) >> (64 - kSlotBits));
  }

  GraphRecord &register_at_launch(const void *exec);
  void name_at_first_launch(GraphRecord &record);
  // Below: under the registry mutex.
  GraphRecord *create_record(const void *exec, const char *api, const char *site,
                             const char *content, bool site_pending);
  Slot *claim_slot(uintptr_t handle);
  void relabel(GraphRecord &record);
  void retire(GraphRecord &record);
  void retire_label(const GraphLabel *label);
  GraphRecord &overflow();

  // kSlotCount slots, mapped at the first registration: 2 MiB of .bss would cost every
  // process that inherits LD_PRELOAD a few microseconds at start-up.
  std::atomic<Slot *> slots_{nullptr};
  std::atomic<size_t> records_issued_{0};
  size_t handles_used_ = 0;
  detail::ChunkPool<GraphRecord> records_;
  detail::ChunkPool<GraphLabel> labels_;
  detail::MessageCounts messages_;
  GraphRecord *overflow_ = nullptr;
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

}  // namespace ferrum
