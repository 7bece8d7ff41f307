#include "range/graph_registry.hpp"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <new>

#include "held_here.hpp"
#include "naming/graph_naming.hpp"
#include "range/replay_numbers.hpp"
#include "support/log.hpp"
#include "text_rules.hpp"
#include "zeroed_memory.hpp"

namespace ferrum_replay::shim {
namespace {

// 64-bit FNV-1a: the key of MessageCounts.
uint64_t hash_text(const char *text) {
  uint64_t hash = 1469598103934665603ull;
  for (const unsigned char *p = reinterpret_cast<const unsigned char *>(text); *p; ++p)
    hash = (hash ^ *p) * 1099511628211ull;
  return hash;
}

// The key of graphs that show `name` whole in `message` (MessageTaken's shared name).
uint64_t shared_message_key(const char *message, const char *name) {
  return hash_text(message) ^ (hash_text(name) * 0x9E3779B97F4A7C15ull);
}

// One mutex for every slow path: registration is rare (instantiation, first sight, naming,
// destruction) and must be consistent (ordinals in order, unique messages).
pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;

// A fork while another thread registers would leave the child's mutex locked forever. One from
// a signal handler that interrupted this thread's registration takes nothing (held_here.hpp:
// lock_for_fork): the child keeps the copy as it is, the interrupted registration ends it.
// While this thread holds the mutex for the fork (from this prepare handler until the parent's
// or the child's one gives it back), a graph call on it — a signal handler's landing there,
// another fork handler's — is refused by Lock rather than waiting for itself. (A flag of its own,
// not the count of held_here.hpp: a child handler reads that count as "forked from inside a lock
// of ours", own_process.hpp.)
thread_local bool t_locked_for_fork __attribute__((tls_model("initial-exec"))) = false;

// Counted as held here (held_here.hpp): a fork() from a signal handler that lands inside must
// not wait for it in lock_before_fork. Not taken at all by a thread that holds a lock of ours
// already — this one or another (a signal handler's graph call that interrupted it), nor by one
// that holds this one for a fork: that wait would never end (graph_registry.hpp says what each
// slow path does then).
class Lock {
 public:
  Lock() : held_(!common::inside_our_lock() && !t_locked_for_fork) {
    if (held_) common::lock_ours(&g_mutex);
  }
  ~Lock() {
    if (held_) common::unlock_ours(&g_mutex);
  }
  bool held() const { return held_; }
  Lock(const Lock &) = delete;
  Lock &operator=(const Lock &) = delete;

