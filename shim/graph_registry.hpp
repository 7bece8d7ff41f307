// Identity of every executable graph the shim has seen: an ordinal in first-seen order, a
// name, the NVTX message registered once for that name, and per-graph counters.
//
// Lookups (every launch) take no lock and allocate nothing: an open-addressing table of
// fixed capacity in zero-initialised static storage, keyed by the graph-exec handle. Only
// the first sight of a handle writes (a compare-and-swap claims the slot, then the record
// is filled and published); racing first sights of the same handle wait for the winner.
#pragma once

#include <nvtx3/nvToolsExt.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>

namespace ferrum {

inline constexpr size_t kMaxGraphNameLength = 63;

struct alignas(64) GraphRecord {
  std::atomic<uintptr_t> handle{0};  // the CUgraphExec / cudaGraphExec_t; 0 = free slot
  std::atomic<uint32_t> published{0};
  uint32_t ordinal = 0;  // 1, 2, 3... in first-seen order; 0 for the overflow record
  uint32_t color = 0;    // ARGB, stable per name
  nvtxStringHandle_t message = nullptr;  // registered once; null when no NVTX tool answers
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> failed_launches{0};
  std::atomic<uint64_t> rejected_pushes{0};
  char name[kMaxGraphNameLength + 1] = {};
};

class GraphRegistry {
 public:
  static constexpr size_t kCapacity = size_t{1} << 15;
  // Beyond this many graphs new handles share the overflow record rather than degrading
  // every lookup with long probe sequences.
  static constexpr size_t kMaxGraphs = kCapacity / 4 * 3;

  constexpr GraphRegistry() = default;
  GraphRegistry(const GraphRegistry &) = delete;
  GraphRegistry &operator=(const GraphRegistry &) = delete;

  // The record of `exec`, created on first sight (registration may format and register an
  // NVTX string; later lookups only read). Never null.
  GraphRecord &record_for_launch(const void *exec, nvtxDomainHandle_t domain);

  // Number of distinct graphs registered.
  size_t size() const { return count_.load(std::memory_order_acquire); }

  // Calls visit(record) for every published record, overflow last if it was used.
  template <typename Visit>
  void for_each(Visit &&visit) const {
    for (const GraphRecord &record : slots_)
      if (record.published.load(std::memory_order_acquire)) visit(record);
    if (overflow_.launches.load(std::memory_order_relaxed)) visit(overflow_);
  }

 private:
  GraphRecord &register_new(GraphRecord &slot, nvtxDomainHandle_t domain);
  GraphRecord &overflow(nvtxDomainHandle_t domain);

  GraphRecord slots_[kCapacity];
  GraphRecord overflow_;
  std::atomic<uint32_t> count_{0};
  std::atomic<uint32_t> ordinals_issued_{0};  // all-zero state keeps the table in .bss
  std::atomic<int> overflow_state_{0};
};

// The process-wide registry (static storage: costs nothing until a graph is seen).
GraphRegistry &graph_registry();

// A colour derived from the name alone, so a graph keeps its colour across runs.
uint32_t color_for_name(const char *name);

}  // namespace ferrum
