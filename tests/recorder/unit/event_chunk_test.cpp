// Packed event chunks (recorder/event_chunk.hpp): every event comes back exactly as it was
// recorded, whichever way it was stored — a 16-byte record against a template, or whole behind
// an escape — and in the order it was recorded, while readers read a chunk being filled.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "thread_buffer.hpp"

using namespace ferrum_replay::recorder;

namespace {

bool same(const Event &a, const Event &b) {
  return a.start == b.start && a.end == b.end && a.attrs.name == b.attrs.name &&
         a.attrs.category == b.attrs.category && a.attrs.has_color == b.attrs.has_color &&
         a.attrs.kind == b.attrs.kind && a.attrs.color == b.attrs.color &&
         a.attrs.payload.kind == b.attrs.payload.kind && a.attrs.payload.u == b.attrs.payload.u &&
         a.domain_id == b.domain_id && a.depth == b.depth;
}

// Writes `events` into one chunk as ThreadBuffer does (the chunk must hold them) and returns the
// slots used.
uint32_t pack(EventChunk &chunk, ChunkWriter &writer, const std::vector<Event> &events) {
  uint32_t used = 0;
  for (const Event &e : events) {
    REQUIRE(!chunk.full(used));
    used += writer.write(chunk, used, e.start, e.end, e.attrs, e.domain_id, e.depth);
  }
  return used;
}

std::vector<Event> unpacked(const EventChunk &chunk, uint32_t used) {
  std::vector<Event> out;
  const uint32_t n = unpack(chunk, used, [&](const Event &e) { out.push_back(e); });
  CHECK(n == out.size());
  return out;
}

void check_round_trip(const std::vector<Event> &events, uint32_t *slots_used = nullptr) {
  auto *chunk = new EventChunk;
  ChunkWriter writer;
  const uint32_t used = pack(*chunk, writer, events);
  const std::vector<Event> back = unpacked(*chunk, used);
  REQUIRE(back.size() == events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    INFO("event " << i);
    CHECK(same(back[i], events[i]));
  }
  if (slots_used) *slots_used = used;
  delete chunk;
}

Event range(const char *name, uint64_t start, uint64_t end, uint64_t payload = 0,
            uint32_t depth = 0) {
  Event e{};
  e.start = start;
  e.end = end;
  e.attrs.name = name;
  e.attrs.payload = Payload(payload);
  e.depth = depth;
  return e;
}

}  // namespace

TEST_CASE("packed chunk: a graph's replays take one 16-byte slot each") {
  std::vector<Event> events;
  uint64_t t = uint64_t{1} << 62;  // a CPU counter's ticks: far from 0
  for (uint64_t i = 0; i < 1000; ++i, t += 3000)
    events.push_back(range("decode batch 8", t, t + 1200 + i % 7, 41 + i));
  uint32_t used = 0;
  check_round_trip(events, &used);
  CHECK(used == events.size());
}

TEST_CASE("packed chunk: nested ranges, marks and several names and domains round-trip") {
  static const char *const names[] = {"outer", "inner", "mark", "other"};
  std::vector<Event> events;
  std::mt19937_64 random(7);
  uint64_t t = 123456789;
  for (int i = 0; i < 2000; ++i) {
    // Payloads that go up and down (a step number that starts again) keep their template.
    Event e = range(names[random() % 4], 0, 0, 1000 + random() % 5 - random() % 5,
                    static_cast<uint32_t>(random() % 3));
    t += random() % 100000;
    e.end = t;
    e.start = t - random() % 50000;  // ends in storage order, starts anywhere before
    if (std::strcmp(e.attrs.name, "mark") == 0) {
      e.attrs.kind = EventKind::mark;
      e.start = e.end;
    }
    e.domain_id = static_cast<uint32_t>(random() % 3);
    e.attrs.has_color = random() % 2 == 0;
    e.attrs.color = e.attrs.has_color ? 0xff00ff00u : 0;
    events.push_back(e);
  }
  uint32_t used = 0;
  check_round_trip(events, &used);
  CHECK(used == events.size());  // 4 names x 3 depths x 3 domains x 2 colours: 72 templates
}

