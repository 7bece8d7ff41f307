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

// Everything NVTX lets a caller attach to a range, after decoding nvtxEventAttributes_t. `name`
// must point to memory that outlives the recorder's report (see ThreadBuffer::intern).
struct RangeAttrs {
  const char *name = "";
  uint32_t category = 0;
  bool has_color = false;
  uint32_t color = 0;  // ARGB
  Payload payload;
};

struct Event {
  // In ticks of the recorder's TickClock (clock.hpp): monotonic nanoseconds or the CPU's counter.
  // Snapshot::scale turns them into nanoseconds; comparing two ticks compares two instants.
  uint64_t start;
  uint64_t end;
  RangeAttrs attrs;
  uint32_t domain_id;  // 0 is NVTX's global (NULL) domain
  uint32_t depth;      // 0-based level within its (thread, domain) stack, as push returned it
};

}  // namespace ferrum_replay::recorder
