// The spill holds no descriptor: what the program does to its descriptors (closes all of them,
// dup2s its own files over them) can neither take spilled ranges away nor make the recorder
// write into or read back from a file of the program's.
#include <dirent.h>
#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../../support/address_space.hpp"
#include "name_pages.hpp"
#include "recorder.hpp"
#include "snapshot.hpp"
#include "spill_file.hpp"
#include "trace_writer.hpp"

using namespace ferrum_replay::recorder;

namespace {

std::set<int> open_descriptors() {
  std::set<int> fds;
  DIR *dir = opendir("/proc/self/fd");
  REQUIRE(dir != nullptr);
  const int own = dirfd(dir);
  while (const dirent *e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (fd != own) fds.insert(fd);
  }
  closedir(dir);
  return fds;
}

std::vector<Event> numbered_events(uint32_t first, uint32_t count) {
  std::vector<Event> events(count);
  for (uint32_t i = 0; i < count; ++i) {
    events[i].start = first + i;
    events[i].end = first + i + 1;
    events[i].attrs.name = "spilled";
    events[i].depth = i % 3;
  }
  return events;
}

bool holds(const SpillFile &spill, const SpillRun &run, const std::vector<Event> &expected) {
  std::vector<Event> back(run.count);
  if (!spill.read(run, 0, run.count, back.data())) return false;
  return back.size() == expected.size() &&
         std::memcmp(back.data(), expected.data(), back.size() * sizeof(Event)) == 0;
}

// A recorder that spills from its first full chunk on (FERRUM_RECORD_MEMORY=0), so that a few
// thousand ranges exercise the spill.
Settings spilling_at_once() {
  Settings settings;
  settings.memory = 0;
  return settings;
}

// Nested ranges in the global domain: `rounds` * 2 ranges.
void record(Recorder &r, int rounds) {
  const auto &g = r.names().global_domain();
  for (int i = 0; i < rounds; ++i) {
    r.push(g, "outer", true, {});
    r.push(g, "inner", false, {});
    r.pop(g);
    r.pop(g);
  }
}

}  // namespace

TEST_CASE("segment geometry covers the address space without gaps") {
  uint64_t expected_base = 0;
  for (unsigned k = 0; k < 40; ++k) {
    unsigned index;
    uint64_t base, size;
    SpillFile::segment_of(expected_base, &index, &base, &size);
    CHECK(index == k);
    CHECK(base == expected_base);
    CHECK(size == (k < 7 ? (uint64_t{1} << 20) << k : uint64_t{64} << 20));
    unsigned last_index;
    uint64_t last_base, last_size;
    SpillFile::segment_of(base + size - 1, &last_index, &last_base, &last_size);
    CHECK(last_index == k);
    CHECK(last_base == base);
    expected_base = base + size;
  }
  unsigned index;
  uint64_t base, size;
  SpillFile::segment_of(UINT64_MAX / 2, &index, &base, &size);
  CHECK(index == SpillFile::kMaxSegments);  // beyond the last segment: nothing maps there
}

TEST_CASE("a spill file leaves the file system max(10 %, 256 MiB) free, or is not made") {
  constexpr uint64_t MiB = uint64_t{1} << 20, GiB = uint64_t{1} << 30;
  // A 16 MiB tmpfs, empty: never spilled to (it took 15 MiB, and the program's write failed).
  CHECK_FALSE(SpillFile::leaves_room(1 * MiB, 16 * MiB, 16 * MiB));
  // A 1 GiB tmpfs: 256 MiB stay free.
  CHECK(SpillFile::leaves_room(64 * MiB, 320 * MiB, GiB));
  CHECK_FALSE(SpillFile::leaves_room(64 * MiB, 320 * MiB - 1, GiB));
  // A 1 TiB disk: 10 % of it stays free.
  CHECK(SpillFile::leaves_room(64 * MiB, 103 * GiB, 1024 * GiB));
  CHECK_FALSE(SpillFile::leaves_room(64 * MiB, 102 * GiB, 1024 * GiB));
  // More than is free, and ramfs (no size reported, nothing free by its word): never.
  CHECK_FALSE(SpillFile::leaves_room(64 * MiB, 32 * MiB, 1024 * GiB));
  CHECK_FALSE(SpillFile::leaves_room(MiB, 0, 0));
  // Sizes at the end of the range do not wrap.
  CHECK(SpillFile::leaves_room(64 * MiB, UINT64_MAX, UINT64_MAX / 2));
  CHECK_FALSE(SpillFile::leaves_room(UINT64_MAX, UINT64_MAX, UINT64_MAX));
}

