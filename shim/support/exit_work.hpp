// The shim's work in exit(): one atexit handler, never registered where the C library's lock of
// the exit list may be held for ever.
//
// Why atexit: the handler runs in exit() before the ELF destructors and before the exit
// handlers that an NVTX tool registered at its start (before the shim's first range), where a
// tool writes its report (the recorder its trace at its destructor): the last GPU times and the
// pop of a range left by a jump reach the tool in time (launch_range.cpp, gpu_timing.cpp).
//
// Why not in a fork child: atexit() takes the lock of the exit list (glibc's __exit_funcs_lock,
// also taken by __cxa_atexit as a library's constructor registers its destructors, and by
// __cxa_finalize in every dlclose). fork() does not reset that lock: a child forked while
// another thread of its parent held it finds it held for ever, and a child whose first launch
// registered the handler hung there (F147). (A prepare fork handler that registers it in the
// parent is no way out: before glibc 2.36 prepare handlers run under the fork-handler lock,
// which dlclose takes inside the exit list's.) So a process registers it only if it is the
// process that loaded the shim (loading_process.hpp); a child registers nothing of its own —
// it keeps its parent's handler, registered before the fork, or, where the parent had none, its
// work runs at the shim's ELF destructor instead (finish_exit_work): after the program's own
// destructors, before those of the libraries it links and of the NVTX tool.
#pragma once

namespace ferrum_replay::shim {

// Run in this order.
enum class ExitWork : unsigned {
  settle_thread_calls,  // the exiting thread's call left by a jump: its range's pop
  gpu_last_pass,        // the GPU times still in flight, then no more CUDA calls
  count
};

// Hands `work` to the exit handler, registering the handler if this process may. Never waits
// for another thread: one that comes while the handler is being registered (or a signal handler)
// leaves its work for it and goes on.
void run_at_exit(ExitWork slot, void (*work)());

// The work not yet done (each piece runs once): from the shim's ELF destructor.
void finish_exit_work();

}  // namespace ferrum_replay::shim
