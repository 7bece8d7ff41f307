// Whether the calling process is the one that loaded the shim, or a child made from it by fork()
// (or clone, _Fork).
//
// Why it matters: fork() resets only some of the C library's locks in the child (the
// allocator's, stdio's list, the loader's main lock). Others — the exit list's, the loader's
// write lock — stay as the parent's other threads held them at the fork, for ever in the child,
// whose copy of those threads does not exist. A bare child that never takes them goes on; one of
// the shim's lazy first steps must not take them there: registering the exit handler
// (exit_work.hpp), loading the unwinder for the first call-site walk (call_site.cpp). In the
// process that loaded the shim whoever holds such a lock is alive to release it.
#pragma once

namespace ferrum_replay::shim {

// One getpid() system call: for first steps, never a launch's path.
bool in_loading_process();

}  // namespace ferrum_replay::shim
