// Where completed ranges go while the process runs, so that the recorder's memory stays bounded
// however long the program records: each thread fills a fixed-size chunk in memory, sorts it into
// trace order and appends it here as one "run"; at exit the trace writer merges a thread's runs
// (and what is still in memory) back into one sorted sequence. The JSON is the same as if every
// event had stayed in memory.
//
// The file is unnamed (O_TMPFILE in $TMPDIR, else /tmp; or a mkstemp name unlinked at once): it
// never appears in a directory listing, cannot be reached through a planted symlink, and vanishes
// with the process however it ends. Runs are written with pwrite at offsets reserved by an atomic
// add, so threads spill without a lock. Events hold pointers (range names), which stay valid
// because only this process, with the same address space, reads the file back.
//
// If the file cannot be created or written (no TMPDIR space, a read-only /tmp), spilling is
// switched off and events simply stay in memory, as before: nothing is lost.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "event.hpp"

namespace ferrum_replay::recorder {

// One spilled, sorted run of one thread's events.
struct SpillRun {
  uint64_t offset = 0;              // bytes into the spill file
  uint32_t count = 0;               // events
  bool uses_global_domain = false;  // some event is in NVTX's global domain (id 0)
};

class SpillFile {
 public:
  SpillFile() = default;
  ~SpillFile();
  SpillFile(const SpillFile &) = delete;
  SpillFile &operator=(const SpillFile &) = delete;

  // Appends `count` events; fills `run` and returns true, or returns false (and never tries
  // again) if the file could not be created or written.
  bool append(const Event *events, uint32_t count, SpillRun *run);
  // The same in two steps, for a run written in pieces: reserve room for `count` events, then
  // write them (events [first, first + n) of the run) in any number of calls.
  bool reserve(uint64_t count, SpillRun *run);
  bool write(const SpillRun &run, uint32_t first, const Event *events, uint32_t n);
  // Reads `count` events of a run starting at event `first` into `out`. False on a read error.
  bool read(const SpillRun &run, uint32_t first, uint32_t count, Event *out) const;

  // Bytes spilled so far (for tests and the stress figures).
  uint64_t size() const { return end_.load(std::memory_order_relaxed); }

  // pthread_atfork: no thread may be creating the file while another forks.
  void lock_for_fork();
  void unlock_after_fork();
  // In a fork() child, after unlock_after_fork: the inherited file description is shared with the
  // parent, whose runs it holds. Forget it (the child's events go to a file of its own, created
  // when needed).
  void forget_after_fork();

 private:
  int open_fd();

  std::atomic<int> fd_{-1};
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> end_{0};
  std::mutex open_mu_;  // creation only
};

// Reads a run back in small batches, for the k-way merge at exit.
class RunReader {
 public:
  RunReader(const SpillFile &file, SpillRun run) : file_(&file), run_(run) {}
  // The current event, or nullptr when the run is exhausted (or unreadable).
  const Event *peek();
  void advance() { ++pos_; }

 private:
  static constexpr uint32_t kBatch = 64;
  const SpillFile *file_;
  SpillRun run_;
  uint32_t next_ = 0;  // first event of the run not yet read into batch_
  uint32_t pos_ = 0, len_ = 0;
  Event batch_[kBatch];
};

}  // namespace ferrum_replay::recorder