TEST_CASE("the trace leaves the file system min(10 %, 256 MiB) free, or is not written") {
  constexpr uint64_t MiB = uint64_t{1} << 20, GiB = uint64_t{1} << 30;
  constexpr auto trace = SpillFile::Room::trace;
  // A 64 MiB tmpfs: 6.4 MiB stay free (a run's trace filled it to the last byte, NT-6).
  CHECK(SpillFile::leaves_room(57 * MiB, 64 * MiB, 64 * MiB, trace));
  CHECK_FALSE(SpillFile::leaves_room(58 * MiB, 64 * MiB, 64 * MiB, trace));
  // A 1 TiB disk: 256 MiB stay free, not a tenth of it.
  CHECK(SpillFile::leaves_room(64 * MiB, 320 * MiB, 1024 * GiB, trace));
  CHECK_FALSE(SpillFile::leaves_room(64 * MiB, 320 * MiB - 1, 1024 * GiB, trace));
  // ramfs, some FUSE daemons: no size reported, so nothing to keep (review TD-1).
  CHECK(SpillFile::leaves_room(MiB, 0, 0, trace));
  CHECK_FALSE(SpillFile::leaves_room(UINT64_MAX, UINT64_MAX, UINT64_MAX, trace));
}

TEST_CASE("spilling holds no descriptor, before or after") {
  const std::set<int> before = open_descriptors();
  SpillFile spill;
  const std::vector<Event> events = numbered_events(0, 4096);
  SpillRun run;
  REQUIRE(spill.append(events.data(), 4096, &run));
  CHECK(spill.segments() == 1);
  CHECK(open_descriptors() == before);
  CHECK(holds(spill, run, events));
}

TEST_CASE("a run across segments reads back whole") {
  SpillFile spill;
  // 1 MiB + a bit: the first run fills most of segment 0, the second straddles into segment 1.
  const uint32_t first_count = (1u << 20) / sizeof(Event) - 10;
  const std::vector<Event> a = numbered_events(0, first_count), b = numbered_events(7, 100);
  SpillRun ra, rb;
  REQUIRE(spill.append(a.data(), first_count, &ra));
  REQUIRE(spill.append(b.data(), 100, &rb));
  CHECK(spill.segments() == 2);
  CHECK(holds(spill, ra, a));
  CHECK(holds(spill, rb, b));
  std::vector<Event> part(50);
  REQUIRE(spill.read(rb, 5, 50, part.data()));
  CHECK(std::memcmp(part.data(), b.data() + 5, 50 * sizeof(Event)) == 0);
  spill.release(rb, 0, 100);  // only memory use changes
  CHECK(holds(spill, rb, b));
}

// `count` events of run `run` of `runs` that overlap one another all along: starts run,
// run + runs, run + 2 * runs... from `first` on.
std::vector<Event> interleaved_events(uint32_t first, uint32_t run, uint32_t runs, uint32_t count) {
  std::vector<Event> events = numbered_events(0, count);
  for (uint32_t i = 0; i < count; ++i) {
    events[i].start = first + i * runs + run;
    events[i].end = events[i].start + 1;
  }
  return events;
}

// Every event of `runs` in trace order, through the exit writer's merge.
std::vector<Event> merged(const SpillFile &spill, const std::vector<SpillRun> &runs,
                          std::vector<Event> memory = {}) {
  Snapshot snap;
  snap.spill = &spill;
  ThreadSnapshot thread;
  thread.runs = runs;
  thread.events = std::move(memory);
  std::vector<Event> out;
  for_each_event_in_order(snap, thread, [&](const Event &e) { out.push_back(e); });
  return out;
}

