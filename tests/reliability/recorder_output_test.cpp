// The recorder's output safety and bounded memory, without NVTX:
//   - events spill to a temporary file as they complete, and the trace written from the spill
//     file is byte for byte the trace written from memory;
//   - the trace file never follows a symbolic link planted at its path, never replaces a file
//     that is not a ferrum-replay trace unless forced (and then only a regular file), and is
//     created 0644 minus umask;
//   - writing it never waits on a lock we did not create (an flock on the directory is
//     irrelevant, our own lock is bounded), a kill mid-write leaves nothing at the final name
//     and the next run removes the dead process's temporary, devices/FIFOs/descriptors are
//     written as streams with a bounded wait.
#include <dirent.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "output_file.hpp"
#include "recorder.hpp"
#include "snapshot.hpp"
#include "spill_file.hpp"
#include "trace_writer.hpp"

using namespace ferrum_replay::recorder;

namespace {
// These tests are about the spill: every full chunk goes to it (FERRUM_RECORD_MEMORY=0), so
// that thousands of ranges, not millions, exercise it.
ferrum_replay::recorder::Settings spilling_at_once() {
  ferrum_replay::recorder::Settings settings;
  settings.memory = 0;
  return settings;
}
}  // namespace

namespace {

// A chunk of ranges that repeat their attributes (event_chunk.hpp): a run is this many events.
constexpr uint32_t kChunk = EventChunk::kRepeatedEvents;

std::string read_file(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string &path, const std::string &text) {
  std::ofstream(path) << text;
}

// The path PREFIX + fd, given as the output setting: noted as the recorder notes its output
// when it starts (note_output_stream), the only way a descriptor above 2 is written.
std::string noted(const char *prefix, int fd) {
  const std::string path = prefix + std::to_string(fd);
  ferrum_replay::common::note_output_stream(path.c_str());
  return path;
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/ferrum-reliability-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string operator/(const std::string &name) const { return path + "/" + name; }
};

// Nested ranges in two domains, so that the trace order (start, longer first) differs from the
// order in which ranges end, and every run holds both domains.
void record_nested(Recorder &r, int rounds, const char *outer_name = "outer") {
  const auto &g = r.names().global_domain();
  auto *d = r.names().create_domain("spill");
  for (int i = 0; i < rounds; ++i) {
    RangeAttrs attrs;
    attrs.payload.kind = PayloadKind::u64;
    attrs.payload.u = static_cast<uint64_t>(i);
    r.push(g, outer_name, true, attrs);
    r.push(*d, "inner", true, attrs);
    r.push(*d, "innermost", false, {});
    r.pop(*d);
    r.pop(*d);
    r.pop(g);
  }
}

std::vector<Event> in_order(const Snapshot &snap, const ThreadSnapshot &t) {
  std::vector<Event> out;
  for_each_event_in_order(snap, t, [&](const Event &e) { out.push_back(e); });
  return out;
}

bool same_event(const Event &a, const Event &b) {
  return a.start == b.start && a.end == b.end && a.domain_id == b.domain_id && a.depth == b.depth &&
         a.attrs.name == b.attrs.name && a.attrs.payload.u == b.attrs.payload.u;
}

}  // namespace

TEST_CASE("events spill as they complete and the trace is identical") {
  Recorder r(spilling_at_once(), 0);
  // 3 ranges a round: 6 full runs a thread and a partial chunk.
  constexpr int kThreads = 3, kRuns = 6, kRounds = kRuns * kChunk / 3 + 180;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&] { record_nested(r, kRounds); });
  for (auto &t : threads) t.join();

  CHECK(r.spill_file().size() >= uint64_t{kThreads} * kRuns * kChunk * sizeof(Event));
  Snapshot streamed = r.snapshot_for_report();
  REQUIRE(streamed.threads.size() == kThreads);
  for (const ThreadSnapshot &t : streamed.threads) {
    CHECK(t.runs.size() == kRuns);
    CHECK(t.events.size() == 3u * kRounds - kRuns * kChunk);  // only the last, partial chunk
    CHECK(t.event_count() == 3u * kRounds);
  }
  Snapshot in_memory = r.snapshot();
  // Each snapshot fits its own tick-to-ns line (recorder/clock.hpp); one line for both compares
  // the events themselves.
  in_memory.scale = streamed.scale;
  CHECK(in_memory.spill == nullptr);
  for (const ThreadSnapshot &t : in_memory.threads) {
    CHECK(t.runs.empty());
    CHECK(t.events.size() == 3u * kRounds);
    CHECK(std::is_sorted(t.events.begin(), t.events.end(), event_before));
  }
  CHECK(streamed.range_count() == in_memory.range_count());
  CHECK(streamed.used_domains() == in_memory.used_domains());
  CHECK(render_trace(streamed) == render_trace(in_memory));

  // The same events as a plain sort of everything (the merge loses and duplicates nothing).
  for (size_t i = 0; i < streamed.threads.size(); ++i) {
    std::vector<Event> all;
    for_each_event(streamed, streamed.threads[i], [&](const Event &e) { all.push_back(e); });
    sort_events(all);
    const std::vector<Event> merged = in_order(streamed, streamed.threads[i]);
    REQUIRE(all.size() == merged.size());
    CHECK(std::equal(all.begin(), all.end(), merged.begin(), same_event));
  }
}

TEST_CASE("a thread's memory stays one chunk however long it records") {
  Recorder r(spilling_at_once(), 0);
  record_nested(r, 100000);  // 300,000 ranges
  const Snapshot s = r.snapshot_for_report();
  REQUIRE(s.threads.size() == 1);
  CHECK(s.threads[0].events.size() < kChunk);
  CHECK(s.threads[0].event_count() == 300000);
}

TEST_CASE("without spilling every event stays in memory, with the same trace") {
  Settings no_spill;
  no_spill.spill = false;
  Recorder r(no_spill, 0);
  record_nested(r, 2000);
  CHECK(r.spill_file().size() == 0);
  Snapshot s = r.snapshot_for_report();
  CHECK(s.threads[0].runs.empty());
  CHECK(s.threads[0].events.size() == 6000);
  Snapshot again = r.snapshot();
  // Each snapshot fits its own tick-to-ns line (recorder/clock.hpp); one line for both compares
  // the events themselves.
  again.scale = s.scale;
  CHECK(render_trace(s) == render_trace(again));
}

// `runs` full runs, each of which overlaps every earlier one in time: `runs` ranges are opened
// first and one of them ends in each chunk, so every run starts with a range that began before
// the others' ends (chain_runs: no two runs can be read one after the other).
void record_overlapping_runs(Recorder &r, uint32_t runs) {
  const auto &g = r.names().global_domain();
  for (uint32_t i = 0; i < runs; ++i) r.push(g, "long", false, {});
  for (uint32_t run = 0; run < runs; ++run) {
    for (uint32_t i = 0; i + 1 < kChunk; ++i) {
      r.push(g, "short", false, {});
      r.pop(g);
    }
    r.pop(g);  // the chunk's last event: a "long" range that started before every run
  }
  r.push(g, "short", false, {});  // the last chunk is spilled when the next event needs room
  r.pop(g);
}

