#include "gpu/gpu_timing.hpp"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "background_thread.hpp"
#include "errno_kept.hpp"
#include "error_text.hpp"
#include "held_here.hpp"
#include "monotonic_clock.hpp"
#include "own_process.hpp"
#include "resolve/real_functions.hpp"
#include "support/exit_work.hpp"
#include "support/log.hpp"

namespace ferrum_replay::shim::gpu {
namespace {

// The driver functions, by their exported names (cuda.h's version macros do not apply to
// strings). Where two names exist the newer is preferred.
constinit RealFunction<CUresult (*)(CUevent *, unsigned)> g_event_create{"cuEventCreate"};
constinit RealFunction<CUresult (*)(CUevent, CUstream)> g_event_record{"cuEventRecord"};
constinit RealFunction<CUresult (*)(CUevent, CUstream)> g_event_record_ptsz{"cuEventRecord_ptsz"};
constinit RealFunction<CUresult (*)(CUevent)> g_event_query{"cuEventQuery"};
constinit RealFunction<CUresult (*)(float *, CUevent, CUevent)> g_elapsed_v2{
    "cuEventElapsedTime_v2"};
constinit RealFunction<CUresult (*)(float *, CUevent, CUevent)> g_elapsed{"cuEventElapsedTime"};
constinit RealFunction<CUresult (*)(CUevent)> g_event_destroy_v2{"cuEventDestroy_v2"};
constinit RealFunction<CUresult (*)(CUevent)> g_event_destroy{"cuEventDestroy"};
constinit RealFunction<CUresult (*)(CUstream, CUstreamCaptureStatus *)> g_is_capturing{
    "cuStreamIsCapturing"};
constinit RealFunction<CUresult (*)(CUstream, CUstreamCaptureStatus *)> g_is_capturing_ptsz{
    "cuStreamIsCapturing_ptsz"};
constinit RealFunction<CUresult (*)(CUcontext *)> g_ctx_get_current{"cuCtxGetCurrent"};
constinit RealFunction<CUresult (*)(CUdevice *)> g_ctx_get_device{"cuCtxGetDevice"};
constinit RealFunction<CUresult (*)(CUcontext)> g_ctx_push{"cuCtxPushCurrent_v2"};
constinit RealFunction<CUresult (*)(CUcontext *)> g_ctx_pop{"cuCtxPopCurrent_v2"};
constinit RealFunction<CUresult (*)(CUstream *, unsigned)> g_stream_create{"cuStreamCreate"};
constinit RealFunction<CUresult (*)(CUstream)> g_stream_destroy_v2{"cuStreamDestroy_v2"};
constinit RealFunction<CUresult (*)(CUdevice, unsigned *, int *)> g_primary_state{
    "cuDevicePrimaryCtxGetState"};
constinit RealFunction<CUresult (*)(CUstreamCaptureMode *)> g_exchange_capture_mode{
    "cuThreadExchangeStreamCaptureMode"};
constinit RealFunction<CUresult (*)(CUcontext, unsigned *)> g_ctx_api_version{"cuCtxGetApiVersion"};
constinit RealFunction<CUresult (*)(CUstream, CUcontext *, CUgreenCtx *)> g_stream_get_ctx_v2{
    "cuStreamGetCtx_v2"};
// Resolved with the rest (resolve_api), on a program thread: a failed lookup on the reaper
// would leave the C library's dlerror buffer in the reaper's thread-local storage.
std::atomic<CUresult (*)(CUstreamCaptureMode *)> g_exchange_capture_mode_fn{nullptr};

// 0: not resolved, 1: being resolved, 2: resolved (the engine's table is complete), 3: off for
// the process (the driver cannot be kept loaded: keep_driver).
std::atomic<int> g_api_state{0};
// Said once: the stream table (stream_watch.hpp) could not be mapped.
std::atomic<bool> g_stream_table_missing{false};

// Before the engine has the functions (so before any event exists): one reference of its own to
// each library they lie in (the driver), never dropped. Events may be in flight whenever the
// program dlcloses the driver, and the reaper, a context's drop and the exit's last pass call
// them afterwards: an unloaded driver was a SIGSEGV there, and a reload (at a new address) one at
// the next instantiation. Held, the program's dlclose leaves the driver loaded and a reload finds
// the same instance. False when a library cannot be held (a driver loaded with dlmopen into
// another namespace): timing is then off for the process.
bool keep_driver(const EventApi &api) {
  const auto at = [](auto function) { return reinterpret_cast<const void *>(function); };
  const void *const functions[] = {
      at(api.event_create),          at(api.event_record),      at(api.event_record_ptsz),
      at(api.event_query),           at(api.elapsed),           at(api.event_destroy),
      at(api.is_capturing),          at(api.is_capturing_ptsz), at(api.ctx_get_current),
      at(api.ctx_get_device),        at(api.ctx_push),          at(api.ctx_pop),
      at(api.stream_create),         at(api.stream_destroy),    at(api.primary_state),
      at(api.exchange_capture_mode), at(api.ctx_api_version),   at(api.stream_get_ctx_v2)};
  // One reference per library: the driver's functions all lie in one, so one in practice.
  const void *held[sizeof functions / sizeof *functions] = {};
  size_t count = 0;
  for (const void *function : functions) {
    Dl_info owner{};
    if (!function) continue;
    const bool found = dladdr(function, &owner) != 0;
    bool known = false;
    for (size_t i = 0; found && i < count && !known; ++i) known = held[i] == owner.dli_fbase;
    if (known) continue;
    if (!found || !keep_loaded(function)) {
      log_line(LogLevel::error,
               "GPU timing: cannot keep the driver '%s' loaded (loaded with dlmopen into another "
               "namespace?); replays are not timed",
               message_value(found && owner.dli_fname ? owner.dli_fname : "").text);
      return false;
    }
    held[count++] = owner.dli_fbase;
  }
  return true;
}

// False: timing is off for the process (keep_driver).
bool resolve_api() {
  g_exchange_capture_mode_fn.store(g_exchange_capture_mode.get(), std::memory_order_release);
  EventApi api;
  api.event_create = g_event_create.get();
  api.event_record = g_event_record.get();
  api.event_record_ptsz = g_event_record_ptsz.get();
  api.exchange_capture_mode = g_exchange_capture_mode_fn.load(std::memory_order_relaxed);
  if (!api.event_record_ptsz) api.event_record_ptsz = nullptr;  // no per-thread timing then
  api.event_query = g_event_query.get();
  api.elapsed = g_elapsed_v2.get();
  if (!api.elapsed) api.elapsed = g_elapsed.get();
  api.event_destroy = g_event_destroy_v2.get();
  if (!api.event_destroy) api.event_destroy = g_event_destroy.get();
  api.is_capturing = g_is_capturing.get();
  api.is_capturing_ptsz = g_is_capturing_ptsz.get();
  api.ctx_get_current = g_ctx_get_current.get();
  api.ctx_get_device = g_ctx_get_device.get();
  api.ctx_push = g_ctx_push.get();
  api.ctx_pop = g_ctx_pop.get();
  api.stream_create = g_stream_create.get();
  api.stream_destroy = g_stream_destroy_v2.get();
  api.primary_state = g_primary_state.get();
  api.ctx_api_version = g_ctx_api_version.get();
  api.stream_get_ctx_v2 = g_stream_get_ctx_v2.get();
  api.now_ns = common::monotonic_ns;
  if (!keep_driver(api)) return false;
  engine().set_api(api);
  return true;
}

// ---- the reaper ----
pthread_mutex_t g_wake_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_wake;  // CLOCK_MONOTONIC, initialised when the reaper starts
// The reaper's life. A process lives as long as its last thread, and that must never be the
// reaper: a program whose main thread ends (pthread_exit, thrd_exit, cancelled) lives on in
// its other threads and ends with the last of them. So the reaper runs only while a program
// thread that needs it lives: each thread that times a launch (or makes a pool) is
// registered, with a thread-specific value whose destructor runs as the thread ends, however
// it ends, before the C library counts it gone; the last registered thread's destructor ends
// the reaper and joins it. The next registered thread starts one again. Without a reaper,
// a flush reads finished replays on the calling thread (pass_here_locked), the exit on a thread of
// its own, waited for within a bound (exit_pass_locked).
pthread_mutex_t g_life_mutex = PTHREAD_MUTEX_INITIALIZER;  // starts, stops, registrations
pthread_key_t g_thread_key;
bool g_key_made = false;    // (g_life_mutex)
uint32_t g_registered = 0;  // registered threads that have not ended (g_life_mutex)
bool g_key_failed = false;  // said once (g_life_mutex)
// Stays set once set, also after the thread's destructor ran (its later launches, from other
// destructors or exit handlers, are read at exit): t_launch_ready relies on that. Whoever
// makes a thread register again must clear both.
constinit __attribute__((tls_model("initial-exec"))) thread_local bool t_registered = false;
// Set when this thread could not be registered: it tries once, not under a mutex at every
// launch (a launch takes no lock). A thread started later tries again.
constinit __attribute__((tls_model("initial-exec"))) thread_local bool t_unregistrable = false;
// A thread's first try to register waits for g_life_mutex at most kRegisterWaitMs; once that
// is spent, each later try (at its next launches, until one succeeds) takes it only if free.
// Its holders take microseconds, but the end of the last registered thread holds it while it
// stops the reaper: a pass (up to 200 ms) and the join, up to 10 s for a reaper stuck in a
// driver call. A program thread's launch must not wait that long for our bookkeeping; its
// replays go untimed ("thread not registered") until the mutex is free.
constexpr long kRegisterWaitMs = 300;
constinit __attribute__((tls_model("initial-exec"))) thread_local bool t_register_waited = false;
}  // namespace
constinit __attribute__((tls_model("initial-exec"))) thread_local bool t_launch_ready = false;
namespace {
std::atomic<bool> g_reaper_running{false};  // written under g_life_mutex
// The program's task budget left no room for a reaper (start_reaper): none is started again.
std::atomic<bool> g_reaper_refused{false};
// Tasks left to the program beyond the reaper's before one is started.
constexpr unsigned kSpareTasks = 4;
// Reapers are numbered as they start; each returns at its next look once g_end_through reaches
// its number. A reaper let go (its join timed out) stays asked to end, whoever starts next.
// The number of the latest reaper (written under g_life_mutex, before it starts).
std::atomic<uint64_t> g_reapers_started{0};
std::atomic<uint64_t> g_end_through{0};
// The reaper being stopped, number << 1, | 1 once it has been let go inside a driver call that
// has not returned yet; 0: none. Set under g_life_mutex before the join, so that the reaper,
// which clears it as it ends, always clears after it was set. A reaper let go may hold the
// engine's mutex all that time: no reaper is started behind it (each would wait there, and be
// let go in turn, 10 s more at each thread's end), and no pass is made on a flushing thread or
// at exit (it would wait there). Back from its call, it starts its successor (reaper_main).
std::atomic<uint64_t> g_let_go{0};
bool reaper_let_go() {
  return g_let_go.load(std::memory_order_acquire) & 1;
}
// install_handlers: 0 not yet, 1 being installed (by one thread), 2 installed.
std::atomic<int> g_handlers_state{0};
pthread_t g_reaper{};
uint64_t g_passes = 0;        // completed passes (g_wake_mutex)
bool g_wake_request = false;  // (g_wake_mutex)
// The reaper does not sleep before g_passes reaches this: a flush waiting for two passes gets
// them back to back, not one idle period (20 ms) apart (g_wake_mutex).
uint64_t g_wake_target = 0;

pthread_mutex_t g_sink_mutex = PTHREAD_MUTEX_INITIALIZER;
ferrum_replay_gpu_sink_fn g_sink = nullptr;  // (g_sink_mutex)
void *g_sink_context = nullptr;
size_t g_sink_stride = sizeof(ferrum_replay_gpu_replay);  // (g_sink_mutex) set_sink
bool g_sink_stride_known = true;                          // (g_sink_mutex) set_sink

// 256: a reaper's batch and its names (Engine::reap_pass) stay within the 64 KiB of its stack
// that 512 replays took before names were copied; the rest is the sink's.
constexpr size_t kBatch = 256;
ferrum_replay_gpu_replay g_batch[kBatch];  // pass_here's (g_life_mutex); a reaper has its own
char g_names[kBatch][kReplayNameBytes];    // g_batch's names (Engine::reap_pass)

// Set on the thread that is calling the sink, around the call (deliver): the reaper, a flushing
// thread, the exit's pass thread. That thread holds g_sink_mutex, so a sink that registers
// another sink or unregisters itself (set_sink) must not take it again: keyed to the reaper
// alone, a sink that unregistered itself inside a flush waited for itself for ever (F166).
constinit __attribute__((tls_model("initial-exec"))) thread_local bool t_in_sink = false;
// How long set_sink, called from inside a lock of ours on its thread (a signal handler's), tries
// the sink mutex before it refuses: another thread's delivery ends within a sink's call.
constexpr long kSinkTryMs = 100;

bool on_reaper() {
  return g_reaper_running.load(std::memory_order_acquire) &&
         pthread_equal(pthread_self(), g_reaper);
}

// No cancellation while a lock of ours is held (common/held_here.hpp: lock_ours): a cancellation
// point reached inside (a sink's output, a log line, the join of a reaper) unwound with the lock
// held — a thread that returned with a cancel pending was "cancelled" in its key's destructor,
// and the next thread to register waited for ever.

// Hands `batch` to the sink in the sink's layout: a sink built against a shorter struct steps
// through the array by its own sizeof, so each replay is moved down to its stride, cut to the
// fields the sink knows (`size` says so). In place, front to back: a replay moves only down, over
// ones already moved.
// The one place a sink is called, whichever thread delivers: the sink may call set_sink
// (t_in_sink), which takes effect from the next batch.
// deliver's part, holding g_sink_mutex: the replays to the sink registered now, in its layout.
void hand_over(ferrum_replay_gpu_replay *batch, size_t count) {
  // Read once, before the call: the sink may replace them (set_sink, on this thread).
  const ferrum_replay_gpu_sink_fn sink = g_sink;
  void *const context = g_sink_context;
  const size_t stride = g_sink_stride;
  if (!sink || count == 0) return;
  if (!g_sink_stride_known) {  // one at a time: read right whatever its stride
    for (size_t i = 0; i < count; ++i) {
      batch[i].size = static_cast<uint32_t>(stride);
      t_in_sink = true;
      sink(&batch[i], 1, context);
      t_in_sink = false;
      // Each call is its batch: a sink that unregistered or replaced itself inside one is
      // called no more — it may have freed its context; it was called on for the rest of the
      // array (review CQ-6) — and the rest goes to the sink registered now, if any.
      if (g_sink != sink || g_sink_context != context) {
        hand_over(batch + i + 1, count - i - 1);
        return;
      }
    }
    return;
  }
  if (stride < sizeof *batch) {
    char *bytes = reinterpret_cast<char *>(batch);
    for (size_t i = 0; i < count; ++i) {
      batch[i].size = static_cast<uint32_t>(stride);
      memmove(bytes + i * stride, &batch[i], stride);
    }
  }
  t_in_sink = true;
  sink(batch, count, context);
  t_in_sink = false;
}

void deliver(ferrum_replay_gpu_replay *batch, size_t count) {
  if (count == 0) return;
  common::lock_ours(&g_sink_mutex);
  hand_over(batch, count);
  common::unlock_ours(&g_sink_mutex);
}

void *reaper_main(void *) {
  // A program thread capturing a graph in the global mode (PyTorch's default) has every
  // "unsafe" call made by any other thread invalidate its capture — an event query, an event or
  // stream creation included. The reaper's calls are none of the program's business: this
  // thread runs in the relaxed mode, which capture never checks.
  if (auto exchange = g_exchange_capture_mode_fn.load(std::memory_order_acquire)) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    exchange(&mode);
  }
  const uint64_t self = g_reapers_started.load(std::memory_order_acquire);
  const auto asked_to_end = [self] {
    return g_end_through.load(std::memory_order_acquire) >= self;
  };
  // Its own batch: a reaper let go may still be delivering while the next one reads.
  static_assert((sizeof(ferrum_replay_gpu_replay) + kReplayNameBytes) * kBatch <= 64 * 1024,
                "fits the stack");
  ferrum_replay_gpu_replay batch[kBatch];
  char names[kBatch][kReplayNameBytes];
  Engine &timing = engine();
  uint64_t claims = timing.claims();
  for (;;) {
    bool more = true;
    while (more && !asked_to_end())
      deliver(batch, timing.reap_pass(batch, kBatch, &more, &g_end_through, self, names));
    // Idle only when nothing is in flight and no launch came since the last look: a program
    // that synchronises after each burst has nothing in flight just after it, and a 20 ms nap
    // then would let the next bursts drain the pool (a stream of short replays went ~70 %
    // untimed, "pool exhausted").
    const uint64_t now_claims = timing.claims();
    const bool busy = timing.totals().in_flight != 0 || now_claims != claims;
    claims = now_claims;
    common::lock_ours(&g_wake_mutex);
    ++g_passes;
    pthread_cond_broadcast(&g_wake);
    if (asked_to_end()) {
      common::unlock_ours(&g_wake_mutex);
      // Its stop is over. If it was let go (its join gave up while it was inside a driver call
      // that has now returned), the threads that launch since have no reaper: it starts one.
      uint64_t mine = g_let_go.load(std::memory_order_acquire);
      while ((mine >> 1) == self &&
             !g_let_go.compare_exchange_weak(mine, 0, std::memory_order_acq_rel)) {
      }
      if ((mine >> 1) == self && (mine & 1) && !timing.stopped()) start_reaper();
      return nullptr;
    }
    if (!g_wake_request && g_passes >= g_wake_target) {
      const timespec until = common::monotonic_after_ms(busy ? 1 : 20);
      pthread_cond_timedwait(&g_wake, &g_wake_mutex, &until);
    }
    g_wake_request = false;
    common::unlock_ours(&g_wake_mutex);
  }
}

// Asks the reaper for a pass that starts after now and waits for it, at most `timeout_ms`.
void wait_for_pass(int timeout_ms) {
  if (!g_reaper_running.load(std::memory_order_acquire) || on_reaper()) return;
  const timespec until = common::monotonic_after_ms(timeout_ms);
  common::lock_ours(&g_wake_mutex);
  const uint64_t target = g_passes + 2;  // the pass running now may have started earlier
  g_wake_request = true;
  if (g_wake_target < target) g_wake_target = target;
  pthread_cond_broadcast(&g_wake);
  // (A reaper asked to end does no more passes: no use waiting for them.)
  while (g_passes < target && g_end_through.load(std::memory_order_acquire) <
                                  g_reapers_started.load(std::memory_order_acquire))
    if (pthread_cond_timedwait(&g_wake, &g_wake_mutex, &until) == ETIMEDOUT) break;
  common::unlock_ours(&g_wake_mutex);
}

// A pass when no reaper runs (none can start meanwhile: g_life_mutex), for replays launched
// after the last registered thread ended it; only when some are in flight — which counts those
// read at a context's end and not delivered yet (Totals: a cuCtxDestroy on a thread with no
// reaper running left them for a pass that never came, F165). In the relaxed capture mode, like
// the reaper (see reaper_main). A flush makes it on the calling thread.
void pass_here_locked() {
  if (g_reaper_running.load(std::memory_order_relaxed) || engine().totals().in_flight == 0 ||
      reaper_let_go())
    return;
  auto exchange = g_exchange_capture_mode_fn.load(std::memory_order_acquire);
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (exchange) exchange(&mode);
  bool more = true;
  while (more) deliver(g_batch, engine().reap_pass(g_batch, kBatch, &more, nullptr, 0, g_names));
  if (exchange) exchange(&mode);
}

// The exit's makes it on a thread of its own, waited for at most `timeout_ms`: the exiting
// thread may be in exit() from a signal handler that interrupted a driver call, the driver's own
// lock held, and a driver call made on it would wait for itself (the same lock a reaper's pass
// waits for: Engine::lock_at_exit). That thread never ends: the exiting thread may be the
// program's last, which glibc no longer counts, and a thread that ended then would be the last
// and call exit() again (it did: the second exit ran the exit hooks beside the first, and the
// trace was lost); the process ends with the first exit's _exit. Without a thread: not read,
// those replays counted in flight at exit. Like pass_here_locked, it runs where replays read at a
// context's end wait for delivery, none in flight.
std::atomic<uint64_t> g_exit_passes_asked{0}, g_exit_passes_done{0};

void *exit_pass_main(void *) {
  const uint64_t asked = g_exit_passes_asked.load(std::memory_order_acquire);
  if (auto exchange = g_exchange_capture_mode_fn.load(std::memory_order_acquire)) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    exchange(&mode);
  }
  ferrum_replay_gpu_replay batch[kBatch];  // its own: a pass let go may still deliver
  char names[kBatch][kReplayNameBytes];
  bool more = true;
  while (more) deliver(batch, engine().reap_pass(batch, kBatch, &more, nullptr, 0, names));
  g_exit_passes_done.store(asked, std::memory_order_release);
  for (;;) pause();  // signals are blocked here (background_thread.hpp): until the _exit
}

