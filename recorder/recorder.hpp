// The recording core: push/pop semantics per (thread, domain), fault injection, protocol-error
// counting and the exit snapshot. Knows nothing of NVTX's calling conventions (injection.cpp
// decodes those), so tests can drive it directly.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "clock.hpp"
#include "event.hpp"
#include "gpu_tracks.hpp"
#include "name_registry.hpp"
#include "settings.hpp"
#include "snapshot.hpp"
#include "thread_buffer.hpp"

namespace ferrum_replay::recorder {

// Returned by push and pop on a rejected push or an unmatched pop. NVTX reserves -2
// (NVTX_NO_PUSH_POP_TRACKING) for "no tool attached"; -1 keeps the two distinguishable.
inline constexpr int kRejected = -1;

// The process's name as traces and the exit table show it, from /proc/self/cmdline's bytes
// (arguments separated by NULs): argv[0]'s base name, not cut to 15 bytes like
// /proc/self/comm; for a Python interpreter also its script's base name or "-m MODULE"
// ("python3 serve.py"). Empty when there is no argv[0].
std::string command_display_name(std::string_view cmdline);

// What a push's describe() returns (see Recorder::push): the range's message, and whether it
// outlives the recorder (a registered string or a literal) or must be copied.
struct MessageText {
  std::string_view text;
  bool stable;
};

// The calling thread's buffer for the recorder of `generation` (Recorder::current_thread).
// Trivially constructible and destructible: no TLS destructor runs at thread exit, and the
// buffer it points to outlives the thread on purpose. Initial-exec: the recorder's thread-local
// data is then placed when the library is loaded (static TLS, in every thread from its start),
// not allocated by glibc on a thread's first use of it, which aborts the process when there is
// no memory for it ("cannot allocate memory for thread-local data"). (A loader out of static
// TLS fails to load the recorder instead: NVTX then runs the program without a tool.)
// constinit: without it, every access from another file first tested for a TLS initialisation
// function that cannot exist (a load and a branch per push and per pop).
struct ThreadSlot {
  uint64_t generation = 0;
  ThreadBuffer *buffer = nullptr;
};
extern constinit __attribute__((tls_model("initial-exec"))) thread_local ThreadSlot t_slot;

class Recorder {
 public:
  // `origin_realtime_ns`: the wall-clock time at `origin_ns`, so that traces of several
  // processes can be aligned (0: unknown).
  Recorder(const Settings &settings, uint64_t origin_ns, uint64_t origin_realtime_ns = 0);
  // Only test instances are ever destroyed; the process-wide one lives until the process ends,
  // because other threads may still be recording while exit runs.
  ~Recorder();
  Recorder(const Recorder &) = delete;
  Recorder &operator=(const Recorder &) = delete;

  NameRegistry &names() { return names_; }
  // The frames all stacks hold beyond their own room (kSharedStackRoom, thread_buffer.hpp).
  uint64_t shared_stack_room_used() const { return stack_room_.used(); }
  const NameRegistry &names() const { return names_; }
  // nvtxDomainRegisterString: the registry's handle within its budget, else a handle kept with
  // the calling thread's names (ThreadBuffer::keep), so that every string keeps its text however
  // many a program registers (the shim registers one per graph name, and a graph renamed
  // 300,000 times must end with its last name); nullptr, counted as refused, without room.
  nvtxStringRegistration_st *register_string(std::string_view text);
  // Strings kept that way, found again by text (a program that registers the same string on
  // every call must not copy it every time): a direct-mapped cache, lock-free; a collision
  // only costs another copy.
  static constexpr size_t kKeptStringsCache = 4096;
  uint64_t origin_ns() const { return origin_ns_; }
  uint64_t origin_realtime_ns() const { return origin_realtime_ns_; }

  // Opens a range on the calling thread. `message_is_stable`: `message` outlives the recorder (a
  // registered string or a literal), so it need not be copied. Returns the 0-based level of the
  // new range in its (thread, domain) stack, as NVTX specifies, or kRejected.
  int push(const nvtxDomainRegistration_st &domain, std::string_view message,
           bool message_is_stable, const RangeAttrs &attrs) noexcept {
    return push_in_place(domain, [&](RangeAttrs &out) {
      out = attrs;
      return MessageText{message, message_is_stable};
    });
  }
  // The same, for the hot path: `describe(RangeAttrs &)` writes the range's attributes in place,
  // into the frame they stay in until the pop, and returns its message. (Building them in a
  // temporary first cost a store-forwarding stall per copy: measured, a few ns each.)
  template <typename Describe>
  int push_in_place(const nvtxDomainRegistration_st &domain, Describe &&describe) noexcept;
  // Closes the innermost range of `domain` on the calling thread. Returns its level, or
  // kRejected (and counts a protocol error) if that stack is empty.
  int pop(const nvtxDomainRegistration_st &domain) noexcept;

