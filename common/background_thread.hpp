// How the shim starts a thread of its own inside the host program (the GPU reaper): detached, so
// that nobody has to join it, with every signal blocked, so that a signal meant for the program
// is never delivered to it, and named from inside itself (prctl), so that `ps -T` and debuggers
// say whose it is — pthread_setname_np on another thread opens /proc/self/task/TID/comm, a
// descriptor without close-on-exec that a fork+exec elsewhere in the program could inherit.
//
// Such a thread must not keep the program alive: a process lives until its last thread ends,
// and a program whose main thread ends with pthread_exit ends when its own last thread does.
// A thread that runs for ever asks only_live_thread() now and then, and ends when it says so —
// the C library then exits the process (status 0) on that thread, running the program's exit
// handlers there, with the signal mask of the thread that started it (end_as_last_thread()).
#pragma once

#include <pthread.h>
#include <signal.h>
#include <stddef.h>

namespace ferrum_replay::common {

struct BackgroundThread {
  // Called with a `const sigset_t *`: the signal mask of the thread that started it (valid
  // during the call).
  void *(*main)(void *);
  const char *name;  // at most 15 characters
};

// Starts `thread.main` on such a thread with a stack of `stack_bytes`; `thread` must outlive the
// thread's start (a static). Fills `*id` when given, as pthread_create does: before the new thread
// can read it. 0, or pthread_create's error (nothing started).
int start_background_thread(const BackgroundThread &thread, size_t stack_bytes,
                            pthread_t *id = nullptr);

// True when the calling thread is the only live thread of the process: the main thread has
// ended (pthread_exit) and no other thread runs. Asked without a descriptor: /proc/self/task's
// link count is 2 + the process's threads, an ended main thread included (it stays a zombie
// while the process lives), and an ended thread's /proc/self/task/TID/cwd no longer resolves.
// False whenever /proc cannot tell (not mounted, another kernel's rules): the thread then runs
// on, as before. A few microseconds: ask it at most every few milliseconds.
bool only_live_thread();

// For a background thread about to end as the process's last thread: restores the mask it was
// started with, so that the program's exit handlers (run on it next) and any child they start
// see the program's mask, not "everything blocked".
void end_as_last_thread(const sigset_t *creator_mask);

}  // namespace ferrum_replay::common
