// The program's buffered standard output goes before our exit lines on the same file (the
// recorder's table, a launch summary on stderr, in `prog 2>&1 | ...`). Our exit hooks run among
// the C library's exit handlers, before it flushes the program's stdio buffers: our lines came
// first, the reader (`head -1`) took one of ours and left, and the program's own last write met
// a pipe without a reader — SIGPIPE, status 141, in a third of runs (review DD-5).
// The flush is the C library's own, moved earlier, so it is done only where it cannot change
// what happens to the program (review HH-4: a flush into a pipe whose reader had gone raised
// the program's SIGPIPE inside our exit hook, before the destructors of its libraries and
// before our trace): only where our line goes to the same file as stdout, only where stdout's
// descriptor is writable now (not a pipe whose reader is gone, not a full one), only after our
// files are written, and never waiting for another thread's lock. libstdc++-free.
#pragma once

#include <stdio.h>

namespace ferrum_replay::common {

// At exit, right before a line of ours goes to descriptor `target_fd`: flushes the C library's
// stdout when `target_fd` is the same open file (device and inode: the same pipe in `2>&1`) as
// stdout's descriptor, that descriptor is writable without waiting (poll: POLLOUT, no POLLERR
// or POLLHUP), at most 64 KiB are pending, no other thread holds stdout's lock (ftrylockfile)
// and the program has not put another FILE in its place. SIGPIPE is held for the flush: a
// reader that leaves during it (a pipe with some room and a large buffer, a socket shut for
// reading) no longer ends the program there (review II-1); the pending bytes go back into the
// buffer, and the C library's last flush meets the reader gone, as without us. Otherwise
// nothing: the C library flushes it at the end, as without us. `stdout_variable`: where `stdout` is
// (the program's copy of the variable where it has one); `libc_object`: the C library's own stdout
// object (glibc's _IO_2_1_stdout_). Either null: nothing done. Found by the caller: a library
// preloaded into every process must not bind data symbols at load (tests/load_cost_check.py), so
// the shim looks them up at activation.
void let_host_stdout_go_first(FILE *const *stdout_variable, FILE *libc_object, int target_fd);

}  // namespace ferrum_replay::common