TEST_CASE("runs are compacted so the merge reads from few sources at once") {
  Recorder r(spilling_at_once(), 0);
  record_overlapping_runs(r, 17);
  const Snapshot reference = r.snapshot();
  Snapshot s = r.snapshot_for_report();
  // Each snapshot fits its own tick-to-ns line (recorder/clock.hpp); one line for both compares
  // the events themselves.
  s.scale = reference.scale;
  REQUIRE(s.threads[0].runs.size() == 17);
  CHECK(chain_runs(s.threads[0].runs).size() == 17);
  SpillFile &spill = const_cast<SpillFile &>(r.spill_file());
  const uint64_t spilled = spill.size();
  compact_runs(spill, s.threads[0].runs, 4);
  CHECK(s.threads[0].runs.size() <= 4);
  CHECK(spill.size() > spilled);  // merged runs were written
  CHECK(s.threads[0].event_count() == reference.threads[0].events.size());
  CHECK(render_trace(s) == render_trace(reference));
}

TEST_CASE("runs that follow one another are read as chains, not copied") {
  // Nested ranges: a chunk may end inside a nest whose outer ranges end in the next chunk, so
  // a run can overlap the one before it, never the one before that: two chains.
  Recorder r(spilling_at_once(), 0);
  record_nested(r, 17 * kChunk / 3 + 5);  // 17 runs and a few events in memory
  const Snapshot reference = r.snapshot();
  Snapshot s = r.snapshot_for_report();
  s.scale = reference.scale;
  REQUIRE(s.threads[0].runs.size() == 17);
  CHECK(chain_runs(s.threads[0].runs).size() <= 2);
  SpillFile &spill = const_cast<SpillFile &>(r.spill_file());
  const uint64_t spilled = spill.size();
  compact_runs(spill, s.threads[0].runs, 4);
  CHECK(s.threads[0].runs.size() == 17);
  CHECK(spill.size() == spilled);  // nothing copied
  CHECK(render_trace(s) == render_trace(reference));
}

TEST_CASE("snapshots taken while threads spill are consistent") {
  Recorder r(spilling_at_once(), 0);
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&] { record_nested(r, 20000); });
  std::thread reader([&] {
    while (!done.load()) {
      const Snapshot s = r.snapshot();
      for (const ThreadSnapshot &t : s.threads) {
        // Whatever was captured is complete: the order holds, and nothing beyond what was pushed.
        CHECK(std::is_sorted(t.events.begin(), t.events.end(), event_before));
        CHECK(t.events.size() <= 60000u);
      }
    }
  });
  for (auto &t : threads) t.join();
  done = true;
  reader.join();
  CHECK(r.snapshot().range_count() == 4u * 60000);
}

TEST_CASE("a fork child records into its own spill file") {
  Recorder r(spilling_at_once(), 0);
  record_nested(r, 3 * kChunk);  // 9 runs in the parent's file
  const uint64_t parent_spilled = r.spill_file().size();
  r.before_fork();
  const pid_t pid = fork();
  if (pid == 0) {
    r.after_fork_in_child();
    int failures = 0;
    // The parent's ranges belong to the parent's trace.
    failures |= (r.snapshot().range_count() != 0) << 0;
    failures |= (r.spill_file().size() != 0) << 1;
    record_nested(r, 2 * kChunk, "child");
    const Snapshot s = r.snapshot_for_report();
    failures |= (s.range_count() != 6u * kChunk) << 2;
    failures |= (s.threads.size() != 1 || s.threads[0].runs.size() != 5)
                << 3;  // the 6th chunk is full, not yet spilled
    Snapshot again = r.snapshot();
    again.scale = s.scale;  // one tick-to-ns line for both (see above)
    failures |= (render_trace(s) != render_trace(again)) << 4;
    _exit(failures);
  }
  r.after_fork_in_parent();
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(r.spill_file().size() == parent_spilled);
  CHECK(r.snapshot().range_count() == 9u * kChunk);
}

TEST_CASE("a spill file that cannot be created: events beyond the budget are dropped, counted") {
  // (TMPDIR is read from the environment the process started with: common/startup_env.hpp.)
  Recorder r(spilling_at_once(), 0);
  const_cast<SpillFile &>(r.spill_file()).set_directory_for_tests("/proc/self/no-such-directory");
  record_nested(r, 3000);
  CHECK(r.spill_file().size() == 0);
  Snapshot s = r.snapshot_for_report();
  CHECK(s.threads[0].runs.empty());
  // FERRUM_RECORD_MEMORY=0 leaves the thread its first chunk; the rest is counted, not kept.
  CHECK(s.range_count() == kChunk);
  CHECK(s.memory_drops == 9000 - kChunk);
}

// ---- the trace file ----

namespace {

Snapshot small_snapshot(Recorder &r) {
  r.push(r.names().global_domain(), "x", false, {});
  r.pop(r.names().global_domain());
  return r.snapshot();
}

mode_t mode_of(const std::string &path) {
  struct stat st;
  REQUIRE(lstat(path.c_str(), &st) == 0);
  return st.st_mode;
}

}  // namespace

TEST_CASE("a symbolic link planted at the trace path is never followed") {
  TempDir dir;
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  const std::string victim = dir / "victim.txt";
  write_file(victim, "precious\n");
  const std::string path = dir / "trace.json";
  REQUIRE(symlink(victim.c_str(), path.c_str()) == 0);

  TraceFileOutcome outcome;
  REQUIRE(write_trace_file(path, s, TraceFileOptions{}, &outcome));
  CHECK(outcome.diverted);
  CHECK(outcome.written_path == dir / "trace.1.json");
  CHECK(read_file(victim) == "precious\n");
  CHECK(S_ISLNK(mode_of(path)));
  CHECK(read_file(outcome.written_path) == render_trace(s));

  // A dangling link is not followed either (open(O_CREAT) through it would create its target).
  const std::string dangling = dir / "dangling.json";
  REQUIRE(symlink((dir / "created-through-link").c_str(), dangling.c_str()) == 0);
  REQUIRE(write_trace_file(dangling, s, TraceFileOptions{}, &outcome));
  CHECK(outcome.written_path == dir / "dangling.1.json");
  CHECK(access((dir / "created-through-link").c_str(), F_OK) != 0);

  SUBCASE("forced: a symbolic link is still neither followed nor replaced") {
    TraceFileOptions force;
    force.force = true;
    REQUIRE(write_trace_file(path, s, force, &outcome));
    CHECK(outcome.diverted);
    CHECK_FALSE(outcome.foreign_regular);  // the message must not suggest FORCE
    CHECK(outcome.written_path == dir / "trace.2.json");
    CHECK(S_ISLNK(mode_of(path)));
    CHECK(read_file(victim) == "precious\n");
  }
}