void exit_pass_locked(int timeout_ms) {
  if (g_reaper_running.load(std::memory_order_relaxed) || engine().totals().in_flight == 0 ||
      reaper_let_go())
    return;
  static constexpr common::BackgroundThread kPass{exit_pass_main, "ferrum-gpu-exit"};
  const uint64_t asked = g_exit_passes_asked.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (common::start_background_thread(kPass, 256 * 1024) != 0) return;
  const common::MonotonicBound bound(timeout_ms);
  while (g_exit_passes_done.load(std::memory_order_acquire) < asked) {
    if (bound.passed()) {
      log_line(LogLevel::error,
               "GPU timing: the exit's pass did not end within %d ms (a driver call that does "
               "not return); let go",
               timeout_ms);
      return;
    }
    const timespec pause_for{0, 200 * 1000};
    nanosleep(&pause_for, nullptr);
  }
}

// What has finished is read once more: by the reaper when one runs (waited for at most
// `timeout_ms`), else by a pass of the flush's own thread or the exit's bounded one (never a
// launch). Decided under g_life_mutex, which a start needs too. Once stopped (the exit),
// nothing is read any more.
void last_pass(int timeout_ms, bool at_exit) {
  if (engine().stopped()) return;
  engine().ask_full_pass();  // whatever has finished, in stream order or not
  // g_life_mutex within the same bound: the last registered thread's end holds it while it
  // joins the reaper (up to 10 s), and a flush's pass on another thread across driver calls
  // (which may wait for the driver's lock this thread holds, when it is exiting).
  if (!common::lock_ours_within(&g_life_mutex, timeout_ms)) return;
  const bool running = g_reaper_running.load(std::memory_order_relaxed);
  if (!running) {
    if (at_exit)
      exit_pass_locked(timeout_ms);
    else
      pass_here_locked();
  }
  common::unlock_ours(&g_life_mutex);
  if (running) wait_for_pass(timeout_ms);
}

