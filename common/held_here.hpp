// Whether the calling thread is inside one of our locked sections. exit() called from a signal
// handler that interrupted such a section runs our exit hooks on that very thread, and a hook
// that then took the same lock waited for itself: the process never ended (a SIGTERM handler
// that calls exit(), landing while a thread's first NVTX call registered it). One rule for the
// shim and the recorder: every lock an exit hook also takes is held through a HeldHere, and a
// hook that finds inside_our_lock() true on its thread takes none of them — it writes nothing and
// says so in one line; so does an NVTX call the recorder gets from such a handler (a name
// registered, a domain created: NameRegistry). And while a thread holds any lock of ours,
// cancellation is disabled (no_cancel.hpp): a cancellation point reached inside (a log line, a
// sink's output, a join, a bounded wait's nanosleep) must not unwind with the lock held — the next
// thread to want it waited for ever. The count is this library's own (each library compiles this
// header, its symbols hidden) and static TLS, as the recorder's other thread-locals (no allocation
// at a thread's first use). (A thread's own event buffer, locked for a few instructions while it
// spills, is handled more finely: ThreadBuffer::collect gives up that thread's ranges only.)
#pragma once

#include <pthread.h>
#include <time.h>

#include "monotonic_clock.hpp"

namespace ferrum_replay::common {

inline thread_local unsigned t_our_locks_held __attribute__((tls_model("initial-exec"))) = 0;
inline thread_local int t_cancel_state_outside __attribute__((tls_model("initial-exec"))) = 0;

inline void note_lock_taken() {
  if (t_our_locks_held++ == 0)
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &t_cancel_state_outside);
}
inline void note_lock_given_back() {
  if (--t_our_locks_held == 0) pthread_setcancelstate(t_cancel_state_outside, nullptr);
}

inline bool inside_our_lock() {
  return t_our_locks_held != 0;
}

// The same for a lock taken and given back by hand (a condition variable's mutex, a lock held
// across calls).
// Counted from before the lock is taken until after it is given back: a signal handler that
// lands anywhere in between sees it (inside_our_lock) and must not take it, also in the instant
// after lock() returned and before the count would have been raised.
inline void lock_ours(pthread_mutex_t *mutex) {
  note_lock_taken();
  pthread_mutex_lock(mutex);
}
inline void unlock_ours(pthread_mutex_t *mutex) {
  pthread_mutex_unlock(mutex);
  note_lock_given_back();
}

// The same rule for our pthread_atfork prepare handlers, which lock what a fork must not copy
// half-changed. fork() called from a signal handler that interrupted one of our locked sections on
// this thread (a crash reporter's or a supervisor's handler that forks) runs them on that very
// thread: a prepare handler that waited for the lock the interrupted section holds waited for
// itself, and the host's fork() never returned. So a prepare handler takes each lock through
// lock_for_fork: outside our locks it waits as lock() does; inside one it only tries, for a bounded
// time (another thread's section ends soon, the interrupted one only after the handler returns),
// and gives up. Its parent and child handlers then give back only what it took, and where the fork
// came from inside our lock, the child keeps its copy as it is, as a child made without fork
// handlers does (own_process.hpp): the interrupted section, which the child's thread resumes when
// its handler returns, ends it there.
inline constexpr long kForkLockTryMs = 100;

// Tries `mutex` (anything with try_lock()) for up to `ms` milliseconds (CLOCK_MONOTONIC: a
// clock set back does not stretch it); false when it stayed taken. (A try loop, not
// pthread_mutex_clocklock, which needs glibc 2.30.)
template <typename Mutex>
bool try_lock_within(Mutex &mutex, long ms) {
  const MonotonicBound bound(ms);
  for (;;) {
    if (mutex.try_lock()) return true;
    if (bound.passed()) return false;
    const timespec pause{0, 100 * 1000};  // no cancellation: disabled inside our locks
    nanosleep(&pause, nullptr);
  }
}

template <typename Mutex>
bool lock_for_fork(Mutex &mutex) {
  if (!inside_our_lock()) {
    mutex.lock();
    return true;
  }
  return try_lock_within(mutex, kForkLockTryMs);
}

// pthread_mutex_t through lock_for_fork and try_lock_within.
struct PthreadMutexRef {
  pthread_mutex_t *mutex;
  void lock() { pthread_mutex_lock(mutex); }
  bool try_lock() { return pthread_mutex_trylock(mutex) == 0; }
};
inline bool lock_for_fork(pthread_mutex_t *mutex) {
  PthreadMutexRef ref{mutex};
  return lock_for_fork(ref);
}

// lock_ours, waiting at most `ms` milliseconds: for an exit hook's lock that another thread may
// hold across a call that never returns (the GPU reaper inside a driver call, waiting for the
// driver's own lock, which exit() from a signal handler interrupted on the exiting thread).
// False, and nothing held, when it stayed taken.
inline bool lock_ours_within(pthread_mutex_t *mutex, long ms) {
  note_lock_taken();
  PthreadMutexRef ref{mutex};
  if (try_lock_within(ref, ms)) return true;
  note_lock_given_back();
  return false;
}

// Locks `mutex` (anything with lock() and unlock()) for the scope and counts it as held here.
template <typename Mutex>
class HeldHere {
 public:
  explicit HeldHere(Mutex &mutex) : mutex_(mutex) {
    note_lock_taken();  // first: see lock_ours
    mutex_.lock();
  }
  ~HeldHere() {
    mutex_.unlock();
    note_lock_given_back();
  }
  HeldHere(const HeldHere &) = delete;
  HeldHere &operator=(const HeldHere &) = delete;

 private:
  Mutex &mutex_;
};

}  // namespace ferrum_replay::common
