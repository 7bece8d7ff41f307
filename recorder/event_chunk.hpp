// How a thread's completed events sit in memory until the exit report: packed, 16 bytes for an
// event that repeats the attributes of one seen earlier in the same chunk, instead of a 64-byte
// Event each.
//
// Why: every recorded range lands in memory the process has never touched (events are kept until
// exit), and on the machines we measure a fresh page costs microseconds — per 64-byte Event that
// was more than half of a recorded range's cost (docs/performance.md, "the recorder's floor";
// appending 16 bytes to fresh memory costs a quarter of appending 64). A program's ranges repeat:
// a graph's replays differ only in their times and replay number. So a chunk keeps a small table
// of attribute sets (PackedTemplate: name, category, colour, domain, depth, kinds, and a base for
// the payload), written the first time an attribute set appears in that chunk, and each event is
// a PackedRecord: its time relative to the previous event's, its duration, its payload relative
// to the template's base, and the template's index. Whatever does not fit — an async event, a
// gap or a duration beyond 40 bits of ticks (minutes), a payload far from its template's base, a
// chunk whose table is full — is stored whole (an escape record followed by the Event, 80 bytes).
// The table is per chunk and starts empty in each, so it is bounded however many names a program
// uses.
//
// Readers (ThreadBuffer::collect, spill_tail) unpack a chunk's first `count` slots in order; the
// owner writes templates and records before it publishes the count with a release store, and a
// reader reads only records below a count it loaded with acquire, and only the templates those
// records name.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "event.hpp"

namespace ferrum_replay::recorder {

// One attribute set of a chunk (40 bytes).
struct PackedTemplate {
  const char *name;
  uint64_t payload_base;  // the payload's bits (Payload::u) when the template was made
  uint32_t category;
  uint32_t color;
  uint32_t domain_id;
  uint32_t depth;
  bool has_color;
  EventKind kind;
  PayloadKind payload_kind;
};

// One event that repeats a template (16 bytes), or the escape that says a whole Event follows in
// the next kEscapeSlots slots. Two words, each written whole (make): as bit-fields, every field
// was a read-modify-write of memory the chunk had never held, and a byte store read back as part
// of a word stalled store forwarding (measured: docs/performance.md).
//   lo: bits 0-39 time_delta, 40-47 templ, 48-63 zero
//   hi: bits 0-39 duration, 40-63 payload_delta
struct PackedRecord {
  uint64_t lo, hi;

  // 40 bits of ticks each way: minutes at a CPU counter's few GHz, so that a thread stalled
  // between two ranges (a loaded machine, a debugger) does not turn them into escapes. The
  // caller has checked that each value fits its field (ChunkWriter::write).
  static PackedRecord make(int64_t time_delta, uint8_t templ, uint64_t duration,
                           int64_t payload_delta) {
    return PackedRecord{(static_cast<uint64_t>(time_delta) & kMask40) | uint64_t{templ} << 40,
                        duration | static_cast<uint64_t>(payload_delta) << 40};
  }
  // This event's anchor (anchor_of) minus the previous event's, in ticks.
  int64_t time_delta() const { return static_cast<int64_t>(lo << 24) >> 24; }
  // The index into the chunk's templates, or kEscape.
  uint8_t templ() const { return static_cast<uint8_t>(lo >> 40); }
  uint64_t duration() const { return hi & kMask40; }  // end - start, in ticks
  // Payload::u minus the template's payload_base.
  int64_t payload_delta() const { return static_cast<int64_t>(hi) >> 40; }