TEST_CASE("compaction merges only as many runs as bring the count down, in trace order") {
  // 6 runs of 100 events, each overlapping all the others in time: 6 chains; at most 4 sources:
  // merging 3 of them is enough (the exit report's compaction copies what it must, not every
  // spilled event).
  SpillFile spill;
  std::vector<SpillRun> runs(6);
  for (uint32_t i = 0; i < 6; ++i) {
    const std::vector<Event> events = interleaved_events(0, i, 6, 100);
    REQUIRE(spill.append(events.data(), 100, &runs[i]));
  }
  CHECK(chain_runs(runs).size() == 6);
  const uint64_t before = spill.size();
  compact_runs(spill, runs, 4);
  CHECK(runs.size() == 4);
  CHECK(spill.size() - before == 300 * sizeof(Event));
  // Many runs, a few passes: still every event once, in order.
  for (uint32_t i = 0; i < 40; ++i) {
    const std::vector<Event> events = interleaved_events(600, i, 40, 10);
    runs.emplace_back();
    REQUIRE(spill.append(events.data(), 10, &runs.back()));
  }
  compact_runs(spill, runs, 3);
  CHECK(runs.size() <= 3);
  uint64_t next = 0;
  for (const Event &e : merged(spill, runs)) CHECK(e.start == next++);
  CHECK(next == 1000);

  // Runs that overlap in stretches (interleaved starts, stretches of each) still merge in order.
  std::vector<Event> a, b;
  for (uint32_t i = 0; i < 300; ++i) (i / 7 % 2 ? a : b).push_back(numbered_events(i, 1)[0]);
  runs.assign(2, SpillRun{});
  REQUIRE(spill.append(a.data(), static_cast<uint32_t>(a.size()), &runs[0]));
  REQUIRE(spill.append(b.data(), static_cast<uint32_t>(b.size()), &runs[1]));
  next = 0;
  for (const Event &e : merged(spill, runs)) CHECK(e.start == next++);
  CHECK(next == 300);
}

TEST_CASE("runs that follow one another form one chain, read in trace order, never copied") {
  SpillFile spill;
  // Spilled out of time order: run 0 holds the latest events, run 2 the earliest.
  std::vector<SpillRun> runs(3);
  for (uint32_t i = 0; i < 3; ++i) {
    const std::vector<Event> events = numbered_events((2 - i) * 100, 100);
    REQUIRE(spill.append(events.data(), 100, &runs[i]));
  }
  const std::vector<std::vector<uint32_t>> chains = chain_runs(runs);
  REQUIRE(chains.size() == 1);
  CHECK(chains[0] == std::vector<uint32_t>{2, 1, 0});
  const uint64_t before = spill.size();
  compact_runs(spill, runs, 2);
  CHECK(runs.size() == 3);
  CHECK(spill.size() == before);
  uint64_t next = 0;
  for (const Event &e : merged(spill, runs)) CHECK(e.start == next++);
  CHECK(next == 300);

  // A run whose first event equals the chain's last (equal intervals at clock resolution) does
  // not join it: a chain's runs are strictly one after another.
  const std::vector<Event> touching = numbered_events(299, 10);
  runs.emplace_back();
  REQUIRE(spill.append(touching.data(), 10, &runs.back()));
  CHECK(chain_runs(runs).size() == 2);
}

TEST_CASE("a run written in pieces without order keys is merged, never chained") {
  // reserve() + write() leave SpillRun::first/last unset: such a run must not be taken for one
  // that starts before every other.
  SpillFile spill;
  std::vector<SpillRun> runs(2);
  const std::vector<Event> late = numbered_events(100, 3);
  REQUIRE(spill.append(late.data(), 3, &runs[0]));
  std::vector<Event> early = numbered_events(50, 3);
  for (uint32_t i = 0; i < 3; ++i) early[i].start = early[i].end = 50 + 10 * i;
  REQUIRE(spill.reserve(3, &runs[1]));
  REQUIRE(spill.write(runs[1], 0, early.data(), 3));
  CHECK_FALSE(runs[1].keyed);
  CHECK(chain_runs(runs).size() == 2);
  std::vector<uint64_t> starts;
  for (const Event &e : merged(spill, runs)) starts.push_back(e.start);
  CHECK(starts == std::vector<uint64_t>{50, 60, 70, 100, 101, 102});
}