TEST_CASE("a file that is not a ferrum-replay trace is kept unless forced") {
  TempDir dir;
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  const std::string path = dir / "out.json";
  write_file(path, "{\"traceEvents\":[]}\n");  // a trace, but not one of ours
  write_file(dir / "out.1.json", "also someone else's\n");

  TraceFileOutcome outcome;
  REQUIRE(write_trace_file(path, s, TraceFileOptions{}, &outcome));
  CHECK(outcome.diverted);
  CHECK(outcome.written_path == dir / "out.2.json");
  CHECK(read_file(path) == "{\"traceEvents\":[]}\n");
  CHECK(read_file(dir / "out.1.json") == "also someone else's\n");

  // Our own earlier trace is replaced in place.
  REQUIRE(write_trace_file(outcome.written_path, s, TraceFileOptions{}, &outcome));
  CHECK_FALSE(outcome.diverted);
  CHECK(outcome.written_path == dir / "out.2.json");

  // A truncated trace of ours (a crash while copying it, say) no longer counts as ours.
  const std::string whole = read_file(dir / "out.2.json");
  write_file(dir / "cut.json", whole.substr(0, whole.size() / 2));
  CHECK(is_ferrum_trace_file(dir / "out.2.json"));
  CHECK_FALSE(is_ferrum_trace_file(dir / "cut.json"));
  // Another tool's trace that ends like a completed object is not ours either;
  // ours is known by its trailer even when its footer is longer than the 64 KiB read.
  write_file(dir / "other.json", "{\"traceEvents\":[],\"otherData\":{\"complete\":true}}\n");
  CHECK_FALSE(is_ferrum_trace_file(dir / "other.json"));
  write_file(dir / "long.json", "{\"traceEvents\":[\n],\"ferrumReplay\":{\"version\":1," +
                                    std::string(100000, ' ') + kTraceTrailer);
  CHECK(is_ferrum_trace_file(dir / "long.json"));

  TraceFileOptions force;
  force.force = true;
  REQUIRE(write_trace_file(path, s, force, &outcome));
  CHECK_FALSE(outcome.diverted);
  CHECK(read_file(path) == render_trace(s));
}

TEST_CASE("special files and directories at the trace path") {
  TempDir dir;
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  TraceFileOutcome outcome;

  // A FIFO is a stream: without a reader it is an error at once (never a wait), and nothing is
  // created beside it nor is it replaced, even when forced.
  const std::string fifo = dir / "fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
  TraceFileOptions force;
  force.force = true;
  CHECK_FALSE(write_trace_file(fifo, s, force, &outcome));
  CHECK(outcome.stream);
  CHECK(outcome.error.find(std::strerror(ENXIO)) == 0);
  CHECK(S_ISFIFO(mode_of(fifo)));
  CHECK(access((dir / "fifo.1").c_str(), F_OK) != 0);

  REQUIRE(mkdir((dir / "d.json").c_str(), 0755) == 0);
  CHECK_FALSE(write_trace_file(dir / "d.json", s, TraceFileOptions{}, &outcome));
  CHECK(outcome.error == std::strerror(EISDIR));

  CHECK_FALSE(write_trace_file(dir / "missing/t.json", s, TraceFileOptions{}, &outcome));
  CHECK(outcome.error == std::strerror(ENOENT));
  write_file(dir / "plain", "x");
  CHECK_FALSE(write_trace_file(dir / "plain/t.json", s, TraceFileOptions{}, &outcome));
  CHECK(outcome.error == std::strerror(ENOTDIR));
  CHECK_FALSE(write_trace_file("", s, TraceFileOptions{}, &outcome));
  CHECK_FALSE(write_trace_file(dir.path + "/", s, TraceFileOptions{}, &outcome));
  CHECK_FALSE(write_trace_file(dir / std::string(300, 'n'), s, TraceFileOptions{}, &outcome));
  CHECK(outcome.error == std::strerror(ENAMETOOLONG));

  // No temporary file left behind by any of it.
  const std::string listing = dir / "listing";
  std::system(("ls -a '" + dir.path + "' > '" + listing + "'").c_str());
  CHECK(read_file(listing).find(".tmp") == std::string::npos);
}

TEST_CASE("the trace file is created 0644 minus the umask") {
  TempDir dir;
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  for (const mode_t mask : {mode_t{022}, mode_t{027}, mode_t{077}, mode_t{0}}) {
    const mode_t old = umask(mask);
    TraceFileOutcome outcome;
    const std::string path = dir / ("umask" + std::to_string(mask) + ".json");
    const bool ok = write_trace_file(path, s, TraceFileOptions{}, &outcome);
    umask(old);
    REQUIRE(ok);
    CHECK((mode_of(path) & 07777) == (0644 & ~mask));
  }
}

TEST_CASE("numbered names keep the extension") {
  CHECK(numbered_path("/a/trace.json", 1) == "/a/trace.1.json");
  CHECK(numbered_path("/a/trace.123.json", 2) == "/a/trace.123.2.json");
  CHECK(numbered_path("/a.d/trace", 3) == "/a.d/trace.3");
  CHECK(numbered_path("/a/.hidden", 1) == "/a/.hidden.1");
  CHECK(numbered_path("trace.json", 1) == "trace.1.json");
}

// ---- common/output_file: never block, never leave a partial file, streams ----

namespace {

double seconds_since(const timespec &start) {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec - start.tv_sec) +
         static_cast<double>(now.tv_nsec - start.tv_nsec) / 1e9;
}

timespec now_monotonic() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t;
}

uint64_t realtime_ns_now() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
}

// Holds the output lock of `dir` the way another ferrum-replay process would.
int hold_output_lock(const std::string &dir) {
  char name[200];
  REQUIRE(ferrum_replay::common::output_lock_name(dir.c_str(), name, sizeof name));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name, std::strlen(name));
  const int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(sock >= 0);
  REQUIRE(bind(sock, reinterpret_cast<sockaddr *>(&address),
               static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + std::strlen(name))) ==
          0);
  return sock;
}