TEST_CASE(
    "packed chunk: what does not fit a record is stored whole, and what follows still packs") {
  const uint64_t t = uint64_t{1} << 40;
  std::vector<Event> events;
  events.push_back(range("a", t, t + 10, 1));
  // A gap within 39 bits of ticks packs; one beyond them is stored whole, forward and backward.
  events.push_back(range("a", t + (uint64_t{1} << 33), t + (uint64_t{1} << 33) + 10, 2));
  events.push_back(range("a", t + (uint64_t{1} << 41), t + (uint64_t{1} << 41) + 10, 2));
  events.push_back(range("a", t + 5, t + 20, 3));
  // Ranges within and beyond 40 bits of ticks; one whose end reads before its start.
  events.push_back(range("a", t, t + (uint64_t{1} << 32) + 25, 4));
  events.push_back(range("a", t, t + (uint64_t{1} << 41) + 25, 4));
  events.push_back(range("a", t + 40, t + 30, 5));
  // A payload far from its template's base, then back near it; signed and floating payloads.
  events.push_back(range("a", t + 40, t + 50, uint64_t{1} << 40));
  events.push_back(range("a", t + 50, t + 60, 6));
  Event negative = range("a", t + 60, t + 70);
  negative.attrs.payload = Payload(int64_t{-5});
  events.push_back(negative);
  Event real = range("a", t + 70, t + 80);
  real.attrs.payload = Payload(2.5);
  events.push_back(real);
  // Start/end ranges: `end` is an id, stored whole.
  Event begin = range("async", t + 90, 77);
  begin.attrs.kind = EventKind::async_begin;
  events.push_back(begin);
  Event end = range("", t + 95, 77);
  end.attrs.kind = EventKind::async_end;
  events.push_back(end);
  events.push_back(range("a", t + 96, t + 100, 7));
  // A depth and a domain id at their limits.
  Event deep = range("a", t + 100, t + 110, 8, UINT32_MAX);
  deep.domain_id = UINT32_MAX;
  events.push_back(deep);
  uint32_t used = 0;
  check_round_trip(events, &used);
  CHECK(used > events.size());  // some were stored whole
}

TEST_CASE("packed chunk: each field of a record keeps its extreme values, and one beyond escapes") {
  // The record's two words are built by shifts and masks (PackedRecord::make): a sign or a bit
  // lost at a field's edge would show here, not in the ordinary traffic above.
  constexpr int64_t kGap = (int64_t{1} << 39) - 1;         // time_delta: 40 bits, signed
  constexpr uint64_t kDuration = (uint64_t{1} << 40) - 1;  // duration: 40 bits
  constexpr int64_t kPayload = (int64_t{1} << 23) - 1;     // payload_delta: 24 bits, signed
  const uint64_t t = uint64_t{1} << 62;
  const uint64_t base = uint64_t{1} << 50;
  auto packs = [](const std::vector<Event> &events) {
    uint32_t used = 0;
    check_round_trip(events, &used);
    return used == events.size();
  };
  // The first event ends at t + 1 (a range's anchor is its end): each second event below ends
  // exactly at, or one tick beyond, what a record holds from there.
  const uint64_t a = t + 1;
  // Time: forward by 2^39 - 1 and back by 2^39 pack; one tick further either way is stored whole.
  CHECK(packs({range("a", t, a, base), range("a", a + kGap - 1, a + kGap, base)}));
  CHECK(packs({range("a", t, a, base), range("a", a - kGap - 2, a - kGap - 1, base)}));
  CHECK_FALSE(packs({range("a", t, a, base), range("a", a + kGap, a + kGap + 1, base)}));
  CHECK_FALSE(packs({range("a", t, a, base), range("a", a - kGap - 3, a - kGap - 2, base)}));
  // Duration: 2^40 - 1 ticks packs, 2^40 is stored whole.
  CHECK(packs({range("a", t, a, base), range("a", a + 1 - kDuration, a + 1, base)}));
  CHECK_FALSE(packs({range("a", t, a, base), range("a", a - kDuration, a + 1, base)}));
  // Payload: 2^23 - 1 above the template's base and 2^23 below it pack against it. One beyond
  // either way takes a template of its own (still packed): read back wrong, had it been packed
  // against the first (check_round_trip).
  CHECK(packs({range("a", t, a, base), range("a", a, a + 1, base + kPayload),
               range("a", a + 1, a + 2, base - kPayload - 1)}));
  CHECK(packs({range("a", t, a, base), range("a", a, a + 1, base + kPayload + 1)}));
  CHECK(packs({range("a", t, a, base), range("a", a, a + 1, base - kPayload - 2)}));
  // The last of the table's templates, index 127: its index survives the record's 8 bits.
  static std::vector<std::string> names;
  for (uint32_t i = names.size(); i < EventChunk::kTemplates; ++i)
    names.push_back("name " + std::to_string(i));
  std::vector<Event> all;
  for (uint32_t i = 0; i < EventChunk::kTemplates; ++i)
    all.push_back(range(names[i].c_str(), t + i, t + i + 1, base - i));
  for (uint32_t i = 0; i < EventChunk::kTemplates; ++i) {  // each again, newest first
    const uint32_t j = EventChunk::kTemplates - 1 - i;
    all.push_back(range(names[j].c_str(), t + 200 + i, t + 300 + i, base - j + kPayload));
  }
  CHECK(packs(all));
}

