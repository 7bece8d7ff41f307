// How we start a thread of our own inside the host program (the shim's GPU reaper; the exit
// reports' thread where the exiting one has too little stack, stack_room.hpp): joinable, so
// that the shim can end it and wait for it to be gone (a join bounded on CLOCK_MONOTONIC) before
// the last program thread that needs it ends — a process lives as long as its last thread,
// and that must not be the shim's (gpu_timing.cpp, g_life_mutex); with every signal blocked,
// so that a signal meant for the program is never delivered to it, and named from inside itself
// (prctl), so that `ps -T` and debuggers say whose it is — pthread_setname_np on another thread
// opens /proc/self/task/TID/comm, a descriptor without close-on-exec that a fork+exec elsewhere in
// the program could inherit.
#pragma once

#include <pthread.h>
#include <stddef.h>

namespace ferrum_replay::common {

struct BackgroundThread {
  void *(*main)(void *);     // called with `argument`
  const char *name;          // at most 15 characters
  void *argument = nullptr;  // (read by the new thread at its start)
};

// Starts `thread.main` on such a thread with a stack of `stack_bytes`; `thread` must outlive the
// thread's start (a static). Fills `*id` when given, as pthread_create does: before the new thread
// can read it. 0, or pthread_create's error (nothing started).
int start_background_thread(const BackgroundThread &thread, size_t stack_bytes,
                            pthread_t *id = nullptr);

// Whether the program's task budget leaves room for a long-lived thread of ours and `spare`
// more: each thread is a task of the user's RLIMIT_NPROC and of the cgroup's pids.max, and one
// of ours took the slot a program running at its exact limit counted on — its own
// pthread_create failed with EAGAIN (review DD-3). Tight where the process's own threads, or the
// cgroup's tasks (v2: pids.current against pids.max), come within `spare` of the limit; not
// tight where nothing says so (no limit, a privileged user, files unreadable). `why`: the line
// saying which limit. A few small /proc and /sys reads: for a thread's start, never a launch.
bool tasks_to_spare(unsigned spare, char *why, size_t why_size);

}  // namespace ferrum_replay::common
