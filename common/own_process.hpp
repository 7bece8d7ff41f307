// Whether the library's state belongs to the calling process.
//
// A child made without the C library's fork handlers — _Fork() (POSIX 2024, glibc 2.34), a raw
// clone or clone3 system call, glibc's clone() — inherits everything of ours (counters, buffers,
// locks held by threads it does not have, shared mappings of the parent's spill file) but none of
// the pthread_atfork resets that a fork() child gets. Acting on that state hurt the host: such a
// child that called exit() waited for ever on the lock of the parent's GPU reaper, wrote the
// parent's ranges and launch counts as its own (a judge then counted them twice), and wrote its
// own names and spilled ranges into the file the parent was still using. So the state is tagged
// with the process it belongs to, and checked where acting on it would hurt: the exit hooks and
// the writes into memory shared with the parent. Never on a launch's or a range's path: getpid()
// is a system call.
//
// One copy per library (each links common with hidden symbols, as held_here.hpp).
#pragma once

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>

#include "held_here.hpp"

namespace ferrum_replay::common {

namespace own_process_detail {
inline std::atomic<pid_t> g_pid{0};  // 0: nothing noted, the state is nobody else's
inline pthread_once_t g_once = PTHREAD_ONCE_INIT;
inline bool g_kept_as_parents = false;  // keep_parents_copy_in_child() ran in this process
inline void note_in_child() {
  // fork() from a signal handler inside one of our locked sections (held_here.hpp,
  // lock_for_fork), or inside a change that takes no lock (keep_parents_copy_in_child): the
  // child's resets did not run, its copy is its parent's.
  if (inside_our_lock() || g_kept_as_parents) return;
  g_pid.store(getpid(), std::memory_order_relaxed);
}
}  // namespace own_process_detail

// The calling process owns the state from now on; a fork() child owns its copy (its handler
// notes it). Called when the state is first made (a process that never uses CUDA never is).
inline void note_own_process() {
  own_process_detail::g_pid.store(getpid(), std::memory_order_relaxed);
  pthread_once(&own_process_detail::g_once,
               [] { pthread_atfork(nullptr, nullptr, own_process_detail::note_in_child); });
}

// For a fork() child handler that found the forking thread interrupted in the middle of a change
// of ours that takes no lock (a range being stored: the recorder's ThreadBuffer::storing), by the
// signal handler that forked. Resetting the state under that change broke it when the handler
// returned in the child; so the child keeps its copy as it is, and, as in a child made without
// fork handlers, that copy is not the child's (state_is_this_process). Whichever of this and the
// note above runs first in the child.
inline void keep_parents_copy_in_child() {
  own_process_detail::g_kept_as_parents = true;
  own_process_detail::g_pid.store(-1, std::memory_order_relaxed);  // no process's
}

// False in a child made without fork handlers: the state it sees is its parent's.
inline bool state_is_this_process() {
  const pid_t pid = own_process_detail::g_pid.load(std::memory_order_relaxed);
  return pid == 0 || pid == getpid();
}

}  // namespace ferrum_replay::common
