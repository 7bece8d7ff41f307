// POSIX record locks (fcntl F_SETLK/F_OFD aside, lockf) belong to a process and a file, not to a
// descriptor: closing ANY descriptor of the file in the process — one we opened for a moment to
// read it — releases every such lock the process holds on it (POSIX; fcntl(2), "the record
// locks are lost"). A program that locks its own executable or a plugin while it runs (a
// single-instance guard, an updater's protocol) lost that lock when the shim read the file's
// symbol table to name a call site (review DD-2). So a file the program may hold such a lock on
// is not opened by us at all. libstdc++-free.
#pragma once

#include <sys/types.h>

namespace ferrum_replay::common {

// Whether this process may hold a POSIX record lock on the file (device, inode): read from
// /proc/locks (every lock of the machine; open-file-description and flock locks, which a close
// of another descriptor leaves alone, do not count). True also where /proc/locks cannot be read:
// what cannot be told is kept away from. Reads a /proc file only: takes no lock of the file's.
bool may_hold_record_lock(dev_t device, ino_t inode);

}  // namespace ferrum_replay::common
