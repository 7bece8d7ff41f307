// GPU time per replay (FERRUM_REPLAY_GPU_TIME=on): the engine, without any real driver.
//
// Each timed replay is bracketed by two driver events recorded on the launch's own stream
// (same stream semantics as the launch). The events come from a bounded pool per context
// (kPairsPerContext pairs, kMaxContexts contexts); the launch path claims a pair lock-free,
// records, and publishes it; it never synchronises, never waits, takes no lock and allocates
// nothing — an exhausted pool means the replay is not timed (counted). Everything else — pool
// creation, clock alignment, reaping finished pairs, delivery to the sink, per-graph
// statistics — happens off the launch path, under the engine's mutex, in the reaper
// (gpu_timing.cpp runs it on a thread; unit tests call reap_pass() directly).
//
// Alignment: the reaper records a reference event on a stream of the context's own and
// brackets the moment it completes between two CLOCK_MONOTONIC reads (the tightest of
// kAlignTries); a replay's start is reference + cuEventElapsedTime(reference, start), its end
// start + cuEventElapsedTime(start, end): its length is the pair's own reading, whatever the
// reference. cuEventElapsedTime answers a float of milliseconds, exact to 2^-24 of itself, so
// the reference is renewed (aligned again) every kReanchorNs while replays are read: the start
// of a replay read an hour into the run is rounded to 30 ns, not to 250 us (F138).
// align_error_ns = half the bracket + both readings' float rounding + the events' resolution
// (kEventResolutionNs).
//
// Context destruction: drop_context()/the device variants are called before (or, for a
// primary context's release, right after) the real call, under the mutex; during the call
// (made without the mutex) the engine calls no CUDA function, so the reaper never touches a
// dead context; the in-flight replays of a dropped pool count as not timed. A context that ended
// where the hooks did not see it is forgotten at the driver's first answer that says so
// (forget_ended): one call into it, not one a pass for the rest of the run (F167).
//
// The driver functions are a table of pointers (EventApi) so tests can supply fakes.
#pragma once

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "ferrum_replay/ferrum_replay.h"
#include "held_here.hpp"