void at_exit() {
  if (g_api_state.load(std::memory_order_acquire) != 2) return;  // never timed anything
  // A child made without fork handlers (own_process.hpp): the engine, its locks and its replays
  // are the parent's — its reaper, which may hold the engine's mutex, does not exist here.
  if (!common::state_is_this_process()) return;
  // exit() from a signal handler that interrupted this thread holding a lock of ours: the last
  // pass would wait for it for ever (held_here.hpp). What finishes from now on goes unreported;
  // stopped all the same (no lock taken), so that the runtime's teardown of its contexts passes
  // straight through the context hooks, whose lock may be the one this thread holds.
  if (common::inside_our_lock()) {
    engine().mark_stopped();
    return;
  }
  give_back_abandoned();  // the exiting thread's own, if it left a launch by a jump
  last_pass(1000, /*at_exit=*/true);
  engine().stop();  // from here on, no CUDA call: the runtime's teardown comes next
}

// No prepare handler takes the engine's mutex before a fork: the reaper holds it across driver
// calls, and a driver (or any library) whose own prepare handler runs first and takes a lock
// those calls need would wait for the reaper while the reaper waits for it: the program's fork
// hung for ever (seen with the stand-in driver, whose handler locks its state). The child
// starts the engine afresh instead, mutex included (fork_child), consistent or not at the fork.

