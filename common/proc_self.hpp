// Opening a file of /proc that belongs to the whole process (its descriptors, its command line)
// in a way that still works once the main thread has ended: /proc/self is the main thread's
// entry, and after it ends with pthread_exit (the process lives on in its other threads) that
// entry shows no descriptors and no memory. /proc/thread-self (Linux 3.17) is the calling
// thread's entry, which shares both; /proc/self where the kernel predates it.
// Not for what differs per thread (comm, stat): those stay /proc/self or /proc/self/task/TID.
#pragma once

#include "own_descriptor.hpp"

namespace ferrum_replay::common {

// open(2) of "/proc/thread-self/<relative>", else "/proc/self/<relative>" (`flags` as open's,
// O_CLOEXEC added), held as an OwnDescriptor proved to be the file at that path. Empty when it
// cannot be opened, errno set by the last try.
OwnDescriptor open_process_file(const char *relative, int flags);

}  // namespace ferrum_replay::common