std::vector<std::string> listing(const std::string &dir) {
  std::vector<std::string> names;
  if (DIR *d = opendir(dir.c_str())) {
    while (const dirent *e = readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A pid that is certainly not alive: a child that has exited and was reaped.
pid_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

}  // namespace

TEST_CASE("an flock on the output directory, by this process or another, never delays the trace") {
  TempDir dir;
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  TraceFileOutcome outcome;
  SUBCASE("the program's own singleton lock on its directory") {
    const int mine = open(dir.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(flock(mine, LOCK_EX) == 0);
    const timespec start = now_monotonic();
    REQUIRE(write_trace_file(dir / "t.json", s, TraceFileOptions{}, &outcome));
    CHECK(seconds_since(start) < 1.0);
    close(mine);
  }
  SUBCASE("another process's lock") {
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    const pid_t holder = fork();
    if (holder == 0) {
      const int fd = open(dir.path.c_str(), O_RDONLY | O_DIRECTORY);
      flock(fd, LOCK_EX);
      (void)!write(ready[1], "x", 1);
      pause();
      _exit(0);
    }
    char byte;
    REQUIRE(read(ready[0], &byte, 1) == 1);
    const timespec start = now_monotonic();
    REQUIRE(write_trace_file(dir / "t.json", s, TraceFileOptions{}, &outcome));
    CHECK(seconds_since(start) < 1.0);
    kill(holder, SIGKILL);
    waitpid(holder, nullptr, 0);
    close(ready[0]);
    close(ready[1]);
  }
  CHECK(outcome.written_path == dir / "t.json");
  CHECK(outcome.unlocked.empty());
  CHECK(read_file(dir / "t.json") == render_trace(s));
}

TEST_CASE("the output lock held elsewhere costs at most ~2 s and then nothing is replaced") {
  TempDir dir;
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  const std::string path = dir / "t.json";
  REQUIRE(write_trace_file(path, s, TraceFileOptions{}, &*std::make_unique<TraceFileOutcome>()));
  const std::string earlier = read_file(path);
  const int lock = hold_output_lock(dir.path);
  TraceFileOptions options;
  options.lock_timeout_ms = 300;
  const timespec start = now_monotonic();
  TraceFileOutcome outcome;
  REQUIRE(write_trace_file(path, s, options, &outcome));
  const double waited = seconds_since(start);
  CHECK(waited >= 0.25);
  CHECK(waited < 1.5);
  CHECK(outcome.unlocked ==
        "the output lock of its directory was held by another process for 300 ms (a ferrum-replay "
        "one writing there, or any process of any user that took its name)");
  // Our earlier trace would be replaced under the lock; without it, the trace goes beside.
  CHECK(outcome.written_path == numbered_path(path, static_cast<unsigned long>(getpid())));
  CHECK(read_file(path) == earlier);
  close(lock);
  // The default bound.
  const int again = hold_output_lock(dir.path);
  const timespec start2 = now_monotonic();
  REQUIRE(write_trace_file(dir / "u.json", s, TraceFileOptions{}, &outcome));
  CHECK(seconds_since(start2) < 3.0);  // nothing at u.json: written without waiting on others
  close(again);
}

TEST_CASE("a lock that cannot be taken here is not reported as held by another process") {
  using ferrum_replay::common::describe_lock_failure;
  using ferrum_replay::common::lock_output_dir;
  TempDir dir;
  char why[256];
  // Held elsewhere for the whole wait.
  const int held = hold_output_lock(dir.path);
  const int lock = lock_output_dir(dir.path.c_str(), 50);
  CHECK(lock == -EADDRINUSE);
  describe_lock_failure(lock, 2000, why, sizeof why);
  CHECK(std::string(why) ==
        "the output lock of its directory was held by another process for 2 s (a ferrum-replay "
        "one writing there, or any process of any user that took its name)");
  close(held);
  // No descriptor left for the socket: refused at once, and said so.
  rlimit files{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &files) == 0);
  const int lowest_free = dup(0);
  REQUIRE(lowest_free >= 0);
  close(lowest_free);
  rlimit none = files;
  none.rlim_cur = static_cast<rlim_t>(lowest_free);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &none) == 0);
  const timespec start = now_monotonic();
  const int refused = lock_output_dir(dir.path.c_str(), 2000);
  const double waited = seconds_since(start);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &files) == 0);
  CHECK(refused == -EMFILE);
  CHECK(waited < 0.5);
  describe_lock_failure(refused, 2000, why, sizeof why);
  CHECK(std::string(why) == std::string("the output lock of its directory cannot be taken here: ") +
                                std::strerror(EMFILE));
  // The directory gone.
  const int gone = lock_output_dir((dir / "missing").c_str(), 2000);
  CHECK(gone == -ENOENT);
  // A buffer too small still ends in a NUL.
  char small[8];
  describe_lock_failure(gone, 2000, small, sizeof small);
  CHECK(std::strlen(small) == 7);
}

TEST_CASE("leftover temporaries of dead processes of ours are removed; nothing else is") {
  TempDir dir;
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  const std::string path = dir / "t.json";
  // What our own temporary's name looks like on this host.
  char tmp[4200];
  const int fd = ferrum_replay::common::create_temp_beside(path.c_str(), tmp, sizeof tmp);
  REQUIRE(fd >= 0);
  close(fd);
  unlink(tmp);
  const std::string own(tmp);
  const std::string host_part = own.substr(path.size() + 1, 8);  // PATH.HOSTTAG.PID.N.tmp
  const auto temp_of = [&](long pid, int n) {
    return path + "." + host_part + "." + std::to_string(pid) + "." + std::to_string(n) + ".tmp";
  };
  const pid_t dead = dead_pid();
  const std::string header = "{\"traceEvents\":[\n{\"ph\":\"M\"";
  write_file(temp_of(dead, 0), header + std::string(100000, ' '));  // killed mid-write
  write_file(temp_of(dead, 1), "");                                 // killed before writing
  write_file(temp_of(dead, 2), "someone else's data");              // not ours: kept
  write_file(temp_of(getppid(), 0), header);                        // alive: kept
  write_file(path + ".0badc0de." + std::to_string(dead) + ".0.tmp", header);  // another host
  REQUIRE(symlink("/etc/hostname", temp_of(dead, 3).c_str()) == 0);           // a link: kept

  TraceFileOutcome outcome;
  REQUIRE(write_trace_file(path, s, TraceFileOptions{}, &outcome));
  CHECK(outcome.written_path == path);
  const std::vector<std::string> left = listing(dir.path);
  const auto has = [&](const std::string &full) {
    return std::find(left.begin(), left.end(), full.substr(dir.path.size() + 1)) != left.end();
  };
  CHECK_FALSE(has(temp_of(dead, 0)));
  CHECK_FALSE(has(temp_of(dead, 1)));
  CHECK(has(temp_of(dead, 2)));
  CHECK(has(temp_of(getppid(), 0)));
  CHECK(has(path + ".0badc0de." + std::to_string(dead) + ".0.tmp"));
  CHECK(has(temp_of(dead, 3)));
  CHECK(has(path));
  CHECK(left.size() == 5);
}

