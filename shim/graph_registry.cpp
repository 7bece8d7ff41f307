#include "graph_registry.hpp"

#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "log.hpp"

namespace ferrum {
namespace {

constinit GraphRegistry g_registry;

size_t slot_index(uintptr_t handle) {
  // Fibonacci hashing: handles are aligned heap addresses, so the low bits carry little.
  constexpr unsigned kBits = 15;
  static_assert((size_t{1} << kBits) == GraphRegistry::kCapacity);
  return static_cast<size_t>((handle * 0x9E3779B97F4A7C15ull) >> (64 - kBits));
}

void wait_until_published(const GraphRecord &record) {
  while (!record.published.load(std::memory_order_acquire)) sched_yield();
}

void register_message(GraphRecord &record, nvtxDomainHandle_t domain) {
  record.color = color_for_name(record.name);
  // With no tool attached this returns null and launches fall back to the ASCII name,
  // which lives as long as the record: nothing is formatted per launch either way.
  record.message = nvtxDomainRegisterStringA(domain, record.name);
}

}  // namespace

GraphRegistry &graph_registry() {
  return g_registry;
}

uint32_t color_for_name(const char *name) {
  uint32_t hash = 2166136261u;  // FNV-1a
  for (const unsigned char *p = reinterpret_cast<const unsigned char *>(name); *p; ++p)
    hash = (hash ^ *p) * 16777619u;
  // Keep every channel in 0x40..0xDF so names stay readable on dark and light timelines.
  uint32_t r = 0x40 + (hash & 0xFF) % 0xA0;
  uint32_t g = 0x40 + ((hash >> 8) & 0xFF) % 0xA0;
  uint32_t b = 0x40 + ((hash >> 16) & 0xFF) % 0xA0;
  return 0xFF000000u | (r << 16) | (g << 8) | b;
}

GraphRecord &GraphRegistry::record_for_launch(const void *exec, nvtxDomainHandle_t domain) {
  const uintptr_t handle = reinterpret_cast<uintptr_t>(exec);
  if (handle == 0) return overflow(domain);  // the driver rejects it; still one balanced range
  size_t index = slot_index(handle);
  for (size_t probes = 0; probes < kCapacity; ++probes, index = (index + 1) % kCapacity) {
    GraphRecord &slot = slots_[index];
    uintptr_t seen = slot.handle.load(std::memory_order_acquire);
    if (seen == handle) {
      if (__builtin_expect(!slot.published.load(std::memory_order_acquire), 0))
        wait_until_published(slot);
      return slot;
    }
    if (seen != 0) continue;
    if (count_.load(std::memory_order_relaxed) >= kMaxGraphs) return overflow(domain);
    if (slot.handle.compare_exchange_strong(seen, handle, std::memory_order_acq_rel))
      return register_new(slot, domain);
    if (seen == handle) {  // lost the race to a first sight of the same graph
      wait_until_published(slot);
      return slot;
    }
  }
  return overflow(domain);
}

GraphRecord &GraphRegistry::register_new(GraphRecord &slot, nvtxDomainHandle_t domain) {
  slot.ordinal = ordinals_issued_.fetch_add(1, std::memory_order_relaxed) + 1;
  snprintf(slot.name, sizeof slot.name, "graph %u", slot.ordinal);
  register_message(slot, domain);
  count_.fetch_add(1, std::memory_order_release);
  slot.published.store(1, std::memory_order_release);
  log_line(LogLevel::debug, "graph exec %p first seen: named '%s'",
           reinterpret_cast<void *>(slot.handle.load(std::memory_order_relaxed)), slot.name);
  return slot;
}

GraphRecord &GraphRegistry::overflow(nvtxDomainHandle_t domain) {
  int expected = 0;
  if (overflow_state_.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    snprintf(overflow_.name, sizeof overflow_.name, "graph (unregistered)");
    register_message(overflow_, domain);
    overflow_.published.store(1, std::memory_order_release);
    log_line(LogLevel::info,
             "a launch with a null handle, or more than %zu graphs: such launches share the "
             "range name '%s'",
             kMaxGraphs, overflow_.name);
  } else {
    wait_until_published(overflow_);
  }
  return overflow_;
}

}  // namespace ferrum
