// Whether the calling thread may wait for a lock of the recorder's.
//
// The recorder's pthread_atfork prepare handler takes its locks (the threads', the names', the
// GPU tracks', the spill file's) and its parent and child handlers give them back. Between the
// two, program code runs on the forking thread: glibc runs prepare handlers in reverse order of
// registration and parent/child handlers in order, so every handler the program or a library
// registered before the recorder's (registered at the first NVTX call) runs inside that window;
// so does a signal handler that lands inside fork(). An NVTX call there that took one of those
// locks, or an exit() there whose report did, waited for its own thread: the process hung (F161).
// held_here.hpp's count cannot mark the window: a child handler reads that count as "forked
// from inside a locked section of ours" (own_process.hpp), and the fork handlers take their
// locks through lock_for_fork precisely because they may run there. So the window has a flag of
// its own, as the shim's graph registry has (F141), and every guard of the recorder that asks
// "may this thread wait for our locks?" asks cannot_wait_for_our_locks(), never
// inside_our_lock() alone. An NVTX call refused there is dropped and counted as the same call
// from a signal handler inside our lock is (the call's own comment says where).
#pragma once

#include "held_here.hpp"

namespace ferrum_replay::recorder {

// Set by Recorder::before_fork before its first lock, cleared by the parent's or the child's
// handler after its last unlock: a call in between is refused, never waits.
inline thread_local bool t_holding_for_fork __attribute__((tls_model("initial-exec"))) = false;

inline bool cannot_wait_for_our_locks() {
  return common::inside_our_lock() || t_holding_for_fork;
}

}  // namespace ferrum_replay::recorder
