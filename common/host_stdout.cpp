#include "host_stdout.hpp"

#include <poll.h>
#include <sys/stat.h>

#include "errno_kept.hpp"

namespace ferrum_replay::common {

void let_host_stdout_go_first(FILE *const *stdout_variable, FILE *libc_object, int target_fd) {
  if (!stdout_variable || !libc_object || target_fd < 0) return;
  FILE *const out = *stdout_variable;
  if (out != libc_object) return;  // the program's own FILE in its place: never followed
  const ErrnoKept errno_kept;
  if (ftrylockfile(out) != 0) return;  // another thread holds it: its write goes on, we do not wait
  const int fd = fileno_unlocked(out);
  struct stat ours {
  }, theirs{};
  pollfd probe{fd, POLLOUT, 0};
  if (fd >= 0 && fstat(fd, &theirs) == 0 && fstat(target_fd, &ours) == 0 &&
      ours.st_dev == theirs.st_dev && ours.st_ino == theirs.st_ino && poll(&probe, 1, 0) == 1 &&
      (probe.revents & (POLLOUT | POLLERR | POLLHUP | POLLNVAL)) == POLLOUT)
    fflush_unlocked(out);
  funlockfile(out);
}

}  // namespace ferrum_replay::common
