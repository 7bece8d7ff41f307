// Where completed ranges go while the process runs, so that the recorder's memory stays bounded
// however long the program records: each thread fills a fixed-size chunk in memory, sorts it into
// trace order and appends it here as one "run"; at exit the trace writer merges a thread's runs
// (and what is still in memory) back into one sorted sequence. The JSON is the same as if every
// event had stayed in memory.
//
// The spill holds no descriptor. It is a series of segments, each an unnamed temporary file
// (O_TMPFILE in $TMPDIR, else /tmp; or a mkostemp name unlinked at once, mode 0600) that is given
// its full size (posix_fallocate, so that writing through the mapping can never fault for lack of
// space), mapped MAP_SHARED and closed at once: the descriptor lives for four system calls, and
// the mapping alone keeps the file. Whatever the program then does to its descriptors (closes every
// one of them, dup2s its own files over them) cannot reach the spilled data, and the spill never
// writes into or reads back from a file of the program's. Runs are written and read with memcpy
// at offsets reserved by an atomic add, so threads spill without a lock (a new segment is created
// under a mutex, once per segment). Pages already written or read are handed back to the file
// with MADV_DONTNEED (data-safe for a shared file mapping), a 1 MiB window at a time, so spilled
// ranges do not count as the process's resident memory beyond about one window. Events hold
// pointers (range names), which stay valid because only this process, with the same address space,
// reads the segments back.
//
// Room is left to the host: a segment or name block is made only where the file system would keep
// at least max(10 % of its size, 256 MiB) free for an unprivileged user after it (leaves_room,
// checked with fstatvfs on the new file before its space is allocated). Without it the spill took
// doubling segments until the file system was full, and the program's own writes to $TMPDIR
// failed with ENOSPC (FINDINGS F122: 15 of a 16 MiB tmpfs). A segment refused for room is a
// segment that could not be made (ENOSPC), below. On tmpfs the spill is memory (shared memory
// pages, charged to the program's memory cgroup, not to its resident size): the same margin
// applies there; ramfs, which reports no size, is never spilled to (docs/settings.md).
//
// If a segment cannot be created (no TMPDIR space, a read-only /tmp, no address space), spilling
// is switched off: events stay in memory while FERRUM_RECORD_MEMORY allows, and beyond it new ones
// are dropped and counted (thread_buffer.hpp) — the budget is a bound, also for a long run in a
// container whose /tmp is read-only — and the exit says why, once. In a fork() child
// the parent's segments are unmapped (they hold the parent's runs, which the child must neither
// write nor report); the child's events go to segments of its own.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "event.hpp"

namespace ferrum_replay::recorder {

// One spilled, sorted run of one thread's events.
struct SpillRun {
  uint64_t offset = 0;              // bytes into the spill's logical address space
  uint32_t count = 0;               // events
  bool uses_global_domain = false;  // some event is in NVTX's global domain (id 0)
  uint32_t ranges = 0;              // events that are push/pop ranges (EventKind::range)
  // Where its first and last events stand in trace order (runs are stored sorted): the exit
  // writer reads runs that do not overlap one after another instead of merging them
  // (snapshot.hpp, chain_runs). Set by append(); whoever writes a run in pieces sets them and
  // `keyed` — a run without keys is merged on its own, never chained.
  OrderKey first, last;
  bool keyed = false;
};

// Where a name block (SpillFile::map_name_block) is mapped.
struct NameSpan {
  const char *data;
  size_t size;
};

class SpillFile {
 public:
  SpillFile() = default;
  ~SpillFile();
  SpillFile(const SpillFile &) = delete;
  SpillFile &operator=(const SpillFile &) = delete;

  // Appends `count` events (sorted in trace order); fills `run` (its keys, its counts) and returns
  // true, or returns false (and never tries again) if a segment could not be created.
  bool append(const Event *events, uint32_t count, SpillRun *run);
  // The same in two steps, for a run written in pieces: reserve room for `count` events, then
  // write them (events [first, first + n) of the run) in any number of calls.
  bool reserve(uint64_t count, SpillRun *run);
  bool write(const SpillRun &run, uint32_t first, const Event *events, uint32_t n);
  // Reads `count` events of a run starting at event `first` into `out`. False if the run is not
  // in a segment of this process (never for a run that write() completed).
  bool read(const SpillRun &run, uint32_t first, uint32_t count, Event *out) const;
  // Hands the whole pages of events [first, first + count) of `run` back to their file: a later
  // read faults them in again. Only memory use changes, never what a read returns.
  void release(const SpillRun &run, uint32_t first, uint32_t count) const;

  // A block of `bytes` for range names recorded beyond FERRUM_RECORD_MEMORY (thread_buffer.hpp):
  // an unnamed file of its own, made and mapped like a segment but not one of them. It is never
  // unmapped here — not by forget_after_fork either, because a fork() child's events may point
  // at names its parent copied there — and its owner unmaps it (release_name_block). nullptr
  // when it cannot be made, which switches spilling off as a failed segment does.
  char *map_name_block(uint64_t bytes);
  // Every name block mapped so far, sorted by address: the exit report hands back the pages of
  // them it reads (name_pages.hpp). Their owners unmap them only as the recorder ends, so the
  // list holds while a report runs. Blocks mapped while it is read may be missing from it.
  std::vector<NameSpan> name_blocks() const;
  // Bumped in a fork() child (forget_after_fork): a name block mapped in an earlier generation
  // is shared with the parent, which may still append to it, so the child appends to none.
  uint32_t generation() const { return generation_.load(std::memory_order_relaxed); }