TEST_CASE("a trace killed mid-write leaves no file at the final name") {
  TempDir dir;
  const std::string path = dir / "big.json";
  const pid_t child = fork();
  if (child == 0) {
    Recorder r(spilling_at_once(), 0);
    record_nested(r, 200000);  // a trace of tens of MB: long enough to be killed in the middle
    const Snapshot s = r.snapshot_for_report();
    TraceFileOutcome outcome;
    write_trace_file(path, s, TraceFileOptions{}, &outcome);
    _exit(0);
  }
  // Kill it once its temporary has grown. Recording the ranges comes first and may take long
  // (a sanitizer build on a loaded machine): wait for the temporary as long as the child lives,
  // up to a generous bound.
  bool killed_mid_write = false, exited = false;
  const time_t give_up = time(nullptr) + 300;
  while (!killed_mid_write && !exited && time(nullptr) < give_up) {
    for (const std::string &name : listing(dir.path)) {
      struct stat st {};
      if (!killed_mid_write && name.find(".tmp") != std::string::npos &&
          stat((dir / name).c_str(), &st) == 0 && st.st_size > 4096) {
        kill(child, SIGKILL);
        killed_mid_write = true;
      }
    }
    if (!killed_mid_write) {
      exited = waitpid(child, nullptr, WNOHANG) == child;
      usleep(2000);
    }
  }
  if (!exited) {
    if (!killed_mid_write) kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  }
  REQUIRE(killed_mid_write);
  CHECK(access(path.c_str(), F_OK) != 0);  // never a partial trace (nor a placeholder) at the name

  // The next run writing to that name takes it and cleans up.
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  TraceFileOutcome outcome;
  REQUIRE(write_trace_file(path, s, TraceFileOptions{}, &outcome));
  CHECK(outcome.written_path == path);
  CHECK_FALSE(outcome.diverted);
  CHECK(listing(dir.path) == std::vector<std::string>{"big.json"});
}

TEST_CASE("a file written during this run is a sibling's: written beside it, never replaced") {
  TempDir dir;
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  const std::string path = dir / "job.json";
  TraceFileOptions options;
  options.run_start_ns = realtime_ns_now() - 1000000000ull;  // this run started 1 s ago
  TraceFileOutcome outcome;
  REQUIRE(write_trace_file(path, s, options, &outcome));  // the first process takes the name
  CHECK(outcome.written_path == path);
  const std::string first = read_file(path);
  REQUIRE(write_trace_file(path, s, options, &outcome));  // a sibling exits later
  CHECK(outcome.sibling);
  CHECK(outcome.written_path == numbered_path(path, static_cast<unsigned long>(getpid())));
  CHECK(read_file(path) == first);
  // A later run (started after both were written) replaces the earlier trace of ours.
  options.run_start_ns = realtime_ns_now() + 1000000000ull;
  REQUIRE(write_trace_file(path, s, options, &outcome));
  CHECK(outcome.written_path == path);
  CHECK_FALSE(outcome.sibling);
}

TEST_CASE("stream targets: devices, FIFOs and descriptors are written, never created or renamed") {
  CHECK(ferrum_replay::common::is_stream_target("/dev/null"));
  CHECK(ferrum_replay::common::is_stream_target("/dev/stdout"));
  CHECK(ferrum_replay::common::is_stream_target("/dev/stderr"));
  CHECK(ferrum_replay::common::is_stream_target("/proc/self/fd/1"));
  CHECK(ferrum_replay::common::is_stream_target("/dev/fd/2"));
  CHECK_FALSE(ferrum_replay::common::is_stream_target("/tmp"));
  CHECK_FALSE(ferrum_replay::common::is_stream_target("/etc/hostname"));
  CHECK_FALSE(ferrum_replay::common::is_stream_target("/nonexistent/x.json"));

  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  TraceFileOutcome outcome;
  REQUIRE(write_trace_file("/dev/null", s, TraceFileOptions{}, &outcome));
  CHECK(outcome.stream);
  CHECK(outcome.written_path == "/dev/null");
  CHECK(access("/dev/null.1", F_OK) != 0);

  CHECK_FALSE(write_trace_file("/dev/full", s, TraceFileOptions{}, &outcome));
  CHECK(outcome.error == std::strerror(ENOSPC));

  // A pipe given as /proc/self/fd/N: the trace arrives through it.
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  });
  REQUIRE(write_trace_file(noted("/proc/self/fd/", fds[1]), s, TraceFileOptions{}, &outcome));
  close(fds[1]);
  reader.join();
  close(fds[0]);
  CHECK(got == render_trace(s));

  // A full pipe nobody reads: given up after the stall bound, not a hang.
  REQUIRE(pipe(fds) == 0);
  Recorder big(Settings{}, 0);
  record_nested(big, 3000);  // more than a pipe holds
  const Snapshot bs = big.snapshot_for_report();
  const timespec start = now_monotonic();
  CHECK_FALSE(write_trace_file(noted("/dev/fd/", fds[1]), bs, TraceFileOptions{}, &outcome));
  CHECK(outcome.error.find(std::strerror(ETIMEDOUT)) == 0);
  // The bound is 2 s without progress: a reader that makes a little room late (a terminal's
  // second flush) may cost one more wait, and a loaded machine adds its scheduling delays.
  CHECK(seconds_since(start) < 6.0);

  // Its reader gone: EPIPE, and no SIGPIPE kills the process (we are still here).
  close(fds[0]);
  CHECK_FALSE(write_trace_file(noted("/dev/fd/", fds[1]), bs, TraceFileOptions{}, &outcome));
  CHECK(outcome.error == std::strerror(EPIPE));
  sigset_t pending;
  sigpending(&pending);
  CHECK_FALSE(sigismember(&pending, SIGPIPE));
  close(fds[1]);

  // A descriptor that is not open.
  CHECK_FALSE(write_trace_file(noted("/proc/self/fd/", 987654), s, TraceFileOptions{}, &outcome));
  CHECK(outcome.error == std::strerror(EBADF));
}