TEST_CASE("equal events come in memory, then run, order whatever the chains") {
  // Three copies of the same intervals, told apart by payload: in memory, in run 0, in run 1.
  // Run 1 follows run 2 without overlap and shares its chain; run 0 overlaps both.
  SpillFile spill;
  std::vector<Event> copies[3];
  for (uint32_t c = 0; c < 3; ++c) {
    copies[c] = numbered_events(100, 50);
    for (Event &e : copies[c]) e.attrs.payload = Payload(uint64_t{c});
  }
  const std::vector<Event> early = numbered_events(0, 100);
  std::vector<SpillRun> runs(3);
  REQUIRE(spill.append(copies[1].data(), 50, &runs[0]));
  REQUIRE(spill.append(copies[2].data(), 50, &runs[1]));
  REQUIRE(spill.append(early.data(), 100, &runs[2]));
  const std::vector<std::vector<uint32_t>> chains = chain_runs(runs);
  CHECK(chains.size() == 2);
  const std::vector<Event> out = merged(spill, runs, copies[0]);
  REQUIRE(out.size() == 250);
  for (uint32_t i = 0; i < 100; ++i) CHECK(out[i].start == i);
  for (uint32_t i = 0; i < 150; ++i) {
    CHECK(out[100 + i].start == 100 + i / 3);
    CHECK(out[100 + i].attrs.payload.u == i % 3);  // memory, run 0, run 1
  }
}

// Resident pages of the spill file's mappings (files without a name: the test makes no other),
// from /proc/self/smaps. Not the process's whole resident size: a sanitizer's shadow of the
// written pages (TSan: four times them) would count there, and is not the spill's doing.
long resident_kib() {
  FILE *f = std::fopen("/proc/self/smaps", "re");
  REQUIRE(f != nullptr);
  long total = 0;
  bool spill_mapping = false;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    long kib = 0;
    if (std::sscanf(line, "Rss: %ld kB", &kib) == 1) {
      if (spill_mapping) total += kib;
    } else if (std::strchr(line, '-') && std::strchr(line, '-') < std::strchr(line, ' ')) {
      spill_mapping = std::strstr(line, " (deleted)\n") != nullptr;  // a mapping's first line
    }
  }
  std::fclose(f);
  return total;
}

TEST_CASE("spilled pages stop counting as resident a window at a time") {
  SpillFile spill;
  const uint32_t per_run = 1024;  // a thread buffer's chunk
  const std::vector<Event> events = numbered_events(0, per_run);
  SpillRun run;
  REQUIRE(spill.append(events.data(), per_run, &run));  // the first segment exists
  const long before = resident_kib();
  const uint64_t total = uint64_t{64} << 20;  // 64 MiB of spilled events
  std::vector<SpillRun> runs;
  for (uint64_t bytes = 0; bytes < total; bytes += per_run * sizeof(Event)) {
    REQUIRE(spill.append(events.data(), per_run, &run));
    runs.push_back(run);
  }
  const long grown = resident_kib() - before;
  // At most the window being filled (1 MiB) plus the test's own vector of runs and slack.
  CHECK_MESSAGE(grown < 4 * 1024, "resident memory grew by " << grown << " KiB for 64 MiB spilled");
  // Released, not lost: every run still reads back.
  for (size_t i = 0; i < runs.size(); i += runs.size() / 7) CHECK(holds(spill, runs[i], events));
  CHECK(holds(spill, runs.back(), events));
}

