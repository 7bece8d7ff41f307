// Whether the calling thread is inside one of our locked sections. exit() called from a signal
// handler that interrupted such a section runs our exit hooks on that very thread, and a hook
// that then took the same lock waited for itself: the process never ended (a SIGTERM handler
// that calls exit(), landing while a thread's first NVTX call registered it). One rule for the
// shim and the recorder: every lock an exit hook also takes is held through a HeldHere, and a
// hook that finds inside_our_lock() true on its thread takes none of them — it writes nothing and
// says so in one line. The count is this library's own (each library compiles this header, its
// symbols hidden) and static TLS, as the recorder's other thread-locals (no allocation at a
// thread's first use).
#pragma once

#include <pthread.h>

namespace ferrum_replay::common {

inline thread_local unsigned t_our_locks_held __attribute__((tls_model("initial-exec"))) = 0;

inline bool inside_our_lock() {
  return t_our_locks_held != 0;
}

// The same for a lock taken and given back by hand (a condition variable's mutex, a lock held
// across calls).
inline void lock_ours(pthread_mutex_t *mutex) {
  pthread_mutex_lock(mutex);
  ++t_our_locks_held;
}
inline void unlock_ours(pthread_mutex_t *mutex) {
  --t_our_locks_held;
  pthread_mutex_unlock(mutex);
}

// Locks `mutex` (anything with lock() and unlock()) for the scope and counts it as held here.
template <typename Mutex>
class HeldHere {
 public:
  explicit HeldHere(Mutex &mutex) : mutex_(mutex) {
    mutex_.lock();
    ++t_our_locks_held;
  }
  ~HeldHere() {
    --t_our_locks_held;
    mutex_.unlock();
  }
  HeldHere(const HeldHere &) = delete;
  HeldHere &operator=(const HeldHere &) = delete;

 private:
  Mutex &mutex_;
};

}  // namespace ferrum_replay::common