namespace ferrum_replay::shim::gpu {

// ---- configuration, fixed at activation (before any launch reads it) ----
// `on` is atomic (read relaxed: a plain load) because the calls that end a context, and a
// lookup's answer, may read it while another thread is still activating; `every` only after
// a launch has seen the shim active.
struct Config {
  std::atomic<bool> on{false};
  uint32_t every = 1;  // FERRUM_REPLAY_GPU_TIME_EVERY: time replays 1, 1+N, 1+2N... of each graph
};
extern Config g_config;
void configure(bool on, uint32_t every);
// The one engine of the process (defined below: once made, one load on the launch path).
class Engine;
inline Engine &engine();
// The launch path's one branch: is GPU timing on in this process?
inline bool timing_on() {
  return __builtin_expect(g_config.on.load(std::memory_order_relaxed), 0);
}

// ---- the driver functions the engine calls (null: missing) ----
struct EventApi {
  CUresult (*event_create)(CUevent *, unsigned) = nullptr;
  CUresult (*event_record)(CUevent, CUstream) = nullptr;       // legacy stream semantics
  CUresult (*event_record_ptsz)(CUevent, CUstream) = nullptr;  // per-thread default stream
  CUresult (*event_query)(CUevent) = nullptr;
  CUresult (*elapsed)(float *, CUevent, CUevent) = nullptr;  // _v2 when present
  CUresult (*event_destroy)(CUevent) = nullptr;
  CUresult (*is_capturing)(CUstream, CUstreamCaptureStatus *) = nullptr;
  CUresult (*is_capturing_ptsz)(CUstream, CUstreamCaptureStatus *) = nullptr;
  CUresult (*ctx_get_current)(CUcontext *) = nullptr;
  CUresult (*ctx_get_device)(CUdevice *) = nullptr;
  CUresult (*ctx_push)(CUcontext) = nullptr;
  CUresult (*ctx_pop)(CUcontext *) = nullptr;
  CUresult (*stream_create)(CUstream *, unsigned) = nullptr;
  CUresult (*stream_destroy)(CUstream) = nullptr;
  CUresult (*primary_state)(CUdevice, unsigned *, int *) = nullptr;    // optional
  CUresult (*exchange_capture_mode)(CUstreamCaptureMode *) = nullptr;  // optional
  // Optional: whether a driver's answer that a context is invalid means it ended
  // (Engine::context_ended), and whether the current context is a green one (CUDA 12.5+;
  // Engine::green_current).
  CUresult (*ctx_api_version)(CUcontext, unsigned *) = nullptr;
  CUresult (*stream_get_ctx_v2)(CUstream, CUcontext *, CUgreenCtx *) = nullptr;
  uint64_t (*now_ns)() = nullptr;  // CLOCK_MONOTONIC
};

// ---- per-graph statistics: fixed memory, log buckets ----
// Durations below 8 ns are exact; above, 8 buckets per power of two up to 2^40 ns (~18 min;
// longer ones share the last bucket): a percentile is its bucket's midpoint, within 6.25 % of
// the true value (and clamped to [min, max]).
struct Histogram {
  static constexpr unsigned kSubBits = 3;
  static constexpr unsigned kMaxExponent = 40;
  static constexpr unsigned kBuckets = 8 + (kMaxExponent - kSubBits) * 8;
  uint64_t counts[kBuckets] = {};  // 64-bit: a graph replayed for days must not wrap
  static unsigned bucket_of(uint64_t ns);
  static uint64_t midpoint(unsigned bucket);
  void add(uint64_t ns) { ++counts[bucket_of(ns)]; }
  // The value at `fraction` (0.5, 0.99) of `total` samples; 0 when empty.
  uint64_t percentile(double fraction, uint64_t total) const;
};

struct GraphStats {
  uint32_t ordinal = 0;  // 0: free entry (the overflow record's times go to `other`)
  // Whether the graph still lives, for Engine::stats_slot to give the row of one that does not
  // to a new graph once no row is free: `live` (the registry's word that GraphRecord::live_ordinal
  // points to, never unmapped) holds `ordinal` while the graph lives; `dead` once seen not to (a
  // graph does not come back: ordinals are not reused), or once its context ended.
  const std::atomic<uint32_t> *live = nullptr;  // null: taken for live (no registry: unit tests)
  CUcontext context = nullptr;                  // of its first replay read
  bool dead = false;
  uint64_t count = 0, total_ns = 0, min_ns = 0, max_ns = 0;
  Histogram histogram;
  void add(uint64_t ns);
  void merge(const GraphStats &other);
  uint64_t percentile(double fraction) const;  // within [min_ns, max_ns]
};

// ---- the pools ----
inline constexpr uint32_t kPairsPerContext = 1024;  // replays in flight per context, at most
inline constexpr uint32_t kMaxContexts = 16;        // kUntimedNames says "over 16 contexts"
inline constexpr uint32_t kMaxTimedGraphs = 1024;   // graphs with a row of GPU statistics
inline constexpr int kMaxDevices = 64;  // primary contexts known; a bit each in a device mask
// Green contexts remembered at once (Engine::note_green): a device is split into a few SM
// partitions each, so a program holds far fewer; past it, a green context is known only where the
// driver says so (cuStreamGetCtx_v2, CUDA 12.5+).
inline constexpr uint32_t kMaxGreenContexts = 64;
inline constexpr int kAlignTries = 5;
inline constexpr uint64_t kEventResolutionNs = 500;
// How long an alignment's try polls its event before it is given up (a busy device): a pool's
// first alignment, whose replays are not timed without it, and a renewal, made with the mutex
// held every kReanchorNs, which gives up at its first slow try (the old reference serves on).
inline constexpr uint64_t kAlignSpinNs = 20 * 1000 * 1000;
inline constexpr uint64_t kReanchorSpinNs = 1000 * 1000;
// How old a pool's reference grows before a pass aligns the clock again. A start read T ms after
// the reference is rounded to T * 2^-24 ms (the float cuEventElapsedTime answers): 15.6 us after
// 131 s of a reference aligned once per context (F138); 30 ns within 2^10 ms. The renewal costs a
// few event records and queries on the reaper's thread, once a period, and only while replays
// of the pool are read.
inline constexpr uint64_t kReanchorNs = 1000ull * 1000 * 1000;
inline constexpr uint32_t kClaimProbes = 4;  // neighbours from the thread's cursor, then:
// pairs sampled across the pool, kClaimStride apart, before a replay is called "pool exhausted"
// (Engine::begin: a cursor that ran into another thread's block of pairs in flight).
inline constexpr uint32_t kClaimSamples = 16;
inline constexpr uint32_t kClaimStride = kPairsPerContext / kClaimSamples + 1;
// How long a context's destruction waits for its replays still running before their times are
// given up (the destruction itself waits for the context's work anyway).
inline constexpr uint64_t kHarvestBoundNs = 20 * 1000 * 1000;
// A replay's name as delivered: copied out of the graph's label when its pair is read, with its
// NUL (the range messages of shim/range are at most 159 bytes; longer ones would be cut).
inline constexpr size_t kReplayNameBytes = 160;

struct Pair {
  std::atomic<uint32_t> state{0};   // kFree, kClaimed, kRecorded, kDead (gpu_engine.cpp)
  std::atomic<uint32_t> claims{0};  // times claimed, for Engine::claims()
  CUevent start = nullptr, end = nullptr;
  uint64_t stream = 0;
  // Streams 0 and 2 are not one stream each: one legacy stream per context, one per-thread
  // default stream per thread and context (ferrum_replay_gpu_replay's `context`, `thread`).
  CUcontext context = nullptr;
  uint32_t thread = 0;
  uint32_t category = 0;  // beside `thread`: a pair stays 96 bytes (VV-5)
  // The graph's label text at launch (shim/range), read when the GPU has finished the replay,
  // and its owner's count of pairs that name it (or null): raised while the pair holds the
  // name, so the registry never reuses a label a replay in flight still names (F77).
  const char *name = "";
  std::atomic<uint32_t> *name_holds = nullptr;
  const std::atomic<uint32_t> *graph_live = nullptr;  // GraphStats::live
  uint64_t replay = 0;
  // Who enqueued it, and when: the launching thread's ordinal (0 for none yet) and its count of
  // claimed pairs. One thread's replays on one stream finish in this order (UnfinishedRuns).
  uint32_t launcher = 0;
  uint64_t order = 0;
};
static_assert(sizeof(Pair) == 96, "a launch claims and writes a pair: no more lines than needed");

// A stream runs its work in the order it was enqueued, so once a replay a thread enqueued on a
// stream has not finished, neither have the replays that thread enqueued there after it. A pass
// over a pool asks the driver about each such run's oldest unfinished replay only: with 1,000
// replays queued behind a long one, one cuEventQuery per pass instead of 1,000 — each a driver
// call, which may take locks the program's own launches take, every millisecond. Keyed by the
// launching thread too: two threads' replays on one stream have no order the shim knows. Runs
// past kRuns are not remembered, only asked about pair by pair (as before: slower, not wrong).
// The order can break where the shim cannot see it: a stream destroyed with work still queued
// and its handle value given to a new stream (the shim does not hook cuStreamDestroy), or
// thread ordinals wrapped. A finished replay then waits behind an unfinished one of another
// stream; passes that ask about every pair (Engine::kFullPassEvery, flushes, the exit, the last
// round before a context goes) bound that wait.
class UnfinishedRuns {
 public:
  // With `skip` false, behind() is always false: a pass that asks about every pair.
  explicit UnfinishedRuns(bool skip) : skip_(skip) {}
  // True when an older replay of the same run was found unfinished in this pass.
  bool behind(const Pair &pair) const {
    if (!skip_) return false;
    const size_t at = find(pair);
    return at < count_ && pair.order > runs_[at].order;
  }
  void unfinished(const Pair &pair) {  // the driver said `pair` has not finished
    const size_t at = find(pair);
    if (at < count_) {
      if (pair.order < runs_[at].order) runs_[at].order = pair.order;
    } else if (count_ < kRuns) {
      runs_[count_++] = Run{pair.context, pair.stream, pair.launcher, pair.order};
    }
  }

