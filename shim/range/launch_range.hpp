// The balanced range around one graph launch, and the per-thread guard that keeps nested
// intercepted calls to one range.
//
// Invariant: every push this shim issues is followed by exactly one pop on the same thread
// and domain — whatever the push returned (a tool rejects with a negative value and then
// swallows the matching pop), whether the launch failed, and whatever unwinds through the
// launch (the pop is in a destructor; the shim is built with unwind tables and a
// personality routine, see unwind_support.cpp). A launch left by a non-local jump (a
// watchdog's siglongjmp out of a signal handler) runs no destructor: its pop is issued late,
// at the thread's next intercepted call, which notices the abandoned call (see OutermostCall),
// or, where none comes, as the thread ends or on the exiting thread at exit
// (settle_thread_calls).
//
// Modelled on nvtx3.hpp's scoped_range_in: cannot be copied, moved or heap-allocated.
#pragma once

#include <nvtx3/nvToolsExt.h>
#include <stdint.h>

#include <atomic>

#include "errno_kept.hpp"
#include "gpu/gpu_timing.hpp"
#include "range/activation.hpp"
#include "range/graph_registry.hpp"
#include "range/replay_numbers.hpp"
#include "resolve/real_functions.hpp"
#include "support/log.hpp"

namespace ferrum_replay::shim {

// Whether GPU timing may be on: on, or not known before the start has ended (it reads the
// setting). What the timing needs from calls that come before any graph call — a lookup's
// wrapper, a green context made current, a primary context retained — is kept then too: a
// program that converts its green context before its first graph had it timed and pushed on
// the reaper's thread (review Y). The state first: its acquire orders the setting's read
// ("off" could be seen just before the start ended with "on").
inline bool gpu_timing_possible() {
  return shim_state() == ShimState::undecided || gpu::timing_on();
}

// This thread's open outermost intercepted call (launch, instantiate or destroy). The
// runtime's cudaGraphLaunch reaches the driver's cuGraphLaunch underneath (and
// cudaGraphInstantiate the driver's instantiate); both layers are intercepted, and the inner
// one must not open a second range or register the graph twice. Initial-exec TLS: plain
// %fs-relative accesses, no __tls_get_addr call per launch.
struct ThreadCalls {
  // The marker in the frame of the open outermost call, null when none is open; while that
  // call runs, the marker holds marker_value() of its own address (OutermostCall).
  const volatile uintptr_t *open;
  // The range the open call pushed and has not popped yet, if any.
  nvtxDomainHandle_t pop_domain;
  bool pop_pending;
  // errno's address on this thread, once thread_errno() asked for it; null again once the
  // thread's end was settled (set_up_thread_calls).
  int *errno_at;
};
extern constinit __attribute__((tls_model("initial-exec"))) thread_local ThreadCalls t_calls;

// A thread's first range (or timed replay): finds errno's address and arms the thread-end
// hook (settle_thread_calls) before a call of this thread can be left pending. Returns
// errno's address; errno is kept.
int *set_up_thread_calls();

// errno's address on this thread, for the ErrnoKept of the launch's own calls around the real
// one (the tool's push and pop, GPU timing's events): &errno is a call into the C library, made
// once per thread — where the thread-end hook is armed too, so that it costs the launch path
// no branch of its own.
inline int *thread_errno() {
  int *at = t_calls.errno_at;
  if (__builtin_expect(at == nullptr, 0)) at = set_up_thread_calls();
  return at;
}

// How far below an open call's frame a call nested in it can be: the CUDA library's own
// frames between the two layers, a tool's callback, a signal frame. Only within this reach is
// the open call's marker read (it is then on the live part of the same stack).
inline constexpr uintptr_t kNestingReach = 256 * 1024;

// The slow path of OutermostCall: the open call's frame is not above this one (or out of
// reach), so unless this thread runs on its alternate signal stack (a handler that
// interrupted the open call), that call was left by a non-local jump: its range gets its
// pop now, it is counted, and the guard is cleared. Returns false when the call is nested
// after all (on the alternate signal stack).
bool close_abandoned_call();

// A non-local jump of this thread (longjmp, siglongjmp, _longjmp, __longjmp_chk: the shim's
// exports, hooks/jump_hooks.cpp) to the jmp_buf `env`: where it leaves this thread's open call
// (it lands above the call's frame, and not on the alternate signal stack it runs on), the call
// is marked left — no later call can be taken for one nested in it, whatever its stale stack
// words still hold (F160) — and the thread's next intercepted call settles it, as one whose
// marker was overwritten (close_abandoned_call). Only marks: a jump usually leaves a signal
// handler, where the tool's pop must not run. Async-signal-safe. Nothing when no call is open.
void note_jump(const void *env);

// This thread's open call, which can no longer return: its range, if any, gets its pop now,
// on this thread and in its domain, and its GPU timing pair goes back. Where no later
// intercepted call of the thread comes to close it (close_abandoned_call): called as the
// thread ends (the hook set_up_thread_calls arms) and, on the exiting thread, in exit()
// before the tool's report and the launch summary (an atexit handler; again in the exit hook
// for a call left after that ran). Nothing when no call is open.
void settle_thread_calls();

// Calls left by a non-local jump and closed late, in this process.
unsigned long long abandoned_calls();

// On a function that holds an OutermostCall: its frame must be on the thread's real stack.
// AddressSanitizer's use-after-return detection moves instrumented functions' locals to heap
// "fake stacks", where frame addresses are not ordered by depth. No effect in other builds.
#define FERRUM_REAL_STACK_FRAME __attribute__((no_sanitize_address))

// What an open call's marker holds: its own address ^ its thread's ThreadCalls ^ this key.
// Not the address alone: a pointer to itself is common in other data (an empty list's head)
// that may come to lie where an abandoned call's marker was. Not the same on every thread: a
// stack can pass between threads (pooled fiber stacks), and another thread's call claiming at
// the very address of this thread's abandoned marker would otherwise write what this thread's
// next call takes for its open call's marker. Not unique per call (it was, at the cost of a
// counter, a multiply and a second thread-local store per launch): on one thread, `open` only
// ever points at a marker written by the call that set it, and a later call of that thread
// whose marker lies at the same address is not nested in it (the frame check) — so only a
// value written by something else needs telling apart.
inline constexpr uintptr_t kMarkerKey = 0x9E3779B97F4A7C15ull;
inline uintptr_t marker_value(const volatile uintptr_t *marker) {
  return reinterpret_cast<uintptr_t>(marker) ^ reinterpret_cast<uintptr_t>(&t_calls) ^ kMarkerKey;
}

// Whether a call whose frame lies at `here` is nested in this thread's open call (the caller
// saw one open): below it on the same stack, within reach, and its marker intact.
FERRUM_REAL_STACK_FRAME inline bool nested_in_open_call(uintptr_t here) {
  const volatile uintptr_t *marker = t_calls.open;
  const uintptr_t open = reinterpret_cast<uintptr_t>(marker);
  return here < open && open - here < kNestingReach && *marker == marker_value(marker);
}

// This thread's stack pointer: an address in the caller's frame, for nested_in_open_call() in
// a function that keeps no frame of its own.
inline uintptr_t stack_pointer() {
  uintptr_t sp;
#if defined(__x86_64__)
  asm("mov %%rsp, %0" : "=r"(sp));
#elif defined(__aarch64__)
  asm("mov %0, sp" : "=r"(sp));
#else
#error "stack_pointer(): an architecture this shim does not support"
#endif
  return sp;
}

// Claims the outermost-call guard of this thread for the scope, unless a call is open on
// this thread further up the same stack (then this call is nested in it and passes through).
//
// Why a frame address and a marker rather than a depth counter: siglongjmp out of a call (a
// watchdog pattern) skips its destructor, and a counter would stay raised for ever — every
// later launch of the thread would get no range. Stacks grow down on every supported
// architecture, so a call nested in the open one has its frame below the open call's; a call
// whose frame is at or above it — or far away, or whose marker no longer holds its value
// because the stack was reused — cannot be nested: the open call was abandoned.
//
// The stack words alone cannot prove the open call live: below a jump target, a frame that does
// not write them (a large buffer not written yet) leaves the abandoned marker intact, and every
// call from below it looked nested, for good (F160). So the jumps themselves are watched: the
// longjmp family is exported (hooks/jump_hooks.cpp) and a jump that leaves the open call marks
// it left (note_jump). Not a rule on the calls' shapes (a second nested call, or one of another
// kind, proving the open one abandoned): a signal handler's calls nest in a live call in any
// number and of any kind, and taking one for outermost would run it inside the tool or the
// registry that the interrupted call is in — the guard exists to prevent exactly that. The
// hot path is unchanged: a mark is a pointer the frame check can never accept. What is not
// watched (a jump bound inside the C library, setcontext/swapcontext, a jmp_buf that cannot be
// decoded) keeps the marker rule alone: docs/reliability.md, "Not covered".
class OutermostCall {
 public:
  // Not instrumented either: the marker it may read lies in a frame that is not instrumented
  // (or in a stack area that has been reused since).
  FERRUM_REAL_STACK_FRAME OutermostCall() {
    ThreadCalls &calls = t_calls;
    if (calls.open) {
      if (nested_in_open_call(reinterpret_cast<uintptr_t>(&marker_))) return;
      if (!close_abandoned_call()) return;
    }
    marker_ = marker_value(&marker_);
    // The marker before the pointer to it, also for a signal handler on this very thread (the
    // compiler may not swap the two stores).
    std::atomic_signal_fence(std::memory_order_seq_cst);
    calls.open = &marker_;
    claimed_ = true;
  }

