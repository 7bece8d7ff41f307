#include "recorder.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <new>

#include "clock.hpp"
#include "errno_kept.hpp"
#include "fork_window.hpp"
#include "held_here.hpp"
#include "own_descriptor.hpp"
#include "own_process.hpp"
#include "proc_self.hpp"
#include "utf8.hpp"

namespace ferrum_replay::recorder {

namespace {

std::atomic<uint64_t> g_next_generation{1};

// Emptied buffers kept for threads to come (fold_ended_threads); the rest are deleted.
constexpr size_t kMaxIdleBuffers = 64;

uint32_t os_thread_id() {
  return static_cast<uint32_t>(syscall(SYS_gettid));
}

// Whether thread `tid` of this process can no longer run: tgkill(pid, tid, 0) answers ESRCH.
// (A tid the kernel has given to a new thread since reads as running.)
bool thread_ended(uint32_t tid) {
  const common::ErrnoKept errno_kept;
  return syscall(SYS_tgkill, static_cast<long>(getpid()), static_cast<long>(tid), 0) != 0 &&
         errno == ESRCH;
}

std::string own_thread_name() {
  char name[17] = {};
  if (prctl(PR_GET_NAME, name, 0, 0, 0) != 0) return {};
  return name;
}

// `ts`'s spilled runs read back and merged into its events, in trace order.
void materialize_runs(const Snapshot &snap, ThreadSnapshot &ts) {
  if (ts.runs.empty()) return;
  std::vector<Event> all;
  all.reserve(ts.event_count());
  for_each_event_in_order(snap, ts, [&](const Event &e) { all.push_back(e); });
  ts.events.swap(all);
  ts.runs.clear();
}

// First line of a /proc file without its newline; empty if unreadable (e.g. the thread is gone).
std::string read_proc_line(const char *path) {
  std::string out;
  common::OwnDescriptor file(::open(path, O_RDONLY | O_CLOEXEC), path, /*follow=*/true);
  char buf[256];
  const ssize_t n = file.ours() ? ::pread(file.get(), buf, sizeof buf, 0) : -1;
  if (file.close() == 0 && n > 0) out.assign(buf, static_cast<size_t>(n));
  if (const size_t end = out.find('\n'); end != std::string::npos) out.resize(end + 1);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string process_display_name() {
  // The process's (not the main thread's: it may have ended, and /proc/self with it).
  std::string cmdline;
  if (common::OwnDescriptor file = common::open_process_file("cmdline", O_RDONLY); file) {
    char buf[4096];
    ssize_t n;  // pread: a number the program took meanwhile keeps its offset (own_descriptor.hpp)
    while (cmdline.size() < 65536 &&
           ((n = ::pread(file.get(), buf, sizeof buf, static_cast<off_t>(cmdline.size()))) > 0 ||
            (n < 0 && errno == EINTR)))
      if (n > 0) cmdline.append(buf, static_cast<size_t>(n));
    if (file.close() == EBADF) cmdline.clear();  // not ours any more: not the command line
  }
  return command_display_name(cmdline);
}

}  // namespace

std::string command_display_name(std::string_view cmdline) {
  std::vector<std::string_view> argv;
  while (!cmdline.empty()) {
    const size_t nul = cmdline.find('\0');
    argv.push_back(cmdline.substr(0, nul));
    if (nul == std::string_view::npos) break;
    cmdline.remove_prefix(nul + 1);
  }
  const auto base = [](std::string_view path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string_view::npos ? path : path.substr(slash + 1);
  };
  if (argv.empty() || base(argv[0]).empty()) return {};
  std::string name(base(argv[0]));
  // An interpreter's name says little ("python3"): name the script or module it runs too. Only
  // those, never the other arguments (they may hold tokens or paths nobody meant to share).
  if (name.rfind("python", 0) == 0 && argv.size() > 1) {
    // Appended piece by piece: `" " + std::string(...)` trips GCC 12's -Wrestrict at -O3 (a
    // false positive in its inlined insert), and a release build is -Werror too.
    if (argv[1] == "-m" && argv.size() > 2)
      name.append(" -m ").append(argv[2]);
    else if (!argv[1].empty() && argv[1][0] != '-')
      name.append(" ").append(base(argv[1]));
  }
  return name;
}

Recorder::Recorder(const Settings &settings, uint64_t origin_ns, uint64_t origin_realtime_ns)
    : settings_(settings),
      origin_ns_(origin_ns),
      origin_realtime_ns_(origin_realtime_ns),
      clock_(settings.cpu_counter),
      generation_(g_next_generation.fetch_add(1, std::memory_order_relaxed)),
      names_(settings.reject != RejectMode::none && !settings.reject_domain_only,
             settings.reject != RejectMode::none && settings.reject_domain_only
                 ? std::optional<std::string>(settings.reject_domain)
                 : std::nullopt),
      // memory_budget_ is declared after gpu_: only its address is taken here.
      gpu_(settings.spill ? &spill_ : nullptr, &memory_budget_),
      memory_budget_(settings.memory) {}

Recorder::~Recorder() {
  for (ThreadBuffer *t : threads_) delete t;
  for (ThreadBuffer *t : orphans_) delete t;
  for (ThreadBuffer *t : idle_) delete t;
  for (const NameBlock &names : kept_names_) release_name_block(names);
}

constinit __attribute__((tls_model("initial-exec"))) thread_local ThreadSlot t_slot;

ThreadBuffer *Recorder::register_thread() noexcept {
  // A signal handler's NVTX call that interrupted this thread holding a lock of ours (this very
  // registration, say), or a fork handler's inside our fork window (fork_window.hpp): taking
  // threads_mu_ would wait for ever. No buffer for that call (counted by the caller as a
  // thread without a buffer's: memory_drops), and the slot stays unset for the thread's next.
  if (cannot_wait_for_our_locks()) return nullptr;
  ThreadSlot &slot = t_slot;
  ThreadBuffer *buffer = nullptr;
  const common::ErrnoKept errno_kept;  // allocations (ENOMEM) and reading the thread name
  try {
    const uint32_t tid = os_thread_id();
    const std::string name = own_thread_name();
    const common::HeldHere lock(threads_mu_);  // held_here.hpp: the exit report takes it too
    if (threads_.size() >= fold_at_ && snapshots_reading_ == 0) fold_ended_threads();
    // Room first (growing geometrically), so that nothing throws once a buffer is taken.
    if (threads_.size() == threads_.capacity()) threads_.reserve(2 * threads_.size() + 16);
    if (!idle_.empty()) {
      idle_.back()->adopt(tid, name);
      buffer = idle_.back();
      idle_.pop_back();
    } else {
      buffer = new ThreadBuffer(tid, name, settings_.spill ? &spill_ : nullptr, &memory_budget_,
                                &shim_domain_id_, &stack_room_);
    }
    threads_.push_back(buffer);
  } catch (const std::bad_alloc &) {
    // Not retried: a buffer that came later would meet the pops of pushes it never saw.
    buffer = nullptr;
  }
  slot.buffer = buffer;
  slot.generation = generation_;
  return buffer;
}

void Recorder::spill_if_over_budget(EndedThread &gone) noexcept {
  if (gone.events.empty() || !settings_.spill ||
      memory_budget_.take(gone.events.size() * sizeof(Event)))
    return;
  try {
    sort_events(gone.events);
    if (gone.runs.size() == gone.runs.capacity()) gone.runs.reserve(gone.runs.size() + 1);
    SpillRun run;
    if (!spill_.append(gone.events.data(), static_cast<uint32_t>(gone.events.size()), &run)) {
      // Beyond FERRUM_RECORD_MEMORY with nowhere to spill: dropped and counted, as a live
      // thread's are (thread_buffer.hpp) — kept, they grew memory by every ended thread's ranges.
      ended_memory_drops_ += gone.events.size();
      std::vector<Event>().swap(gone.events);
      return;
    }
    gone.runs.push_back(run);
    std::vector<Event>().swap(gone.events);
  } catch (const std::bad_alloc &) {
  }
}

void Recorder::fold_ended_threads() {
  size_t kept = 0;
  for (size_t i = 0; i < threads_.size(); ++i) {
    ThreadBuffer *t = threads_[i];
    bool ended = thread_ended(t->tid());
    if (ended) {
      try {
        // Room first (growing geometrically), so that nothing throws once the buffer is emptied.
        if (ended_.size() == ended_.capacity()) ended_.reserve(2 * ended_.size() + 16);
        if (idle_.size() == idle_.capacity()) idle_.reserve(2 * idle_.size() + 16);
        EndedThread gone{t->tid(), t->initial_name(),          {},
                         {},       t->published_open_frames(), t->published_shim_open_frames()};
        ended = t->give_up(&gone.events, &gone.runs, &ended_reentrant_drops_,
                           &ended_shim_reentrant_drops_, &ended_memory_drops_);
        if (ended) {
          spill_if_over_budget(gone);
          ended_.push_back(std::move(gone));
          idle_.push_back(t);
        }
      } catch (const std::bad_alloc &) {
        ended = false;  // kept as it is, with its events
      }
    }
    if (!ended) threads_[kept++] = t;
  }
  threads_.resize(kept);
  fold_at_ = std::max<size_t>(64, 2 * kept);
  // Idle buffers beyond what the next threads will want (those folded while a snapshot kept
  // the buffers from being folded) are deleted; their names stay.
  while (idle_.size() > kMaxIdleBuffers) {
    try {
      idle_.back()->hand_names_to(&kept_names_);
    } catch (const std::bad_alloc &) {
      break;
    }
    delete idle_.back();
    idle_.pop_back();
  }
}

int Recorder::push_unframed(ThreadBuffer &thread, FrameStack *stack, bool shim,
                            bool handler_room) noexcept {
  if (stack)
    ++stack->unframed;
  else
    thread.push_stackless();
  if (shim && reported_.load(std::memory_order_relaxed))  // late_for_report: not counted
    return FERRUM_REPLAY_PUSH_AFTER_REPORT;
  thread.opened(shim);
  if (stack && stack->frames.size() >= kMaxOpenFrames) {
    depth_drops_.fetch_add(1, std::memory_order_relaxed);
    if (shim) shim_depth_drops_.fetch_add(1, std::memory_order_relaxed);
  } else if (handler_room) {
    thread.drop_reentrant(shim);
  } else {
    count_memory_drop();
  }
  return kRejected;
}

bool Recorder::make_room(ThreadBuffer &thread, FrameStack &stack, bool shim) noexcept {
  // A signal handler's push or pop while the frames move touches nothing (ThreadBuffer::moving):
  // a reallocation frees the old frames, which a handler's push would otherwise write into.
  const ThreadBuffer::Moving moving(thread);
  const size_t open = stack.frames.size();
  if (open < kMaxOpenFrames) {
    // Twice as many within a stack's own room, up to all of it (few reallocations for the usual
    // tens deep); beyond it a quarter more each time, so that the room all stacks share holds
    // little more than what is open: doubling filled it with half as many open, and correct
    // programs nesting deep on many threads at once lost ranges (reviews YY-1, YY2-1).
    size_t room = stack.frames.capacity() < kOwnStackCapacity
                      ? std::min(2 * open + kSignalReserve + 1, kOwnStackCapacity)
                      : std::min(open + open / 4, kMaxOpenFrames) + kSignalReserve + 1;
    // Not a step of a few frames short of its own room (79 to 143, then to 145: YY4-5).
    if (room < kOwnStackCapacity && kOwnStackCapacity - room < kOwnStackCapacity / 8)
      room = kOwnStackCapacity;
    switch (thread.grow(stack.frames, room)) {
      case ThreadBuffer::Growth::grown:
        return true;
      case ThreadBuffer::Growth::no_memory:
        return false;
      case ThreadBuffer::Growth::beyond_shared_room:
        break;  // the room all stacks share is full: this one stops growing here
    }
  }
  // The oldest half goes, at kMaxOpenFrames or where the shared room stopped this stack: at its
  // own kOwnStackCapacity or beyond (ThreadBuffer::grow), so at least 64 frames go, room for
  // more than kSignalReserve.
  static_assert((kOwnStackCapacity - kSignalReserve) / 2 > kSignalReserve + 1);
  const size_t dropped = stack.frames.size() / 2;
  stack.frames.erase(stack.frames.begin(), stack.frames.begin() + dropped);
  stack.dropped += dropped;
  depth_drops_.fetch_add(dropped, std::memory_order_relaxed);
  if (shim) shim_depth_drops_.fetch_add(dropped, std::memory_order_relaxed);
  return true;
}

bool Recorder::should_reject_slow() noexcept {
  if (settings_.reject == RejectMode::all) return true;
  if (settings_.reject != RejectMode::every_nth || settings_.reject_every == 0) return false;
  const uint64_t n = push_counter_.fetch_add(1, std::memory_order_relaxed) + 1;
  return n % settings_.reject_every == 0;
}

int Recorder::pop(const nvtxDomainRegistration_st &domain) noexcept {
  // Read the clock first, for the same reason.
  const uint64_t end = clock_.now();
  ThreadBuffer *const buffer = current_thread();
  if (!buffer) [[unlikely]]
    return kRejected;  // a thread without a buffer recorded none of its pushes (counted there)
  ThreadBuffer &thread = *buffer;
  const ThreadBuffer::Activity activity(thread);  // see push_in_place
  // A signal handler's pop while the thread moves its stacks (ThreadBuffer::moving): its push
  // was dropped; nothing is touched.
  if (activity.nested() && thread.moving()) [[unlikely]]
    return kRejected;
  FrameStack *const frame_stack = thread.find_stack(domain.id);
  const bool shim = is_shim_domain(domain.id);
  // A launch of the shim's that returns after the last report began: it stays what the report
  // counts it as, a launch in flight (open, not recorded), whenever the report reads this thread
  // (its open count and its events are read apart: recorded and closed now, it was counted both
  // in flight and as a range, review SS-1), whether its push got a frame or not. After-report
  // pushes were never counted open (push_in_place, push_unframed).
  // A pop that read the flag just before it was set may still race with the report's reads:
  // closed before it is recorded, it is then at worst in neither (a launch missing: the judge
  // fails the run), never in both (which could stand in for a range lost elsewhere, TT-3).
  const bool late = shim && reported_.load(std::memory_order_relaxed);  // late_for_report
  if (frame_stack && frame_stack->unframed != 0) [[unlikely]] {
    --frame_stack->unframed;  // the pop of a push that got no frame (push_unframed)
    if (!late) thread.closed(shim);
    return kRejected;
  }
  if (!frame_stack || frame_stack->frames.empty()) [[unlikely]] {
    if (frame_stack && frame_stack->dropped != 0) {  // a range given up (make_room)
      --frame_stack->dropped;
      if (!late) thread.closed(shim);
      return kRejected;
    }
    if (thread.pop_stackless()) {  // the pop of a push that found no stack (push_unframed)
      if (!late) thread.closed(shim);
      return kRejected;
    }
    const bool wrong_domain = thread.open_frames() > 0;
    (wrong_domain ? pop_wrong_domain_ : pop_without_push_).fetch_add(1, std::memory_order_relaxed);
    if (shim) [[unlikely]]
      (wrong_domain ? shim_pop_wrong_domain_ : shim_pop_without_push_)
          .fetch_add(1, std::memory_order_relaxed);
    return kRejected;
  }
  std::vector<Frame> *const stack = &frame_stack->frames;
  const Frame &frame = stack->back();
  const uint32_t depth = frame.depth;
  if (!late) [[likely]]
    thread.closed(shim);
  // The pop of a rejected push is swallowed: the caller did the right thing.
  if (!frame.rejected && !late) [[likely]] {
    // Packed straight from the frame, whose fields were stored at the push, long retired. (A
    // signal handler's push cannot move the frame meanwhile: push_in_place keeps spare capacity.)
    thread.record(frame.start, end, frame.attrs, domain.id, depth);
  }
  stack->pop_back();
  // A stack gives back room it no longer needs once the room all stacks share is under pressure,
  // so that room held by stacks since popped goes to the stacks that need it (threads nesting
  // 150 deep in 4,000 domains in turn lost 148,000 ranges, reviews MM-1, YY2-6; stacks popped
  // back while it was under half taken kept their peaks, and 33 threads nesting 8,200 deep
  // afterwards lost 51,114, YY3-1, or 29,591, YY4-1): once an eighth of the shared room is
  // taken, a stack less than half full. Half, not a bar that moves with the pressure: a shrink
  // leaves a stack four-fifths full, and a bar above that shrank it again at every pop, copying
  // it whole each time (a descent from 8,000 deep cost 7,166 reallocations, YY5-1); at half, a
  // descent costs a few. Not without pressure: a stack swinging deep and back would reallocate
  // in every swing, in pop (YY-4, YY2-2). Nor in a signal handler's pop: the interrupted push or
  // pop holds a reference into this vector. The room is looked at first: most stacks never have
  // more than their own.
  if (stack->capacity() > kOwnStackCapacity) [[unlikely]]
    if (2 * stack->size() < stack->capacity() && stack_room_.used() > kSharedStackRoom / 8 &&
        !activity.nested())
      thread.shrink(*stack);
  return static_cast<int>(depth);
}

void Recorder::mark(const nvtxDomainRegistration_st &domain, std::string_view message,
                    bool message_is_stable, RangeAttrs attrs) noexcept {
  const uint64_t now = clock_.now();
  ThreadBuffer *const buffer = current_thread();
  if (!buffer) [[unlikely]] {
    count_memory_drop();
    return;
  }
  ThreadBuffer &thread = *buffer;
  attrs.name = message_is_stable ? message.data() : thread.intern(message);
  attrs.kind = EventKind::mark;
  Event event{};
  event.start = event.end = now;
  event.attrs = attrs;
  event.domain_id = domain.id;
  thread.append(event);
}

uint64_t Recorder::start_range(const nvtxDomainRegistration_st &domain, std::string_view message,
                               bool message_is_stable, RangeAttrs attrs) noexcept {
  ThreadBuffer *const buffer = current_thread();
  if (!buffer) [[unlikely]] {
    // The id still goes out (its end is then an end without a begin in the trace's counts).
    count_memory_drop();
    return next_async_id_.fetch_add(1, std::memory_order_relaxed);
  }
  ThreadBuffer &thread = *buffer;
  attrs.name = message_is_stable ? message.data() : thread.intern(message);
  attrs.kind = EventKind::async_begin;
  Event event{};
  event.end = next_async_id_.fetch_add(1, std::memory_order_relaxed);
  event.attrs = attrs;
  event.domain_id = domain.id;
  event.start = clock_.now();
  thread.append(event);
  return event.async_id();
}

void Recorder::end_range(const nvtxDomainRegistration_st &domain, uint64_t id) noexcept {
  const uint64_t now = clock_.now();
  if (id == 0 || id >= next_async_id_.load(std::memory_order_relaxed)) {
    end_unknown_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ThreadBuffer *const thread = current_thread();
  if (!thread) [[unlikely]] {
    count_memory_drop();
    return;
  }
  Event event{};
  event.start = now;
  event.end = id;
  event.attrs.kind = EventKind::async_end;
  event.domain_id = domain.id;
  thread->append(event);
}

Snapshot Recorder::snapshot() const {
  return take_snapshot(true);
}

Snapshot Recorder::snapshot_for_report(bool last, uint32_t exiting_tid) {
  // Before any thread's events are read: a push of the shim's from here on is answered as after
  // the report. One that read the flag just before may still land after its thread was read:
  // neither in the trace nor counted after it (a judge then finds one launch missing, never one
  // too many allowed for).
  if (last) {
    reported_.store(true, std::memory_order_seq_cst);
    // And before the reads below on every architecture (a store then loads of other places may
    // pass each other without it: aarch64, TT-3).
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  Snapshot snap = take_snapshot(false, last, exiting_tid);
  for (ThreadSnapshot &t : snap.threads) compact_runs(spill_, t.runs);
  for (ThreadSnapshot &t : snap.gpu_tracks) compact_runs(spill_, t.runs);
  return snap;
}

Snapshot Recorder::take_snapshot(bool materialize, bool release_memory,
                                 uint32_t reporting_tid) const {
  if (reporting_tid == 0) reporting_tid = os_thread_id();
  Snapshot snap;
  snap.pid = static_cast<long>(getpid());
  snap.process_name = process_display_name();
  if (snap.process_name.empty()) snap.process_name = read_proc_line("/proc/self/comm");
  snap.origin_ns = origin_ns_;
  snap.scale = clock_.scale();
  snap.clock_source = clock_.source_name();
  snap.origin_realtime_ns = origin_realtime_ns_;
  snap.rank_variable = settings_.rank_variable;
  snap.rank_value = settings_.rank_value;
  snap.domain_names = names_.domain_names();
  snap.unasked_domain = names_.unasked_domain();
  snap.category_names = names_.category_names();

  std::vector<ThreadBuffer *> threads;
  std::vector<EndedThread> ended;
  {
    const common::HeldHere lock(threads_mu_);
    threads = threads_;
    // The last report takes them (no copy of the events); other snapshots copy.
    if (release_memory)
      ended.swap(ended_);
    else
      ended = ended_;
    snap.reentrant_drops += ended_reentrant_drops_;
    snap.shim_reentrant_drops += ended_shim_reentrant_drops_;
    snap.memory_drops += ended_memory_drops_;
    ++snapshots_reading_;
  }
  // No buffer is folded (emptied for another thread) while this reads them.
  struct Reading {
    const Recorder &recorder;
    ~Reading() {
      const common::HeldHere lock(recorder.threads_mu_);
      --recorder.snapshots_reading_;
    }
  } reading{*this};
  // A thread's events and runs, collected: sorted, read back from the spill when asked.
  const auto add = [&](ThreadSnapshot &&ts) {
    sort_events(ts.events);
    if (!ts.runs.empty()) snap.spill = &spill_;
    if (materialize) materialize_runs(snap, ts);
    snap.errors.open_at_exit += ts.open_frames;
    snap.shim_errors.open_at_exit += ts.shim_open_frames;
    snap.threads.push_back(std::move(ts));
  };
  for (EndedThread &gone : ended) {
    ThreadSnapshot ts;
    ts.tid = gone.tid;
    if (!names_.thread_name(ts.tid, &ts.name)) ts.name = gone.name;
    ts.open_frames = gone.open_frames;
    ts.shim_open_frames = gone.shim_open_frames;
    ts.events = std::move(gone.events);
    ts.runs = std::move(gone.runs);
    add(std::move(ts));
  }
  for (ThreadBuffer *t : threads) {
    ThreadSnapshot ts;
    ts.tid = t->tid();
    // An explicit nvtxNameOsThread wins; then the live name (a thread may be named after its
    // first range); then the name it had when it first recorded (it may have exited since).
    if (!names_.thread_name(ts.tid, &ts.name)) {
      char path[64];
      std::snprintf(path, sizeof path, "/proc/self/task/%u/comm", ts.tid);
      ts.name = read_proc_line(path);
      if (ts.name.empty()) ts.name = t->initial_name();
    }
    ts.open_frames = t->published_open_frames();
    ts.shim_open_frames = std::min(t->published_shim_open_frames(), ts.open_frames);
    if (ts.shim_open_frames != 0 && ts.tid != reporting_tid && !thread_ended(ts.tid)) {
      snap.shim_in_flight += ts.shim_open_frames;  // launches that had not returned
      ts.open_frames -= ts.shim_open_frames;
      ts.shim_open_frames = 0;
    }
    snap.reentrant_drops += t->reentrant_drops();
    snap.shim_reentrant_drops += t->shim_reentrant_drops();
    snap.memory_drops += t->memory_drops();
    t->collect(&ts.events, &ts.runs, release_memory);
    add(std::move(ts));
  }
  // After every thread's events: a block their names are in was mapped before they were recorded.
  snap.name_blocks = spill_.name_blocks();
  // Before the threads' spilled runs are let go: pairing reads every thread's events.
  match_async_ranges(snap, next_async_id_.load(std::memory_order_relaxed),
                     async_ranges_room(settings_.memory));
  snap.gpu_domain = gpu_domain_;
  gpu_.collect(&snap);
  {
    const uint64_t dropped = snap.gpu.dropped;
    snap.gpu = gpu_status_;
    snap.gpu.dropped = dropped;
  }
  if (materialize)
    for (ThreadSnapshot &ts : snap.gpu_tracks) materialize_runs(snap, ts);
  if (materialize) snap.spill = nullptr;
  snap.rejected_pushes = rejected_.load(std::memory_order_relaxed);
  snap.memory_drops += memory_drops_.load(std::memory_order_relaxed);
  snap.depth_drops = depth_drops_.load(std::memory_order_relaxed);
  snap.shim_depth_drops = shim_depth_drops_.load(std::memory_order_relaxed);
  snap.errors.pop_without_push = pop_without_push_.load(std::memory_order_relaxed);
  snap.errors.pop_wrong_domain = pop_wrong_domain_.load(std::memory_order_relaxed);
  snap.shim_domain_known = shim_domain_id_.load(std::memory_order_relaxed) != UINT32_MAX;
  snap.shim_errors.pop_without_push = shim_pop_without_push_.load(std::memory_order_relaxed);
  snap.shim_errors.pop_wrong_domain = shim_pop_wrong_domain_.load(std::memory_order_relaxed);
  snap.errors.end_unknown_id += end_unknown_.load(std::memory_order_relaxed);
  // Each shim count is read apart from the total it is a share of, while other threads may be
  // changing both (a launch's pop as the exit report is taken): a share is never more than its
  // total in the trace (the judges refuse one that is, review OO-4).
  ProtocolErrors &shim = snap.shim_errors;
  shim.pop_without_push = std::min(shim.pop_without_push, snap.errors.pop_without_push);
  shim.pop_wrong_domain = std::min(shim.pop_wrong_domain, snap.errors.pop_wrong_domain);
  shim.open_at_exit = std::min(shim.open_at_exit, snap.errors.open_at_exit);
  snap.shim_depth_drops = std::min(snap.shim_depth_drops, snap.depth_drops);
  snap.shim_reentrant_drops = std::min(snap.shim_reentrant_drops, snap.reentrant_drops);
  return snap;
}

namespace {
// The locks this thread's prepare handler took (held_here.hpp: lock_for_fork); all of them
// unless fork() was called from a signal handler inside a locked section of ours.
struct ForkLocks {
  bool threads = false, names = false, gpu = false, spill = false;
};
thread_local ForkLocks t_fork_locks __attribute__((tls_model("initial-exec")));
// A fork() made inside our fork window — a signal handler's that landed inside fork(), a fork
// handler's own — on the thread that holds every lock of ours for the outer fork: its handlers
// take nothing and give nothing back (the outer fork's do), so they only count the depth.
// Taking the locks again waited for ever (review T).
thread_local unsigned t_nested_forks __attribute__((tls_model("initial-exec"))) = 0;
}  // namespace

void Recorder::before_fork() {
  if (t_holding_for_fork) {
    ++t_nested_forks;
    return;
  }
  ForkLocks &taken = t_fork_locks;
  // First, as lock_ours counts first: an NVTX call or an exit() on this thread from here until
  // the parent's or the child's handler has given everything back is refused, never waits.
  t_holding_for_fork = true;
  taken.threads = common::lock_for_fork(threads_mu_);
  // The child's handler must not allocate (it cannot report a failure): room for every buffer to
  // become an orphan there. Without it, those buffers are simply not kept in the child. Not from
  // a signal handler inside our lock: that child keeps its copy as it is.
  if (taken.threads && !common::inside_our_lock()) {
    try {
      orphans_.reserve(orphans_.size() + threads_.size());
    } catch (const std::bad_alloc &) {
    }
  }
  taken.names = common::lock_for_fork(names_.mutex());
  taken.gpu = gpu_.before_fork();
  taken.spill = spill_.lock_for_fork();
}

void Recorder::after_fork_in_parent() {
  if (t_nested_forks > 0) {  // a nested fork's (before_fork)
    --t_nested_forks;
    return;
  }
  const ForkLocks &taken = t_fork_locks;
  if (taken.spill) spill_.unlock_after_fork();
  if (taken.gpu) gpu_.after_fork_in_parent();
  if (taken.names) names_.mutex().unlock();
  if (taken.threads) threads_mu_.unlock();
  t_holding_for_fork = false;  // after: see before_fork
}

void Recorder::after_fork_in_child() {
  // A nested fork's child (before_fork): it goes on inside the outer fork, whose own handler
  // (the parent's, in this copy) gives the locks back; the state stays its parent's, which
  // own_process.hpp tells apart (no trace is written of it).
  if (t_nested_forks > 0) {
    --t_nested_forks;
    return;
  }
  ThreadBuffer *self = t_slot.generation == generation_ ? t_slot.buffer : nullptr;
  if (common::inside_our_lock() || (self && (self->storing() || self->moving()))) {
    // fork() from a signal handler inside a locked section of ours, or inside the forking
    // thread's ThreadBuffer::record or a move of its stacks (which take no lock): that section
    // resumes in this child when the handler returns; nothing reset under it (emptied, the chunk
    // it writes to was unmapped under it, or its events were published again as the child's;
    // the shared room counted from stacks half moved, review YY2-5), and the copy stays its
    // parent's (own_process.hpp: no trace from here), as in a child made without fork handlers.
    if (!common::inside_our_lock()) common::keep_parents_copy_in_child();
    after_fork_in_parent();
    return;
  }
  spill_.unlock_after_fork();
  spill_.forget_after_fork();
  gpu_.after_fork_in_child();
  names_.mutex().unlock();
  // Only the forking thread exists in the child. The parent's other threads, their open ranges
  // and every range completed before the fork belong to the parent's trace.
  for (ThreadBuffer *t : threads_)
    if (t != self && orphans_.size() < orphans_.capacity()) orphans_.push_back(t);
  threads_.clear();
  ended_.clear();          // the parent's threads, in the parent's trace
  snapshots_reading_ = 0;  // a snapshot another thread was taking has no thread here
  if (self) {
    self->restart_after_fork(os_thread_id());
    threads_.push_back(self);
  }
  memory_budget_.restart_after_fork();
  // The other threads' stacks are the parent's (orphans_, never emptied here): their room is not
  // the child's to count, this thread's is.
  stack_room_.restart_after_fork(self ? self->shared_room_held() : 0);
  push_counter_.store(0, std::memory_order_relaxed);
  rejected_.store(0, std::memory_order_relaxed);
  pop_without_push_.store(0, std::memory_order_relaxed);
  pop_wrong_domain_.store(0, std::memory_order_relaxed);
  shim_pop_without_push_.store(0, std::memory_order_relaxed);
  shim_pop_wrong_domain_.store(0, std::memory_order_relaxed);
  memory_drops_.store(0, std::memory_order_relaxed);  // the parent's, in the parent's trace
  // So are its ended threads' (a child carried 640,000 of them and failed `check`, review PP-2).
  ended_memory_drops_ = ended_reentrant_drops_ = ended_shim_reentrant_drops_ = 0;
  depth_drops_.store(0, std::memory_order_relaxed);
  shim_depth_drops_.store(0, std::memory_order_relaxed);
  // Ids go on counting: an end of the parent's range in the child is unknown to the child's trace.
  end_unknown_.store(0, std::memory_order_relaxed);
  threads_mu_.unlock();
  t_holding_for_fork = false;  // after: see before_fork
}

nvtxStringRegistration_st *Recorder::register_string(std::string_view text) {
  text = bounded_name(text);
  if (cannot_wait_for_our_locks()) {  // a signal or fork handler: as in register_thread
    names_.refuse();                  // counted with the names not kept
    return nullptr;
  }
  if (nvtxStringRegistration_st *kept = names_.register_string(text)) return kept;
  const size_t hash = std::hash<std::string_view>()(text);
  std::atomic<nvtxStringRegistration_st *> &cached = kept_strings_[hash % kKeptStringsCache];
  std::atomic<size_t> &cached_hash = kept_hashes_[hash % kKeptStringsCache];
  // The slot's hash before its handle: the handle and its text lie in a name block that may
  // have been handed back to the kernel since (ThreadBuffer::keep), and reading them for every
  // registration that merely shared the slot brought those blocks back for good: 28 bytes of
  // resident memory a string, 277 MB for 10,000,000 (review NT-1). The text decides.
  if (cached_hash.load(std::memory_order_acquire) == hash)
    if (nvtxStringRegistration_st *seen = cached.load(std::memory_order_acquire);
        seen && std::string_view(seen->text, seen->size) == text)
      return seen;
  ThreadBuffer *thread = current_thread();
  char *storage =
      thread ? thread->keep(sizeof(nvtxStringRegistration_st) + text.size() + 1) : nullptr;
  if (!storage) {
    names_.refuse();
    return nullptr;
  }
  char *copy = storage + sizeof(nvtxStringRegistration_st);
  std::memcpy(copy, text.data(), text.size());
  copy[text.size()] = '\0';
  nvtxStringRegistration_st *handle = new (storage) nvtxStringRegistration_st{copy, text.size()};
  cached.store(handle, std::memory_order_release);
  cached_hash.store(hash, std::memory_order_release);
  return handle;
}

}  // namespace ferrum_replay::recorder