void init_wake() {
  pthread_condattr_t attributes;
  pthread_condattr_init(&attributes);
  pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
  pthread_cond_init(&g_wake, &attributes);
  pthread_condattr_destroy(&attributes);
}

void fork_child() {
  engine().reset_in_child();  // its mutex made anew first: the reaper may have held it
  // Every object the parent's reaper may have been inside at the fork starts afresh: a
  // condition variable keeps the count of its waiters, and the reaper that was waiting on g_wake
  // does not exist here — left as it was, the child's first broadcast (its exit's last pass)
  // waits for that phantom waiter forever.
  init_wake();
  // Forked while the parent was still installing the handlers (this one is registered, so only
  // its last store was to come): installed here, or every start_reaper would wait for it.
  g_handlers_state.store(2, std::memory_order_release);
  pthread_mutex_init(&g_wake_mutex, nullptr);
  pthread_mutex_init(&g_sink_mutex, nullptr);
  g_passes = 0;
  g_wake_request = false;
  g_wake_target = 0;
  // Only the forking thread lives here: registered or not, as in the parent (its
  // thread-specific value came along; none if its destructor already ran — a fork from an exit
  // path — and then it must not count). No reaper runs; the next pool request starts one.
  pthread_mutex_init(&g_life_mutex, nullptr);
  g_registered = g_key_made && pthread_getspecific(g_thread_key) ? 1 : 0;
  g_reapers_started.store(0, std::memory_order_relaxed);
  g_end_through.store(0, std::memory_order_relaxed);
  g_let_go.store(0, std::memory_order_relaxed);  // not a thread of this process
  g_reaper_running.store(false, std::memory_order_release);
}