TEST_CASE("a descriptor above 2 is written only as noted when the output setting was read") {
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  TraceFileOutcome outcome;
  TempDir dir;
  const int fd = open((dir / "given").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);  // no CLOEXEC
  REQUIRE(fd > 2);
  // Never named by a setting (a pattern that expanded to it at exit, say): not proven ours.
  CHECK_FALSE(write_trace_file("/dev/fd/" + std::to_string(fd), s, TraceFileOptions{}, &outcome));
  CHECK(outcome.error.find(std::strerror(ESTALE)) == 0);
  CHECK(read_file(dir / "given").empty());
  // Named, and unchanged: written.
  REQUIRE(write_trace_file(noted("/dev/fd/", fd), s, TraceFileOptions{}, &outcome));
  CHECK(read_file(dir / "given") == render_trace(s));
  // The program closed it and opened its own file, which took the number (no O_CLOEXEC): the
  // program's file is left alone.
  close(fd);
  const int own = open((dir / "own").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(own == fd);
  CHECK_FALSE(
      write_trace_file("/proc/self/fd/" + std::to_string(fd), s, TraceFileOptions{}, &outcome));
  CHECK(outcome.error.find(std::strerror(ESTALE)) == 0);
  CHECK(read_file(dir / "own").empty());
  close(own);
  // Closed since: not written either.
  CHECK_FALSE(write_trace_file("/dev/fd/" + std::to_string(fd), s, TraceFileOptions{}, &outcome));
  CHECK(read_file(dir / "own").empty());
}

TEST_CASE("the temporary in progress is removed only by the process that made it") {
  TempDir dir;
  char tmp[8192];
  const int fd =
      ferrum_replay::common::create_temp_beside((dir / "t.json").c_str(), tmp, sizeof tmp);
  REQUIRE(fd >= 0);
  close(fd);
  // A child forked while its parent writes, that exits meanwhile: the file is the parent's.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(ferrum_replay::common::remove_temp_in_progress() ? 1 : 0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(access(tmp, F_OK) == 0);
  // The process that made it removes it, once; after temp_finished, nothing is in progress.
  CHECK(ferrum_replay::common::remove_temp_in_progress());
  CHECK(access(tmp, F_OK) != 0);
  CHECK_FALSE(ferrum_replay::common::remove_temp_in_progress());
  const int again =
      ferrum_replay::common::create_temp_beside((dir / "u.json").c_str(), tmp, sizeof tmp);
  REQUIRE(again >= 0);
  close(again);
  ferrum_replay::common::temp_finished();
  CHECK_FALSE(ferrum_replay::common::remove_temp_in_progress());
  CHECK(access(tmp, F_OK) == 0);
}

TEST_CASE("FERRUM_RECORD_FORCE replaces only a regular file, never a link to one") {
  TempDir dir;
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  write_file(dir / "real.json", "user data\n");
  REQUIRE(symlink((dir / "real.json").c_str(), (dir / "link.json").c_str()) == 0);
  TraceFileOptions force;
  force.force = true;
  TraceFileOutcome outcome;
  REQUIRE(write_trace_file(dir / "link.json", s, force, &outcome));
  CHECK(outcome.diverted);
  CHECK(outcome.written_path == dir / "link.1.json");
  CHECK(S_ISLNK(mode_of(dir / "link.json")));
  CHECK(read_file(dir / "real.json") == "user data\n");
  REQUIRE(write_trace_file(dir / "real.json", s, force, &outcome));
  CHECK_FALSE(outcome.diverted);
  CHECK(read_file(dir / "real.json") == render_trace(s));
}

TEST_CASE("fresh names follow the one rule, at most 99 of them") {
  TempDir dir;
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  write_file(dir / "x.json", "foreign");
  for (int n = 1; n <= 99; ++n) write_file(dir / ("x." + std::to_string(n) + ".json"), "foreign");
  TraceFileOutcome outcome;
  CHECK_FALSE(write_trace_file(dir / "x.json", s, TraceFileOptions{}, &outcome));
  CHECK(outcome.error == std::strerror(EEXIST));
  CHECK(access((dir / "x.100.json").c_str(), F_OK) != 0);
}

// A pseudo-terminal: its writing end (blocking), the master in `master`.
int open_terminal(int *master) {
  *master = posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(*master >= 0);
  REQUIRE(grantpt(*master) == 0);
  REQUIRE(unlockpt(*master) == 0);
  const int terminal = open(ptsname(*master), O_WRONLY | O_NOCTTY);
  REQUIRE(terminal >= 0);
  return terminal;
}

TEST_CASE("no stream write blocks beyond the bound, and the host's descriptor keeps its flags") {
  Recorder big(Settings{}, 0);
  record_nested(big, 3000);  // more than a terminal's or a socket's buffer holds
  const Snapshot bs = big.snapshot_for_report();
  TraceFileOutcome outcome;
  // A terminal nobody reads: a blocking write to it waits in the kernel even after poll said
  // there was room; as a descriptor path it is reopened as our own non-blocking description.
  int master = -1;
  const int terminal = open_terminal(&master);
  timespec start = now_monotonic();
  CHECK_FALSE(write_trace_file(noted("/dev/fd/", terminal), bs, TraceFileOptions{}, &outcome));
  CHECK(outcome.error.find(std::strerror(ETIMEDOUT)) == 0);
  // The bound is 2 s without progress: a reader that makes a little room late (a terminal's
  // second flush) may cost one more wait, and a loaded machine adds its scheduling delays.
  CHECK(seconds_since(start) < 6.0);
  CHECK((fcntl(terminal, F_GETFL) & O_NONBLOCK) == 0);
  close(terminal);
  close(master);

  // A socket nobody reads: send(MSG_DONTWAIT), the description untouched.
  int pair[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  start = now_monotonic();
  CHECK_FALSE(write_trace_file(noted("/proc/self/fd/", pair[0]), bs, TraceFileOptions{}, &outcome));
  CHECK(outcome.error.find(std::strerror(ETIMEDOUT)) == 0);
  // The bound is 2 s without progress: a reader that makes a little room late (a terminal's
  // second flush) may cost one more wait, and a loaded machine adds its scheduling delays.
  CHECK(seconds_since(start) < 6.0);
  CHECK((fcntl(pair[0], F_GETFL) & O_NONBLOCK) == 0);
  // Its reader gone: EPIPE and no SIGPIPE.
  close(pair[1]);
  CHECK_FALSE(write_trace_file(noted("/proc/self/fd/", pair[0]), bs, TraceFileOptions{}, &outcome));
  CHECK(outcome.error == std::strerror(EPIPE));
  close(pair[0]);

  // A pipe: reopened non-blocking, the host's end stays blocking; a reader gets everything.
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  });
  CHECK(write_trace_file(noted("/dev/fd/", fds[1]), bs, TraceFileOptions{}, &outcome));
  CHECK((fcntl(fds[1], F_GETFL) & O_NONBLOCK) == 0);
  close(fds[1]);
  reader.join();
  close(fds[0]);
  CHECK(got == render_trace(bs));
}

