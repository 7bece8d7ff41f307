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