// Under g_life_mutex: ends the reaper and waits for it to be gone, so that the thread that
// ends it (the last registered one, about to end itself) is never outlived by it. The reaper
// looks at the request between its batches and before it sleeps; a pass in progress is a few
// driver calls. Past 10 s (a driver call that does not return), it is let go, and said.
void stop_reaper_locked() {
  if (!g_reaper_running.load(std::memory_order_relaxed)) return;
  // What has finished is read first (at most 200 ms): the pairs go back to the pool, where the
  // next thread to time a launch would find them taken ("pool exhausted") until a new reaper's
  // first pass.
  wait_for_pass(200);
  const uint64_t number = g_reapers_started.load(std::memory_order_relaxed);
  g_let_go.store(number << 1, std::memory_order_release);  // being stopped (before it can end)
  common::lock_ours(&g_wake_mutex);
  g_end_through.store(number, std::memory_order_release);
  pthread_cond_broadcast(&g_wake);
  common::unlock_ours(&g_wake_mutex);
  // Polled on CLOCK_MONOTONIC (monotonic_clock.hpp): pthread_timedjoin_np's time is the wall
  // clock's, which a clock set back stretches; pthread_clockjoin_np needs glibc 2.34.
  // (A reaper cannot end itself: it never registers, and waiting here for itself would be 10 s
  // lost.)
  const common::MonotonicBound bound(10000);
  int joined = on_reaper() ? EDEADLK : EBUSY;
  while (joined == EBUSY && (joined = pthread_tryjoin_np(g_reaper, nullptr)) == EBUSY &&
         !bound.passed()) {
    const timespec pause{0, 200 * 1000};  // no cancellation: g_life_mutex is held (held_here.hpp)
    nanosleep(&pause, nullptr);
  }
  uint64_t stopping = number << 1;
  if (joined != EBUSY) {
    g_let_go.compare_exchange_strong(stopping, 0, std::memory_order_acq_rel);
  } else if (!g_let_go.compare_exchange_strong(stopping, stopping | 1, std::memory_order_acq_rel)) {
    joined = 0;  // it ended (cleared its stop) just as the bound ran out: not stuck
    pthread_detach(g_reaper);
  }
  if (joined != 0) {
    pthread_detach(g_reaper);
    if (joined == EBUSY)
      log_line(LogLevel::error,
               "GPU timing: the reaper thread did not end within 10 s (a driver call that does "
               "not return); let go, and no other started until it returns");
    else
      log_line(LogLevel::error, "GPU timing: the reaper thread could not be joined (%s); let go",
               common::error_text(joined));
  }
  g_reaper_running.store(false, std::memory_order_release);
}

