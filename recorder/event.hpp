// What one completed range looks like in memory. Kept trivially copyable and free of owning
// pointers so that a thread can publish events with a single release store and the exit writer can
// read them with plain loads.
#pragma once

#include <cstdint>

namespace ferrum_replay::recorder {

// NVTX payloads come in six C types; three are enough to keep every value exact in JSON.
enum class PayloadKind : uint8_t { none, u64, i64, f64 };

struct Payload {
  PayloadKind kind = PayloadKind::none;
  union {
    uint64_t u;
    int64_t i;
    double d;
  };
  Payload() : u(0) {}
  explicit Payload(uint64_t value) : kind(PayloadKind::u64), u(value) {}
  explicit Payload(int64_t value) : kind(PayloadKind::i64), i(value) {}
  explicit Payload(double value) : kind(PayloadKind::f64), d(value) {}
};

// What an Event records. Push/pop ranges are the recorder's main business (and the only kind the
// tables count); marks and start/end ranges are kept so that a trace holds everything the
// program's own NVTX said (trace_writer.hpp: "i", "b" and "e" events).
enum class EventKind : uint8_t {
  range,        // a push/pop range: start..end on one thread ("X")
  mark,         // nvtxMark*: an instant, end == start ("i")
  async_begin,  // nvtxRangeStart*: the start of a start/end range; end holds its id ("b")
  async_end,    // nvtxRangeEnd: its end, on the thread that ended it; end holds the id ("e")
};

// Everything NVTX lets a caller attach to an event, after decoding nvtxEventAttributes_t. `name`
// must point to memory that outlives the recorder's report (see ThreadBuffer::intern).
struct RangeAttrs {
  const char *name = "";
  uint32_t category = 0;
  bool has_color = false;
  // Kept here, in what would be padding, so that an Event stays 64 bytes; push leaves it `range`
  // and pop copies it with the rest, so the push/pop path does no extra work for it.
  EventKind kind = EventKind::range;
  uint32_t color = 0;  // ARGB
  Payload payload;
};

struct Event {
  // In ticks of the recorder's TickClock (clock.hpp): monotonic nanoseconds or the CPU's counter.
  // Snapshot::scale turns them into nanoseconds; comparing two ticks compares two instants.
  uint64_t start;
  // A range's end (ticks). A mark: equal to start. A start/end range's begin or end: the range's
  // id (async_id()), which pairs the two, possibly recorded on different threads.
  uint64_t end;
  RangeAttrs attrs;
  uint32_t domain_id;  // 0 is NVTX's global (NULL) domain
  uint32_t depth;      // ranges: 0-based level within its (thread, domain) stack, as push returned
                       // it; 0 for the other kinds

  EventKind kind() const { return attrs.kind; }
  bool is_range() const { return attrs.kind == EventKind::range; }
  bool is_async() const {
    return attrs.kind == EventKind::async_begin || attrs.kind == EventKind::async_end;
  }
  uint64_t async_id() const { return end; }
};
// Every event costs its size in each thread's buffer and in the spill file: keep it one cache line.
static_assert(sizeof(Event) == 64, "Event must stay 64 bytes");

// What decides an event's place in trace order, kept apart from the event where only the place
// matters (a spilled run's first and last events: SpillRun).
struct OrderKey {
  uint64_t start = 0;
  uint64_t end = 0;
  uint32_t domain_id = 0;
  uint32_t depth = 0;
  static OrderKey of(const Event &e) { return OrderKey{e.start, e.end, e.domain_id, e.depth}; }
};

// Trace order, the one rule for Events and OrderKeys alike. Events are stored in the order ranges
// *ended*; viewers want start order with an enclosing range before the ranges it contains, which
// "earlier start, then later end" guarantees. Equal intervals (possible at clock resolution) keep
// the outer range first by depth.
template <class A, class B>
bool trace_order_before(const A &a, const B &b) {
  if (a.start != b.start) return a.start < b.start;
  if (a.end != b.end) return a.end > b.end;
  if (a.domain_id != b.domain_id) return a.domain_id < b.domain_id;
  return a.depth < b.depth;
}

}  // namespace ferrum_replay::recorder