  ~OutermostCall() {
    if (!claimed_) return;
    marker_ = 0;
    t_calls.open = nullptr;
  }

  bool claimed() const { return claimed_; }

  OutermostCall(const OutermostCall &) = delete;
  OutermostCall &operator=(const OutermostCall &) = delete;
  static void *operator new(decltype(sizeof 0)) = delete;

 private:
  volatile uintptr_t marker_ = 0;
  bool claimed_ = false;
};

// A record's range text: its label's, or its fixed name when it has no label (the overflow
// record, when no label could be allocated).
inline const char *record_text(const GraphRecord &record) {
  const GraphLabel *label = record.label.load(std::memory_order_acquire);
  return label ? label->text : record.name;
}

class LaunchRange {
 public:
  // Only inside a claimed OutermostCall.
  LaunchRange(GraphRecord &record, nvtxDomainHandle_t domain) : record_(record), domain_(domain) {
    // Payload: this graph's replay number (1-based), so summaries group by name while each
    // instance stays identifiable. Taken whether or not a range is pushed: it is the count.
    replay_ = take_replay_number(record);
    // No NVTX tool answered the domain's creation (FERRUM_REPLAY_SUMMARY or GPU timing alone;
    // NVTX's answer holds for the process): no range is built or pushed, and no pop is owed.
    // With no tool NVTX would drop it; a tool that handles ranges but no domains would get it
    // in NVTX's global domain, the program's, as ours (the log line at activation says that
    // no tool sees ranges). Building one for NVTX's no-op cost about 1 ns per launch.
    if (!domain_) return;
    nvtxEventAttributes_t attributes{};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.category = record.ordinal;
    attributes.colorType = NVTX_COLOR_ARGB;
    attributes.color = record.color.load(std::memory_order_relaxed);
    attributes.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    attributes.payload.ullValue = replay_;
    if (nvtxStringHandle_t message = record.message.load(std::memory_order_acquire)) {
      attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
      attributes.message.registered = message;
    } else {  // the tool registers no strings: the label's text, which outlives us
      attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
      attributes.message.ascii = record_text(record);
    }
    // The thread's set-up first (its first range: the thread-end and exit hooks armed): a
    // signal handler calling exit() inside that set-up found a pop owed for a push never
    // issued, and popped the program's own range (or none: "pop without push").
    int *const errno_at = thread_errno();
    // Owed from the moment it is issued: a jump out of the push itself still gets its pop.
    t_calls.pop_domain = domain_;
    t_calls.pop_pending = true;
    int depth;
    {
      const common::ErrnoKept errno_kept(errno_at);  // the tool's handler: errno_kept.hpp
      depth = nvtxDomainRangePushEx(domain_, &attributes);
    }
    // -2 (NVTX_NO_PUSH_POP_TRACKING) means no tool; FERRUM_REPLAY_PUSH_AFTER_REPORT, a tool
    // that has taken its report (ferrum_replay.h); other negatives are a tool's refusal.
    if (depth < 0 && depth != NVTX_NO_PUSH_POP_TRACKING) [[unlikely]] {
      if (depth == FERRUM_REPLAY_PUSH_AFTER_REPORT)
        record.after_tool_report.fetch_add(1, std::memory_order_relaxed);
      else
        record.rejected_pushes.fetch_add(1, std::memory_order_relaxed);
    }
  }