// The destructor of a registered thread's value: it is ending (returned, pthread_exit,
// thrd_exit, cancelled), before the C library counts it gone.
void registered_thread_ends(void *) {
  give_back_abandoned();             // the thread left a launch by a jump and never launched again
  common::lock_ours(&g_life_mutex);  // the join below is a cancellation point: held_here.hpp
  if (g_registered > 0 && --g_registered == 0) stop_reaper_locked();
  common::unlock_ours(&g_life_mutex);
}

// Registers the calling thread once (see g_life_mutex) and makes sure a reaper runs; false
// when it cannot be registered (no thread-specific key left: it times nothing then), or not
// now (g_life_mutex held past kRegisterWaitMs: a later launch tries again).
bool register_thread() {
  if (__builtin_expect(t_registered, 1)) return true;
  if (t_unregistrable) return false;
  // A signal handler's launch that interrupted this thread inside a lock of ours (a flush's
  // last pass holds g_life_mutex): waiting for it would wait for ever (held_here.hpp). Not
  // registered now, not marked unregistrable: a later launch registers it.
  if (common::inside_our_lock()) return false;
  const long wait_ms = t_register_waited ? 0 : kRegisterWaitMs;
  t_register_waited = true;
  if (!common::lock_ours_within(&g_life_mutex, wait_ms)) return false;  // tried again later
  bool registered = g_key_made;
  if (!registered && pthread_key_create(&g_thread_key, registered_thread_ends) == 0)
    registered = g_key_made = true;
  if (registered && pthread_setspecific(g_thread_key, &g_registered) != 0) registered = false;
  if (registered) {
    ++g_registered;
    t_registered = true;
  } else {
    t_unregistrable = true;
  }
  const bool say = !registered && !g_key_failed;
  if (say) g_key_failed = true;
  common::unlock_ours(&g_life_mutex);
  if (say)
    log_line(LogLevel::error,
             "GPU timing: no thread-specific key or value for the shim; replays of threads "
             "that could not be registered are not timed");
  if (registered) start_reaper();
  return registered;
}

}  // namespace