TEST_CASE(
    "a blocking stream that cannot be reopened is written with RWF_NOWAIT, within the bound") {
  // No descriptor left (as after setuid, or chroot without /proc, the reopen through /proc
  // fails): the host's own descriptor, every write pwritev2(RWF_NOWAIT). In a child, whose
  // descriptors can all be taken; it answers in bits of its exit status.
  int probe[2];
  REQUIRE(pipe(probe) == 0);
  iovec one{const_cast<char *>("x"), 1};
  const bool nowait_pipes = syscall(SYS_pwritev2, probe[1], &one, 1, -1L, -1L, RWF_NOWAIT) == 1;
  close(probe[0]);
  close(probe[1]);
  if (!nowait_pipes) {
    MESSAGE("skipped: this kernel cannot write a pipe with RWF_NOWAIT");
    return;
  }
  Recorder big(Settings{}, 0);
  record_nested(big, 3000);  // more than a pipe holds
  const Snapshot bs = big.snapshot_for_report();
  int read_late[2], unread[2];
  REQUIRE(pipe(read_late) == 0);
  REQUIRE(pipe(unread) == 0);
  int master = -1;
  const int terminal = open_terminal(&master);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(read_late[0]);
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = 64;
    setrlimit(RLIMIT_NOFILE, &limit);
    while (open("/dev/null", O_RDONLY) >= 0) {
    }
    int failed = 0;
    TraceFileOutcome outcome;
    // A pipe whose reader makes room late (after 1 s): everything, the description blocking.
    if (!write_trace_file(noted("/dev/fd/", read_late[1]), bs, TraceFileOptions{}, &outcome) ||
        (fcntl(read_late[1], F_GETFL) & O_NONBLOCK) != 0)
      failed |= 1;
    // A pipe nobody reads: given up within the bound, the description blocking.
    const timespec start = now_monotonic();
    if (write_trace_file(noted("/dev/fd/", unread[1]), bs, TraceFileOptions{}, &outcome) ||
        outcome.error.find(std::strerror(ETIMEDOUT)) != 0 || seconds_since(start) > 6.0 ||
        (fcntl(unread[1], F_GETFL) & O_NONBLOCK) != 0)
      failed |= 2;
    // A terminal: no RWF_NOWAIT there, so nothing is written, as before.
    if (write_trace_file(noted("/dev/fd/", terminal), bs, TraceFileOptions{}, &outcome) ||
        outcome.error != std::string(std::strerror(ferrum_replay::common::kStreamNotReopenable)) +
                             ferrum_replay::common::stream_error_note(
                                 ferrum_replay::common::kStreamNotReopenable))
      failed |= 4;
    _exit(failed);
  }
  close(read_late[1]);
  close(unread[1]);
  close(terminal);
  sleep(1);
  std::string got;
  char buf[65536];
  ssize_t n;
  while ((n = read(read_late[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK_MESSAGE((WEXITSTATUS(status) & 1) == 0, "a pipe read late did not get the trace");
  CHECK_MESSAGE((WEXITSTATUS(status) & 2) == 0, "a pipe nobody reads: not ETIMEDOUT within 6 s");
  CHECK_MESSAGE((WEXITSTATUS(status) & 4) == 0, "a terminal: not kStreamNotReopenable");
  CHECK(got == render_trace(bs));
  int terminal_bytes = 0;  // nothing reached the terminal
  CHECK(ioctl(master, FIONREAD, &terminal_bytes) == 0);
  CHECK(terminal_bytes == 0);
  close(read_late[0]);
  close(unread[0]);
  close(master);
}

namespace {

// Writes `bytes` to the descriptor path of `fd` as one stream; the error, and the seconds taken.
int write_as_stream(int fd, size_t bytes, double *seconds) {
  namespace common = ferrum_replay::common;
  const timespec start = now_monotonic();
  common::Stream stream;
  int error = common::open_stream(noted("/dev/fd/", fd).c_str(), &stream);
  const std::string data(bytes, 'x');
  if (error == 0) error = common::stream_write(&stream, data.data(), data.size());
  common::close_stream(&stream);
  *seconds = seconds_since(start);
  return error;
}

void fill(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  const std::string page(4096, 'f');
  while (write(fd, page.data(), page.size()) > 0) {
  }
  fcntl(fd, F_SETFL, flags);
}

ino_t inode_of(int fd) {
  struct stat st {};
  fstat(fd, &st);
  return st.st_ino;
}

}  // namespace

TEST_CASE("waiting for a stream's reader is bounded per file, and one file's wait is its own") {
  // F101: the 2 s bound was per stream, and each log line is a stream of its own; a file is now
  // waited for 2 s plus 1 ms per 64 bytes it took, in all. A first version marked stalled files
  // by (dev * K ^ ino) | 1: pipes made one after the other (consecutive inodes) were one file.
  // A stuck pipe of even inode and the next one after, where this machine hands them out so
  // (the kernel numbers them per CPU in batches: on a loaded machine, as under a sanitizer,
  // another process or CPU may take the numbers between; then two pipes all the same).
  int stuck[2] = {-1, -1}, healthy[2] = {-1, -1};
  for (int tries = 0; tries < 200; ++tries) {
    REQUIRE(pipe(stuck) == 0);
    REQUIRE(pipe(healthy) == 0);
    if (((inode_of(stuck[1]) & 1) == 0 && inode_of(healthy[1]) == inode_of(stuck[1]) + 1) ||
        tries == 199)
      break;
    for (int fd : {stuck[0], stuck[1], healthy[0], healthy[1]}) close(fd);
  }
  fill(stuck[1]);
  double seconds = 0;
  CHECK(write_as_stream(stuck[1], 100, &seconds) == ETIMEDOUT);
  CHECK(seconds > 1.5);
  CHECK(seconds < 6.0);
  // Its wait spent: the next lines there take the room there is, at once.
  for (int line = 0; line < 5; ++line) {
    CHECK(write_as_stream(stuck[1], 100, &seconds) == ETIMEDOUT);
    CHECK(seconds < 0.5);
  }
  // The pipe made next: a reader that starts late (300 ms) is waited for, and gets everything.
  size_t got = 0;
  std::thread reader([&] {
    usleep(300 * 1000);
    char buffer[65536];
    ssize_t n;
    while ((n = read(healthy[0], buffer, sizeof buffer)) > 0) got += static_cast<size_t>(n);
  });
  CHECK(write_as_stream(healthy[1], 1 << 20, &seconds) == 0);
  close(healthy[1]);
  reader.join();
  CHECK(got == (1u << 20));
  for (int fd : {stuck[0], stuck[1], healthy[0]}) close(fd);

  // A reader that takes a page every 0.25 s, and a line of 1 KiB at a time, each a stream of
  // its own (a debug log): every line waited its own 2 s bound at most, and none ever reached
  // it — 200 lines took 12 s. Now the file's whole wait is bounded.
  int slow[2];
  REQUIRE(pipe(slow) == 0);
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    char page[4096];
    while (!done.load()) {
      usleep(250 * 1000);
      if (read(slow[0], page, sizeof page) <= 0) break;
    }
  });
  const timespec start = now_monotonic();
  int written = 0;
  for (int line = 0; line < 200; ++line) written += write_as_stream(slow[1], 1024, &seconds) == 0;
  const double took = seconds_since(start);
  done = true;
  close(slow[1]);
  trickle.join();
  close(slow[0]);
  CHECK(took < 6.0);
  CHECK(written >= 64);  // the pipe's own room at least
}

TEST_CASE("a symbolic link at the name is never a stream, whatever it points to") {
  TempDir dir;
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  const std::string fifo = dir / "fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  // A reader on the FIFO: a followed link would send the trace there.
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  for (const std::string &target : {fifo, std::string("/dev/null")}) {
    const std::string link = dir / "link.json";
    unlink(link.c_str());
    unlink((dir / "link.1.json").c_str());
    REQUIRE(symlink(target.c_str(), link.c_str()) == 0);
    CHECK_FALSE(ferrum_replay::common::is_stream_target(link.c_str()));
    TraceFileOutcome outcome;
    REQUIRE(write_trace_file(link, s, TraceFileOptions{}, &outcome));
    CHECK_FALSE(outcome.stream);
    CHECK(outcome.diverted);
    CHECK(outcome.written_path == dir / "link.1.json");
    CHECK(S_ISLNK(mode_of(link)));
    CHECK(read_file(dir / "link.1.json") == render_trace(s));
  }
  char byte;
  CHECK(read(reader, &byte, 1) <= 0);  // nothing reached the FIFO
  close(reader);
  // The descriptor paths, links themselves, stay streams.
  CHECK(ferrum_replay::common::is_stream_target("/dev/stdout"));
  CHECK(ferrum_replay::common::is_stream_target("/proc/self/fd/2"));
}

TEST_CASE("names up to the file system's limit are written; temporaries and fresh names fit") {
  TempDir dir;
  Recorder r(spilling_at_once(), 0);
  const Snapshot s = small_snapshot(r);
  for (size_t length : {200u, 230u, 240u, 250u}) {
    const std::string path = dir / (std::string(length, 'g') + ".json");
    TraceFileOutcome outcome;
    REQUIRE_MESSAGE(write_trace_file(path, s, TraceFileOptions{}, &outcome), outcome.error);
    CHECK(outcome.written_path == path);
    // A sibling's file at the name: NAME.<pid>.EXT fits too.
    TraceFileOptions sibling;
    sibling.run_start_ns = 1;
    REQUIRE(write_trace_file(path, s, sibling, &outcome));
    CHECK(outcome.sibling);
    CHECK(outcome.written_path.size() - dir.path.size() - 1 <= 255);
    CHECK(read_file(outcome.written_path) == render_trace(s));
  }
  // Fresh names of two long names that differ only at the end stay apart.
  char a[4200], b[4200];
  const std::string stem = dir / std::string(252, 'h');
  REQUIRE(ferrum_replay::common::fresh_name_within((stem + "a.x").c_str(), 17ul, a, sizeof a));
  REQUIRE(ferrum_replay::common::fresh_name_within((stem + "b.x").c_str(), 17ul, b, sizeof b));
  CHECK(std::string(a) != std::string(b));
  CHECK(std::string(a).size() - dir.path.size() - 1 <= 255);
  CHECK(std::string(a).substr(std::string(a).size() - 5) == ".17.x");

  // A running marker (the shim's summary promised: PATH.PID.running) of a short name is the name
  // and the suffix; of a name at the limit, shortened by the temporaries' rule, apart, within it.
  char m[4200], n[4200];
  REQUIRE(
      ferrum_replay::common::running_marker_name((dir / "s.txt").c_str(), 4242, 0, m, sizeof m));
  CHECK(std::string(m) == dir / "s.txt.4242.running");
  // A sibling's (the first taken by another process of that pid number) is told apart.
  REQUIRE(
      ferrum_replay::common::running_marker_name((dir / "s.txt").c_str(), 4242, 3, m, sizeof m));
  CHECK(std::string(m) == dir / "s.txt.4242.3.running");
  CHECK_FALSE(ferrum_replay::common::running_marker_name(
      (dir / "s.txt").c_str(), 4242, ferrum_replay::common::kMaxMarkerSibling + 1, m, sizeof m));
  REQUIRE(ferrum_replay::common::running_marker_name((stem + "a.x").c_str(), 2147483647, 0, m,
                                                     sizeof m));
  REQUIRE(ferrum_replay::common::running_marker_name((stem + "b.x").c_str(), 2147483647, 0, n,
                                                     sizeof n));
  CHECK(std::string(m) != std::string(n));
  CHECK(std::string(m).size() - dir.path.size() - 1 <= 255);
  CHECK(std::string(m).substr(std::string(m).size() - 19) == ".2147483647.running");
  const int marker = open(m, O_WRONLY | O_CREAT | O_EXCL, 0644);
  CHECK(marker >= 0);  // the file system takes the name
  if (marker >= 0) close(marker);
  CHECK_FALSE(ferrum_replay::common::running_marker_name((dir / "s.txt").c_str(), 1, 0, m, 20));
  // The longest sibling's suffix fits where the shortening rule leaves room.
  REQUIRE(ferrum_replay::common::running_marker_name((stem + "a.x").c_str(), -2147483647 - 1,
                                                     ferrum_replay::common::kMaxMarkerSibling, n,
                                                     sizeof n));
  CHECK(std::string(n).size() - dir.path.size() - 1 <= 255);
  // A sibling's name made from sibling 0's (its stem not computed again) is the same name, for
  // a short name and for one shortened at the limit, from sibling 0's name or another's.
  for (const std::string &given : {std::string(dir / "s.txt"), stem + "a.x"}) {
    for (const unsigned sibling : {1u, 3u, ferrum_replay::common::kMaxMarkerSibling}) {
      size_t stem_length = 0;
      REQUIRE(ferrum_replay::common::running_marker_name(given.c_str(), -2147483647 - 1, 0, m,
                                                         sizeof m, &stem_length));
      REQUIRE(ferrum_replay::common::running_marker_sibling(m, sizeof m, stem_length,
                                                            -2147483647 - 1, 2));
      REQUIRE(ferrum_replay::common::running_marker_sibling(m, sizeof m, stem_length,
                                                            -2147483647 - 1, sibling));
      REQUIRE(ferrum_replay::common::running_marker_name(given.c_str(), -2147483647 - 1, sibling, n,
                                                         sizeof n));
      CHECK(std::string(m) == std::string(n));
    }
  }
  size_t stem_length = 0;
  REQUIRE(ferrum_replay::common::running_marker_name((dir / "s.txt").c_str(), 4242, 0, m, sizeof m,
                                                     &stem_length));
  CHECK_FALSE(ferrum_replay::common::running_marker_sibling(
      m, sizeof m, stem_length, 4242, ferrum_replay::common::kMaxMarkerSibling + 1));
  CHECK_FALSE(  // does not fit
      ferrum_replay::common::running_marker_sibling(m, stem_length + 10, stem_length, 4242, 1));

  // A dead process's leftover of a long name, made by the one rule, is recognised and removed.
  const std::string path = dir / (std::string(245, 'k') + ".json");
  const pid_t child = fork();
  if (child == 0) {
    char tmp[4200];
    const int fd = ferrum_replay::common::create_temp_beside(path.c_str(), tmp, sizeof tmp);
    if (fd < 0) _exit(1);
    const char header[] = "{\"traceEvents\":[\n";
    _exit(write(fd, header, sizeof header - 1) == static_cast<ssize_t>(sizeof header - 1) ? 0 : 2);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(listing(dir.path).size() > 0);
  const size_t before = listing(dir.path).size();
  TraceFileOutcome outcome;
  REQUIRE(write_trace_file(path, s, TraceFileOptions{}, &outcome));
  CHECK(outcome.written_path == path);
  CHECK(listing(dir.path).size() == before);  // the leftover went, the trace came
  for (const std::string &name : listing(dir.path)) CHECK(name.find(".tmp") == std::string::npos);
}
