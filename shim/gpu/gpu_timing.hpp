// GPU timing wired to the real driver: the driver functions (resolved like every real
// function, real_functions.hpp: never a dlopen of a driver the program has not loaded; the
// driver then kept loaded by a reference of the shim's own, never dropped), the
// reaper thread, the hand-off to a tool (ferrum_replay_set_gpu_sink / _gpu_flush), exit and
// fork. The engine itself is gpu_engine.hpp.
//
// The reaper: one thread, started by the first launch that asks for a context's pool (never
// in a process that does not turn GPU timing on), all signals blocked. It wakes every
// millisecond while replays are in flight or launches keep coming (every 20 ms when neither),
// creates pools, reaps, and calls the sink with batches, outside the engine's mutex. It lives
// only while a program thread that timed a launch lives: the last such thread, as it ends,
// has it read what has finished, ends it and joins it (docs/gpu-time.md); without a reaper, a
// flush or the exit reads on the calling thread, never on a launch. At exit (an atexit handler
// registered before the engine is first used, so it runs before the CUDA runtime's teardown) one
// last pass is read (waited for at most 1 s), then the engine stops calling CUDA for good. After
// fork, the child forgets every pool (its contexts are not usable there) and starts a reaper of
// its own on its first timed launch.
#pragma once

#include <cuda.h>

#include "errno_kept.hpp"
#include "gpu/gpu_engine.hpp"
#include "gpu/stream_watch.hpp"