 private:
  static constexpr size_t kRuns = 32;  // 1 KiB of stack: harvest_locked runs on program threads
  struct Run {
    CUcontext context;
    uint64_t stream;
    uint32_t launcher;
    uint64_t order;  // the oldest unfinished replay seen
  };
  size_t find(const Pair &pair) const {  // the run `pair` belongs to; count_ when none
    size_t i = 0;
    while (i < count_ && !(runs_[i].launcher == pair.launcher && runs_[i].stream == pair.stream &&
                           runs_[i].context == pair.context))
      ++i;
    return i;
  }
  Run runs_[kRuns];
  size_t count_ = 0;
  bool skip_;
};

struct Pool;

// What the launch path holds between the two records. Null pool: not timed.
struct Ticket {
  Pool *pool = nullptr;
  Pair *pair = nullptr;  // claimed by the launching thread until end()
  bool per_thread = false;
  CUstream stream = nullptr;
  // A current context without a pool: one is asked for in end(), only if the launch succeeded.
  // Asked for before it, a context destroyed under a thread that still had it current (its
  // launch fails) took a slot for good, its pool failed at the reaper's push into it: after 16,
  // no context was ever timed again, and the reaper had called into a dead context.
  CUcontext unpooled = nullptr;
};

// Why a replay was not timed (each counted).
enum class Untimed : unsigned {
  sampled_out,
  no_context,       // no current context
  pool_not_ready,   // the context's pool is being created, or could not be
  pool_exhausted,   // every pair in flight
  capturing,        // the stream is being captured, or the query failed
  event_error,      // a record, query or elapsed call failed
  launch_failed,    // the launch itself returned an error
  context_dropped,  // the context was destroyed while the replay was in flight
  unregistered,     // its thread not registered (gpu_timing.cpp): no key left, or not yet
  abandoned,        // the launch was left (a jump, an unwind) before its end event
  stream_shared,    // another thread's launch used its stream meanwhile (stream_watch.hpp)
  contexts_full,    // its context came after kMaxContexts others that still have a pool
  after_exit,       // launched after the exit's last pass (stop()): no CUDA call of ours then
  green_context,    // its context is a green one (Engine::green_current): never timed (F173)
  count_
};
inline constexpr const char *kUntimedNames[] = {"sampled out",
                                                "no context",
                                                "pool not ready",
                                                "pool exhausted",
                                                "capturing",
                                                "event error",
                                                "launch failed",
                                                "context destroyed",
                                                "thread not registered",
                                                "left by a jump or unwind",
                                                "stream shared",
                                                "over 16 contexts",
                                                "after exit",
                                                "green context"};
static_assert(sizeof kUntimedNames / sizeof *kUntimedNames ==
              static_cast<unsigned>(Untimed::count_));

// `timed` counts the replays handed to the sink (or read while none was registered); a replay
// read at a context's end and not handed over yet (Engine::pending_) counts in `in_flight` until
// a pass delivers it: the recorder counts what its sink got, and its trace's timed + in flight +
// not timed must add up to the launches as the shim's do (F165).
struct Totals {
  uint64_t timed = 0, in_flight = 0, not_timed = 0, align_error_ns = 0;
  uint64_t untimed[static_cast<unsigned>(Untimed::count_)] = {};
};

uint64_t next_engine_generation();

class Engine {
 public:
  Engine() = default;
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;
  ~Engine();

