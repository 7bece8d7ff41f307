#include "event_chunk.hpp"

namespace ferrum_replay::recorder {

// Out of line: the rare event that repeats no template (event_chunk.hpp) keeps the common path
// small.
uint32_t ChunkWriter::write_whole(EventChunk &chunk, uint32_t used, uint64_t start, uint64_t end,
                                  const RangeAttrs &attrs, uint32_t domain_id, uint32_t depth) {
  Event e;
  e.start = start;
  e.end = end;
  e.attrs = attrs;
  e.domain_id = domain_id;
  e.depth = depth;
  chunk.slots[used] = PackedRecord::make(0, EventChunk::kEscape, 0, 0);
  std::memcpy(static_cast<void *>(&chunk.slots[used + 1]), &e, sizeof e);
  last_anchor_ = anchor_of(attrs.kind, start, end);
  return EventChunk::kMaxSlotsPerEvent;
}

}  // namespace ferrum_replay::recorder