  ~LaunchRange() {
    // Whatever the push returned: see the invariant above. Not when the pop was issued
    // already — only if a call nested in this one was taken for a new call after an abandoned
    // one (a stack this guard cannot order), which then closed this range early; balance holds.
    if (!domain_ || !t_calls.pop_pending) return;
    t_calls.pop_pending = false;
    const common::ErrnoKept errno_kept(thread_errno());  // after the real launch: the tool's pop
    nvtxDomainRangePop(domain_);
  }

  void note_failed_launch() { record_.failed_launches.fetch_add(1, std::memory_order_relaxed); }

  // What GPU timing tells a tool about this replay: the range's message, category, payload.
  uint64_t replay() const { return replay_; }
  uint32_t category() const { return record_.ordinal; }
  const char *message() const { return record_text(record_); }
  // The graph's current label; null when it has none (message() is then the record's name).
  const GraphLabel *label() const { return record_.label.load(std::memory_order_acquire); }
  // The graph's word that says whether it still lives (GraphRecord::live_ordinal).
  const std::atomic<uint32_t> *live_ordinal() const {
    return record_.live_ordinal.load(std::memory_order_relaxed);
  }

  LaunchRange(const LaunchRange &) = delete;
  LaunchRange &operator=(const LaunchRange &) = delete;
  LaunchRange(LaunchRange &&) = delete;
  LaunchRange &operator=(LaunchRange &&) = delete;
  static void *operator new(decltype(sizeof 0)) = delete;
  static void *operator new[](decltype(sizeof 0)) = delete;