  void set_api(const EventApi &api) { api_ = api; }
  const EventApi &api() const { return api_; }

  // ---- the launch path: lock-free, allocation-free, never waits ----
  // Decides whether this replay is timed, opens a window on its stream (stream_watch.hpp: every
  // launch on a stream other threads may use, timed or not) and records its start event.
  // `replay` is the graph's 1-based replay number. A timed replay's ticket is
  // filled in place, field by field, in the caller's frame: a ticket returned by value was
  // stored in pieces and read back whole (a store-forwarding stall; about 5 ns per launch in
  // paired runs).
  // `name_holds` (may be null): the count that name's owner keeps of the pairs naming it; one
  // more while this replay's pair holds the name (Pair::name_holds).
  // `graph_live` (may be null): the graph's word that holds `category` while it lives
  // (GraphStats::live).
  void begin(Ticket &ticket, CUstream stream, bool per_thread, const char *name,
             std::atomic<uint32_t> *name_holds, uint32_t category, uint64_t replay,
             const std::atomic<uint32_t> *graph_live = nullptr);
  // After the real launch: records the end event and hands the pair to the reaper. For every
  // launch that opened a window on its stream (stream_watch.hpp), timed or not, it closes it;
  // a timed replay that met another thread's launch there is not timed ("stream shared").
  // True when it asked for a new pool (the ticket's context had none, and the launch
  // succeeded): the caller then makes sure a reaper runs. `left`: the launch did not return but
  // is being unwound (a cancellation inside the driver, an exception): counted as left, as a
  // jump out of it is, not as a launch that failed (the launch summary's "failed" column counts
  // no such launch either).
  bool end(Ticket &ticket, bool launched, bool left = false);
  // A launch of this thread that never reached end(): left by a jump (siglongjmp out of the
  // driver, from a signal handler), which runs no destructor. Its pair would stay claimed for
  // good — one of the context's pairs fewer, and a replay counted neither timed nor not — so
  // it is given back and counted ("left by a jump or unwind") where the thread is known to have
  // left that launch: at its next outermost graph call (OutermostCall sees the open call
  // abandoned), as it ends (its registration's destructor), and at exit on the exiting thread.
  void give_back_abandoned();