  static constexpr uint64_t kMask40 = (uint64_t{1} << 40) - 1;
  // What each field holds (ChunkWriter::write checks against these): time_delta and
  // payload_delta signed, -(kMax + 1) ... kMax; duration 0 ... kMaxDuration.
  static constexpr int64_t kMaxTimeDelta = (int64_t{1} << 39) - 1;
  static constexpr uint64_t kMaxDuration = kMask40;
  static constexpr int64_t kMaxPayloadDelta = (int64_t{1} << 23) - 1;
};
static_assert(sizeof(PackedRecord) == 16, "a packed event is 16 bytes");

struct EventChunk {
  static constexpr size_t kBytes = 64 * 1024;
  static constexpr uint32_t kTemplates = 128;
  static constexpr uint8_t kEscape = 0xff;
  static constexpr uint32_t kEscapeSlots = sizeof(Event) / sizeof(PackedRecord);
  // The most slots one event takes: a chunk with fewer left is full.
  static constexpr uint32_t kMaxSlotsPerEvent = 1 + kEscapeSlots;
  static constexpr uint32_t kSlots =
      (kBytes - kTemplates * sizeof(PackedTemplate) - 3 * sizeof(uint64_t)) / sizeof(PackedRecord);
  // The events a chunk holds when each repeats a template and follows the one before within 32
  // bits of ticks: a graph's replays, nested ranges of a loop (tests size their runs by it).
  static constexpr uint32_t kRepeatedEvents = kSlots - kMaxSlotsPerEvent + 1;

  // Templates and records are not constructed: each is written whole before a published record
  // refers to it, and a chunk's mapped memory is fresh.
  EventChunk() {}
  union {
    PackedTemplate templates[kTemplates];
  };
  union {
    PackedRecord slots[kSlots];
  };
  std::atomic<uint32_t> count{0};  // slots published (release), not events
  std::atomic<EventChunk *> next{nullptr};
  // The anchor the first record's time_delta counts from: that record's own (its time_delta is
  // 0), so that a chunk's first event needs no escape. Written with that record.
  uint64_t base = 0;

  bool full(uint32_t used) const { return used > kSlots - kMaxSlotsPerEvent; }
};
static_assert(sizeof(EventChunk) <= EventChunk::kBytes, "a chunk is 64 KiB: 16 pages, no more");

// The time that consecutive events' time_delta links: a range's or a mark's end (events are
// stored in the order they ended), an async event's start (its `end` holds its id).
inline uint64_t anchor_of(EventKind kind, uint64_t start, uint64_t end) {
  return kind == EventKind::async_begin || kind == EventKind::async_end ? start : end;
}

// The owner's side of its tail chunk: where each attribute set's template is. Owner only.
// Its state belongs to the chunk being filled, so it starts afresh whenever it is handed an
// empty chunk (a new one, or one emptied by spilling or after a fork): no caller resets it.
class ChunkWriter {
 public:
  // Writes one event at `chunk.slots[used]` (the caller has checked !chunk.full(used)) and
  // returns the slots it took. Publishing is the caller's.
  [[gnu::always_inline]] uint32_t write(EventChunk &chunk, uint32_t used, uint64_t start,
                                        uint64_t end, const RangeAttrs &attrs, uint32_t domain_id,
                                        uint32_t depth) {
    if (used == 0) [[unlikely]]
      restart();
    if (attrs.kind == EventKind::range || attrs.kind == EventKind::mark) [[likely]] {
      if (used == 0) [[unlikely]]
        chunk.base = last_anchor_ = end;
      const int64_t delta = static_cast<int64_t>(end - last_anchor_);
      const uint64_t duration = end - start;
      if (delta >= -PackedRecord::kMaxTimeDelta - 1 && delta <= PackedRecord::kMaxTimeDelta &&
          duration <= PackedRecord::kMaxDuration) [[likely]] {
        const int templ = find_or_add(chunk, attrs, domain_id, depth);
        if (templ >= 0) [[likely]] {
          chunk.slots[used] = PackedRecord::make(
              delta, static_cast<uint8_t>(templ), duration,
              static_cast<int64_t>(attrs.payload.u - chunk.templates[templ].payload_base));
          last_anchor_ = end;
          ++events_;
          return 1;
        }
      }
    }
    ++events_;
    return write_whole(chunk, used, start, end, attrs, domain_id, depth);
  }
  // The events written into the current chunk: what it unpacks into.
  uint32_t events() const { return events_; }