TEST_CASE("reading spilled runs back keeps nothing resident, runs on page boundaries or not") {
  // A packed chunk holds as many events as fit (event_chunk.hpp), so a run's bytes seldom end on
  // a page, let alone on the kernel's 64 KiB fault-around block: packed back to back, a reader's
  // faults mapped its neighbours' pages and pages it had released, and a quarter of what the exit
  // report read stayed resident (the stress run's peak grew from 48 to 66 MB).
  for (const uint32_t per_run : {1024u, 1000u, 3770u}) {
    CAPTURE(per_run);
    SpillFile spill;
    const std::vector<Event> events = numbered_events(0, per_run);
    std::vector<SpillRun> runs;
    const uint64_t total = uint64_t{48} << 20;
    for (uint64_t bytes = 0; bytes < total; bytes += per_run * sizeof(Event)) {
      SpillRun run;
      REQUIRE(spill.append(events.data(), per_run, &run));
      runs.push_back(run);
    }
    const long before = resident_kib();
    uint64_t read = 0;
    for (const SpillRun &run : runs) {
      RunReader reader(spill, run);
      for (const Event *e = reader.peek(); e; reader.advance(), e = reader.peek())
        read += e->start == events[read % per_run].start;
    }
    CHECK(read == runs.size() * per_run);  // every event read back, in order
    const long grown = resident_kib() - before;
    CHECK_MESSAGE(grown < 2 * 1024, "resident memory grew by " << grown << " KiB reading "
                                                               << (total >> 20) << " MiB");
  }
}

// 1 MiB name blocks of the spill's, each full of 100-byte names "block <i> name <j>", handed back
// to their files as a thread buffer hands back a full block.
constexpr size_t kNameBlock = size_t{1} << 20;
constexpr size_t kNameBytes = 100;  // a name, its terminator included
std::vector<char *> name_blocks_of(SpillFile &spill, int count) {
  std::vector<char *> blocks;
  for (int i = 0; i < count; ++i) {
    char *b = spill.map_name_block(kNameBlock);
    REQUIRE(b != nullptr);
    for (size_t at = 0; at + kNameBytes <= kNameBlock; at += kNameBytes)
      std::snprintf(b + at, kNameBytes, "block %d name %zu", i, at / kNameBytes);
    ::madvise(b, kNameBlock, MADV_DONTNEED);
    blocks.push_back(b);
  }
  return blocks;
}

// Every name of `blocks` still what name_blocks_of wrote.
bool names_intact(const std::vector<char *> &blocks) {
  for (size_t i = 0; i < blocks.size(); ++i)
    for (size_t at = 0; at + kNameBytes <= kNameBlock; at += kNameBytes) {
      char expected[kNameBytes];
      std::snprintf(expected, sizeof expected, "block %zu name %zu", i, at / kNameBytes);
      if (std::strcmp(blocks[i] + at, expected) != 0) return false;
    }
  return true;
}

TEST_CASE("names read back from name blocks go back to their files, the least recent first") {
  // The exit report reads every event's name again (the table, the trace): each page it read of
  // a name block stayed mapped, 96 MB at exit for 8,000,000 distinct names (review NT-7).
  SpillFile spill;
  const std::vector<char *> blocks = name_blocks_of(spill, 24);
  const std::vector<NameSpan> spans = spill.name_blocks();
  REQUIRE(spans.size() == blocks.size());
  for (size_t i = 1; i < spans.size(); ++i) CHECK(spans[i - 1].data < spans[i].data);
  for (const NameSpan &span : spans) CHECK(span.size == kNameBlock);

  const long before = resident_kib();
  const std::string in_memory = "a name in memory";  // a thread's within the budget
  size_t most_touched = 0;
  {
    NamePages pages(spans);
    // Block by block as a thread's events name them, a name kept in memory between each two,
    // and every 1,000th name one of the first block's again (a name interned long before).
    for (int i = 0; i < 24; ++i)
      for (size_t at = 0; at + kNameBytes <= kNameBlock; at += kNameBytes) {
        pages.read(blocks[i] + at);
        CHECK_FALSE(blocks[i][at] == '\0');  // the bytes read, as the report reads them
        pages.read(in_memory.c_str());
        if (at / kNameBytes % 1000 == 0) pages.read(blocks[0]);
        most_touched = std::max(most_touched, pages.touched_bytes());
      }
    CHECK(most_touched <= NamePages::kMaxTouchedBytes);
  }  // the last blocks go back as the pass ends
  const long grown = resident_kib() - before;
  CHECK_MESSAGE(grown < 1024, "resident memory grew by " << grown << " KiB reading "
                                                         << 24 * kNameBlock / 1024
                                                         << " KiB of names");
  // Handed back, never lost: only the spill's shared file pages, whose data stays in the file.
  CHECK(in_memory == "a name in memory");
  CHECK(names_intact(blocks));
}