TEST_CASE("packed chunk: attribute sets in a cycle, fewer and more than the writer keeps at hand") {
  // Nested ranges pop innermost first, so k nested sets come back in a cycle of k: within the
  // writer's recent templates (k <= 4) or beyond them, every event packs and reads back exactly.
  static const char *const names[] = {"step", "forward", "layer", "attn", "mlp",
                                      "norm", "rope",    "kv",    "out"};
  for (int k : {1, 2, 3, 4, 5, 6, 9}) {
    INFO("cycle of " << k);
    std::vector<Event> events;
    uint64_t t = uint64_t{1} << 45;
    for (int i = 0; i < 3000; ++i, t += 5) {
      const int s = i % k;
      events.push_back(range(names[s], t - 2, t, 1000 + i / k, static_cast<uint32_t>(k - 1 - s)));
    }
    uint32_t used = 0;
    check_round_trip(events, &used);
    CHECK(used == events.size());
  }
}

TEST_CASE("packed chunk: the templates a writer used last belong to its chunk alone") {
  // ChunkWriter tries the last templates its table gave before the table itself. Handed an
  // empty chunk — a new one, or the same one emptied by a spill, which still holds its old
  // templates — it must not find them there: a record naming an old template would read back
  // as whatever new attribute set is later written over it.
  const uint64_t t = uint64_t{1} << 62;
  std::vector<Event> first, second;
  for (uint64_t i = 0; i < 50; ++i) {  // "a" and "b" alternate: both at hand
    first.push_back(range("a", t + 10 * i, t + 10 * i + 3, 100 + i));
    first.push_back(range("b", t + 10 * i + 4, t + 10 * i + 6, 7, 1));
  }
  for (uint64_t i = 0; i < 50; ++i)  // "b" alone: template 0 of the emptied chunk
    second.push_back(range("b", t + 1000 + i, t + 1001 + i, 7, 1));
  // The same set far from its template's base, then near the old base again.
  second.push_back(range("b", t + 2000, t + 2001, uint64_t{1} << 40, 1));
  second.push_back(range("b", t + 2002, t + 2003, 8, 1));
  // New sets: written over the old templates' places.
  for (const char *name : {"c", "d", "e"}) second.push_back(range(name, t + 2004, t + 2005));
  second.push_back(range("b", t + 2006, t + 2007, 9, 1));
  for (const bool same_chunk : {true, false}) {
    const char *const which = same_chunk ? "the same chunk, emptied" : "a new chunk";
    INFO(which);
    auto *chunk = new EventChunk;
    auto *next = same_chunk ? chunk : new EventChunk;
    ChunkWriter writer;
    CHECK(pack(*chunk, writer, first) == first.size());
    const uint32_t used = pack(*next, writer, second);  // from slot 0: restarts the writer
    CHECK(used == second.size());
    const std::vector<Event> back = unpacked(*next, used);
    REQUIRE(back.size() == second.size());
    for (size_t i = 0; i < back.size(); ++i) {
      INFO("event " << i);
      CHECK(same(back[i], second[i]));
    }
    if (next != chunk) delete next;
    delete chunk;
  }
}

TEST_CASE("packed chunk: a chunk whose table of templates is full stores new names whole") {
  static std::vector<std::string> names;
  names.clear();
  for (int i = 0; i < 300; ++i) names.push_back("name " + std::to_string(i));
  std::vector<Event> events;
  uint64_t t = 1000;
  for (int round = 0; round < 3; ++round)
    for (const std::string &name : names) {
      t += 10;
      events.push_back(range(name.c_str(), t - 5, t, static_cast<uint64_t>(round)));
    }
  uint32_t used = 0;
  check_round_trip(events, &used);
  // The first 128 names pack in every round; the other 172 are stored whole each time.
  const uint32_t whole = 3 * (300 - EventChunk::kTemplates);
  CHECK(used == (events.size() - whole) + whole * EventChunk::kMaxSlotsPerEvent);
}