 private:
  void restart() {
    templates_ = 0;
    events_ = 0;
    std::memset(index_, 0, sizeof index_);
    for (int &r : recent_) r = -1;
  }
  static constexpr size_t kIndexSize = 2 * EventChunk::kTemplates;  // at most half full
  // Whether template `t` is this attribute set (its payload aside).
  static bool same_set(const PackedTemplate &t, const RangeAttrs &attrs, uint32_t domain_id,
                       uint32_t depth) {
    return t.name == attrs.name && t.domain_id == domain_id && t.depth == depth &&
           t.category == attrs.category && t.color == attrs.color &&
           t.has_color == attrs.has_color && t.kind == attrs.kind &&
           t.payload_kind == attrs.payload.kind;
  }
  static bool near_base(const PackedTemplate &t, uint64_t payload) {
    const int64_t delta = static_cast<int64_t>(payload - t.payload_base);
    return delta >= -PackedRecord::kMaxPayloadDelta - 1 && delta <= PackedRecord::kMaxPayloadDelta;
  }
  // The template of this attribute set whose payload base is within 23 bits of the payload
  // (either way: a step number that starts again); a new one where there is none and the table
  // has room; else -1.
  //
  // The last four templates the table gave (found or added) are tried first: a graph's replays
  // repeat one, a range around each launch alternates two, ranges nested four deep pop in a
  // cycle of four. The hash and the probe of the chunk's table they skip were a chain of
  // dependent loads that cost about 7 ns per range (measured with the lookup left out:
  // docs/performance.md). The newest is compared with a copy kept here (a graph's replays: no
  // load from the chunk before the record is stored), the other three by index. More than four
  // sets in a cycle miss every time and pay the compares on top of the table: on the writer
  // alone 7.9 ns per event instead of 6.2; 3.7-4.4 for cycles of one to four.
  //
  // Inlined into write, as write is into ThreadBuffer::record and it into Recorder::pop: a call
  // here saved and restored six registers per event; adding a template is the rare part, out of
  // line.
  [[gnu::always_inline]] int find_or_add(EventChunk &chunk, const RangeAttrs &attrs,
                                         uint32_t domain_id, uint32_t depth) {
    if (recent_[0] >= 0 && same_set(newest_, attrs, domain_id, depth) &&
        near_base(newest_, attrs.payload.u)) [[likely]]
      return recent_[0];
    for (int k = 1; k < kRecent; ++k) {
      const int r = recent_[k];
      if (r >= 0 && same_set(chunk.templates[r], attrs, domain_id, depth) &&
          near_base(chunk.templates[r], attrs.payload.u))
        return r;
    }
    const int found = find_or_add_in_table(chunk, attrs, domain_id, depth);
    if (found >= 0) {  // the newest first; the oldest makes way
      for (int k = kRecent - 1; k > 0; --k) recent_[k] = recent_[k - 1];
      recent_[0] = found;
      newest_ = chunk.templates[found];
    }
    return found;
  }
  [[gnu::always_inline]] int find_or_add_in_table(EventChunk &chunk, const RangeAttrs &attrs,
                                                  uint32_t domain_id, uint32_t depth) {
    uint64_t h = (reinterpret_cast<uintptr_t>(attrs.name) ^ (uint64_t{domain_id} << 40) ^
                  (uint64_t{depth} << 20) ^ attrs.category) *
                 0x9e3779b97f4a7c15ull;
    for (size_t i = h >> 56;; i = (i + 1) % kIndexSize) {
      const uint8_t entry = index_[i];
      if (entry == 0) return add(chunk, i, attrs, domain_id, depth);
      const PackedTemplate &t = chunk.templates[entry - 1];
      if (same_set(t, attrs, domain_id, depth)) {
        if (near_base(t, attrs.payload.u)) [[likely]]
          return entry - 1;
        return add(chunk, i, attrs, domain_id, depth);  // the same set, a payload far away
      }
    }
  }
  [[gnu::noinline]] int add(EventChunk &chunk, size_t index_slot, const RangeAttrs &attrs,
                            uint32_t domain_id, uint32_t depth) {
    if (templates_ == EventChunk::kTemplates) return -1;
    PackedTemplate &t = chunk.templates[templates_];
    t.name = attrs.name;
    t.payload_base = attrs.payload.u;
    t.category = attrs.category;
    t.color = attrs.color;
    t.domain_id = domain_id;
    t.depth = depth;
    t.has_color = attrs.has_color;
    t.kind = attrs.kind;
    t.payload_kind = attrs.payload.kind;
    index_[index_slot] = static_cast<uint8_t>(++templates_);
    return static_cast<int>(templates_ - 1);
  }
  uint32_t write_whole(EventChunk &chunk, uint32_t used, uint64_t start, uint64_t end,
                       const RangeAttrs &attrs, uint32_t domain_id, uint32_t depth);

