// Room on the stack for work that needs more of it than a launch does: the exit reports (the
// shim's launch summary, the recorder's trace and table) keep path and text buffers in their
// frames, some 40 KiB together. exit() may be called where far less is left — on a thread a
// pool made with a 16–32 KiB stack, from a signal handler on a small alternate stack, under
// `ulimit -s` — and running off the end crashed the program (a guard page) or, on an alternate
// stack the program had malloc'ed, silently overwrote the heap below it (its own buffered
// output). The program alone exits cleanly there: so must it with us.
#pragma once

#include <stddef.h>

namespace ferrum_replay::common {

// Bytes left on the stack the caller runs on (its alternate signal stack when on one), below
// the caller's frame; SIZE_MAX when it cannot be told — also when the frame lies outside the
// stack the thread library or the kernel knows of (a fiber's, a coroutine's, an alternate
// stack disarmed for its handler: SS_AUTODISARM).
size_t stack_room();

// Runs `work(argument)` on the calling thread when its stack is known to have `bytes` left,
// else on a thread of our own with a stack of that size (every signal blocked, waited for: it
// is ours). Where no thread can be made, in place all the same when the room is unknown or at
// least kStackInPlace. False when `work` did not run.
bool run_with_stack_room(void (*work)(void *), void *argument, size_t bytes);

// What the exit reports ask for: several times what they were measured to need (about 40 KiB).
constexpr size_t kExitReportStack = 256 * 1024;
constexpr size_t kStackInPlace = 64 * 1024;

}  // namespace ferrum_replay::common