TEST_CASE("packed chunk: a thread buffer fills, links and spills chunks and loses nothing") {
  // Mixed events across many chunks, spilled or kept, come back in order and intact.
  for (const bool spill : {false, true}) {
    CAPTURE(spill);
    SpillFile spill_file;
    ThreadBuffer buffer(1, "t", spill ? &spill_file : nullptr, nullptr);
    std::vector<Event> events;
    std::mt19937_64 random(11);
    uint64_t t = uint64_t{1} << 50;
    static const char *const names[] = {"x", "y", "z"};
    for (int i = 0; i < 5 * static_cast<int>(EventChunk::kRepeatedEvents); ++i) {
      t += random() % 2 == 0 ? 100 : (uint64_t{1} << 40);  // some gaps escape
      Event e = range(names[random() % 3], t - 50, t, static_cast<uint64_t>(i));
      if (random() % 50 == 0) {
        e.attrs.kind = EventKind::async_begin;
        e.start = t;
        e.end = static_cast<uint64_t>(i) + 1;
      }
      buffer.append(e);
      events.push_back(e);
    }
    std::vector<Event> in_memory;
    std::vector<SpillRun> runs;
    buffer.collect(&in_memory, &runs);
    std::vector<Event> all = in_memory;
    for (const SpillRun &run : runs) {
      std::vector<Event> back(run.count);
      REQUIRE(spill_file.read(run, 0, run.count, back.data()));
      all.insert(all.end(), back.begin(), back.end());
    }
    CHECK(spill == !runs.empty());
    REQUIRE(all.size() == events.size());
    // Spilled runs are sorted into trace order: compare as multisets, by payload (unique).
    std::sort(all.begin(), all.end(),
              [](const Event &a, const Event &b) { return a.attrs.payload.u < b.attrs.payload.u; });
    std::sort(events.begin(), events.end(),
              [](const Event &a, const Event &b) { return a.attrs.payload.u < b.attrs.payload.u; });
    size_t differing = 0;
    for (size_t i = 0; i < events.size(); ++i) differing += !same(all[i], events[i]);
    CHECK(differing == 0);
  }
}

TEST_CASE("packed chunk: a reader never sees a torn event while the owner packs") {
  // The owner packs while another thread collects again and again (run under TSan too). A
  // collect reads each chunk up to the count it found there, so events written meanwhile into
  // an earlier chunk may be missing from it (snapshot(): "simply not included"); but each event
  // it holds is whole, and they come in the order they were written.
  ThreadBuffer buffer(1, "t");
  constexpr uint64_t kEvents = 3 * EventChunk::kRepeatedEvents + 100;
  auto good = [](const Event &e) {
    return std::strcmp(e.attrs.name, e.attrs.payload.u % 3 == 0 ? "a" : "b") == 0 &&
           e.end - e.start == 10 && e.attrs.payload.kind == PayloadKind::u64;
  };
  std::atomic<bool> done{false};
  std::thread writer([&] {
    uint64_t t = uint64_t{1} << 45;
    for (uint64_t i = 0; i < kEvents; ++i) {
      t += i % 97 == 0 ? (uint64_t{1} << 40) : 20;  // some stored whole
      buffer.append(range(i % 3 == 0 ? "a" : "b", t - 10, t, i));
    }
    done.store(true);
  });
  size_t reads = 0, bad = 0, out_of_order = 0;
  while (!done.load() || reads == 0) {
    std::vector<Event> seen;
    buffer.collect(&seen, nullptr);
    for (size_t i = 0; i < seen.size(); ++i) {
      bad += !good(seen[i]);
      out_of_order += i > 0 && seen[i].attrs.payload.u <= seen[i - 1].attrs.payload.u;
    }
    ++reads;
  }
  writer.join();
  std::vector<Event> all;
  buffer.collect(&all, nullptr);
  REQUIRE(all.size() == kEvents);
  for (uint64_t i = 0; i < kEvents; ++i) bad += !good(all[i]) || all[i].attrs.payload.u != i;
  CHECK(bad == 0);
  CHECK(out_of_order == 0);
}

TEST_CASE("packed chunk: FERRUM_RECORD_MEMORY keeps as many events as it says, packed or not") {
  // A full chunk kept in memory is charged its events as the exit report unpacks them (64 bytes
  // each), whatever it held: a chunk of events stored whole (start/end ranges) holds a fifth of
  // what a chunk of a graph's replays does, and charged as the latter it kept a fifth of them.
  for (const EventKind kind : {EventKind::range, EventKind::async_begin}) {
    CAPTURE(static_cast<int>(kind));
    SpillFile spill;
    spill.set_directory_for_tests("/proc/self/no-such-directory");  // beyond it: dropped
    const uint64_t limit = 8 * uint64_t{EventChunk::kRepeatedEvents} * sizeof(Event);
    MemoryBudget budget(limit);
    ThreadBuffer buffer(1, "t", &spill, &budget);
    uint64_t t = 1000;
    for (uint64_t i = 0; i < 200000; ++i, t += 10) {
      Event e = range("x", t - 5, t, i);
      if (kind == EventKind::async_begin) {
        e.attrs.kind = kind;
        e.start = t;
        e.end = i + 1;
      }
      buffer.append(e);
    }
    std::vector<Event> kept;
    buffer.collect(&kept, nullptr);
    // The budget's worth, plus the chunk being filled (never charged), never more.
    CHECK(kept.size() * sizeof(Event) >= limit);
    CHECK(kept.size() * sizeof(Event) <= limit + EventChunk::kRepeatedEvents * sizeof(Event));
    CHECK(kept.size() + buffer.memory_drops() == 200000);
  }
}
