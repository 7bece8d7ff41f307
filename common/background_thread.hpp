// How the shim and the recorder start a thread of their own inside the host program (the GPU
// reaper, the recorder's chunk thread): detached, so that nobody has to join it, with every
// signal blocked, so that a signal meant for the program is never delivered to it, and named,
// so that `ps -T` and debuggers say whose it is.
#pragma once

#include <pthread.h>
#include <stddef.h>

namespace ferrum_replay::common {

// Starts `main(nullptr)` on such a thread with a stack of `stack_bytes`, named `name` (at most
// 15 characters); fills `*thread` when given. 0, or pthread_create's error (nothing started).
int start_background_thread(void *(*main)(void *), size_t stack_bytes, const char *name,
                            pthread_t *thread = nullptr);

}  // namespace ferrum_replay::common