  // ---- at instantiation (not the launch path) ----
  // Creates the calling thread's current context's pool now, if it has none yet. True when
  // the context has a pool (made now or before) that a reaper must serve. Waits for the mutex
  // at most `lock_ms` (0: one try); false when it stayed taken (the pool is left requested).
  bool prepare_current_context(long lock_ms);

  // ---- off the launch path (each takes the mutex) ----
  // Every kFullPassEvery-th pass asks the driver about every replay in flight, not only about
  // each run's oldest unfinished one (UnfinishedRuns): where stream order broke unseen, a
  // finished replay waits at most this many passes (the reaper's: about 1 ms apart when busy).
  static constexpr uint64_t kFullPassEvery = 256;
  // The next pass to start asks about every replay in flight: a flush or the exit reports
  // whatever has finished, in stream order or not. A flag the pass reads: takes no lock.
  void ask_full_pass() { full_pass_asked_.store(true, std::memory_order_release); }
  // Creates requested pools, reaps finished pairs into `batch` (at most `capacity`), updates
  // the statistics. Returns the number of replays put in `batch`; `*more` when the batch
  // filled before everything finished was taken. Calls CUDA only on live contexts.
  // With `end_through`, the pass ends before its next pair once *end_through reaches `self`
  // (each read is driver calls: a slow driver must not hold up a reaper asked to end).
  // With `names` (`capacity` of them), each replay's name is copied there while its pair is
  // still held, and `batch[i].name` points at `names[i]`: once the pair is free the label may be
  // reused for another graph before the batch is delivered. Without it (unit tests that read
  // the batch at once), the names point at the labels.
  size_t reap_pass(ferrum_replay_gpu_replay *batch, size_t capacity, bool *more,
                   const std::atomic<uint64_t> *end_through = nullptr, uint64_t self = 0,
                   char (*names)[kReplayNameBytes] = nullptr);
  // The context `context` is about to be destroyed: its pool goes first (its events destroyed
  // while the context still lives), its in-flight replays count as not timed.
  void drop_context(CUcontext context);
  // A device's primary context is about to be reset: its pool goes, events destroyed first.
  void drop_device(int device);
  // A device's primary context may have been destroyed already (its last release): its pool
  // goes without any CUDA call.
  void forget_device(int device);
  // ---- green contexts (CUDA 12.4): never timed (F173) ----
  // cuda.h (cuGreenCtxCreate): "a green context can be current to only one thread at a time.
  // There is no internal synchronization to make API calls accessing the same green context from
  // multiple threads work." A pool needs its context pushed on the reaper's thread (to make it,
  // align its clock, read its events) while the program has it current: outside that contract,
  // and a driver that refuses such a push left the pool failing for good. So a launch in a green
  // context is not timed ("green context"), and the context gets no pool: the shim never makes
  // it current anywhere.
  // A CUcontext cuCtxFromGreenCtx answered (hooked on every route; a program can make a green
  // context current only through it): remembered, lock-free, until its cuGreenCtxDestroy.
  void note_green(CUcontext context);
  void forget_green(CUcontext context);
  bool any_green() const { return greens_used_.load(std::memory_order_acquire); }
  // Whether `context`, current on the calling thread, is a green context: remembered, or said so
  // by cuStreamGetCtx_v2 on the NULL stream (CUDA 12.5+: it names the current green context).
  // A driver call at most once per context that asks for a pool (the launch path calls it only
  // for a context without one, before the request that gives it a slot).
  bool green_current(CUcontext context);