  // nvtxMark*: an instant event on the calling thread.
  void mark(const nvtxDomainRegistration_st &domain, std::string_view message,
            bool message_is_stable, RangeAttrs attrs) noexcept;
  // nvtxRangeStart*: records the begin of a start/end range on the calling thread and returns its
  // id (never 0), unique in the process. Its end may come on any thread.
  uint64_t start_range(const nvtxDomainRegistration_st &domain, std::string_view message,
                       bool message_is_stable, RangeAttrs attrs) noexcept;
  // nvtxRangeEnd: records the end of range `id` on the calling thread. An id never handed out
  // is counted as a protocol error (end_unknown_id) and recorded nowhere; an id ended twice is
  // found when the snapshot pairs begins with ends (match_async_ranges).
  void end_range(const nvtxDomainRegistration_st &domain, uint64_t id) noexcept;

  // The calling thread's buffer, registered on first use; nullptr for a thread that could not
  // get one (no memory for it: that thread records nothing, and its pushes, pops and events are
  // counted in memory_drops). Exposed for tests.
  ThreadBuffer *current_thread() {
    const ThreadSlot &slot = t_slot;
    if (slot.generation == generation_) [[likely]]
      return slot.buffer;
    return register_thread();
  }
  // Something the program asked for was not recorded because memory ran out (the host's
  // address-space limit, or memory exhausted): what the recorder does instead of throwing.
  void count_memory_drop() noexcept { memory_drops_.fetch_add(1, std::memory_order_relaxed); }

  // Copies everything recorded so far, spilled events included, into memory. Safe while other
  // threads keep recording: what they complete after their buffer has been read is simply not
  // included.
  Snapshot snapshot() const;
  // The same, but spilled events stay in the spill file (Snapshot::spill, ThreadSnapshot::runs),
  // merged as the trace is written: what the exit report uses, so that writing a long run's
  // trace does not need the whole run in memory. `last` (the exit report): the events held in
  // memory are let go as they are copied (ThreadBuffer::collect), so that the report does not
  // hold them twice; later snapshots then miss them.
  // From the last one on, the shim's pushes are answered FERRUM_REPLAY_PUSH_AFTER_REPORT and
  // recorded nowhere (their pops swallowed): the shim counts those launches as after the report,
  // so a judge knows exactly which launches the trace cannot hold. `exiting_tid`: the thread
  // that called exit(), when another one takes the report for it (0: the caller); its open
  // ranges are not launches in flight (Snapshot::shim_in_flight).
  Snapshot snapshot_for_report(bool last = false, uint32_t exiting_tid = 0);

  // GPU time per replay delivered by the shim (gpu_tracks.hpp); GpuTracks::sink with this as
  // its context is what injection.cpp registers.
  GpuTracks &gpu() { return gpu_; }
  // The GPU status the exit report records (set by the report after ferrum_replay_gpu_flush,
  // or by tests); the trace's "gpu" block appears only when `registered`.
  void set_gpu_status(const GpuStatus &status) { gpu_status_ = status; }
  // Also the domain the shim's ranges are in: created now, before the program's, so that it
  // has a low id and a handle of its own (NameRegistry::keep_domain).
  // Its protocol errors are also counted on their own (Snapshot::shim_errors): the shim's
  // balance is the judges' to check, the program's own NVTX habits are not (review LL-1).
  // Called before the first push (injection.cpp), or by tests.
  void set_gpu_domain(std::string domain) {
    shim_domain_id_.store(names_.keep_domain(domain), std::memory_order_relaxed);
    gpu_domain_ = std::move(domain);
  }

  // Thread buffers that exist: those of live threads, those not yet folded, the idle ones
  // (tests: that buffers of ended threads are reused).
  size_t buffers() const {
    std::lock_guard lock(threads_mu_);
    return threads_.size() + idle_.size();
  }

  // The process's spill file (tests: how much was spilled).
  const SpillFile &spill_file() const { return spill_; }

  // fork() support, see pthread_atfork in injection.cpp.
  void before_fork();
  void after_fork_in_parent();
  void after_fork_in_child();