  uint64_t last_anchor_ = 0;
  uint32_t templates_ = 0;
  uint32_t events_ = 0;
  uint8_t index_[kIndexSize] = {};  // template index + 1 by hash of the attribute set; 0: empty
  // The indexes of the templates the table gave last (find_or_add), newest first; -1: none.
  static constexpr int kRecent = 4;
  int recent_[kRecent] = {-1, -1, -1, -1};
  PackedTemplate newest_ = {};  // a copy of templates[recent_[0]]
};

// The number of events in the first `used` slots of `chunk` (without unpacking them): what a
// reader reserves room for. The slots alone overstate it five times in a chunk of events stored
// whole, and room reserved is memory touched under a malloc that fills what it hands out
// (MALLOC_PERTURB_): the churn test's exit peaked at 148 MB so.
inline uint32_t count_events(const EventChunk &chunk, uint32_t used) {
  uint32_t events = 0;
  for (uint32_t i = 0; i < used; ++events)
    i += chunk.slots[i].templ() == EventChunk::kEscape ? EventChunk::kMaxSlotsPerEvent : 1;
  return events;
}

// Calls out(const Event &) for each event of the first `used` slots of `chunk`, in the order they
// were written. Returns the number of events.
template <class Out>
uint32_t unpack(const EventChunk &chunk, uint32_t used, Out &&out) {
  // `base` is the owner's to write while the chunk is empty (its first record): read only once
  // a published record says it is written (TSan saw the read of an empty chunk's race).
  if (used == 0) return 0;
  uint64_t anchor = chunk.base;
  uint32_t events = 0;
  for (uint32_t i = 0; i < used; ++events) {
    const PackedRecord &r = chunk.slots[i];
    Event e;
    if (r.templ() == EventChunk::kEscape) {
      std::memcpy(static_cast<void *>(&e), &chunk.slots[i + 1], sizeof e);
      anchor = anchor_of(e.attrs.kind, e.start, e.end);
      i += EventChunk::kMaxSlotsPerEvent;
    } else {
      const PackedTemplate &t = chunk.templates[r.templ()];
      anchor += static_cast<uint64_t>(r.time_delta());
      e.end = anchor;
      e.start = anchor - r.duration();
      e.attrs.name = t.name;
      e.attrs.category = t.category;
      e.attrs.has_color = t.has_color;
      e.attrs.kind = t.kind;
      e.attrs.color = t.color;
      e.attrs.payload.kind = t.payload_kind;
      e.attrs.payload.u = t.payload_base + static_cast<uint64_t>(r.payload_delta());
      e.domain_id = t.domain_id;
      e.depth = t.depth;
      i += 1;
    }
    out(e);
  }
  return events;
}

}  // namespace ferrum_replay::recorder