 private:
  GraphRecord &record_;
  nvtxDomainHandle_t domain_;
  uint64_t replay_ = 0;
};

// A replay between its two timing events (GPU timing on). The end event is recorded by
// finish(); a launch left by an exception hands the pair back untimed.
class TimedReplay {
 public:
  TimedReplay(const LaunchRange &range, CUstream stream, bool per_thread) {
    const common::ErrnoKept errno_kept(thread_errno());  // the driver calls, a thread's set-up
    // The label's text and its count of replays in flight, from one read of the label: the
    // replay holds the label (the registry does not reuse it) until its time is read.
    const GraphLabel *label = range.label();
    gpu::launch_begin(ticket_, stream, per_thread, label ? label->text : range.message(),
                      label ? &label->replays_in_flight : nullptr, range.category(), range.replay(),
                      range.live_ordinal());
  }
  void finish(bool launched) {
    const common::ErrnoKept errno_kept(thread_errno());  // after the real launch: its errno counts
    gpu::launch_end(ticket_, launched);
  }
  // No-op once finished; otherwise the launch is being unwound (an exception, a cancellation
  // inside the driver): left, not failed.
  ~TimedReplay() { gpu::launch_end(ticket_, false, /*left=*/true); }

  TimedReplay(const TimedReplay &) = delete;
  TimedReplay &operator=(const TimedReplay &) = delete;
  static void *operator new(decltype(sizeof 0)) = delete;