TEST_CASE("names read over and over from a few blocks stay mapped while they fit") {
  // A loop's names picked out of order from six blocks: handing every block back whenever a
  // fifth was touched made the exit a page fault per name, 2.5 times as long (review RV-1).
  SpillFile spill;
  const std::vector<char *> blocks = name_blocks_of(spill, 6);
  const std::vector<NameSpan> spans = spill.name_blocks();
  NamePages pages(spans);
  uint64_t state = 1;
  for (int i = 0; i < 200000; ++i) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    const size_t block = (state >> 33) % blocks.size();
    const size_t at = (state >> 13) % (kNameBlock / kNameBytes) * kNameBytes;
    pages.read(blocks[block] + at);
  }
  CHECK(pages.handed_back() == 0);
  CHECK(pages.touched_bytes() == 6 * kNameBlock);
  pages.release();
  CHECK(pages.handed_back() == 6);
  CHECK(names_intact(blocks));
}

TEST_CASE("a window goes back when its last byte is written, whichever thread writes it last") {
  // Thread A reserves a run and is preempted before it copies it; other threads fill and pass
  // the window's end meanwhile. Released then, A's pages would come back when A writes them
  // and stay resident for good: 64 windows so, 4 MiB.
  SpillFile spill;
  const uint32_t per_run = 1024;  // 64 KiB: 16 runs fill a 1 MiB window
  const std::vector<Event> events = numbered_events(0, per_run);
  SpillRun warm;
  REQUIRE(spill.append(events.data(), per_run, &warm));
  for (int i = 1; i < 16; ++i) REQUIRE(spill.append(events.data(), per_run, &warm));
  const long before = resident_kib();
  std::vector<SpillRun> late;
  for (int window = 0; window < 64; ++window) {
    SpillRun stalled;
    REQUIRE(spill.reserve(per_run, &stalled));  // A: reserved, not yet written
    for (int i = 1; i < 16; ++i) REQUIRE(spill.append(events.data(), per_run, &warm));
    REQUIRE(spill.write(stalled, 0, events.data(), per_run));  // A writes last
    late.push_back(stalled);
  }
  const long grown = resident_kib() - before;
  CHECK_MESSAGE(grown < 1024, "resident memory grew by " << grown << " KiB");
  for (const SpillRun &run : late) CHECK(holds(spill, run, events));
}

