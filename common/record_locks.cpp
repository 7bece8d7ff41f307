#include "record_locks.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "own_descriptor.hpp"

namespace ferrum_replay::common {
namespace {

constexpr off_t kMaxLocksRead = 256 * 1024;  // bytes of /proc/locks read at most (~3,000 locks)

// One line of /proc/locks ("3: POSIX  ADVISORY  WRITE 4242 08:01:131090 0 EOF", a waiter's
// "3: -> POSIX ..."): whether it is a POSIX lock of process `pid` on `device`:`inode`.
bool is_lock_of(const char *line, const char *end, pid_t pid, dev_t device, ino_t inode) {
  const char *fields[8] = {};
  int count = 0;
  for (const char *p = line; p < end && count < 8;) {
    while (p < end && *p == ' ') ++p;
    if (p >= end) break;
    fields[count++] = p;
    while (p < end && *p != ' ') ++p;
  }
  int at = 1;  // after "N:"
  if (count > at && strncmp(fields[at], "-> ", 3) == 0)
    ++at;  // a waiter holds nothing yet
  else if (count > at && fields[at][0] == '-')
    return false;
  if (count < at + 5 || strncmp(fields[at], "POSIX ", 6) != 0) return false;
  char *after = nullptr;
  const long owner = strtol(fields[at + 3], &after, 10);
  if (after == fields[at + 3] || owner != pid) return false;
  // MAJ:MIN:INODE, the numbers of the device in hex.
  const char *id = fields[at + 4];
  const unsigned long major_number = strtoul(id, &after, 16);
  if (*after != ':') return false;
  const unsigned long minor_number = strtoul(after + 1, &after, 16);
  if (*after != ':') return false;
  const unsigned long long file = strtoull(after + 1, &after, 10);
  return makedev(major_number, minor_number) == device && file == inode;
}

// This process's pid as the /proc that lists the locks numbers it (the PID namespace of that
// mount: a process in a namespace of its own that sees an outer /proc is another number there,
// review II-2): /proc/self's target. 0 where it cannot be read.
pid_t pid_in_proc() {
  char target[32];
  const ssize_t length = readlink("/proc/self", target, sizeof target - 1);
  if (length <= 0) return 0;
  target[length] = '\0';
  char *end = nullptr;
  const long pid = strtol(target, &end, 10);
  return *end == '\0' && pid > 0 ? static_cast<pid_t>(pid) : 0;
}

}  // namespace

bool may_hold_record_lock(dev_t device, ino_t inode) {
  const pid_t pid = pid_in_proc();
  if (pid == 0) return true;
  OwnDescriptor locks(open("/proc/locks", O_RDONLY | O_CLOEXEC | O_NONBLOCK), "/proc/locks");
  if (!locks) return true;
  char buffer[4096];
  size_t held = 0;  // bytes of an unfinished line kept at the buffer's start
  off_t offset = 0;
  for (;;) {
    if (!locks.ours()) return true;  // own_descriptor.hpp: proved before each use
    const ssize_t got = ::pread(locks.get(), buffer + held, sizeof buffer - held, offset);
    if (got < 0) return true;
    offset += got;
    // Every lock of the machine: a host with 100,000 took 5 s per call site (review II-3). Past
    // this much it cannot be told cheaply: kept away from.
    if (offset > kMaxLocksRead) return true;
    size_t length = held + static_cast<size_t>(got);
    const char *start = buffer;
    const char *const end = buffer + length;
    for (const char *newline; (newline = static_cast<const char *>(
                                   memchr(start, '\n', static_cast<size_t>(end - start))));
         start = newline + 1)
      if (is_lock_of(start, newline, pid, device, inode)) return true;
    if (got == 0) return start < end && is_lock_of(start, end, pid, device, inode);
    held = static_cast<size_t>(end - start);
    if (held == sizeof buffer) return true;  // a line longer than a page: cannot be told
    memmove(buffer, start, held);
  }
}

}  // namespace ferrum_replay::common