 private:
  gpu::Ticket ticket_;
};

// The slow path of record_for_launch(): a graph not registered yet, or one named at its first
// launch (FERRUM_REPLAY_SITE=launch). `record` is what the lock-free lookup found, if anything.
// Null only for a graph the registry refused to register (a signal handler's launch on a thread
// inside a lock of ours: graph_registry.hpp).
GraphRecord *record_for_launch_slow(const void *exec, GraphRecord *record);

// The record a launch of `exec` pushes a range for: registered on first sight. Null (from the
// slow path only) when the launch goes without a range.
inline GraphRecord *record_for_launch(const void *exec) {
  GraphRecord *record = graph_registry().find(exec);
  if (__builtin_expect(record == nullptr || record->site_pending.load(std::memory_order_relaxed),
                       0))
    return record_for_launch_slow(exec, record);
  return record;
}

// The launch with GPU timing on: bracketed by two events on `stream` (gpu_timing.hpp).
template <typename Result, typename Function, typename Exec, typename Stream>
__attribute__((noinline)) Result timed_launch(LaunchRange &range, Function real, Exec exec,
                                              Stream stream, bool per_thread, Result success) {
  TimedReplay timed(range, reinterpret_cast<CUstream>(stream), per_thread);
  Result result = real(exec, stream);
  timed.finish(result == success);
  if (result != success) range.note_failed_launch();
  return result;
}

// launch_through() with the shim active: the real launch of `exec` on `stream` inside one range
// named after `exec`, unless this thread is already inside an intercepted call. The result is
// returned unchanged. Out of line, so that the pass-through path below is one load, one branch
// and a tail call into the real function. (Inlined, the range's frame was set up before the
// branch: about 1.2 ns more per launch for every process that asked for nothing.) The real
// function is called directly, not through a lambda: one in a frame (GPU timing's path takes
// it by reference) cost about 0.5 ns per launch, measured.
template <typename Result, typename Function, typename Exec, typename Stream>
FERRUM_REAL_STACK_FRAME __attribute__((noinline)) Result launch_through_active(
    Function real, Exec exec, Stream stream, bool per_thread, Result success) {
  OutermostCall outermost;
  if (!outermost.claimed()) return real(exec, stream);
  GraphRecord *record = record_for_launch(exec);
  if (__builtin_expect(record == nullptr, 0)) return real(exec, stream);
  LaunchRange range(*record, shim_domain());
  // GPU timing off: this one predictable branch is all it costs.
  if (gpu::timing_on()) return timed_launch(range, real, exec, stream, per_thread, success);
  Result result = real(exec, stream);
  if (result != success) range.note_failed_launch();
  return result;
}

// The first launches, while the shim decides whether it is active (shim_active()).
template <typename Result, typename Function, typename Exec, typename Stream>
__attribute__((noinline, cold)) Result launch_through_undecided(Function real, Exec exec,
                                                                Stream stream, bool per_thread,
                                                                Result success) {
  if (!shim_active()) return real(exec, stream);
  return launch_through_active(real, exec, stream, per_thread, success);
}

// The launch of `exec` on `stream` through the real function `real` (`per_thread`: a _ptsz
// launch, whose null stream is the per-thread default stream): launch_through_active() around
// it, or, with the shim off or without a tool, the real call alone. No frame of its own on the
// usual paths (every call it makes is a tail call): the pass-through, and the driver's launch
// under the runtime's — which, found nested here, skips the out-of-line frame, the guard's set-up
// and its teardown (about 0.8 ns per runtime launch, measured).
template <typename Result, typename Function, typename Exec, typename Stream>
inline Result launch_through(Function real, Exec exec, Stream stream, bool per_thread,
                             Result success) {
  const ShimState state = shim_state();
  if (__builtin_expect(state == ShimState::active, 1)) {
    if (t_calls.open && nested_in_open_call(stack_pointer())) return real(exec, stream);
    return launch_through_active(real, exec, stream, per_thread, success);
  }
  if (state == ShimState::passing_through) return real(exec, stream);
  return launch_through_undecided(real, exec, stream, per_thread, success);
}

// Gives `exec`, just instantiated from `graph` (a CUgraph) by `api`, its identity: ordinal,
// call site and content as the settings ask, and name.
void register_instantiated(const void *exec, const void *graph, const char *api);

// ferrum_replay_name_graph_exec: the program's own name for `exec`. 0 or a negative errno:
// -EAGAIN from inside a graph call of the shim on this thread (a signal handler's), where the
// naming could wait for a lock that call holds, or call the tool inside its own call.
FERRUM_REAL_STACK_FRAME int name_graph_exec(const void *exec, const char *name);

// No real definition of `function` is loaded (the program found our export without loading
// CUDA, say). Says so where asked, and answers as the missing library's absence would.
template <typename Function, typename Result>
Result missing_real_function(RealFunction<Function> &function, Result not_found) {
  (void)settings();  // reads FERRUM_REPLAY_LOG so the line below can be asked for
  log_line(LogLevel::error, "%s called but no real %s is loaded; returning error %d",
           function.name(), function.name(), static_cast<int>(not_found));
  return not_found;
}

// Runs `call` (a real instantiate) and gives the new executable graph an identity: ordinal,
// call site, content and name. The outermost layer registers (the runtime's instantiate
// reaches the driver's underneath). The result is returned unchanged.
//
// The guard is held across the registration too: a signal handler's graph call on this thread
// while it registers (walking the stack, under the call-site cache's and the registry's
// mutexes, inside the tool's string registration) is nested, and passes straight through —
// it once waited there for a lock its own thread held, for ever. So is every stretch of ours
// that a graph call or ferrum_replay_name_graph_exec runs (the registry's own rule covers the
// rest: graph_registry.hpp).
template <typename Result, typename Exec, typename Call>
FERRUM_REAL_STACK_FRAME inline Result instantiate_and_register(Result success, Exec *out_exec,
                                                               const void *graph, const char *api,
                                                               Call &&call) {
  if (!shim_active()) return call();
  OutermostCall outermost;
  if (!outermost.claimed()) return call();
  const Result result = call();
  if (result == success && out_exec && *out_exec) {
    register_instantiated(*out_exec, graph, api);
    // A graph is instantiated before it is replayed: its context's event pool is made now, off
    // the launch path, so that the context's first replays are timed too.
    if (gpu::timing_on()) gpu::prepare_current_context();
  }
  return result;
}

// Forgets `exec` before the real destroy runs: once destroyed, the driver may hand the same
// handle to another graph at any moment.
template <typename Exec, typename Call>
FERRUM_REAL_STACK_FRAME inline auto destroy_and_forget(Exec exec, Call &&call) {
  if (!shim_active()) return call();
  OutermostCall outermost;
  if (!outermost.claimed()) return call();
  {
    const common::ErrnoKept errno_kept;  // errno_kept.hpp
    graph_registry().on_destroy(exec);
  }
  return call();
}

}  // namespace ferrum_replay::shim