// On a thread's first timed launch (or a pool made at instantiation), once it is registered:
// creating a thread is this path's cost, once per process unless every registered thread
// ended meanwhile.
namespace {

// A reaper waits on g_wake, which install_handlers initialises: one started while another
// thread was still inside it waited on a condition variable being made anew. Bounded: the
// installing thread takes microseconds; one interrupted by this very signal handler never ends.
bool handlers_installed() {
  for (int round = 0; round < 200; ++round) {
    if (install_handlers()) return true;
    const timespec pause{0, 50 * 1000};
    nanosleep(&pause, nullptr);
  }
  return false;
}

}  // namespace

void start_reaper() {
  if (g_reaper_running.load(std::memory_order_acquire) ||
      g_reaper_refused.load(std::memory_order_acquire))
    return;
  // A signal handler's launch on a thread inside a lock of ours (a flush's or the exit's last
  // pass holds g_life_mutex): the request stays keyed; the next launch, pass or flush starts one.
  if (common::inside_our_lock()) return;
  // Before the lock: the wait for another thread's install_handlers holds nobody up.
  if (!handlers_installed()) return;
  common::lock_ours(&g_life_mutex);
  if (!g_reaper_running.load(std::memory_order_relaxed) && g_registered > 0 && !reaper_let_go() &&
      !g_reaper_refused.load(std::memory_order_relaxed)) {
    // A program at its task limit keeps its slots (background_thread.hpp): no reaper then, for
    // the rest of the run — replays are timed only where a flush or the exit reads them.
    char why[192];
    if (!common::tasks_to_spare(kSpareTasks, why, sizeof why)) {
      g_reaper_refused.store(true, std::memory_order_relaxed);
      common::unlock_ours(&g_life_mutex);
      log_line(LogLevel::info,
               "GPU timing: %s: no reaper thread is started, so as to take no task the program "
               "may need; replays are timed only where read at a flush or the exit",
               why);
      return;
    }
    g_reapers_started.fetch_add(1, std::memory_order_release);
    static constexpr common::BackgroundThread kReaper{reaper_main, "ferrum-gpu"};
    const int failed = common::start_background_thread(kReaper, 256 * 1024, &g_reaper);
    if (failed)
      log_line(LogLevel::error,
               "GPU timing: cannot start the reaper thread (%s); replays are not timed",
               common::error_text(failed));
    else
      g_reaper_running.store(true, std::memory_order_release);
  }
  common::unlock_ours(&g_life_mutex);
}

int primary_context_state(CUdevice device) {
  auto state = g_primary_state.get();
  unsigned flags = 0;
  int active = 0;
  if (!state || state(device, &flags, &active) != CUDA_SUCCESS) return -1;
  return active ? 1 : 0;
}

namespace {
constinit RealFunction<CUresult (*)(CUcontext *, CUgreenCtx)> g_ctx_from_green{"cuCtxFromGreenCtx"};
}  // namespace

CUcontext context_of_green(CUgreenCtx green) {
  auto from_green = g_ctx_from_green.get();
  CUcontext context = nullptr;
  if (!green || !from_green || from_green(&context, green) != CUDA_SUCCESS) return nullptr;
  return context;
}