  // `context` is `device`'s primary context (seen in a cuDevicePrimaryCtxRetain answer): the
  // device-wide drops above take only its pool, and leave the pools of contexts the program
  // created (cuCtxCreate) alone. Until one is seen for a device, they take every pool of the
  // device, and requests not served yet (whose device is unknown), as the safe choice: a pool
  // forgotten costs a few untimed replays, a call into a dead context could cost the program.
  void note_primary(int device, CUcontext context);
  // The caller holds the engine mutex across a real context call (lock()/unlock()).
  void lock() { common::lock_ours(&mutex_); }  // held_here.hpp: the exit hooks take it too
  void unlock() { common::unlock_ours(&mutex_); }
  // drop_* under a held lock.
  void drop_context_locked(CUcontext context, bool destroy_events);
  void drop_device_locked(int device, bool destroy_events);
  // `context` has ended for sure (the call that ends it succeeded; the driver says so): its
  // graphs' rows of statistics are no longer live ones (stats_slot). Under lock(). For a device,
  // its primary context's, once known (note_primary).
  void rows_of_ended_context_locked(CUcontext context);
  void rows_of_ended_primary_locked(int device);
  // The device of `context`, a live context (under lock()): its pool's, else asked of the driver
  // with the context pushed (cuCtxGetDevice); -1 when neither says.
  int device_of_locked(CUcontext context);
  // The devices that have a pool or a known primary context: a bit per ordinal. Under lock().
  uint64_t pool_devices_locked() const;
  // Reads the finished replays of `device`'s pools (for the reaper's next pass), without
  // waiting for those still running, and asking the driver about each run's oldest unfinished
  // replay only (LastRound::runs: on the program's thread, before every release).
  void harvest_device_locked(int device);
  // A program thread is inside a real context-ending call (counted: several may be), made
  // without the mutex: until it returns, reap passes and pool creation call no CUDA function
  // (the context being ended may be any of the pools'). Under lock().
  void context_ending_locked(bool entering) { ending_ += entering ? 1 : -1; }
  // True when any pool exists (a context hook then has work to do).
  bool any_pool() const { return pools_used_.load(std::memory_order_acquire); }

  // After fork, in the child: the mutex made anew (the parent's reaper may have held it), every
  // pool forgotten without a CUDA call, counters restarted.
  void reset_in_child();
  // At exit: no CUDA call is made from now on; what is in flight is counted as such.
  void stop();
  // stop() without the mutex, for an exit from inside a lock of ours (held_here.hpp): the
  // reaper makes no further call after its current one (reap_pass looks before each).
  void mark_stopped() { stopped_.store(true, std::memory_order_release); }
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }
  // The engine's mutex for an exit hook (stop, the launch summary's GPU columns): waited for at
  // most kExitLockMs, and not at all once an exit hook waited that long in vain. The reaper holds
  // it across driver calls; exit() from a signal handler that interrupted a driver call on the
  // exiting thread leaves the driver's own lock held, and the reaper's call waits for it for
  // ever: an exit hook that waited for the mutex never ended the process (a hostile review: 13
  // of 40 SIGTERMs to a launching server whose handler calls exit()). False: nothing held, and
  // what needs the mutex goes unreported.
  static constexpr long kExitLockMs = 1000;
  bool lock_at_exit();

