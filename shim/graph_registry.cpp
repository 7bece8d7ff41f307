#include "graph_registry.hpp"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include <new>

#include "activation.hpp"
#include "call_site.hpp"
#include "graph_content.hpp"
#include "graph_naming.hpp"
#include "log.hpp"
#include "text_util.hpp"

namespace ferrum {
namespace {

void *map_zeroed(size_t bytes) {
  void *memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return memory == MAP_FAILED ? nullptr : memory;
}

// One mutex for every slow path: registration is rare (instantiation, first sight, naming,
// destruction) and must be consistent (ordinals in order, unique messages).
pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;

class Lock {
 public:
  Lock() { pthread_mutex_lock(&g_mutex); }
  ~Lock() { pthread_mutex_unlock(&g_mutex); }
  Lock(const Lock &) = delete;
  Lock &operator=(const Lock &) = delete;
};

// A fork while another thread registers would leave the child's mutex locked forever.
void lock_before_fork() {
  pthread_mutex_lock(&g_mutex);
}
void unlock_after_fork() {
  pthread_mutex_unlock(&g_mutex);
}
void reset_in_child() {
  pthread_mutex_init(&g_mutex, nullptr);
}
pthread_once_t g_fork_handlers_once = PTHREAD_ONCE_INIT;
void install_fork_handlers() {
  pthread_atfork(lock_before_fork, unlock_after_fork, reset_in_child);
}

// What the slow paths learn outside the mutex: walking the stack and querying the driver
// take the loader's lock, which a thread inside dlopen may hold while it calls CUDA.
struct Observation {
  char site[kMaxSiteLength + 1] = {};
  char content[kMaxContentLength + 1] = {};
};

void observe_site(Observation &seen) {
  const Settings &config = settings();
  if (config.site_mode != SiteMode::off)
    capture_call_site(seen.site, sizeof seen.site, config.site_skip);
}

}  // namespace

namespace detail {

template <typename T>
T *ChunkPool<T>::allocate() {
  if (T *reused = free_head) {
    free_head = reused->next_free;
    return new (reused) T();
  }
  const size_t chunk = used / kChunkSize;
  if (chunk == kMaxChunks) return nullptr;
  if (!chunks[chunk]) {
    chunks[chunk] = static_cast<T *>(map_zeroed(kChunkSize * sizeof(T)));
    if (!chunks[chunk]) return nullptr;
  }
  return new (&chunks[chunk][used++ % kChunkSize]) T();
}

template <typename T>
T *ChunkPool<T>::retire(T *object) {
  if (!quarantine) {
    quarantine = static_cast<T **>(map_zeroed(kQuarantine * sizeof(T *)));
    if (!quarantine) return nullptr;  // no quarantine, no reuse: it simply stays
  }
  T *leaving = nullptr;
  if (quarantine_count == kQuarantine) {
    leaving = quarantine[quarantine_head];
    quarantine_head = (quarantine_head + 1) % kQuarantine;
    --quarantine_count;
  }
  quarantine[(quarantine_head + quarantine_count) % kQuarantine] = object;
  ++quarantine_count;
  return leaving;
}

template <typename T>
void ChunkPool<T>::release(T *object) {
  object->next_free = free_head;
  free_head = object;
}

uint32_t *MessageCounts::find(uint64_t hash, bool insert) {
  if (!hashes) {
    hashes = static_cast<uint64_t *>(map_zeroed(kSize * (sizeof(uint64_t) + sizeof(uint32_t))));
    if (!hashes) return nullptr;
    counts = reinterpret_cast<uint32_t *>(hashes + kSize);
  }
  hash |= 1;  // 0 marks a free entry
  for (size_t probes = 0, i = hash & (kSize - 1); probes < kSize;
       ++probes, i = (i + 1) & (kSize - 1)) {
    if (hashes[i] == hash) return &counts[i];
    if (hashes[i] == 0) {
      if (!insert) return nullptr;
      hashes[i] = hash;
      return &counts[i];
    }
  }
  return nullptr;
}

bool MessageCounts::in_use(uint64_t hash) {
  uint32_t *count = find(hash, false);
  return count && *count > 0;
}

void MessageCounts::add(uint64_t hash) {
  if (uint32_t *count = find(hash, true)) ++*count;
}

void MessageCounts::remove(uint64_t hash) {
  if (uint32_t *count = find(hash, false); count && *count) --*count;
}

template struct ChunkPool<GraphRecord>;
template struct ChunkPool<GraphLabel>;

constinit GraphRegistry g_registry;

}  // namespace detail

uint32_t color_for_name(const char *name) {
  const uint64_t hash = hash_text(name);
  // Keep every channel in 0x40..0xDF so names stay readable on dark and light timelines.
  const uint32_t r = 0x40 + (hash & 0xFF) % 0xA0;
  const uint32_t g = 0x40 + ((hash >> 8) & 0xFF) % 0xA0;
  const uint32_t b = 0x40 + ((hash >> 16) & 0xFF) % 0xA0;
  return 0xFF000000u | (r << 16) | (g << 8) | b;
}

GraphRegistry::Slot *GraphRegistry::claim_slot(uintptr_t handle) {
  Slot *slots = slots_.load(std::memory_order_relaxed);
  if (!slots) {
    slots = static_cast<Slot *>(map_zeroed(kSlotCount * sizeof(Slot)));  // all-zero = free
    if (!slots) return nullptr;
    slots_.store(slots, std::memory_order_release);
  }
  size_t index = slot_index(handle);
  for (size_t probes = 0; probes < kSlotCount; ++probes, index = (index + 1) & (kSlotCount - 1)) {
    const uintptr_t seen = slots[index].handle.load(std::memory_order_relaxed);
    if (seen == handle) return &slots[index];
    if (seen == 0) {
      if (handles_used_ >= kMaxHandles) return nullptr;
      ++handles_used_;
      slots[index].handle.store(handle, std::memory_order_release);
      return &slots[index];
    }
  }
  return nullptr;
}

void GraphRegistry::relabel(GraphRecord &record) {
  GraphLabel *label = labels_.allocate();
  if (!label) {
    log_line(LogLevel::error, "label pool exhausted; graph %u keeps its name", record.ordinal);
    return;
  }
  const GraphLabel *old = record.label.load(std::memory_order_relaxed);
  if (old && record.live) messages_.remove(hash_text(old->text));
  retire_label(old);
  char text[kMaxMessageLength + 1];
  const bool chosen_by_person = compose_message(record, text, sizeof text);
  if (!chosen_by_person && messages_.in_use(hash_text(text))) {
    // Another live graph shows this message: keep the two apart.
    char suffix[32];
    snprintf(suffix, sizeof suffix, " (graph %u)", record.ordinal);
    char shortened[kMaxMessageLength + 1];
    copy_printable_utf8(text, shortened, sizeof text - strlen(suffix));
    snprintf(text, sizeof text, "%s%s", shortened, suffix);
  }
  memcpy(label->text, text, sizeof label->text);
  label->color = color_for_name(label->text);
  const nvtxDomainHandle_t domain = shim_domain();
  label->message = nvtxDomainRegisterStringA(domain, label->text);
  if (record.ordinal) nvtxDomainNameCategoryA(domain, record.ordinal, label->text);
  if (record.live) messages_.add(hash_text(label->text));
  // A launch racing with a rename may pair the old colour with the new message, or read
  // the old label's text: either is a label this graph really had.
  // Release: a launcher that sees the new message also sees the tool's string behind it.
  record.color.store(label->color, std::memory_order_relaxed);
  record.message.store(label->message, std::memory_order_release);
  record.label.store(label, std::memory_order_release);
}

void GraphRegistry::retire_label(const GraphLabel *label) {
  if (!label) return;
  if (GraphLabel *leaving = labels_.retire(const_cast<GraphLabel *>(label)))
    labels_.release(leaving);
}

void GraphRegistry::retire(GraphRecord &record) {
  if (!record.live || &record == overflow_) return;
  if (const GraphLabel *label = record.label.load(std::memory_order_relaxed))
    messages_.remove(hash_text(label->text));
  record.live = false;
  GraphRecord *leaving = records_.retire(&record);
  if (!leaving) return;
  // Long destroyed: keep its totals for the summary, recycle it and its label.
  ++recycled_.graphs;
  recycled_.launches += leaving->launches.load(std::memory_order_relaxed);
  recycled_.failed_launches += leaving->failed_launches.load(std::memory_order_relaxed);
  recycled_.rejected_pushes += leaving->rejected_pushes.load(std::memory_order_relaxed);
  retire_label(leaving->label.load(std::memory_order_relaxed));
  leaving->in_use = false;
  records_.release(leaving);
}

GraphRecord &GraphRegistry::overflow() {
  if (!overflow_) {
    GraphRecord *record = new (map_zeroed(sizeof(GraphRecord))) GraphRecord();
    record->user_named = true;  // one fixed name, shared on purpose
    record->live = false;
    copy_printable_utf8("graph (unregistered)", record->name, sizeof record->name);
    relabel(*record);
    overflow_ = record;
    log_line(LogLevel::info,
             "a launch with a null handle, or more graphs than the registry holds (%zu): such "
             "launches share the range name '%s'",
             kMaxHandles, record->name);
  }
  return *overflow_;
}

GraphRecord *GraphRegistry::create_record(const void *exec, const char *api, const char *site,
                                          const char *content, bool site_pending) {
  pthread_once(&g_fork_handlers_once, install_fork_handlers);
  const uintptr_t handle = reinterpret_cast<uintptr_t>(exec);
  Slot *slot = handle ? claim_slot(handle) : nullptr;
  GraphRecord *record = slot ? records_.allocate() : nullptr;
  if (!record) return &overflow();
  record->in_use = true;
  record->ordinal = static_cast<uint32_t>(records_issued_.load(std::memory_order_relaxed) + 1);
  record->api = api;
  copy_printable_utf8(site, record->site, sizeof record->site);
  copy_printable_utf8(content, record->content, sizeof record->content);
  record->site_pending.store(site_pending, std::memory_order_relaxed);
  if (GraphRecord *previous = slot->record.load(std::memory_order_relaxed)) retire(*previous);
  relabel(*record);
  if (!record->label.load(std::memory_order_relaxed)) {  // no label to be had: never publish
    record->in_use = false;                              // a record a launch cannot read
    records_.release(record);
    slot->record.store(nullptr, std::memory_order_release);
    return &overflow();
  }
  records_issued_.store(record->ordinal, std::memory_order_release);
  slot->record.store(record, std::memory_order_release);
  log_line(LogLevel::debug, "graph exec %p registered by %s as graph %u: '%s'", exec, api,
           record->ordinal, record->label.load(std::memory_order_relaxed)->text);
  return record;
}

void GraphRegistry::on_instantiate(const void *exec, const void *graph, const char *api) {
  if (!exec) return;
  const Settings &config = settings();
  Observation seen;
  if (config.site_mode == SiteMode::instantiate) observe_site(seen);
  if (config.content && graph) describe_graph_content(graph, seen.content, sizeof seen.content);
  Lock lock;
  create_record(exec, api, seen.site, seen.content, config.site_mode == SiteMode::launch);
}

void GraphRegistry::on_destroy(const void *exec) {
  if (!exec) return;
  Lock lock;
  const uintptr_t handle = reinterpret_cast<uintptr_t>(exec);
  Slot *slots = slots_.load(std::memory_order_relaxed);
  if (!slots) return;
  size_t index = slot_index(handle);
  for (size_t probes = 0; probes < kSlotCount; ++probes, index = (index + 1) & (kSlotCount - 1)) {
    const uintptr_t seen = slots[index].handle.load(std::memory_order_relaxed);
    if (seen == 0) return;
    if (seen != handle) continue;
    if (GraphRecord *record = slots[index].record.load(std::memory_order_relaxed)) {
      retire(*record);
      slots[index].record.store(nullptr, std::memory_order_release);
      log_line(LogLevel::debug, "graph exec %p (graph %u) destroyed", exec, record->ordinal);
    }
    return;
  }
}

GraphRecord &GraphRegistry::register_at_launch(const void *exec) {
  if (!exec) {
    Lock lock;
    return overflow();
  }
  Observation seen;
  observe_site(seen);  // the launch's own call site: the best we know of a graph seen late
  Lock lock;
  if (GraphRecord *record = find(exec)) return *record;  // another thread was first
  return *create_record(exec, "launch", seen.site, "", false);
}

void GraphRegistry::name_at_first_launch(GraphRecord &record) {
  Observation seen;
  observe_site(seen);
  Lock lock;
  if (!record.site_pending.load(std::memory_order_relaxed)) return;
  copy_printable_utf8(seen.site, record.site, sizeof record.site);
  record.site_pending.store(false, std::memory_order_relaxed);
  relabel(record);
}

int GraphRegistry::name_graph(const void *exec, const char *name) {
  if (!exec || !name) return -EINVAL;
  Observation seen;
  if (!find(exec)) observe_site(seen);
  Lock lock;
  GraphRecord *record = find(exec);
  if (!record) record = create_record(exec, "ferrum_replay_name_graph_exec", seen.site, "", false);
  if (record == overflow_) return -ENOSPC;
  record->user_named = true;
  copy_printable_utf8(name, record->name, sizeof record->name);
  if (!record->name[0]) copy_printable_utf8("?", record->name, sizeof record->name);
  record->site_pending.store(false, std::memory_order_relaxed);
  relabel(*record);
  return 0;
}

}  // namespace ferrum