bool install_handlers() {
  int state = g_handlers_state.load(std::memory_order_acquire);
  if (__builtin_expect(state == 2, 1)) return true;
  if (state != 0 || !g_handlers_state.compare_exchange_strong(state, 1, std::memory_order_acq_rel))
    return false;  // another thread installs them now (or the code a signal handler interrupted)
  init_wake();
  run_at_exit(ExitWork::gpu_last_pass, at_exit);  // exit_work.hpp: not atexit(), F147
  pthread_atfork(nullptr, nullptr, fork_child);
  g_handlers_state.store(2, std::memory_order_release);
  return true;
}

bool make_launch_ready() {
  const int state = g_api_state.load(std::memory_order_acquire);
  // Timing off for the process: every launch goes on untimed (one load; t_launch_ready stays
  // unset).
  if (__builtin_expect(state == 3, 0)) return false;
  if (__builtin_expect(state != 2, 0)) {
    int expected = 0;
    if (g_api_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      // Once: the first timed launch resolves the driver's functions.
      const bool resolved = resolve_api();
      g_api_state.store(resolved ? 2 : 3, std::memory_order_release);
      if (!resolved) return false;
    } else if (expected == 3) {
      return false;
    } else {
      // Another thread resolves right now: this replay is not timed, and counted so.
      engine().not_timed(Untimed::pool_not_ready);
      return false;
    }
  }
  if (__builtin_expect(!register_thread(), 0)) {
    engine().not_timed(Untimed::unregistered);
    return false;
  }
  if (!prepare_stream_slots() && !g_stream_table_missing.exchange(true))
    log_line(LogLevel::error,
             "GPU timing: no memory for the stream table; replays on a stream that several "
             "threads use may be charged each other's work");
  t_launch_ready = true;  // both hold for good: this thread's later launches go straight on
  return true;
}

void prepare_current_context() {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: after the real instantiate
  // An instantiation from a signal handler that interrupted this thread inside a lock of ours
  // (held_here.hpp), the engine's perhaps: the pool comes at the reaper's next pass instead.
  if (common::inside_our_lock()) return;
  install_handlers();
  if (g_api_state.load(std::memory_order_acquire) != 2) {
    int expected = 0;
    if (!g_api_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return;
    const bool resolved = resolve_api();
    g_api_state.store(resolved ? 2 : 3, std::memory_order_release);
    if (!resolved) return;
  }
  // Its pool is made under the engine's mutex: waited for at most 2 s (a pass holds it for
  // microseconds to milliseconds), not at all while a reaper let go may hold it for good.
  if (engine().prepare_current_context(reaper_let_go() ? 0 : 2000) && register_thread())
    start_reaper();
}

int set_sink(ferrum_replay_gpu_sink_fn sink, void *context, size_t replay_size, bool stride_known) {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: the answer is the return value
  install_handlers();
  // Whoever delivers holds the sink mutex across the sink's call: once this returns, the old
  // sink is never called again. Called from inside the sink (on whichever thread delivers), this
  // thread holds it already: the change takes effect from the next batch.
  const bool inside = t_in_sink;
  // From a signal handler that interrupted a section of ours on this thread — perhaps a
  // delivery holding the sink mutex outside the sink's call — waiting for it could be waiting
  // for itself: tried within a bound, and refused when it stayed taken.
  if (!inside && common::inside_our_lock()) {
    if (!common::lock_ours_within(&g_sink_mutex, kSinkTryMs)) return -EDEADLK;
  } else if (!inside) {
    common::lock_ours(&g_sink_mutex);
  }
  g_sink = sink;
  g_sink_context = sink ? context : nullptr;
  g_sink_stride = replay_size < sizeof(ferrum_replay_gpu_replay) ? replay_size
                                                                 : sizeof(ferrum_replay_gpu_replay);
  g_sink_stride_known = stride_known;
  if (!inside) common::unlock_ours(&g_sink_mutex);
  return 0;
}

int flush(ferrum_replay_gpu_status *status) {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp
  install_handlers();
  // From inside a lock of ours on this thread (a signal handler's flush, a sink's): no pass,
  // whose locks may be the one held; the counts are read without one.
  if (!common::inside_our_lock()) last_pass(2000, /*at_exit=*/false);
  if (!status) return 0;
  const Totals totals = engine().totals();
  ferrum_replay_gpu_status filled{};
  filled.size = sizeof filled;
  filled.timed = totals.timed;
  filled.in_flight = totals.in_flight;
  filled.not_timed = totals.not_timed;
  filled.sampled_out = totals.untimed[static_cast<unsigned>(Untimed::sampled_out)];
  filled.align_error_ns = totals.align_error_ns;
  // A caller built against an older, shorter struct gets what fits.
  size_t size = status->size ? status->size : sizeof filled;
  if (size > sizeof filled) size = sizeof filled;
  memcpy(status, &filled, size);
  status->size = static_cast<uint32_t>(size);
  return 0;
}

}  // namespace ferrum_replay::shim::gpu