  // Lock-free (pair states and counters are atomics): an exit hook reads it whoever holds the
  // mutex.
  Totals totals() const;
  // A number that changes whenever a launch tries to claim a pair (the pools' claim cursors,
  // summed; no lock): the reaper stays quick while launches keep coming, even at an instant
  // when it has caught up with every replay in flight.
  uint64_t claims() const;
  // Visits the statistics of every timed graph (ordinal 0: graphs without a row of their
  // own). Under lock().
  template <typename Visit>
  void for_each_stats_locked(Visit &&visit) const {
    if (stats_)
      for (uint32_t i = 0; i < kMaxTimedGraphs; ++i)
        if (stats_[i].ordinal) visit(static_cast<const GraphStats &>(stats_[i]));
    if (other_.count) visit(static_cast<const GraphStats &>(other_));
  }
  // The statistics row of `ordinal`; null when it has none. Under lock() only.
  const GraphStats *stats_for(uint32_t ordinal) const;

  // A replay the caller decided not to time (lock-free: the launch path may call it).
  void not_timed(Untimed why) { count(why); }

 private:
  void count(Untimed why, uint64_t n = 1) {
    untimed_[static_cast<unsigned>(why)].fetch_add(n, std::memory_order_relaxed);
  }
  // context_gone: the driver said the pair's context has ended (forget_ended).
  enum class ReadResult { not_ready, read, failed, context_gone };
  // The calling thread's current context; null when it has none, or after stop() (no CUDA call).
  CUcontext current_context();
  void watch_sampled_out(CUstream stream, bool per_thread);
  ReadResult read_pair_locked(Pool &pool, Pair &pair, ferrum_replay_gpu_replay *into,
                              char *name_copy);
  // Whether harvest_locked, once its time is up with replays skipped behind unfinished ones of
  // their run (UnfinishedRuns), asks about every one of them: where the context goes for good
  // (a destroy, a reset), a finished replay stuck behind a reused stream handle's work is timed
  // instead of counted as dropped, at one driver call per replay in flight. Not before a
  // release that is seldom the last (F139).
  enum class LastRound { runs, every_pair };
  void harvest_locked(uint32_t slot, uint64_t bound_ns, LastRound last);
  // The context's pool; null while it is being made (`*known`: its slot is taken), or not asked
  // for yet.
  Pool *pool_of(CUcontext context, bool *known) const;
  // Asks for a pool for `context` (a slot keyed to it, for the reaper to fill): `*requested`
  // when this call took the slot, `*full` when every slot is another context's.
  void request_pool(CUcontext context, bool *requested, bool *full);
  void create_pool(uint32_t slot, bool align_now);
  bool align(Pool &pool, uint64_t spin_ns, bool stop_when_slow);
  bool reanchor_if_due(uint32_t slot, Pool &pool);
  bool ensure_aligned(uint32_t slot);
  // Pushes the context of the pool in `slot` for the calls that follow; false when it could not
  // be. One the driver calls ended is forgotten at once (forget_ended).
  bool push_pool_context(uint32_t slot, CUcontext context);
  // Whether the driver's `answer` for a call given `context` (a push, a query of its event)
  // proves the context ended: CUDA_ERROR_CONTEXT_IS_DESTROYED does; CUDA_ERROR_INVALID_CONTEXT
  // only when cuCtxGetApiVersion, a question about the handle alone, says so too — cuda.h gives
  // that code for other refusals as well (a green context not converted, a context current
  // elsewhere), and a live context's pool forgotten leaks its events and stream (F173).
  bool context_ended(CUresult answer, CUcontext context);
  // A context ended without the shim seeing it (a context-ending call it does not hook, or a
  // driver that ends one on its own): context_ended said so. Its pool, if still keyed to it,
  // goes without a further CUDA call (its events went with the context), its replays in flight
  // counted "context destroyed", its slot free for another context.
  void forget_ended(uint32_t slot, CUcontext context);
  void release_pool(uint32_t slot, bool destroy_events);
  void mark_failed(uint32_t slot, Pool *pool, CUcontext context);
  bool ends_with_primary(uint32_t slot, int device) const;
  // The row of the pair's graph. A graph that is no longer live (destroyed, its handle reused,
  // its context ended) keeps its row, for the summary's row of it, until a live graph finds
  // none free: then that graph takes it, and what it held goes to the shared "(other timed
  // graphs)" row (review KK1: the first 1,024 graphs ever timed kept every row for good, and a
  // program that re-captures its graphs had each later graph's row, live ones included, at
  // `0 -`). A row is taken only from a graph seen no longer live, never for being replayed
  // least lately (that eviction lost live graphs' rows, review MM-2); the limits of "seen" are
  // in docs/gpu-time.md. Null never; `other_` when nothing else.
  GraphStats *stats_slot(const Pair &pair);
  // Marks the rows of graphs that no longer live (if `retired`, g_graphs_retired as read before
  // the caller's look at its own graph, moved since the last time); the first such row on
  // `ordinal`'s probe path, or null.
  GraphStats *find_dead_row(uint32_t ordinal, uint64_t retired);
  // Whether the pair's graph still lives (its word holds its ordinal; no word: taken for live).
  static bool graph_lives(const Pair &pair);

