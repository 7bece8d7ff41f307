// The program's buffered standard output goes before our exit lines (the recorder's table, a
// launch summary on stderr). Our exit hooks run from the C library's exit handlers, before it
// flushes the program's stdio buffers: on a pipe (`prog 2>&1 | head -1`) our lines came first,
// the reader took one of ours and left, and the program's own last write then met a pipe
// without a reader — SIGPIPE, status 141, in a third of runs (review DD-5). libstdc++-free.
#pragma once

#include <stdio.h>

namespace ferrum_replay::common {

// At exit, before the first line of ours on a stream the program may share (stdout, stderr):
// flushes the C library's stdout — what the exit is about to flush anyway — unless another
// thread is writing to it (never waited for) or the program put another FILE in its place (one
// that may be closed and freed since). A reader gone makes the program's SIGPIPE come here
// rather than a moment later, as it would have without us.
// `stdout_variable`: where `stdout` is (the program's copy of the variable where it has one);
// `libc_object`: the C library's own stdout object (glibc's _IO_2_1_stdout_). Either null:
// nothing done. Found by the caller: a library preloaded into every process must not bind data
// symbols at load (tests/load_cost_check.py), so the shim looks them up at activation.
void let_host_stdout_go_first(FILE *const *stdout_variable, FILE *libc_object);

}  // namespace ferrum_replay::common