TEST_CASE("spilled runs survive the program closing every descriptor and reusing the numbers") {
  char tmpl[] = "/tmp/ferrum-spill-test-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const std::set<int> kept = open_descriptors();

  Recorder r(spilling_at_once(), 0);
  // Six chunks' worth of ranges: 5 runs spilled, the rest in memory.
  constexpr int kFirst = 3 * EventChunk::kRepeatedEvents;
  record(r, kFirst);
  REQUIRE(r.spill_file().size() >= 5u * EventChunk::kRepeatedEvents * sizeof(Event));

  // What a daemon does after fork: close everything but the standard streams (and what the test
  // runner itself holds), then open files of its own, which get the lowest numbers, and dup2 them
  // over other numbers.
  for (int fd = 3; fd < 1024; ++fd)
    if (!kept.count(fd)) close(fd);
  const std::string payload(512 * 1024, 'P');
  std::vector<std::string> paths;
  std::vector<int> own;
  for (int i = 0; i < 4; ++i) {
    paths.push_back(dir + "/own" + std::to_string(i));
    const int fd = open(paths.back().c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, payload.data(), payload.size()) == static_cast<ssize_t>(payload.size()));
    own.push_back(fd);
  }
  for (int target = 3; target < 64; ++target)
    if (!kept.count(target) && target != own[0] && target != own[1] && target != own[2] &&
        target != own[3])
      REQUIRE(dup2(own[target % 4], target) == target);

  record(r, 3000);  // 6,000 more, spilled while the program's files hold every low number
  const Snapshot s = r.snapshot_for_report();
  CHECK(s.range_count() == 2 * kFirst + 6000);
  uint64_t outer = 0, inner = 0, listed = 0;
  for_each_event(s, s.threads[0], [&](const Event &e) {
    ++listed;
    outer += std::strcmp(e.attrs.name, "outer") == 0;
    inner += std::strcmp(e.attrs.name, "inner") == 0;
  });
  CHECK(listed == 2 * kFirst + 6000);
  CHECK(outer == kFirst + 3000);
  CHECK(inner == kFirst + 3000);
  Snapshot again = r.snapshot();
  // Each snapshot fits its own tick-to-ns line (recorder/clock.hpp); one line for both compares
  // the events themselves.
  again.scale = s.scale;
  CHECK(render_trace(s) == render_trace(again));

  for (int target = 3; target < 64; ++target)
    if (!kept.count(target)) close(target);
  for (const std::string &path : paths) {
    struct stat st {};
    REQUIRE(stat(path.c_str(), &st) == 0);
    CHECK(st.st_size == static_cast<off_t>(payload.size()));
    std::string back(payload.size(), '\0');
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(read(fd, back.data(), back.size()) == static_cast<ssize_t>(back.size()));
    close(fd);
    CHECK(back == payload);
    unlink(path.c_str());
  }
  rmdir(dir.c_str());
}

TEST_CASE("a fork child never writes the parent's segments") {
  Recorder r(spilling_at_once(), 0);
  record(r, 2048);  // 4 runs
  const Snapshot before = r.snapshot();
  const std::string parent_trace = render_trace(before);
  r.before_fork();
  const pid_t pid = fork();
  if (pid == 0) {
    r.after_fork_in_child();
    int failures = 0;
    failures |= (r.spill_file().segments() != 0) << 0;
    record(r, 4096);  // 8 runs of the child's own
    const Snapshot s = r.snapshot_for_report();
    failures |= (s.range_count() != 8192) << 1;
    failures |= (r.spill_file().segments() == 0) << 2;
    _exit(failures);
  }
  r.after_fork_in_parent();
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(wait_for_child(pid, &status));  // bounded: a stuck child fails here
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  Snapshot after = r.snapshot();
  // Each snapshot fits its own tick-to-ns line (recorder/clock.hpp); one line for both compares
  // the events themselves.
  after.scale = before.scale;
  CHECK(render_trace(after) == parent_trace);
}

TEST_CASE(
    "a spill directory where nothing can be created: FERRUM_RECORD_MEMORY still bounds memory, "
    "what does not fit is dropped and counted, and the spill says why") {
  Settings settings = spilling_at_once();
  Recorder r(settings, 0);
  const_cast<SpillFile &>(r.spill_file()).set_directory_for_tests("/proc/self/no-such-directory");
  // The system calls that failed (a name block, a segment) leave the program's errno alone: it
  // may be between a call of its own and the check of its errno (a signal handler's ranges).
  errno = 4242;
  record(r, 3000);
  CHECK(errno == 4242);
  CHECK(r.spill_file().failed());
  CHECK(r.spill_file().failure() == ENOENT);
  CHECK(r.spill_file().size() == 0);
  CHECK(r.spill_file().segments() == 0);
  const Snapshot s = r.snapshot_for_report();
  CHECK(s.threads[0].runs.empty());
  // The budget (0: spill every full chunk) leaves the thread its first chunk, no more. It used to
  // keep all 6,000 in memory: without end in a long run.
  CHECK(s.range_count() == EventChunk::kRepeatedEvents);
  CHECK(s.memory_drops == 6000 - EventChunk::kRepeatedEvents);
}