  EventApi api_;
  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
  std::atomic<CUcontext> keys_[kMaxContexts] = {};
  std::atomic<Pool *> pools_[kMaxContexts] = {};
  std::atomic<bool> pools_used_{false};
  std::atomic<CUcontext> primary_[kMaxDevices] = {};       // by device ordinal (note_primary)
  std::atomic<CUcontext> greens_[kMaxGreenContexts] = {};  // note_green; null: free
  std::atomic<bool> greens_used_{false};
  std::atomic<bool> greens_full_said_{false};
  // Which engine this is (a test makes many): a thread's memo of a context found not green
  // (green_current) holds for the engine that asked only.
  const uint64_t generation_ = next_engine_generation();
  bool known_green(CUcontext context) const;
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> timed_{0};
  std::atomic<uint64_t> untimed_[static_cast<unsigned>(Untimed::count_)] = {};
  std::atomic<uint64_t> align_error_max_{0};  // written under the mutex, read without it
  std::atomic<bool> mutex_abandoned_{false};  // lock_at_exit waited kExitLockMs in vain
  int ending_ = 0;  // context-ending calls in progress (context_ending_locked)
  // Passes begun (reap_pass; a pass is the calls up to one that returns without `more`), and
  // whether the current one asks about every pair (kFullPassEvery, ask_full_pass()).
  uint64_t passes_ = 0;
  bool mid_pass_ = false, full_pass_ = false;
  std::atomic<bool> full_pass_asked_{false};
  bool warned_api_ = false;
  GraphStats *stats_ = nullptr;  // kMaxTimedGraphs entries, mapped on first reap
  GraphStats other_;             // graphs without a row of their own (the engine is static)
  uint64_t retired_seen_ = 0;    // g_graphs_retired when find_dead_row last looked at every row
  // Replays read while their context was being destroyed, for the next pass to deliver: the
  // reaper's, or where none runs a flush's or the exit's (gpu_timing.cpp). Written under the
  // mutex; the count is read without it (totals(): not delivered yet, so in flight).
  static constexpr uint32_t kPending = 4096;
  ferrum_replay_gpu_replay pending_[kPending] = {};
  char pending_names_[kPending][kReplayNameBytes];  // their names (not initialised: untouched)
  std::atomic<uint32_t> pending_count_{0};
};

// Set once the engine is made (make_engine(), on first use: no load-time constructor).
extern constinit std::atomic<Engine *> g_engine;
Engine &make_engine();
inline Engine &engine() {
  Engine *made = g_engine.load(std::memory_order_acquire);
  return __builtin_expect(made != nullptr, 1) ? *made : make_engine();
}

}  // namespace ferrum_replay::shim::gpu