 private:
  ThreadBuffer *register_thread() noexcept;
  // Threads come and go (a pool that recycles its threads, a thread per request): a buffer per
  // thread that ever recorded would keep its chunk's page and its bookkeeping for the life of
  // the process, ~10 KiB per ended thread. So, once the buffers have doubled since the last
  // look, registration looks for those whose thread has ended (tgkill(pid, tid, 0): ESRCH — the
  // thread can no longer run) and folds them: their events and name move to ended_, the buffer
  // is emptied for the next thread to adopt. Not while a snapshot reads buffers. Under
  // threads_mu_.
  void fold_ended_threads();
  struct EndedThread;
  // An ended thread's events in memory count against FERRUM_RECORD_MEMORY as its chunks did:
  // beyond it they are spilled as one run. Kept in memory where that cannot be done.
  void spill_if_over_budget(EndedThread &gone) noexcept;
  // A push that gets no frame (memory ran out): kept in `stack`'s unframed count so that its pop
  // closes nothing, or, where there is no stack, in the thread's stackless count (the same).
  // A signal handler's push on a stack that holds kMaxOpenFrames and has no room left is
  // unframed for that reason: counted in depth_drops_, not as a memory drop.
  // `shim`: the push is in the shim's domain (ThreadBuffer::opened). `handler_room`: a signal
  // handler's push (push_in_place: the room kept for handlers used up, or a push before it on
  // that stack went unframed): counted with the ranges dropped in handlers, not as memory —
  // a sampler's nested ranges were "beyond FERRUM_RECORD_MEMORY" (reviews OO-1, PP-1).
  int push_unframed(ThreadBuffer &thread, FrameStack *stack, bool shim, bool handler_room) noexcept;
  // A push or pop of the shim's from the last report on (snapshot_for_report): the push is
  // answered FERRUM_REPLAY_PUSH_AFTER_REPORT on every path, framed or not — a path that
  // answered it rejected or dropped made `check` fail a correct run — and is neither counted
  // nor open; the pop closes nothing (pop).
  bool late_for_report(const nvtxDomainRegistration_st &domain) const noexcept {
    return is_shim_domain(domain.id) && reported_.load(std::memory_order_relaxed);
  }
  // Room on `stack` for a push and kSignalReserve more (push_in_place): the vector grown, or at
  // kMaxOpenFrames, or when the room all stacks share is full (kSharedStackRoom), its oldest half
  // given up (FrameStack::dropped, depth_drops_). False when memory ran out.
  bool make_room(ThreadBuffer &thread, FrameStack &stack, bool shim) noexcept;
  bool should_reject(const nvtxDomainRegistration_st &domain) noexcept {
    // reject_target is only ever true when some rejection mode is active.
    return domain.reject_target && should_reject_slow();
  }
  bool should_reject_slow() noexcept;
  bool is_shim_domain(uint32_t domain_id) const {
    return domain_id == shim_domain_id_.load(std::memory_order_relaxed);
  }
  Snapshot take_snapshot(bool materialize, bool release_memory = false,
                         uint32_t reporting_tid = 0) const;

  const Settings settings_;
  const uint64_t origin_ns_;
  const uint64_t origin_realtime_ns_;
  // Reads every range's start and end (clock.hpp).
  const TickClock clock_;
  // Distinguishes this instance in the thread-local cache, so that a test creating a second
  // recorder at the address of a destroyed one never reuses a stale buffer.
  const uint64_t generation_;
  // The id of the shim's domain (set_gpu_domain); none until then. Read by every push and pop:
  // here, among what is written once, not beside the counters other threads write on each
  // start/end range or error (one cache line).
  std::atomic<uint32_t> shim_domain_id_{UINT32_MAX};
  // Set as the last report begins (snapshot_for_report): read by the shim's pushes, beside.
  std::atomic<bool> reported_{false};
  std::atomic<nvtxStringRegistration_st *> kept_strings_[kKeptStringsCache] = {};
  // Each slot's text hash, looked at before its handle (register_string).
  std::atomic<size_t> kept_hashes_[kKeptStringsCache] = {};
  NameRegistry names_;
  // Before threads_: buffers may spill until the very end, so it outlives them (it is declared
  // first, destroyed last). Null in ThreadBuffers when spilling is switched off.
  SpillFile spill_;
  GpuTracks gpu_;
  MemoryBudget memory_budget_;  // FERRUM_RECORD_MEMORY: events kept in memory before spilling
  MemoryBudget stack_room_{kSharedStackRoom};  // frames beyond each stack's own (thread_buffer.hpp)
  GpuStatus gpu_status_;
  std::string gpu_domain_ = "ferrum-replay";

  mutable std::mutex threads_mu_;  // thread registration, snapshot and fork only
  std::vector<ThreadBuffer *> threads_;
  std::vector<ThreadBuffer *> orphans_;  // buffers of threads that did not survive a fork
  // What is kept of a thread that ended (fold_ended_threads): its events, nothing else.
  struct EndedThread {
    uint32_t tid;
    std::string name;
    std::vector<Event> events;
    std::vector<SpillRun> runs;
    uint32_t open_frames;
    uint32_t shim_open_frames;
  };
  mutable std::vector<EndedThread> ended_;  // the last report moves them out
  std::vector<ThreadBuffer *> idle_;        // emptied buffers, for the next threads to adopt
  std::vector<NameBlock> kept_names_;       // name blocks of deleted buffers (events point there)
  size_t fold_at_ = 64;                     // threads_.size() at which to look again
  mutable unsigned snapshots_reading_ = 0;  // buffers are not folded while a snapshot reads them
  uint64_t ended_reentrant_drops_ = 0;
  uint64_t ended_shim_reentrant_drops_ = 0;
  uint64_t ended_memory_drops_ = 0;