 private:
  const bool held_;
};

void lock_before_fork() {
  t_locked_for_fork = true;  // first, as lock_ours counts first: a call in between is refused
  t_locked_for_fork = common::lock_for_fork(&g_mutex);
}
void unlock_after_fork() {
  if (!t_locked_for_fork) return;
  pthread_mutex_unlock(&g_mutex);
  t_locked_for_fork = false;  // after: a call in between is refused, never waits
}
void reset_in_child() {
  if (!t_locked_for_fork) return;
  // Held by this very thread since lock_before_fork: unlocked, not reinitialised, so that a
  // thread checker sees it released (a reinitialised mutex still counts as held and makes
  // every later lock order look like a cycle).
  pthread_mutex_unlock(&g_mutex);
  t_locked_for_fork = false;
  if (common::inside_our_lock()) return;  // forked from a handler inside our lock: kept as is
  detail::g_registry.start_counting_afresh();
}
pthread_once_t g_fork_handlers_once = PTHREAD_ONCE_INIT;
void install_fork_handlers() {
  pthread_atfork(lock_before_fork, unlock_after_fork, reset_in_child);
}

// The program's name (null: none) into the record's {name} field, printable and cut; whether it
// came through whole decides whether it may share its message (graph_naming.hpp).
void take_user_name(GraphRecord &record, const char *name) {
  record.user_named = name != nullptr;
  common::printable_copy(name, record.name, sizeof record.name);
  record.user_name_whole = name && strcmp(name, record.name) == 0;
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
    chunks[chunk] = static_cast<T *>(common::map_zeroed(kChunkSize * sizeof(T)));
    if (!chunks[chunk]) return nullptr;
  }
  return new (&chunks[chunk][used++ % kChunkSize]) T();
}

template <typename T>
T *ChunkPool<T>::retire(T *object) {
  if (!quarantine) {
    quarantine = static_cast<T **>(common::map_zeroed(kQuarantine * sizeof(T *)));
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
size_t ChunkPool<T>::index_of(const T *object) const {
  for (size_t chunk = 0; chunk < kMaxChunks && chunks[chunk]; ++chunk)
    if (object >= chunks[chunk] && object < chunks[chunk] + kChunkSize)
      return chunk * kChunkSize + static_cast<size_t>(object - chunks[chunk]);
  return SIZE_MAX;
}

template <typename T>
void ChunkPool<T>::release(T *object) {
  object->next_free = free_head;
  free_head = object;
}

MessageCounts::Entry *MessageCounts::find(uint64_t key) const {
  if (!entries) return nullptr;
  for (size_t i = home(key);; i = (i + 1) & (capacity - 1)) {  // never full: ends at a free one
    if (entries[i].hash == key) return &entries[i];
    if (entries[i].hash == 0) return nullptr;
  }
}

bool MessageCounts::resize(unsigned new_bits) {
  const size_t new_capacity = size_t{1} << new_bits;
  auto *fresh = static_cast<Entry *>(common::map_zeroed(new_capacity * sizeof(Entry)));
  if (!fresh) return false;
  Entry *old = entries;
  const size_t old_capacity = capacity;
  entries = fresh;
  capacity = new_capacity;
  bits = new_bits;
  for (size_t i = 0; i < old_capacity; ++i) {
    if (!old[i].hash) continue;
    size_t j = home(old[i].hash);
    while (entries[j].hash) j = (j + 1) & (capacity - 1);
    entries[j] = old[i];
  }
  if (old) common::unmap_zeroed(old, old_capacity * sizeof(Entry));
  return true;
}

bool MessageCounts::in_use(uint64_t hash) const {
  return find(hash | 1) != nullptr;  // present entries count at least 1
}

uint64_t MessageCounts::count(uint64_t hash) const {
  const Entry *entry = find(hash | 1);
  return entry ? entry->count : 0;
}

void MessageCounts::add(uint64_t hash) {
  const uint64_t key = hash | 1;  // 0 marks a free entry
  if (Entry *entry = find(key)) {
    ++entry->count;
    return;
  }
  if ((used + 1) * 4 > capacity * 3) {
    unsigned new_bits = bits ? bits + 1 : 0;
    while ((size_t{1} << new_bits) < kMinCapacity) ++new_bits;
    // Out of memory: carry on while an entry stays free (probes end there); else forget it.
    if (!resize(new_bits) && used + 1 >= capacity) return;
  }
  size_t i = home(key);
  while (entries[i].hash) i = (i + 1) & (capacity - 1);
  entries[i] = Entry{key, 1};
  ++used;
}

void MessageCounts::remove(uint64_t hash) {
  Entry *entry = find(hash | 1);
  if (!entry || --entry->count) return;
  // Backward-shift deletion: pull later entries of the run into the hole when their home
  // allows, so lookups still end at the first free entry and no tombstone accumulates.
  const size_t mask = capacity - 1;
  size_t hole = static_cast<size_t>(entry - entries);
  for (size_t next = (hole + 1) & mask; entries[next].hash; next = (next + 1) & mask) {
    const size_t wanted = home(entries[next].hash);
    if (((next - wanted) & mask) >= ((next - hole) & mask)) {
      entries[hole] = entries[next];
      hole = next;
    }
  }
  entries[hole] = Entry{};
  --used;
  if (capacity > kMinCapacity && used * 8 < capacity) resize(bits - 1);  // failure: stay big
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

GraphRegistry::Slot *GraphRegistry::slot_of(uintptr_t handle) const {
  const SlotTable *table = table_.load(std::memory_order_relaxed);
  if (!table || handle == 0) return nullptr;
  size_t index = table->index(handle);
  for (size_t probes = 0; probes <= table->mask; ++probes, index = (index + 1) & table->mask) {
    Slot &slot = table->slots[index];
    const uint64_t seen = slot.word.load(std::memory_order_relaxed);
    if (seen == 0) return nullptr;
    const GraphRecord *record = slot_record(slot);
    if (record && record->handle.load(std::memory_order_relaxed) == handle) return &slot;
  }
  return nullptr;
}

// The slot holding `handle`, or the free one (a tombstone first) it would go in: a rebuild
// may come first. Null when the table cannot hold one more live graph.
GraphRegistry::Slot *GraphRegistry::claim_slot(uintptr_t handle) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (const SlotTable *table = table_.load(std::memory_order_relaxed)) {
      Slot *tombstone = nullptr;
      size_t index = table->index(handle);
      for (size_t probes = 0; probes <= table->mask; ++probes, index = (index + 1) & table->mask) {
        Slot &slot = table->slots[index];
        const uint64_t seen = slot.word.load(std::memory_order_relaxed);
        const GraphRecord *record = slot_record(slot);
        if (record && record->handle.load(std::memory_order_relaxed) == handle) return &slot;
        if (seen == kTombstoneWord && !tombstone) tombstone = &slot;
        if (seen != 0) continue;
        if (tombstone) return tombstone;  // reusing one keeps the load as it is
        if ((live_slots_ + dead_slots_ + 1) * 4 <= (table->mask + 1) * 3) return &slot;
        break;  // too full: rebuild
      }
      if (attempt == 0 && tombstone) return tombstone;
    }
    if (attempt == 1 || !rebuild(live_slots_ + 1)) return nullptr;
  }
  return nullptr;
}

// A table with no tombstones, room for `live_needed` live graphs in at most half of it, and
// a quarter of it free: published once complete.
bool GraphRegistry::rebuild(size_t live_needed) {
  const SlotTable *old = table_.load(std::memory_order_relaxed);
  unsigned bits = old ? old->bits : kMinTableBits;
  while (live_needed * 2 > (size_t{1} << bits) && bits <= kMaxTableBits) ++bits;
  if (bits > kMaxTableBits) return false;
  SlotTable &fresh = tables_[bits][old == &tables_[bits][0] ? 1 : 0];
  if (!fresh.slots) {
    fresh.slots =
        static_cast<Slot *>(common::map_zeroed((size_t{1} << bits) * sizeof(Slot)));  // free
    if (!fresh.slots) return false;
    fresh.mask = (size_t{1} << bits) - 1;
    fresh.bits = bits;
  } else {  // replaced two rebuilds ago: a stalled launch may still probe it (see find)
    for (size_t i = 0; i <= fresh.mask; ++i)
      fresh.slots[i].word.store(0, std::memory_order_relaxed);
  }
  size_t live = 0;
  for (size_t i = 0; old && i <= old->mask; ++i) {
    const GraphRecord *record = slot_record(old->slots[i]);
    if (!record) continue;
    // Its word moves as it is: the tag does not depend on the table's size.
    size_t index = fresh.index(record->handle.load(std::memory_order_relaxed));
    while (fresh.slots[index].word.load(std::memory_order_relaxed) != 0)
      index = (index + 1) & fresh.mask;
    fresh.slots[index].word.store(old->slots[i].word.load(std::memory_order_relaxed),
                                  std::memory_order_release);
    ++live;
  }
  table_.store(&fresh, std::memory_order_release);
  live_slots_ = live;
  dead_slots_ = 0;
  log_line(LogLevel::debug, "graph table rebuilt: %zu slots, %zu live", fresh.mask + 1, live);
  return true;
}

// `slot` (from claim_slot) now holds `record` for `handle`.
// (claim_slot's: free, a tombstone, or the handle's own, whose record this one replaces.)
void GraphRegistry::publish(Slot &slot, uintptr_t handle, GraphRecord *record) {
  const uint64_t seen = slot.word.load(std::memory_order_relaxed);
  slot.word.store(slot_word(handle, record), std::memory_order_release);
  if (seen != 0 && seen != kTombstoneWord) return;  // the handle's slot already
  if (seen == kTombstoneWord) --dead_slots_;
  ++live_slots_;
}

// The graph in `slot` is gone: its slot becomes a tombstone.
void GraphRegistry::vacate(Slot &slot) {
  slot.word.store(kTombstoneWord, std::memory_order_release);
  --live_slots_;
  ++dead_slots_;
  note_room();
}

// The message counts (MessageCounts): every live graph's message, and apart those shown as a
// person's whole name, by (message, name) — graph_naming.hpp's rule on sharing.
void GraphRegistry::count_message(const GraphLabel &label) {
  messages_.add(hash_text(label.text));
  if (label.shared_key) shared_messages_.add(label.shared_key);
}

void GraphRegistry::forget_message(const GraphLabel &label) {
  messages_.remove(hash_text(label.text));
  if (label.shared_key) shared_messages_.remove(label.shared_key);
}

// The one place a name becomes visible: false when no label could be had (the pool at its
// bound, or no memory for its next chunk), and then nothing of the record's shown name has
// changed — the callers put back what they wrote for it (F170: a rename that could not be shown
// was reported as taken, and the record's {name} said otherwise than its label).
bool GraphRegistry::relabel(GraphRecord &record) {
  GraphLabel *label = labels_.allocate();
  if (!label) {
    log_line(LogLevel::error, "label pool exhausted; graph %u keeps its name", record.ordinal);
    note_refused(labels_refused_at_);
    return false;
  }
  const GraphLabel *old = record.label.load(std::memory_order_relaxed);
  if (old && record.live) forget_message(*old);
  retire_label(old);
  char name[kMaxNameLength + 1], text[kMaxMessageLength + 1];
  const NamingInputs inputs{record.user_named ? record.name : nullptr,
                            record.ordinal,
                            record.site,
                            record.content,
                            record.api,
                            record.user_name_whole};
  const bool shared = choose_name(
      inputs,
      [](const char *message, const char *shared_name, void *context) {
        const auto *registry = static_cast<GraphRegistry *>(context);
        const uint64_t showing = registry->messages_.count(hash_text(message));
        // Taken unless every graph that shows it shows it for this very name.
        return shared_name
                   ? showing >
                         registry->shared_messages_.count(shared_message_key(message, shared_name))
                   : showing > 0;
      },
      this, name, sizeof name, text, sizeof text);
  label->shared_key = shared ? shared_message_key(text, name) : 0;
  memcpy(record.name, name, sizeof record.name);
  memcpy(label->text, text, sizeof label->text);
  label->color = color_for_name(label->text);
  const nvtxDomainHandle_t domain = naming_environment().domain;
  label->message = nvtxDomainRegisterStringA(domain, label->text);
  if (record.ordinal) nvtxDomainNameCategoryA(domain, record.ordinal, label->text);
  if (record.live) count_message(*label);
  // A launch racing with a rename may pair the old colour with the new message, or read
  // the old label's text: either is a label this graph really had.
  // Release: a launcher that sees the new message also sees the tool's string behind it.
  record.color.store(label->color, std::memory_order_relaxed);
  record.message.store(label->message, std::memory_order_release);
  record.label.store(label, std::memory_order_release);
  note_room();  // a label could be had: a name refused for want of one may be tried again
  return true;
}

void GraphRegistry::note_room() {
  room_changes_.store(room_changes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void GraphRegistry::note_refused(std::atomic<uint64_t> &refused_at) {
  refused_until_ns_.store(common::monotonic_ns() + kRefusalHoldNs, std::memory_order_relaxed);
  refused_at.store(room_changes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void GraphRegistry::retire_label(const GraphLabel *label) {
  if (!label) return;
  // Two held labels looked at again per retirement: the list drains faster than it fills.
  for (int looked = 0; looked < 2 && held_oldest_; ++looked) {
    GraphLabel *held = held_oldest_;
    held_oldest_ = held->next_free;
    if (!held_oldest_) held_newest_ = nullptr;
    release_label(held);
  }
  if (GraphLabel *leaving = labels_.retire(const_cast<GraphLabel *>(label))) release_label(leaving);
}

// A label out of its quarantine goes back on the free list, unless a timed replay in flight
// names it: its GPU time is delivered under that name when the GPU finishes it, maybe seconds
// and thousands of retirements later (a replay of graph 1 read as "graph 8194"). Such a label
// waits, held, at the end of the list.
void GraphRegistry::release_label(GraphLabel *label) {
  // Acquire: pairs of that label's replays let it go with release, after copying its text.
  if (label->replays_in_flight.load(std::memory_order_acquire) == 0) {
    labels_.release(label);
    note_room();
    return;
  }
  label->next_free = nullptr;
  (held_newest_ ? held_newest_->next_free : held_oldest_) = label;
  held_newest_ = label;
}

void GraphRegistry::retire(GraphRecord &record) {
  if (!record.live || &record == overflow_.load(std::memory_order_relaxed)) return;
  if (const GraphLabel *label = record.label.load(std::memory_order_relaxed))
    forget_message(*label);
  if (!record.confirmed) unlink_unconfirmed(record);
  record.live = false;
  if (std::atomic<uint32_t> *word = record.live_ordinal.load(std::memory_order_relaxed))
    word->store(0, std::memory_order_relaxed);
  g_graphs_retired.fetch_add(1, std::memory_order_release);
  GraphRecord *leaving = records_.retire(&record);
  if (!leaving) return;
  // Long destroyed: keep its totals for the summary, recycle it and its label.
  ++recycled_.graphs;
  recycled_.launches += replay_count(*leaving);
  recycled_.failed_launches += leaving->failed_launches.load(std::memory_order_relaxed);
  recycled_.rejected_pushes += leaving->rejected_pushes.load(std::memory_order_relaxed);
  recycled_.after_tool_report += leaving->after_tool_report.load(std::memory_order_relaxed);
  retire_label(leaving->label.load(std::memory_order_relaxed));
  leaving->in_use = false;
  records_.release(leaving);
  note_room();
}

std::atomic<uint32_t> *GraphRegistry::live_word_of(const GraphRecord *record) {
  constexpr size_t kChunkSize = detail::ChunkPool<GraphRecord>::kChunkSize;
  const size_t index = records_.index_of(record);
  if (index == SIZE_MAX) return nullptr;
  std::atomic<uint32_t> *&words = live_words_[index / kChunkSize];
  if (!words) {
    void *mapped = common::map_zeroed(kChunkSize * sizeof(std::atomic<uint32_t>));
    if (!mapped) return nullptr;
    words = new (mapped) std::atomic<uint32_t>[kChunkSize]();  // once: never made anew
  }
  return &words[index % kChunkSize];
}

GraphRecord &GraphRegistry::overflow() {
  GraphRecord *shared = overflow_.load(std::memory_order_relaxed);
  if (!shared) {
    // Static, not mapped: it is what a launch gets when nothing else can be had, so it must not
    // need memory itself (.bss, untouched until here: no cost at load, docs/performance.md).
    alignas(GraphRecord) static unsigned char storage[sizeof(GraphRecord)];
    GraphRecord *record = new (storage) GraphRecord();
    take_user_name(*record, "graph (unregistered)");  // one fixed name, shared on purpose
    record->live = false;
    // Without a label its launches show that fixed name (record_text): nothing to undo.
    (void)relabel(*record);
    overflow_.store(record, std::memory_order_release);  // complete: shared_overflow()
    shared = record;
    log_line(LogLevel::info,
             "a launch with a null handle, more live graphs than the registry holds (%zu), or "
             "no memory to be had for the registry: such launches share the range name '%s'",
             kMaxLiveGraphs, record->name);
  }
  return *shared;
}

void GraphRegistry::unlink_unconfirmed(GraphRecord &record) {
  (record.older ? record.older->newer : unconfirmed_oldest_) = record.newer;
  (record.newer ? record.newer->older : unconfirmed_newest_) = record.older;
  record.older = record.newer = nullptr;
  --unconfirmed_;
}

// `record` joins the unconfirmed graphs; past kMaxUnconfirmed, the oldest one not launched
// since it was last looked at leaves. Each look moves a launched one to the back, so a scan
// ends within one pass; if every other one is being launched, none leaves.
void GraphRegistry::hold_unconfirmed(GraphRecord &record) {
  record.older = unconfirmed_newest_;
  record.newer = nullptr;
  (unconfirmed_newest_ ? unconfirmed_newest_->newer : unconfirmed_oldest_) = &record;
  unconfirmed_newest_ = &record;
  ++unconfirmed_;
  for (size_t looked = 1; unconfirmed_ > kMaxUnconfirmed && looked < unconfirmed_; ++looked) {
    GraphRecord &oldest = *unconfirmed_oldest_;
    const uint64_t launches = replay_count(oldest);
    if (launches != oldest.launches_seen) {  // in use: a second chance, at the back
      oldest.launches_seen = launches;
      unlink_unconfirmed(oldest);
      oldest.older = unconfirmed_newest_;
      (unconfirmed_newest_ ? unconfirmed_newest_->newer : unconfirmed_oldest_) = &oldest;
      unconfirmed_newest_ = &oldest;
      ++unconfirmed_;
      continue;
    }
    log_line(LogLevel::debug, "graph %u (exec %p, never seen instantiated) forgotten",
             oldest.ordinal,
             reinterpret_cast<void *>(oldest.handle.load(std::memory_order_relaxed)));
    if (Slot *slot = slot_of(oldest.handle.load(std::memory_order_relaxed));
        slot && slot_record(*slot) == &oldest)
      vacate(*slot);
    retire(oldest);  // unlinks it
  }
}

GraphRecord *GraphRegistry::create_record(const void *exec, const char *api, const char *site,
                                          const char *content, bool site_pending, bool confirmed,
                                          const char *program_name) {
  pthread_once(&g_fork_handlers_once, install_fork_handlers);
  const uintptr_t handle = reinterpret_cast<uintptr_t>(exec);
  // A null handle is never registered: its launches share the overflow record.
  if (!handle) return &overflow();
  Slot *slot = claim_slot(handle);
  GraphRecord *record = slot ? records_.allocate() : nullptr;
  if (record && !fits_in_slot(record)) {  // mapped above 2^48: never without a hint, but checked
    records_.release(record);
    record = nullptr;
  }
  if (!record) return refuse(slot);
  record->in_use = true;
  record->ordinal = static_cast<uint32_t>(records_issued_.load(std::memory_order_relaxed) + 1);
  record->generation.store(record->ordinal, std::memory_order_relaxed);
  record->api = api;
  record->confirmed = confirmed;
  common::printable_copy(site, record->site, sizeof record->site);
  common::printable_copy(content, record->content, sizeof record->content);
  record->site_pending.store(site_pending, std::memory_order_relaxed);
  take_user_name(*record, program_name);
  // claim_slot's: the handle's, if any. Retired first: its message no longer counts against
  // the new graph's.
  if (GraphRecord *previous = slot_record(*slot)) retire(*previous);
  if (!relabel(*record)) {  // no label to be had: never publish a record a launch cannot read
    record->in_use = false;
    record->live = false;
    records_.release(record);
    return refuse(slot);
  }
  records_issued_.store(record->ordinal, std::memory_order_release);
  if (std::atomic<uint32_t> *word = live_word_of(record)) {
    word->store(record->ordinal, std::memory_order_relaxed);
    record->live_ordinal.store(word, std::memory_order_relaxed);  // published with the record
  }
  note_room();  // registered: memory may have come back for a graph refused earlier
  // Last, released: a launch stalled in a replaced table may still hold this record's slot
  // word from its previous life, and find() takes a record whose handle matches as complete.
  record->handle.store(handle, std::memory_order_release);
  publish(*slot, handle, record);
  if (!confirmed) hold_unconfirmed(*record);
  log_line(LogLevel::debug, "graph exec %p registered by %s as graph %u: '%s'", exec, api,
           record->ordinal, record->label.load(std::memory_order_relaxed)->text);
  return record;
}

// No room for `exec`'s graph (see create_record): its launches share the overflow record. A
// graph the handle named before (claim_slot's slot holds it: the driver reused the handle) is
// retired and its slot vacated, so that no launch shows the earlier graph's name. The refusal
// is noted last, at the room count it leaves (refusing_graphs).
GraphRecord *GraphRegistry::refuse(Slot *slot) {
  if (GraphRecord *previous = slot ? slot_record(*slot) : nullptr) {
    retire(*previous);
    vacate(*slot);
  }
  GraphRecord &shared = overflow();
  note_refused(graphs_refused_at_);
  return &shared;
}

void GraphRegistry::start_counting_afresh() {
  for (size_t i = 0; i < records_.used; ++i) {
    if (GraphRecord *record = records_.at(i)) {
      record->numbers_taken.store(0, std::memory_order_relaxed);
      record->numbers_returned.store(0, std::memory_order_relaxed);
      record->failed_launches.store(0, std::memory_order_relaxed);
      record->rejected_pushes.store(0, std::memory_order_relaxed);
      record->after_tool_report.store(0, std::memory_order_relaxed);
      // The child's first launch of it takes the slow path, where the child's own first launch
      // is noted (process_files.hpp: the running marker).
      record->launcher.store(0, std::memory_order_relaxed);
    }
  }
  if (GraphRecord *shared = overflow_.load(std::memory_order_relaxed)) {
    shared->numbers_taken.store(0, std::memory_order_relaxed);
    shared->numbers_returned.store(0, std::memory_order_relaxed);
    shared->failed_launches.store(0, std::memory_order_relaxed);
    shared->rejected_pushes.store(0, std::memory_order_relaxed);
    shared->after_tool_report.store(0, std::memory_order_relaxed);
    shared->launcher.store(0, std::memory_order_relaxed);
  }
  recycled_ = Recycled{};
}

GraphRegistry::Occupancy GraphRegistry::occupancy() const {
  Lock lock;
  Occupancy now;
  if (!lock.held()) return now;  // (refused: nothing)
  now.live_graphs = live_slots_;
  now.tombstones = dead_slots_;
  if (const SlotTable *table = table_.load(std::memory_order_relaxed))
    now.table_slots = table->mask + 1;
  now.unconfirmed = unconfirmed_;
  now.messages = messages_.used;
  now.message_capacity = messages_.capacity;
  return now;
}

void GraphRegistry::on_instantiate(const void *exec, const char *api, const char *site,
                                   const char *content, bool site_pending, const char *scope_name) {
  if (!exec) return;
  Lock lock;
  if (!lock.held()) return;
  create_record(exec, api, site, content, site_pending, true, scope_name);
}

void GraphRegistry::on_destroy(const void *exec) {
  if (!exec) return;
  Lock lock;
  if (!lock.held()) return;
  Slot *slot = slot_of(reinterpret_cast<uintptr_t>(exec));
  if (!slot) return;
  GraphRecord *record = slot_record(*slot);
  if (record) retire(*record);
  vacate(*slot);
  if (record)
    log_line(LogLevel::debug, "graph exec %p (graph %u) destroyed", exec, record->ordinal);
}

GraphRecord *GraphRegistry::register_at_launch(const void *exec, const char *site) {
  Lock lock;
  if (!lock.held()) return nullptr;
  if (!exec) return &overflow();
  if (GraphRecord *record = find(exec)) return record;  // another thread was first
  return create_record(exec, "launch", site, "", false, false);
}

void GraphRegistry::name_at_first_launch(GraphRecord &record, const char *site) {
  Lock lock;
  if (!lock.held()) return;
  if (!record.site_pending.load(std::memory_order_relaxed)) return;
  char was[sizeof record.site];
  memcpy(was, record.site, sizeof was);
  common::printable_copy(site, record.site, sizeof record.site);
  if (!relabel(record)) {  // still pending: tried again once room comes back (refusing_labels)
    memcpy(record.site, was, sizeof record.site);
    return;
  }
  record.site_pending.store(false, std::memory_order_relaxed);
}

int GraphRegistry::name_graph(const void *exec, const char *name, const char *site) {
  if (!exec || !name) return -EINVAL;
  Lock lock;
  if (!lock.held()) return -EAGAIN;
  GraphRecord *record = find(exec);
  if (!record)
    record = create_record(exec, "ferrum_replay_name_graph_exec", site, "", false, false);
  if (record == overflow_.load(std::memory_order_relaxed)) return -ENOSPC;
  // Taken only if shown: without a label for it the record stays as it was, and the program is
  // told (docs/naming.md: 0 only when it took the name).
  const bool was_user_named = record->user_named, was_whole = record->user_name_whole;
  char was[sizeof record->name];
  memcpy(was, record->name, sizeof was);
  take_user_name(*record, name);
  if (!relabel(*record)) {
    record->user_named = was_user_named;
    record->user_name_whole = was_whole;
    memcpy(record->name, was, sizeof record->name);
    return -ENOSPC;
  }
  record->site_pending.store(false, std::memory_order_relaxed);
  return 0;
}

}  // namespace ferrum_replay::shim