namespace ferrum_replay::shim::gpu {

// The launch path (only when timing_on()). Never blocks; see Engine::begin/end. `ticket`
// starts empty and is filled in place when the replay is timed. A thread's first timed launch
// resolves the driver's event functions (once per process) and registers the thread
// (gpu_timing.cpp); from then on t_launch_ready says both are done and the launch goes
// straight to the engine.
extern constinit __attribute__((tls_model("initial-exec"))) thread_local bool t_launch_ready;
// A thread's first timed launch: resolves, registers, sets t_launch_ready. False: this replay
// is not timed (counted, unless timing is off for the process: the driver cannot be kept loaded).
bool make_launch_ready();
// Makes sure a reaper runs while a registered thread lives (a launch asked for a new pool: the
// reaper makes it). Cheap once one runs: one load.
void start_reaper();
inline void launch_begin(Ticket &ticket, CUstream stream, bool per_thread, const char *name,
                         std::atomic<uint32_t> *name_holds, uint32_t category, uint64_t replay,
                         const std::atomic<uint32_t> *graph_live) {
  if (__builtin_expect(!t_launch_ready, 0) && !make_launch_ready()) return;
  engine().begin(ticket, stream, per_thread, name, name_holds, category, replay, graph_live);
}
inline void launch_end(Ticket &ticket, bool launched, bool left = false) {
  // Untimed, no pool to ask for, and no window open on a watched stream (stream_watch.hpp):
  // nothing to do.
  if ((ticket.pool || ticket.unpooled || window_open()) && engine().end(ticket, launched, left))
      [[unlikely]]
    start_reaper();
}
// The calling thread's launch left by a jump, if it timed one (Engine::give_back_abandoned).
inline void give_back_abandoned() {
  if (Engine *made = g_engine.load(std::memory_order_acquire)) made->give_back_abandoned();
}

// At a graph's instantiation (only when timing_on()): the current context's event pool is
// created and its clock aligned now, on the instantiating thread, rather than at the reaper's
// next pass after the first launch — which would leave the first replays of a short burst
// untimed ("pool not ready").
void prepare_current_context();

// Before this process first takes the engine's mutex (a pool made at instantiation, a tool's
// sink or flush, the first timed launch): the fork handlers (a fork while another thread
// holds the mutex must not leave it held in the child) and the exit pass. Once per process.
// True once they are; false while another thread installs them.
bool install_handlers();

// Around the real context-ending calls (hooked_functions.def, kinds context_destroy,
// green_context_destroy, primary_release, primary_reset). Called only when timing_on(). A pool
// is safe only while the shim sees every end of its context: one it does not see (a driver that
// ends a context on its own) is forgotten at the driver's first answer that says so
// (Engine::forget_ended), as a last resort.
//
// The engine's mutex is held to drop (or read) the pools before the call and after it, never
// across it: the real call waits for the context's work, host functions included, and a host
// function of the program that asks the shim anything (ferrum_replay_gpu_flush) must not wait
// for a mutex held by a thread that waits for that host function. While the call runs, the
// reaper and pool creation make no CUDA call at all (Engine::ContextEnding). Once the engine is
// stopped (the exit), the calls pass straight through, the mutex untouched: the runtime's
// teardown releases its contexts then, and the reaper may hold the mutex inside a driver call
// that never returns (Engine::lock_at_exit).
//
// ContextEndingClosed ends that stretch after the real call returns — and also when it unwinds
// (a pthread_cancel at a cancellation point inside the driver's teardown, which may wait for the
// context's work; an exception): left open, the reaper made no CUDA call again for the rest of
// the process and every later replay stayed "in flight" (hostile review of 2026-12-05). Its
// `after` runs under the engine's mutex and is told whether the call returned: on the way out
// of an unwinding call it makes no CUDA call (the driver may be left mid-teardown on this
// thread), and a primary context whose release did not return counts as gone. A call that
// returned an error ended nothing: the shim's state is left as the driver left the context's
// (F173: a refused cuGreenCtxDestroy had a live context's pool forgotten, its events leaked).
// A context-ending call from a signal handler that interrupted this thread inside a lock of
// ours (held_here.hpp) — the engine's, making a pool, say — must not wait for that lock: the
// handler's exit() ran the program's (or the runtime's) teardown, whose context destruction
// waited for itself for ever. GPU timing stops there (no CUDA call of ours follows, so none
// reaches the dead context), and the call passes straight through.
inline bool inside_our_lock_stop(Engine &timing) {
  if (!common::inside_our_lock()) return false;
  timing.mark_stopped();
  return true;
}
template <typename After>
struct ContextEndingClosed {
  Engine &timing;
  After after;  // after(returned), under the mutex, once the stretch is closed
  bool returned = false;
  ~ContextEndingClosed() {
    const common::ErrnoKept errno_kept;  // after the real call, whose errno is the program's
    timing.lock();
    timing.context_ending_locked(false);
    after(returned);
    timing.unlock();
  }
};
template <typename Call>
auto around_context_destroy(CUcontext context, Call &&call) {
  Engine &timing = engine();
  if (!timing.any_pool() || timing.stopped()) return call();
  if (inside_our_lock_stop(timing)) return call();
  {
    const common::ErrnoKept errno_kept;  // errno_kept.hpp: the events' destruction
    timing.lock();
    timing.drop_context_locked(context, true);  // its events go while the context lives
    timing.context_ending_locked(true);
    timing.unlock();
  }
  // A request made meanwhile goes too (no CUDA call: the events are not destroyed) — unless the
  // driver refused the call: the context lives on, and the request is served as any other. (Its
  // pool, dropped above with its events while it lived, is made anew at its next launch.)
  bool ended = true;
  ContextEndingClosed closed{timing, [&](bool returned) {
                               if (!returned || ended) timing.drop_context_locked(context, false);
                               // Its graphs went with it: only when that is sure (a call that did
                               // not return, cancelled in its wait, may have ended nothing).
                               if (returned && ended) timing.rows_of_ended_context_locked(context);
                             }};
  auto result = call();
  ended = result == CUDA_SUCCESS;
  closed.returned = true;
  return result;
}
template <typename Call>
auto around_primary_reset(CUdevice device, Call &&call) {
  Engine &timing = engine();
  if (!timing.any_pool() || timing.stopped()) return call();
  if (inside_our_lock_stop(timing)) return call();
  {
    const common::ErrnoKept errno_kept;
    timing.lock();
    timing.drop_device_locked(device, true);
    timing.context_ending_locked(true);
    timing.unlock();
  }
  bool ended = true;
  ContextEndingClosed closed{timing, [&](bool returned) {
                               timing.drop_device_locked(device, false);
                               if (returned && ended) timing.rows_of_ended_primary_locked(device);
                             }};
  auto result = call();
  ended = result == CUDA_SUCCESS;
  closed.returned = true;
  return result;
}
// A release destroys the primary context only when it drops the last reference: asked after
// the call (cuDevicePrimaryCtxGetState). 1: active, 0: not, -1: the driver did not say.
int primary_context_state(CUdevice device);
// After a call that released `device`'s primary context, under the engine's mutex: if that was
// its last reference (or the call did not return: it may have been), the context's pool goes,
// without a CUDA call (the context may be gone).
inline void forget_ended_primary_locked(Engine &timing, CUdevice device, bool returned) {
  const int state = returned ? primary_context_state(device) : -1;
  // Unknown counts as gone for the pool (forgetting one costs a few untimed replays, a call into
  // a dead context could cost the program), not for the graphs' rows (a live graph's row given
  // away costs its statistics).
  if (state != 1) timing.drop_device_locked(device, false);
  if (state == 0) timing.rows_of_ended_primary_locked(device);
}
template <typename Call>
auto around_primary_release(CUdevice device, Call &&call) {
  Engine &timing = engine();
  if (!timing.any_pool() || timing.stopped()) return call();
  if (inside_our_lock_stop(timing)) return call();
  {
    const common::ErrnoKept errno_kept;
    timing.lock();
    // Whether this release is the last is known only afterwards, when the context may be gone:
    // what has finished is read now (without waiting: the release may not end anything).
    timing.harvest_device_locked(device);
    timing.context_ending_locked(true);
    timing.unlock();
  }
  ContextEndingClosed closed{
      timing, [&](bool returned) { forget_ended_primary_locked(timing, device, returned); }};
  auto result = call();
  closed.returned = true;
  return result;
}

// cuGreenCtxDestroy (CUDA 12.4). The green context's own context ends: it is forgotten as a
// green context (Engine::note_green), and its pool, if one was made where the shim did not know
// it green, goes first, as for cuCtxDestroy — keyed to the CUcontext cuCtxFromGreenCtx gives
// for it (context_of_green). And the call releases the device's primary context (cuda.h),
// possibly for the last time: that context's pool then goes after it, as after
// cuDevicePrimaryCtxRelease (F167). Where cuCtxFromGreenCtx cannot map the handle, the driver
// says it is no live green context: the call fails, and nothing is done before or after it — a
// fallback to the handle as the context's key had a stale handle's refused call forget the live
// context that now lies at that address, its events and stream leaked (F173). After a refused
// call, likewise nothing.
CUcontext context_of_green(CUgreenCtx green);
template <typename Call>
auto around_green_context_destroy(CUgreenCtx green, Call &&call) {
  Engine &timing = engine();
  if ((!timing.any_pool() && !timing.any_green()) || timing.stopped()) return call();
  if (inside_our_lock_stop(timing)) return call();
  const CUcontext mapped = context_of_green(green);
  if (!mapped) return call();
  if (!timing.any_pool()) {  // only remembered as green: forgotten once it ended
    auto result = call();
    if (result == CUDA_SUCCESS) timing.forget_green(mapped);
    return result;
  }
  uint64_t devices = 0;
  {
    const common::ErrnoKept errno_kept;
    timing.lock();
    // The device whose primary context the call releases: the green context's own.
    const int device = timing.device_of_locked(mapped);
    devices =
        device >= 0 && device < kMaxDevices ? uint64_t{1} << device : timing.pool_devices_locked();
    timing.drop_context_locked(mapped, true);  // its events go while it lives
    // The primary context's replays are not read first, as before a release: that would push
    // other contexts of the device here (other green contexts among them, which may be current
    // on another thread: cuda.h gives them no synchronisation), for replays the reaper reads
    // within a millisecond anyway.
    timing.context_ending_locked(true);
    timing.unlock();
  }
  bool ended = true;
  ContextEndingClosed closed{timing, [&](bool returned) {
                               if (returned && !ended) return;  // refused: nothing ended
                               timing.drop_context_locked(mapped, false);
                               timing.forget_green(mapped);
                               for (int d = 0; d < kMaxDevices; ++d)
                                 if (devices & (uint64_t{1} << d))
                                   forget_ended_primary_locked(timing, d, returned);
                             }};
  auto result = call();
  ended = result == CUDA_SUCCESS;
  closed.returned = true;
  return result;
}

// A successful cuCtxFromGreenCtx (when timing may be on: launch_range.hpp gpu_timing_possible,
// before the first graph call too): `context` is a green context's, never
// timed (Engine::note_green).
inline void note_green_context(CUcontext context) {
  engine().note_green(context);
}

// A successful cuDevicePrimaryCtxRetain (when timing may be on, as above): `context` is `device`'s
// primary context, the one its last release or a reset ends.
inline void note_primary_context(CUdevice device, CUcontext context) {
  engine().note_primary(device, context);
}

// ferrum_replay_set_gpu_sink / ferrum_replay_gpu_flush, once the caller knows timing is on.
// `replay_size`: the sink's own sizeof(ferrum_replay_gpu_replay), or the first layout's for a
// sink registered the first way; replays reach it that many bytes apart (at most ours).
// `stride_known` false (the first way): the sink did not say its sizeof, which tools built
// while the struct had grown and the sized way did not exist yet read as 80 bytes — such a
// sink is handed one replay per call, which it reads right whatever its stride (given 64-byte
// steps it read garbage names and crashed the host: review CP-4). A sink may call set_sink from
// inside its call, on any thread that delivers (from the next batch on); -EDEADLK from a signal
// handler that interrupted the shim's own delivery on its thread.
int set_sink(ferrum_replay_gpu_sink_fn sink, void *context, size_t replay_size,
             bool stride_known = true);
int flush(ferrum_replay_gpu_status *status);

}  // namespace ferrum_replay::shim::gpu
