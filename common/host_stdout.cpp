#include "host_stdout.hpp"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio_ext.h>
#include <string.h>
#include <sys/stat.h>

#include "errno_kept.hpp"
#include "write_signals.hpp"

namespace ferrum_replay::common {
namespace {

// The program's pending output, kept while we flush it: where the flush fails (the reader left
// meanwhile: EPIPE; a file size limit: EFBIG), it goes back into the buffer, so that the C
// library's last flush meets the reader gone, at the end, as without us (review II-1). More pending
// than this: not flushed. Static: our exit runs on one thread, and 64 KiB do not belong on an
// exiting thread's stack.
constexpr size_t kMaxPending = 64 * 1024;
char g_pending[kMaxPending];

}  // namespace

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
  const size_t pending = __fpending(out);
  if (pending > 0 && pending <= kMaxPending && out->_IO_write_base &&
      out->_IO_write_ptr - out->_IO_write_base == static_cast<ptrdiff_t>(pending) && fd >= 0 &&
      fstat(fd, &theirs) == 0 && fstat(target_fd, &ours) == 0 && ours.st_dev == theirs.st_dev &&
      ours.st_ino == theirs.st_ino && poll(&probe, 1, 0) == 1 &&
      (probe.revents & (POLLOUT | POLLERR | POLLHUP | POLLNVAL)) == POLLOUT) {
    memcpy(g_pending, out->_IO_write_base, pending);
    // SIGPIPE held and taken back (write_signals.hpp): a reader gone ends the program at the C
    // library's last flush, after every exit handler and destructor — never here, before them.
    const WriteSignalsHeld held;
    // Any failure (EPIPE; EFBIG past the program's file size limit, whose SIGXFSZ is held too;
    // ENOSPC): the bytes go back, and the C library's last flush meets the same, as without us.
    if (fflush_unlocked(out) != 0) {
      clearerr_unlocked(out);
      fwrite_unlocked(g_pending, 1, pending, out);  // fits: the buffer is empty again
    }
  }
  funlockfile(out);
}

}  // namespace ferrum_replay::common
