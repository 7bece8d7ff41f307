// The recorder's output safety and bounded memory, without NVTX:
//   - events spill to a temporary file as they complete, and the trace written from the spill
//     file is byte for byte the trace written from memory;
//   - the trace file never follows a symbolic link planted at its path, never replaces a file
//     that is not a ferrum-replay trace unless forced, and is created 0644 minus umask.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "recorder.hpp"
#include "snapshot.hpp"
#include "spill_file.hpp"
#include "trace_writer.hpp"

using namespace ferrum_replay::recorder;

namespace {

constexpr uint32_t kChunk = 1024;  // ThreadBuffer's chunk: a run is this many events

std::string read_file(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string &path, const std::string &text) {
  std::ofstream(path) << text;
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
  return a.start_ns == b.start_ns && a.end_ns == b.end_ns && a.domain_id == b.domain_id &&
         a.depth == b.depth && a.attrs.name == b.attrs.name &&
         a.attrs.payload.u == b.attrs.payload.u;
}

}  // namespace

TEST_CASE("events spill as they complete and the trace is identical") {
  Recorder r(Settings{}, 0);
  constexpr int kThreads = 3, kRounds = 7000;  // 21,000 ranges a thread: 20 full runs each
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&] { record_nested(r, kRounds); });
  for (auto &t : threads) t.join();

  CHECK(r.spill_file().size() >= uint64_t{kThreads} * 20 * kChunk * sizeof(Event));
  Snapshot streamed = r.snapshot_for_report();
  REQUIRE(streamed.threads.size() == kThreads);
  for (const ThreadSnapshot &t : streamed.threads) {
    CHECK(t.runs.size() == 20);
    CHECK(t.events.size() == 3u * kRounds - 20 * kChunk);  // only the last, partial chunk
    CHECK(t.event_count() == 3u * kRounds);
  }
  const Snapshot in_memory = r.snapshot();
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
  Recorder r(Settings{}, 0);
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
  CHECK(render_trace(s) == render_trace(r.snapshot()));
}

TEST_CASE("runs are compacted so the merge reads from few sources at once") {
  Recorder r(Settings{}, 0);
  record_nested(r, 17 * kChunk / 3 + 5);  // 17 runs and a few events in memory
  const Snapshot reference = r.snapshot();
  Snapshot s = r.snapshot_for_report();
  REQUIRE(s.threads[0].runs.size() == 17);
  SpillFile &spill = const_cast<SpillFile &>(r.spill_file());
  compact_runs(spill, s.threads[0].runs, 4);
  CHECK(s.threads[0].runs.size() <= 4);
  CHECK(s.threads[0].event_count() == reference.threads[0].events.size());
  CHECK(render_trace(s) == render_trace(reference));
}

TEST_CASE("snapshots taken while threads spill are consistent") {
  Recorder r(Settings{}, 0);
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
  Recorder r(Settings{}, 0);
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
    failures |= (render_trace(s) != render_trace(r.snapshot())) << 4;
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

TEST_CASE("a spill file that cannot be created keeps events in memory") {
  const char *old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  setenv("TMPDIR", "/proc/self/no-such-directory", 1);
  Recorder r(Settings{}, 0);
  record_nested(r, 3000);
  if (old)
    setenv("TMPDIR", saved.c_str(), 1);
  else
    unsetenv("TMPDIR");
  CHECK(r.spill_file().size() == 0);
  Snapshot s = r.snapshot_for_report();
  CHECK(s.threads[0].runs.empty());
  CHECK(s.range_count() == 9000);
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
  Recorder r(Settings{}, 0);
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

  SUBCASE("forced: the link itself is replaced, its target untouched") {
    TraceFileOptions force;
    force.force = true;
    REQUIRE(write_trace_file(path, s, force, &outcome));
    CHECK_FALSE(outcome.diverted);
    CHECK(outcome.written_path == path);
    CHECK(S_ISREG(mode_of(path)));
    CHECK(read_file(victim) == "precious\n");
  }
}

TEST_CASE("a file that is not a ferrum-replay trace is kept unless forced") {
  TempDir dir;
  Recorder r(Settings{}, 0);
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

  TraceFileOptions force;
  force.force = true;
  REQUIRE(write_trace_file(path, s, force, &outcome));
  CHECK_FALSE(outcome.diverted);
  CHECK(read_file(path) == render_trace(s));
}

TEST_CASE("special files and directories at the trace path") {
  TempDir dir;
  Recorder r(Settings{}, 0);
  const Snapshot s = small_snapshot(r);
  TraceFileOutcome outcome;

  // A FIFO is never opened (that would block) nor replaced, even when forced.
  const std::string fifo = dir / "fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
  TraceFileOptions force;
  force.force = true;
  REQUIRE(write_trace_file(fifo, s, force, &outcome));
  CHECK(outcome.written_path == dir / "fifo.1");
  CHECK(S_ISFIFO(mode_of(fifo)));

  REQUIRE(mkdir((dir / "d.json").c_str(), 0755) == 0);
  CHECK_FALSE(write_trace_file(dir / "d.json", s, TraceFileOptions{}, &outcome));
  CHECK(outcome.error == std::strerror(EISDIR));

  CHECK_FALSE(write_trace_file(dir / "missing/t.json", s, TraceFileOptions{}, &outcome));
  CHECK(outcome.error == std::strerror(ENOENT));
  CHECK_FALSE(write_trace_file(dir / "fifo/t.json", s, TraceFileOptions{}, &outcome));
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
  Recorder r(Settings{}, 0);
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
