// GPU time per replay, as the shim hands it over (include/ferrum_replay/ferrum_replay.h): each
// completed replay becomes an event on a track of its own per (device, stream), stored like a
// thread's ranges (one ThreadBuffer per track, counted against FERRUM_RECORD_MEMORY with the
// ranges and spilled beyond it through the process's SpillFile, so memory stays bounded however
// long the program runs — with nowhere to spill, what does not fit is dropped and counted).
// Times stay CLOCK_MONOTONIC nanoseconds (not the recorder's ticks): ThreadSnapshot::ns_times
// says so to the writer and the table.
//
// The shim calls the sink from a thread of its own, and ferrum_replay_gpu_flush may call it from
// the exiting thread: a mutex makes every sink call the single writer of the buffers that
// ThreadBuffer requires. It is held only by sink calls, the exit snapshot and fork.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ferrum_replay/ferrum_replay.h"
#include "thread_buffer.hpp"

namespace ferrum_replay::recorder {

struct Snapshot;

// Track ids (the trace's tid of a GPU track) start here: Linux thread ids never exceed 2^22
// (PID_MAX_LIMIT), so a GPU track can never share a tid with a thread of the process.
inline constexpr uint32_t kGpuTrackTidBase = 0x40000000u;
// The most (device, stream) tracks of their own; the replays of further streams share one more
// track per device (kLaterStreams): never dropped — a replay the recorder received and threw
// away, counted as "not timed", let a judge pass on the replays it kept (review HH-3).
inline constexpr size_t kMaxGpuTracks = 4096;
inline constexpr uint64_t kLaterStreams = UINT64_MAX;
// The most per-thread default streams with a track of their own (one per thread and context);
// the replays of later threads share one more per device and context (kLaterThreads): a program
// that starts a thread per request must not use up kMaxGpuTracks and lose its replays.
inline constexpr size_t kMaxPerThreadTracks = 256;
inline constexpr uint32_t kLaterThreads = UINT32_MAX;
// The most contexts whose default streams have tracks of their own; the default streams of later
// contexts share one track per device and stream (kLaterContexts): a program that makes and ends
// a context per job must not use up kMaxGpuTracks either (F86).
inline constexpr size_t kMaxContextTracks = 64;
inline constexpr uint64_t kLaterContexts = UINT64_MAX;

// What the exit report knows of GPU timing (the shim's ferrum_replay_gpu_status).
struct GpuStatus {
  bool registered = false;  // a sink was registered: the trace gets its "gpu" block
  uint64_t in_flight = 0;
  uint64_t not_timed = 0;
  uint64_t align_error_ns = 0;
  uint64_t dropped = 0;  // delivered and not stored (none since HH-3: later streams share a track)
};

class GpuTracks {
 public:
  GpuTracks(SpillFile *spill, MemoryBudget *budget) : spill_(spill), budget_(budget) {}
  ~GpuTracks();
  GpuTracks(const GpuTracks &) = delete;
  GpuTracks &operator=(const GpuTracks &) = delete;

  // The sink's body: copies `count` replays (names interned per track).
  void add(const ferrum_replay_gpu_replay *replays, size_t count) noexcept;
  // The signature ferrum_replay_set_gpu_sink takes; `context` is a GpuTracks.
  static void sink(const ferrum_replay_gpu_replay *replays, size_t count, void *context);

  // Fills snap->gpu_tracks (one ThreadSnapshot per track, ns_times set) and the counters of
  // snap->gpu, leaving snap->gpu.registered and the shim's figures to the caller; adds the
  // replays dropped for want of memory to snap->memory_drops.
  void collect(Snapshot *snap) const;
  uint64_t dropped() const;

  // Also makes room for every track to become an orphan in the child, whose handler must not
  // allocate (Recorder::before_fork); without that room, they are simply not kept there.
  // Whether it took the lock (held_here.hpp: lock_for_fork).
  bool before_fork();
  void after_fork_in_parent() { mu_.unlock(); }
  // The child's tracks start empty: the parent's replays belong to the parent's trace.
  void after_fork_in_child();

 private:
  struct Track {
    int32_t device;
    uint64_t stream;
    uint64_t context;  // streams 0 and 2: one per context (0 for other streams)
    uint32_t thread;   // stream 2: one per thread too (0 for other streams)
    ThreadBuffer *buffer;
  };
  ThreadBuffer *track_for(const ferrum_replay_gpu_replay &replay);

  SpillFile *spill_;
  MemoryBudget *budget_;  // the recorder's, shared with the threads' ranges
  mutable std::mutex mu_;
  std::vector<Track> tracks_;
  std::vector<ThreadBuffer *> orphans_;  // tracks of the parent, after fork
  std::vector<uint64_t> contexts_;       // of default streams, as first seen: named 1, 2...
  size_t per_thread_tracks_ = 0;         // tracks of one thread's per-thread default stream
  uint64_t dropped_ = 0;
  uint64_t memory_drops_ = 0;  // replays not stored for want of memory for their track
  // Replays handed over where this thread may not wait for mu_ (add): lock-free. Not reset in a
  // fork child (a child handler's refusal is the child's).
  std::atomic<uint64_t> refused_{0};
};

// The display name of a GPU track: "GPU 0 · stream 0x7f00..." ("GPU ?" for an unknown device;
// the legacy and per-thread default streams by name).
// `context_number` (1, 2...: contexts in the order their default streams were first seen) and
// `thread` (stream 2's launching thread) tell apart the default streams of several contexts
// and threads; the first context's are named as if it were the only one.
std::string gpu_track_name(int32_t device, uint64_t stream, size_t context_number = 1,
                           uint32_t thread = 0);

}  // namespace ferrum_replay::recorder