  std::atomic<uint64_t> push_counter_{0};  // pushes eligible for every-Nth rejection
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> pop_without_push_{0};
  std::atomic<uint64_t> pop_wrong_domain_{0};
  std::atomic<uint64_t> shim_pop_without_push_{0};  // of pop_without_push_, in that domain
  std::atomic<uint64_t> shim_pop_wrong_domain_{0};
  std::atomic<uint64_t> next_async_id_{1};  // start/end ranges' ids, process-wide
  std::atomic<uint64_t> end_unknown_{0};
  std::atomic<uint64_t> memory_drops_{0};  // beyond the threads' own (ThreadBuffer::memory_drops)
  std::atomic<uint64_t> depth_drops_{0};   // ranges given up by make_room
  std::atomic<uint64_t> shim_depth_drops_{0};  // of depth_drops_, in the shim's domain
};

template <typename Describe>
int Recorder::push_in_place(const nvtxDomainRegistration_st &domain, Describe &&describe) noexcept {
  ThreadBuffer *const buffer = current_thread();
  if (!buffer) [[unlikely]] {
    if (late_for_report(domain)) return FERRUM_REPLAY_PUSH_AFTER_REPORT;
    count_memory_drop();
    return kRejected;
  }
  ThreadBuffer &thread = *buffer;
  const ThreadBuffer::Activity activity(thread);
  // A signal handler's push inside this thread's push or pop never grows the stacks' table
  // (the interrupted call holds a reference into it): in a domain this thread never used, it
  // is rejected, and kept as a push without a stack so that its pop closes it (that pop was
  // counted a protocol error: the shim's, for a handler's launch, review QQ-2).
  if (activity.nested() && (thread.moving() || !thread.has_stack(domain.id))) [[unlikely]] {
    if (late_for_report(domain)) {  // as below, and neither counted nor open (push_unframed)
      if (!thread.moving()) thread.push_stackless();
      return FERRUM_REPLAY_PUSH_AFTER_REPORT;
    }
    if (thread.moving()) {
      thread.drop_reentrant(is_shim_domain(domain.id));  // its pop is swallowed as well (pop)
    } else {
      rejected_.fetch_add(1, std::memory_order_relaxed);
      thread.push_stackless();
      thread.opened(is_shim_domain(domain.id));
    }
    return kRejected;
  }
  FrameStack *const frame_stack = thread.stack(domain.id);
  if (!frame_stack || frame_stack->unframed != 0) [[unlikely]]
    return push_unframed(thread, frame_stack, is_shim_domain(domain.id), activity.nested());
  std::vector<Frame> &stack = frame_stack->frames;
  // Room for ranges a signal handler may push on this thread while this frame (or a pop's) is
  // being read or written: the vector does not move under it for kSignalReserve nested ranges
  // (and a nested push never moves it). Without the memory to keep that room, the push goes
  // unframed: the room is the signal handlers'. At kMaxOpenFrames (or with the room all stacks
  // share full) the oldest frames make room.
  if (activity.nested() ? stack.size() == stack.capacity()
                        : stack.capacity() - stack.size() <= kSignalReserve &&
                              !make_room(thread, *frame_stack, is_shim_domain(domain.id)))
      [[unlikely]]
    return push_unframed(thread, frame_stack, is_shim_domain(domain.id), activity.nested());
  const uint32_t depth = static_cast<uint32_t>(stack.size() + frame_stack->dropped);
  Frame &frame = stack.emplace_back();
  frame.depth = depth;
  const bool shim = is_shim_domain(domain.id);
  // A launch after the last report (a thread still launching at exit): not in the trace, and
  // the shim told so; a frame that swallows its pop, as a rejected one does. Not counted open
  // (nor closed by its pop: Recorder::pop): the report, maybe reading this thread now, counts
  // the shim's open ranges as launches in flight, which the shim's count of these would count
  // again.
  if (late_for_report(domain)) [[unlikely]] {
    frame.rejected = true;
    return FERRUM_REPLAY_PUSH_AFTER_REPORT;
  }
  thread.opened(shim);
  frame.rejected = should_reject(domain);
  if (frame.rejected) [[unlikely]] {
    rejected_.fetch_add(1, std::memory_order_relaxed);
    return kRejected;
  }
  const MessageText message = describe(frame.attrs);
  frame.attrs.name = message.stable ? message.text.data() : thread.intern(message.text);
  // Read the clock last so that the recorder's own bookkeeping is not part of the range.
  frame.start = clock_.now();
  return static_cast<int>(depth);
}

}  // namespace ferrum_replay::recorder