// Bytes mapped from files without a name (/proc/self/maps): the spill's segments and name
// blocks (the test makes no other such mapping).
long unnamed_mapped_kib() {
  FILE *f = std::fopen("/proc/self/maps", "re");
  REQUIRE(f != nullptr);
  long total = 0;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long start = 0, end = 0;
    if (std::strstr(line, " (deleted)\n") && std::sscanf(line, "%lx-%lx", &start, &end) == 2)
      total += static_cast<long>((end - start) / 1024);
  }
  std::fclose(f);
  return total;
}

TEST_CASE("names beyond FERRUM_RECORD_MEMORY go to small spill blocks first, every name kept") {
  // A thread's new names beyond the budget go to a block of the spill's, whose disk space is
  // allocated up front: 32 threads that named a few ranges each took 32 MiB of $TMPDIR (1 MiB
  // each; memory, where $TMPDIR is a tmpfs). A thread's first block is 64 KiB now.
  const long before = unnamed_mapped_kib();
  Recorder r(spilling_at_once(), 0);
  const auto &g = r.names().global_domain();
  std::vector<std::thread> threads;
  for (int t = 0; t < 32; ++t)
    threads.emplace_back([&r, &g, t] {
      for (int i = 0; i < 5; ++i) {
        const std::string name = "thread " + std::to_string(t) + " range " + std::to_string(i);
        r.push(g, name, false, {});
        r.pop(g);
      }
    });
  for (std::thread &t : threads) t.join();
  const long grown = unnamed_mapped_kib() - before;
  CHECK(grown > 0);  // the names did go to spill blocks (the budget is 0)
  CHECK_MESSAGE(grown <= 32 * 64, "32 threads' names took " << grown << " KiB of spill blocks");
  std::set<std::string> names;
  for (const ThreadSnapshot &t : r.snapshot().threads)
    for (const Event &e : t.events) names.insert(e.attrs.name);
  CHECK(names.size() == 32 * 5);
  CHECK(names.count("thread 31 range 4") == 1);
}

TEST_CASE("the trace's range count is the events it holds") {
  // A snapshot whose bookkeeping claims a run that cannot be read: the footer says what the
  // trace holds (2 ranges), never the 1,026 the bookkeeping claims.
  Recorder r(spilling_at_once(), 0);
  record(r, 1);
  Snapshot s = r.snapshot();
  static SpillFile empty_spill;
  s.spill = &empty_spill;
  SpillRun unreadable;
  unreadable.count = 1024;
  unreadable.ranges = 1024;
  s.threads[0].runs = {unreadable};
  REQUIRE(s.range_count() == 1026);
  const std::string json = render_trace(s);
  size_t events = 0;
  for (size_t at = json.find("\"ph\":\"X\""); at != std::string::npos;
       at = json.find("\"ph\":\"X\"", at + 1))
    ++events;
  CHECK(events == 2);
  CHECK(json.find("\"ranges\":2,") != std::string::npos);
}

TEST_CASE("events stay in memory up to FERRUM_RECORD_MEMORY, shared by threads, then spill") {
  Settings settings;
  // Eight full chunks (each charged as the Events it holds: make_room), and each
  // thread's first block of names (16 KiB, heap within the budget: thread_buffer.cpp).
  settings.memory = 8 * EventChunk::kRepeatedEvents * sizeof(Event) + 2 * 16 * 1024;
  Recorder r(settings, 0);
  // Two threads, 4 chunks' worth each (plus their first chunk): all in memory.
  const int per_chunk_rounds = EventChunk::kRepeatedEvents / 2;  // two ranges a round
  std::thread a([&] { record(r, 5 * per_chunk_rounds); });
  a.join();
  std::thread b([&] { record(r, 5 * per_chunk_rounds); });
  b.join();
  CHECK(r.spill_file().size() == 0);
  // Past the shared allowance every full chunk is spilled, and nothing is lost.
  record(r, 20 * per_chunk_rounds);
  CHECK(r.spill_file().size() > 0);
  CHECK(r.spill_file().size() <= 40u * per_chunk_rounds * sizeof(Event));
  const Snapshot snap = r.snapshot();
  size_t total = 0;
  for (const ThreadSnapshot &t : snap.threads) total += t.events.size();
  CHECK(total == 60u * per_chunk_rounds);
}
