// Where a non-local jump lands: the stack pointer the C library's longjmp restores from a
// jmp_buf its setjmp filled (range/launch_range.cpp: a jump that leaves this thread's open call
// marks it left, F160).
#pragma once

#include <stdint.h>

namespace ferrum_replay::shim {

// The stack pointer a longjmp/siglongjmp to `env` restores; 0 when the jmp_buf's layout is not
// known for sure in this process. glibc keeps it mangled with the thread's pointer guard (at
// JB_RSP, rotated, on x86-64; at JB_SP on AArch64): the guard is learnt once from two setjmps
// of our own at known stack pointers, and the decoding checked on the second — a C library
// whose jmp_buf is laid out otherwise gets 0, never a wrong answer. Async-signal-safe (no lock,
// no allocation): a jump usually leaves a signal handler.
uintptr_t jump_target(const void *env);

}  // namespace ferrum_replay::shim