  // Bytes written so far (for tests and the stress figures).
  uint64_t size() const { return written_.load(std::memory_order_relaxed); }
  // Segments mapped now (tests).
  unsigned segments() const;
  // Whether spilling has been switched off after a failure, and why: the errno of the first
  // spill file that could not be made (0 when none failed that way; EIO for a lost segment).
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  int failure() const { return failure_.load(std::memory_order_relaxed); }
  // Where segments and name blocks are made: the tests' directory, else $TMPDIR, else /tmp.
  std::string directory() const;

  // pthread_atfork: no thread may be creating a segment while another forks.
  // Whether it took the lock (held_here.hpp: lock_for_fork).
  bool lock_for_fork();
  void unlock_after_fork();
  // In a fork() child, after unlock_after_fork: unmaps the parent's segments (a shared mapping:
  // writing them would change the parent's runs) and starts empty.
  void forget_after_fork();

  // Tests: the directory segments are created in (nullptr: $TMPDIR, else /tmp).
  void set_directory_for_tests(const char *dir) { directory_for_tests_ = dir; }

  // Geometry of the logical address space: segment k (0-based) is 1 MiB << k for k < 7, then
  // 64 MiB each (small programs reserve little, long ones map few segments); at most
  // kMaxSegments (about 128 GiB in all).
  static constexpr unsigned kMaxSegments = 2048;
  static void segment_of(uint64_t offset, unsigned *index, uint64_t *base, uint64_t *size);

  // The free space a spill file must leave its file system: at least kMinFreeFraction of its size
  // and at least kMinFreeBytes, whichever is more (a small file system, a 16 MiB tmpfs, is then
  // never spilled to: what little it has is the program's). Whether `bytes` more may be taken
  // where `available` bytes are free to an unprivileged user (f_bavail * f_frsize) of `total`
  // (f_blocks * f_frsize). Checked before each segment and name block; the program may of course
  // use the margin itself, and two name blocks made at once may each count the same free space
  // (1 MiB at most each).
  // The trace written at exit (Room::trace), the output the user asked for, keeps the smaller of
  // the two: it filled a 64 MiB tmpfs to its last byte, and other processes writing there failed
  // meanwhile (review NT-6); 6.4 MiB are kept there, 256 MiB on a large disk. On a file system
  // that reports no size (ramfs) or whose size cannot be read, the trace is written as before.
  static constexpr uint64_t kMinFreeBytes = uint64_t{256} << 20;
  static constexpr uint64_t kMinFreeFraction = 10;  // percent
  enum class Room { spill, trace };
  static bool leaves_room(uint64_t bytes, uint64_t available, uint64_t total,
                          Room kind = Room::spill);
  // leaves_room on the file system that holds `fd`: 0, ENOSPC, or fstatvfs's error.
  static int room_on(int fd, uint64_t bytes, Room kind);

 private:
  void fail(int error);  // switches spilling off; the first error is kept
  // The mapping of segment `index`, created if `create`; nullptr if it cannot be.
  char *segment(unsigned index, bool create);
  char *create_segment(unsigned index, uint64_t size);
  // release() by bytes of the logical address space: whole pages only.
  void release_range(uint64_t offset, uint64_t bytes) const;
  // Calls `f(address, bytes)` for each segment piece of [offset, offset + bytes); false if a
  // segment is missing (and `create` is false, or it cannot be created).
  template <class F>
  bool for_each_piece(uint64_t offset, uint64_t bytes, bool create, F &&f) const;
  // Counts `bytes` at `offset` as done in their 1 MiB windows; a window done is released.
  void count_filled(uint64_t offset, uint64_t bytes);

  std::atomic<char *> segments_[kMaxSegments] = {};
  // The name blocks mapped, newest first: pushed without a lock (map_name_block runs inside the
  // program's NVTX call, also in a signal handler or around fork), freed with the file.
  struct NameBlockNode {
    NameSpan span;
    NameBlockNode *next;
  };
  std::atomic<NameBlockNode *> name_blocks_{nullptr};
  std::atomic<bool> failed_{false};
  std::atomic<int> failure_{0};
  std::atomic<uint64_t> end_{0};      // bytes reserved
  std::atomic<uint64_t> written_{0};  // bytes written
  // Bytes written into each 1 MiB window of the logical address space, in a ring: a window
  // completes long before the one kWindowCounters later starts (runs are written right after
  // they are reserved). Were a thread to stall that long between the two, a window would be
  // released early or not at all: memory use only, never data.
  static constexpr unsigned kWindowCounters = 256;
  std::atomic<uint64_t> window_bytes_[kWindowCounters] = {};
  std::atomic<uint32_t> generation_{0};
  std::mutex create_mu_;  // segment creation only
  const char *directory_for_tests_ = nullptr;
};

// Reads a run back in small batches, for the k-way merge at exit. Pages it has read are
// released (SpillFile::release) as it goes; the kernel maps up to 64 KiB around a faulting page
// (fault-around), so a reader holds at most about that much of its run resident.
class RunReader {
 public:
  RunReader(const SpillFile &file, SpillRun run) : file_(&file), run_(run) {}
  // The current event, or nullptr when the run is exhausted (or unreadable).
  const Event *peek();
  void advance() { ++pos_; }

 private:
  static constexpr uint32_t kBatch = 64;
  static constexpr uint32_t kReleaseEvery = 256;  // events (16 KiB) between two releases
  const SpillFile *file_;
  SpillRun run_;
  uint32_t next_ = 0;      // first event of the run not yet read into batch_
  uint32_t released_ = 0;  // events of the run whose pages were released
  uint32_t pos_ = 0, len_ = 0;
  Event batch_[kBatch];
};

}  // namespace ferrum_replay::recorder
